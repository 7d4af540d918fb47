/**
 * bench:offload's dense shapes: the command line that takes them (and refuses what only a ReLU
 * model with planted firing has), and the per-pair check of ours' greedy ids against llama.cpp's.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { parseOptions } from "../bench/offload/options.js";
import { sameGreedyIds } from "../bench/offload/pairs.js";
import type { RunResult } from "../bench/offload/engine-runs.js";

test("a dense shape's limit is chosen later unless --limits gives it, in either order", () => {
  assert.deepEqual(parseOptions(["--shape", "llama3.2-1b"]).options.limits, []);
  assert.deepEqual(parseOptions(["--shape", "gemma3-4b", "--limits", "0.9"]).options.limits, [0.9]);
  assert.deepEqual(parseOptions(["--limits", "0.9", "--shape", "qwen3-0.6b"]).options.limits, [0.9]);
  // the ReLU shapes keep their own defaults
  assert.deepEqual(parseOptions(["--shape", "7b"]).options.limits, [1.5, 2.25, 3.75]);
});

test("a dense shape refuses what needs planted firing, and an unknown shape is named", () => {
  assert.throws(() => parseOptions(["--shape", "qwen3-8b", "--gate-rank", "64"]), /--gate-rank.*qwen3-8b/);
  assert.throws(() => parseOptions(["--shape", "phi3-mini", "--order", "hot"]), /--order hot.*phi3-mini/);
  assert.throws(() => parseOptions(["--shape", "llama4"]), /--shape must be .*llama3.2-1b/);
});

test("greedy ids per pair: equal, where they part, and prompts of different lengths", () => {
  const run = (tokens: number[], promptTokens = 40): RunResult => ({ ok: true, tokens, promptTokens, load: 0 });
  assert.equal(sameGreedyIds(run([5, 6, 7]), run([5, 6, 7])), "yes");
  assert.equal(sameGreedyIds(run([5, 6, 7]), run([5, 9, 7])), "no: from token 1 (ours 6, llama.cpp 9)");
  assert.equal(sameGreedyIds(run([5, 6]), run([5, 6, 7])), "no: from token 2 (ours none, llama.cpp 7)");
  assert.match(sameGreedyIds(run([5], 40), run([5], 41)), /prompts differ/);
  assert.equal(sameGreedyIds(run([8, 8, 8]), run([8, 8, 8])), "yes (one id, 8, repeated: little evidence)");
  assert.equal(sameGreedyIds({ ok: true, load: 0 }, run([5])), "no ids");
});
