/**
 * A neuron store whose layout needs more than one wasm memory runs with its layers split among
 * several (src/model/store-shards.ts), each memory with an offloaded FFN over its own groups. Small
 * stores are forced into 2-3 memories with a small shardBytes. Checked: the same greedy ids and
 * logit bits as one memory under the same budget (gate and predictor mode, dense and mixture
 * stores, 1 and 2 threads), with misses read from flash in every memory; the cache split among the
 * memories sums to one memory's cache (with hot slots per group as one memory pins them); under a
 * budget the memories' extra buffers come out of the cache, so the total laid out is one memory's;
 * each memory's cache is as laid out. (Without a budget, and a memory too small for one layer's
 * share: shards.test.ts.)
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel, type LoadOptions } from "../src/model/model.js";
import { BUDGET_ROOM, type BudgetError, type OffloadLayout, type SparsityMode } from "../src/model/offload/layout.js";
import { convertToStore } from "../src/offline/convert.js";
import { readConfig } from "../src/model/config.js";
import { layoutFor } from "../src/planner/cost-model.js";
import type { Knobs } from "../src/planner/knobs.js";
import { memoryOf, shapeOfStore } from "../src/planner/store-shape.js";
import { synthesize } from "../src/offline/synth.js";
import { ARENA_START } from "../src/runtime/arena.js";
import { CLI, gaussians, greedyAsync, SHARED, tempDir, type Greedy } from "./helpers.js";

const dir = tempDir("powerinfer-store-shards-");
const PROMPT = [1, 300, 301, 302, 303, 304, 305];
const TOKENS = 10;
/** the budget counts wasm memory only: the layout's base is the same in every load of the process */
const BASE: LoadOptions = { contextSize: 48, batchSize: 16, budgetCounts: "wasm" };

async function synthStore(name: string, shape: "tiny" | "mixtral-tiny"): Promise<string> {
  const gguf = join(dir, `${name}.gguf`);
  const predictors = join(dir, `${name}.predictors.gguf`);
  await synthesize({
    shape,
    act: "relu",
    type: "q4_1",
    seed: 7,
    sparsity: 0.9,
    gateRank: 8,
    out: gguf,
    predictorsOut: predictors,
    fsync: false,
  });
  const pi = join(dir, `${name}.pi`);
  await convertToStore({ input: gguf, output: pi, predictors, fsync: false });
  return pi;
}

async function converted(name: string, gguf: string): Promise<string> {
  const pi = join(dir, `${name}.pi`);
  await convertToStore({ input: gguf, output: pi, fsync: false });
  return pi;
}

/** Bytes of the store's FFN packed as the hot region holds it (3 rows a neuron): a cache of a quarter of it misses. */
function packedFFN(pi: string): number {
  const s = NeuronStore.open(pi);
  const bytes = s.ffn.layers.length * s.ffn.layers[0].neurons * 3 * s.ffn.rowBytes;
  s.close();
  return bytes;
}

/** The same greedy ids and logits (strict deep equality compares a Float32Array's bytes). */
function same(got: Greedy, want: Greedy, what: string): void {
  assert.deepEqual(got.ids, want.ids, `${what}: greedy ids`);
  assert.deepEqual(got.logits, want.logits, `${what}: logits`);
}

/** One memory's bytes with this layout: the fixed part in wasm, the FFN's buffers, gate rows or staging and the cache. */
function wholeBytes(l: OffloadLayout): number {
  const r = l.fixedResident;
  return ARENA_START + r.weights + r.buffers + r.kv + l.ffnBuffers + l.gateBytes + l.cacheBytes;
}

/** A wasm budget that leaves one memory a cache of a third of the FFN (split, each memory's own buffers take some of it). */
async function thirdBudget(pi: string, opts: LoadOptions): Promise<number> {
  return Math.ceil(((await LlamaModel.layoutOf(pi, opts)).fixed + packedFFN(pi) / 3) / BUDGET_ROOM);
}

/**
 * The largest shardBytes (in steps of 1/32 of one memory's bytes) at which `opts` split the store
 * into 2 or 3 memories (each memory's own buffers and staging make a split larger than one memory).
 */
async function splitting(pi: string, opts: LoadOptions): Promise<number> {
  const whole = wholeBytes(await LlamaModel.layoutOf(pi, opts));
  for (let k = 31; k >= 8; k--) {
    const shardBytes = Math.floor((whole * k) / 32);
    try {
      const n = (await LlamaModel.layoutOf(pi, { ...opts, shardBytes })).shards?.length ?? 1;
      if (n >= 2 && n <= 3) return shardBytes;
    } catch {
      // a layer's share does not fit (or the memories' own buffers leave no cache): smaller only splits more
      break;
    }
  }
  throw new Error(`${pi}: no shardBytes splits it into 2 or 3 memories`);
}

async function stores(): Promise<[string, string, SparsityMode][]> {
  return [
    ["relu-stories Q8_0, gate mode", await converted("relu", `${SHARED}/models/relu-stories.Q8_0.gguf`), "gate"],
    ["synthetic ReLU with planted predictors, predictor mode", await synthStore("pred", "tiny"), "predictor"],
    ["moe-stories, gate mode", await converted("moe", `${SHARED}/models/moe-stories.gguf`), "gate"],
    [
      "mixtral-tiny with per-expert predictors, predictor mode",
      await synthStore("mixtral", "mixtral-tiny"),
      "predictor",
    ],
  ];
}

test("a store split among 2-3 memories computes the bits of one with the same cache: dense and mixture, gate and predictor mode, 1 and 2 threads; under a budget too", async () => {
  const cases: [string, string, LoadOptions][] = [];
  for (const [name, pi, sparsity] of await stores())
    cases.push([
      `${name}, a quarter-FFN cache`,
      pi,
      { offload: { sparsity, cacheBytes: Math.floor(packedFFN(pi) / 4) } },
    ]);
  const relu = cases[0][1];
  const gate: LoadOptions = { ...BASE, threads: 1, offload: { sparsity: "gate" } };
  cases.push([
    "relu-stories Q8_0, gate mode, under a wasm budget",
    relu,
    { ...gate, memoryBudget: await thirdBudget(relu, gate) },
  ]);
  for (const [name, pi, o] of cases) {
    const shardBytes = await splitting(pi, { ...BASE, threads: 1, ...o });
    for (const threads of [1, 2]) {
      const opts: LoadOptions = { ...BASE, ...o, threads };
      const what = `${name}, ${threads} thread(s), shardBytes ${shardBytes}`;
      const one = await LlamaModel.load(pi, opts);
      const predictor = o.offload!.sparsity === "predictor";
      const last = one.config.nLayer - 1;
      const x = gaussians(one.config.nEmbd, 3);
      let want: Greedy;
      let scores: Float32Array | null = null;
      try {
        assert.equal(one.shardCount, 1);
        assert.equal(one.offloaded!.layout.shards, undefined);
        want = await greedyAsync(one, PROMPT, TOKENS);
        if (predictor) scores = one.predictorScores(last, x);
      } finally {
        await one.dispose();
      }
      const many = await LlamaModel.load(pi, { ...opts, shardBytes });
      try {
        const off = many.offloaded!;
        const shards = off.layout.shards!;
        assert.ok(shards.length >= 2 && shards.length <= 3, `${what}: FFNs in ${shards.length} memories`);
        // an FFN in every memory, but a last one that may hold only the output
        assert.ok(many.shardCount - shards.length <= 1, `${what}: ${many.shardCount} memories`);
        assert.equal(off.parts.length, shards.length);
        assert.equal(off.mode, o.offload!.sparsity);
        same(await greedyAsync(many, PROMPT, TOKENS), want, `${what}, split`);
        // every memory's FFN read misses from flash: the caches are really split and small
        const s = off.snapshot();
        for (let i = 0; i < shards.length; i++) {
          const { from, to } = shards[i].groups;
          const misses = s.groups!.misses.slice(from, to).reduce((a, b) => a + b, 0);
          assert.ok(misses > 0, `${what}: memory ${i} (groups ${from}..${to - 1}) read nothing`);
          assert.equal(off.parts[i].cache.bytes, shards[i].cacheBytes, `${what}: memory ${i}'s cache as laid out`);
        }
        assert.equal(s.groups!.steps.length, shards[shards.length - 1].groups.to, `${what}: every group counted`);
        // generating again from a warm cache: the same bits
        same(await greedyAsync(many, PROMPT, TOKENS), want, `${what}, split, warm`);
        // the predictor of the last group (numbered in the store) from its memory's
        if (scores) assert.deepEqual(many.predictorScores(last, x), scores, `${what}: group ${last}'s predictor`);
      } finally {
        await many.dispose();
      }
    }
  }
});

/** Bytes the two layouts differ by at most in what they lay out: page padding per memory, rounding to slots. */
function slack(layout: OffloadLayout, memories: number, bundleBytes: number): number {
  return memories * 4096 + 2 * bundleBytes + layout.hotPerGroup.length * layout.hotSlotBytes;
}

test("the cache split among memories: one memory's cache summed (hot slots per group as one memory pins them); under a budget the total laid out is one memory's", async () => {
  const pi = await converted("relu-layout", `${SHARED}/models/relu-stories.Q8_0.gguf`);
  const s = NeuronStore.open(pi);
  const bundleBytes = s.ffn.bundleBytes;
  const nFF = s.layer(0).neurons;
  s.close();
  const opts: LoadOptions = { ...BASE, threads: 1, offload: { sparsity: "gate" } };
  // a cache of a fixed size: the same slots, shared out
  const cacheBytes = Math.floor(packedFFN(pi) / 5);
  const fixedCache: LoadOptions = { ...opts, offload: { ...opts.offload, cacheBytes } };
  const one = await LlamaModel.layoutOf(pi, fixedCache);
  const split = await LlamaModel.layoutOf(pi, { ...fixedCache, shardBytes: await splitting(pi, fixedCache) });
  const n = split.shards!.length;
  assert.ok(n >= 2, `${n} memories`);
  const sum = split.shards!.reduce((a, x) => a + x.cacheBytes, 0);
  assert.equal(sum, split.cacheBytes);
  assert.ok(
    Math.abs(sum - one.cacheBytes) <= n * 4096,
    `cache summed over ${n} memories ${sum}, one memory ${one.cacheBytes}`,
  );
  // each group's hot slots as one memory pins them, but for the packed hot region's page padding in each memory
  const pad = 1 + Math.ceil(((n - 1) * 4096) / (one.hotPerGroup.length * one.hotSlotBytes));
  split.hotPerGroup.forEach((h, g) =>
    assert.ok(Math.abs(h - one.hotPerGroup[g]) <= pad, `group ${g}: ${h} hot, one memory ${one.hotPerGroup[g]}`),
  );
  assert.equal(split.coldSlots, one.coldSlots);
  assert.equal(
    split.shards!.reduce((a, x) => a + x.coldSlots, 0),
    one.coldSlots,
  );
  // each memory's groups follow the one before's, and cover the store
  split.shards!.forEach((x, i) => assert.equal(x.groups.from, i === 0 ? 0 : split.shards![i - 1].groups.to));
  assert.equal(split.shards![n - 1].groups.to, one.hotPerGroup.length);

  // under a budget: each memory's own buffers come out of the cache, the total stays one memory's
  // a budget whose cache (a third of the FFN) is what the budget leaves, in one memory and split
  const budgeted: LoadOptions = { ...opts, memoryBudget: await thirdBudget(pi, opts) };
  const b1 = await LlamaModel.layoutOf(pi, budgeted);
  assert.ok(b1.hotPerLayer < nFF, `one memory's cache is what the budget leaves (${b1.hotPerLayer} hot)`);
  const bn = await LlamaModel.layoutOf(pi, { ...budgeted, shardBytes: await splitting(pi, budgeted) });
  assert.ok(bn.fixed > b1.fixed, `the split's fixed part ${bn.fixed} counts its memories' buffers (one: ${b1.fixed})`);
  assert.ok(bn.fixed + bn.cacheBytes <= bn.room, `laid out ${bn.fixed + bn.cacheBytes}, room ${bn.room}`);
  const total1 = b1.fixed + b1.cacheBytes;
  const totalN = bn.fixed + bn.cacheBytes;
  assert.ok(
    Math.abs(totalN - total1) <= slack(b1, bn.shards!.length, bundleBytes),
    `laid out: ${totalN} split among ${bn.shards!.length}, ${total1} in one`,
  );
});

test("the planner's layout of a store split among memories is the one load makes (process budget, gate and predictor mode)", async () => {
  for (const [name, pi, sparsity] of (await stores()).slice(0, 2)) {
    const opts: LoadOptions = { threads: 1, contextSize: 48, batchSize: 16, offload: { sparsity } };
    // Budgets over this process's resident size (the layout's base) as it stands at each load: a
    // disposed model's memories stay resident until a collection. Over the smallest: room for a
    // second memory's buffers and staging, and a third of the FFN.
    const over =
      (await LlamaModel.layoutOf(pi, { ...opts, memoryBudget: 1 << 20 }).then(
        () => assert.fail("a budget of 1 MiB is refused"),
        (e: unknown) => (e as BudgetError).layout.minBudget - (e as BudgetError).layout.fixedResident.base,
      )) +
      16 * 2 ** 20 +
      Math.ceil(packedFFN(pi) / 3);
    const at = (shardBytes?: number) =>
      LlamaModel.layoutOf(pi, { ...opts, memoryBudget: process.memoryUsage.rss() + over, shardBytes });
    const whole = wholeBytes(await at());
    let made: OffloadLayout | null = null;
    let shardBytes = 0;
    for (let k = 31; k >= 8 && !made; k--) {
      shardBytes = Math.floor((whole * k) / 32);
      const l = await at(shardBytes);
      if ((l.shards?.length ?? 1) >= 2) made = l;
    }
    assert.ok(made, `${name}: some memory size splits it`);
    const store = NeuronStore.open(pi);
    try {
      const cfg = readConfig(store);
      const shape = shapeOfStore(store, cfg, sparsity as "gate" | "predictor", 16, 48);
      shape.memory = memoryOf(cfg, shape.memory!.resident, 48, 16, shardBytes);
      const knobs: Knobs = { sparsity: sparsity as "gate" | "predictor", threads: 1, queueDepth: 8, pipeline: true };
      const memories = made.shards!.length;
      const planned = layoutFor(shape, { base: made.fixedResident.base, threads: 1, memories }, knobs, made.budget!);
      assert.deepEqual(planned, made, `${name}: the planner's split`);
      // one memory of the default size holds it: the planner's layout is then one memory's
      const one = layoutFor(
        { ...shape, memory: memoryOf(cfg, shape.memory.resident, 48, 16) },
        { base: made.fixedResident.base, threads: 1 },
        knobs,
        made.budget!,
      );
      assert.equal(one.shards, undefined);
    } finally {
      store.close();
    }
  }
});

test("POWERINFER_SHARD_BYTES splits a store run from the CLI, with the same tokens", async () => {
  const pi = await converted("relu-cli", `${SHARED}/models/relu-stories.Q8_0.gguf`);
  const shardBytes = await splitting(pi, { ...BASE, threads: 1 });
  const run = (env: Record<string, string>) => {
    const r = spawnSync(
      process.execPath,
      [CLI, "run", "-m", pi, "-p", "Once upon a time", ...`-n 16 --temp 0 -c 48 -b 16 -t 1 --json`.split(" ")],
      { encoding: "utf8", env: { ...process.env, ...env } },
    );
    assert.equal(r.status, 0, r.stderr);
    return { tokens: JSON.parse(r.stdout).tokens as number[], stderr: r.stderr };
  };
  const split = run({ POWERINFER_SHARD_BYTES: String(shardBytes) });
  const one = run({});
  assert.match(split.stderr, /resident in [23] wasm memories,/);
  assert.match(split.stderr, /neuron cache [\d.]+ MiB split among [23] memories,/);
  assert.doesNotMatch(one.stderr, /memories/);
  assert.deepEqual(split.tokens, one.tokens);
});
