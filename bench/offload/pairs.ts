/**
 * Section 1's last table: each interleaved pair of runs (ours, then llama.cpp, same limit and
 * threads, one after the other), its decode ratio, and for a dense model whether ours generated
 * llama.cpp's greedy tokens. A pair's ratio is less exposed to the load of a shared machine than
 * the ratio of medians, since both runs of a pair see nearly the same load.
 */
import { SHAPE_SPECS } from "../../src/offline/synth.js";
import type { BenchContext } from "./context.js";
import type { RunResult } from "./engine-runs.js";

/** A dense model's gate mode computes every neuron whose activation is not exactly zero: nearly all. */
export const DENSE_MIN_COMPUTED_PCT = 99;

/** One repetition at one limit and thread count: ours' run and llama.cpp's (absent: not run). */
export interface RunPair {
  ours?: RunResult;
  peer?: RunResult;
}

export interface ComparisonCell {
  ours: RunResult[];
  peer: RunResult[];
  pairs: RunPair[];
}

/** "yes", or where the two runs' generated ids part (or why they cannot be compared). */
export function sameGreedyIds(ours: RunResult, peer: RunResult): string {
  if (!ours.tokens || !peer.tokens) return "no ids";
  if (ours.promptTokens !== peer.promptTokens)
    return `prompts differ (ours ${ours.promptTokens} tokens, llama.cpp ${peer.promptTokens})`;
  const n = Math.max(ours.tokens.length, peer.tokens.length);
  for (let i = 0; i < n; i++)
    if (ours.tokens[i] !== peer.tokens[i])
      return `no: from token ${i} (ours ${ours.tokens[i] ?? "none"}, llama.cpp ${peer.tokens[i] ?? "none"})`;
  // A random-weight model with tied embeddings tends to repeat one token: equal ids then say little.
  const distinct = new Set(ours.tokens).size;
  return distinct > 1 ? "yes" : `yes (one id, ${ours.tokens[0]}, repeated: little evidence)`;
}

export function reportPairs(b: BenchContext, cells: Map<string, ComparisonCell>, denseShape: boolean): void {
  const { o, log } = b;
  // sampled tokens differ between the engines by construction: only greedy ids are compared
  const dense = denseShape && o.temp === 0;
  log("");
  log(
    `Each interleaved pair in run order: ours' decode / llama.cpp's decode${dense ? ", and whether ours' greedy token ids equal llama.cpp's" : ""}.`,
  );
  if (o.temp > 0) log("(The ids are not compared: each engine samples its own tokens.)");
  else if (!dense)
    log(
      SHAPE_SPECS[o.shape].arch === "smallthinker"
        ? "(The greedy ids are not compared: on random weights with a 151,936-token vocabulary and hundreds of routing choices per token, near-ties that summation order decides part the ids within a few tokens, even between our own modes; exactness against llama.cpp is tested on smallthinker-tiny.)"
        : "(The greedy ids are not compared on a ReLU shape: llama.cpp computes SiLU for the llama architecture whatever the file says, so it runs another model.)",
    );
  log("");
  log(`| limit | threads | decode ratio per pair |${dense ? " same greedy ids as llama.cpp, per pair |" : ""}`);
  log(`|---|---|---|${dense ? "---|" : ""}`);
  for (const limitG of o.limits) {
    for (const threads of o.threads) {
      const c = cells.get(`${limitG}/${threads}`)!;
      const ratios = c.pairs.map(({ ours, peer }) =>
        ours?.ok && peer?.ok && peer.decode! > 0 ? `${(ours.decode! / peer.decode!).toFixed(2)}x` : "-",
      );
      const same = c.pairs.map(({ ours, peer }) => (ours?.ok && peer?.ok ? sameGreedyIds(ours, peer) : "-"));
      log(`| ${limitG} GiB | ${threads} | ${ratios.join(", ")} |${dense ? ` ${same.join("; ")} |` : ""}`);
    }
  }
}
