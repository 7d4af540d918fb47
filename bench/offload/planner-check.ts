/**
 * Section 3 of bench:offload: the planner's prediction for the ablation's last configuration's
 * store and limit, beside a run with the plan it wrote, under the same limit.
 */
import { spawnSync } from "node:child_process";
import type { BenchContext } from "./context.js";
import { runOurs, type RunResult } from "./engine-runs.js";
import { hotStoreOf } from "./models.js";
import { BIN, CONTEXT, limitBytes, MiB } from "./settings.js";
import { gib, med, medNum, oursDetail } from "./summary.js";

export function checkPlanner(b: BenchContext): void {
  const { o, models, cg, log, raw } = b;
  const limit = limitBytes(o.ablationLimit);
  const threads = o.ablationThreads[0];
  const store = hotStoreOf(models);
  const planFile = `${store}.bench-plan.json`;
  const cmd = [
    process.execPath,
    BIN,
    "plan",
    "-m",
    store,
    "--memory-budget",
    `${Math.round(limit / MiB)}MiB`,
    "-t",
    String(threads),
    "-c",
    String(CONTEXT),
    "--decode-tokens",
    String(o.n),
    "-o",
    planFile,
    "--json",
    "-q",
  ];
  process.stderr.write(`$ ${cmd.slice(1).join(" ")}\n`);
  const p = spawnSync(cmd[0], cmd.slice(1), { encoding: "utf8", maxBuffer: 64 << 20, timeout: o.timeoutS * 1000 });
  log("");
  log(
    `## The planner at ${gib(limit)}, ${threads} thread(s) (\`powerinfer plan\`, then \`run --plan\` under the limit)`,
  );
  log("");
  if (p.status !== 0) log(`- plan failed (exit ${p.status}): ${(p.stderr ?? "").trim().split("\n").pop()}`);
  else {
    const plan = JSON.parse(p.stdout) as {
      knobs: { sparsity: "gate" | "predictor"; queueDepth: number; hotFraction: number };
      prediction: { tokensPerSecond: number; hitRate: number };
    };
    const runs: RunResult[] = [];
    for (let rep = 0; rep < o.reps; rep++)
      runs.push(
        runOurs(
          cg,
          { store, limit, threads, n: o.n, sparsity: plan.knobs.sparsity, temp: o.temp, extra: ["--plan", planFile] },
          o.timeoutS,
        ),
      );
    raw.plan = { plan, runs };
    const measured = medNum(runs, "decode");
    const predicted = plan.prediction.tokensPerSecond;
    log(
      `- plan: ${plan.knobs.sparsity} sparsity, queue depth ${plan.knobs.queueDepth}, hot share ${plan.knobs.hotFraction}; predicted ${predicted.toFixed(2)} tok/s decode, hit rate ${(100 * plan.prediction.hitRate).toFixed(1)}%`,
    );
    log(
      `- measured with it: ${med(runs, "decode")} tok/s decode, hit rate ${oursDetail(runs).hit}${measured !== undefined ? ` (prediction ${((100 * (predicted - measured)) / measured).toFixed(0)}% off)` : ""}`,
    );
  }
}
