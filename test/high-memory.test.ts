/**
 * Addresses above 2 GiB: wasm32 memory reaches 4 GiB, and a signed shift (ptr >> 2) turns an
 * address past 2 GiB into a negative index that silently reads nothing. Every buffer is put above
 * 2 GiB here (the space below is reserved and never touched, so it costs no memory) and the
 * results must be those of a low-memory run, dense and offloaded.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { LlamaModel } from "../src/model/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { maxDiff, SHARED, tempDir } from "./helpers.js";

const RELU = `${SHARED}/models/relu-stories.gguf`;
const PROMPT = [1, 403, 407, 261, 378, 429, 297];
const FLOOR = 2 ** 31 + (64 << 20);

async function run(model: LlamaModel): Promise<{ logits: Float32Array[]; computed: number }> {
  const out: Float32Array[] = [];
  out.push((await model.forwardAsync(PROMPT, PROMPT.length, 0)).slice());
  for (let i = 0; i < 6; i++) out.push((await model.forwardAsync([300 + i], 1, PROMPT.length + i)).slice());
  return { logits: out, computed: model.offloaded?.snapshot().neuronsComputed ?? 0 };
}

/** Largest difference between two runs' logits, over every step. */
function maxDiffAll(a: Float32Array[], b: Float32Array[]): number {
  return a.reduce((m, x, t) => Math.max(m, maxDiff(x, b[t])), 0);
}

test("above 2 GiB of wasm memory the dense and the offloaded model compute what they compute below it", async () => {
  const pi = join(tempDir(), "relu.pi");
  await convertToStore({ input: RELU, output: pi, fsync: false });
  for (const [path, offload] of [
    [RELU, undefined],
    [pi, { sparsity: "gate" as const, cacheBytes: 256 << 10 }],
    [pi, { sparsity: "gate" as const, cacheBytes: 256 << 10, residentGates: false }],
  ] as const) {
    const low = await LlamaModel.load(path, { threads: 2, contextSize: 32, offload });
    const want = await run(low);
    await low.dispose();
    const high = await LlamaModel.load(path, { threads: 2, contextSize: 32, offload, addressFloor: FLOOR });
    assert.ok(high.residentBytes > FLOOR, "buffers sit above 2 GiB");
    const got = await run(high);
    await high.dispose();
    const d = maxDiffAll(want.logits, got.logits);
    assert.ok(d < 1e-4, `${path} ${JSON.stringify(offload)}: logits differ by ${d} above 2 GiB`);
    assert.equal(got.computed, want.computed, "the same neurons computed");
  }
});
