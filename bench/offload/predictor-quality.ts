/**
 * The last section of bench:offload with a predictable model: predictor mode skips the neurons the
 * predictor rejects, so its text against the exact gate mode's, same store, limit and threads.
 */
import type { BenchContext } from "./context.js";
import { runOurs } from "./engine-runs.js";
import { limitBytes } from "./settings.js";
import { commonPrefix, gib } from "./summary.js";

export function comparePredictorWithGate(b: BenchContext): void {
  const { o, models, cg, log, raw } = b;
  const limit = limitBytes(o.ablationLimit);
  const threads = o.ablationThreads[0];
  // greedy whatever --temp says: the texts are what is compared
  const exact = runOurs(cg, { store: models.store, limit, threads, n: o.n, sparsity: "gate", temp: 0 }, o.timeoutS);
  const pred = runOurs(cg, { store: models.store, limit, threads, n: o.n, sparsity: "predictor", temp: 0 }, o.timeoutS);
  raw.quality = { exact, pred };
  log("");
  log(
    `## Predictor mode against the exact gate mode (${gib(limit)}, ${threads} thread${threads > 1 ? "s" : ""}, ${o.n} tokens)`,
  );
  log("");
  if (!exact.ok || !pred.ok)
    log(`- not compared: gate ${exact.ok ? "ok" : exact.failure}, predictor ${pred.ok ? "ok" : pred.failure}`);
  else {
    const same = exact.text === pred.text;
    log(
      `- gate (exact): ${exact.decode} tok/s decode, ${exact.computedPct}% of neurons computed, ${(exact.readMB! / (exact.promptTokens! + exact.decodeTokens!)).toFixed(1)} MB read per token`,
    );
    log(
      `- predictor: ${pred.decode} tok/s decode, ${pred.computedPct}% of neurons computed, ${(pred.readMB! / (pred.promptTokens! + pred.decodeTokens!)).toFixed(1)} MB read per token`,
    );
    log(
      `- greedy text ${same ? "identical" : `differs after ${commonPrefix([exact.text!, pred.text!])} characters`}: ${JSON.stringify(pred.text!.trim().slice(0, 120))}`,
    );
  }
}
