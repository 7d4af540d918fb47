/**
 * Determinism of a neuron store's FFN (src/model/offload/fixed-order.ts): greedy decoding at
 * temperature 0 gives the same ids and the same logits, bit for bit, under any cache size, from a
 * cold or a warm cache, in a fresh load or generating again, at 1 and at 2 threads. Random-weight
 * models (whose greedy ids turn on the last bits of near ties) included: a gate-mode ReLU store,
 * one with planted predictors in predictor mode, and mixtures of experts (moe-stories, and a
 * synthetic mixtral with per-expert predictors).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { LlamaModel } from "../src/model/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { NeuronStore } from "../src/format/store/index.js";
import { synthesize } from "../src/offline/synth.js";
import type { SparsityMode } from "../src/model/offload/layout.js";
import { f32Bytes, greedyAsync, SHARED, tempDir, type Greedy } from "./helpers.js";

const dir = tempDir("determinism-");
const PROMPT = [1, 300, 301, 302, 303, 304, 305];
const TOKENS = 12;

async function synthStore(name: string, o: Parameters<typeof synthesize>[0] extends infer T ? Partial<T> : never) {
  const gguf = join(dir, `${name}.gguf`);
  const predictors = o.gateRank ? join(dir, `${name}.predictors.gguf`) : undefined;
  await synthesize({
    shape: "tiny",
    act: "relu",
    type: "q4_1",
    seed: 7,
    sparsity: 0.9,
    out: gguf,
    fsync: false,
    ...(predictors ? { predictorsOut: predictors } : {}),
    ...o,
  } as Parameters<typeof synthesize>[0]);
  const pi = join(dir, `${name}.pi`);
  await convertToStore({ input: gguf, output: pi, predictors, fsync: false });
  return pi;
}

function ffnBytes(pi: string): number {
  const s = NeuronStore.open(pi);
  const bytes = s.ffn.layers.length * s.ffn.layers[0].neurons * s.ffn.bundleBytes;
  s.close();
  return bytes;
}

function same(got: Greedy, want: Greedy, what: string): void {
  assert.deepEqual(got.ids, want.ids, `${what}: greedy ids`);
  for (let k = 0; k < want.logits.length; k++)
    assert.ok(
      Buffer.compare(f32Bytes(got.logits[k]), f32Bytes(want.logits[k])) === 0,
      `${what}: the logits of step ${k} differ in their bits`,
    );
}

/**
 * The store under three cache sizes (all of the FFN, a quarter, a sixteenth), each generating
 * twice (cold, then warm), then a fresh load at the middle size: every run the first's bits.
 * Returns the first run of each thread count.
 */
async function check(pi: string, sparsity: SparsityMode, label: string): Promise<Greedy[]> {
  const all = ffnBytes(pi);
  const firsts: Greedy[] = [];
  for (const threads of [1, 2]) {
    let want: Greedy | null = null;
    const sizes = [all, all / 4, all / 16, all / 4];
    for (let i = 0; i < sizes.length; i++) {
      const cacheBytes = Math.floor(sizes[i]);
      const model = await LlamaModel.load(pi, { threads, contextSize: 64, offload: { sparsity, cacheBytes } });
      try {
        const what = `${label}, ${threads} thread(s), cache ${cacheBytes} of ${all} bytes${i === 3 ? ", a fresh load" : ""}`;
        const cold = await greedyAsync(model, PROMPT, TOKENS);
        if (!want) want = cold;
        else same(cold, want, `${what}, cold cache`);
        const warm = await greedyAsync(model, PROMPT, TOKENS);
        same(warm, want, `${what}, warm cache`);
        if (i === 2) {
          const s = model.offloaded!.snapshot();
          assert.ok(s.misses > 0, `${what}: the small cache misses (${s.misses})`);
        }
      } finally {
        await model.dispose();
      }
    }
    firsts.push(want!);
  }
  return firsts;
}

test("a synthetic ReLU store in gate mode: the same bits under every cache size, cold or warm, at 1 and 2 threads, and across thread counts", async () => {
  const pi = await synthStore("gate", {});
  const [one, two] = await check(pi, "gate", "gate mode");
  same(two, one, "gate mode, 2 threads against 1");
});

test("a synthetic ReLU store with planted predictors, predictor mode: the same bits under every cache size, cold or warm, at 1 and 2 threads", async () => {
  const pi = await synthStore("pred", { gateRank: 8 });
  const [one, two] = await check(pi, "predictor", "predictor mode");
  same(two, one, "predictor mode, 2 threads against 1");
});

test("mixtures of experts (moe-stories in gate mode; a synthetic mixtral with per-expert predictors): the same bits under every cache size, cold or warm", async () => {
  const moe = join(dir, "moe.pi");
  await convertToStore({ input: `${SHARED}/models/moe-stories.gguf`, output: moe, fsync: false });
  await check(moe, "gate", "moe-stories");
  const mixtral = await synthStore("mixtral", { shape: "mixtral-tiny", gateRank: 8 });
  await check(mixtral, "predictor", "mixtral-tiny, predictors");
});
