/**
 * A model split among several wasm memories (shards of whole layers, src/model/shards.ts) computes
 * the same bits as in one: greedy ids and every logit equal, the prompt as a batch and token by
 * token, at 1 and 2 threads, on dense, mixture and gemma3 (post-norms, sliding-window rings)
 * models. Small models are forced into several shards with a small shard capacity. Also: each
 * shard's memory holds what planShards says, byte for byte; a pool's kernels touch only their own
 * memory; loadModel's shardBytes splits as LoadOptions' does; a budget above the machine's memory,
 * and a store whose layer with its share of the neuron cache needs more than one memory, are
 * refused before anything loads, with both numbers (a store past one memory otherwise splits:
 * store-shards.test.ts).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { totalmem } from "node:os";
import { join } from "node:path";
import { loadModel } from "../src/api/model.js";
import { GGUFFile } from "../src/format/gguf.js";
import { isNeuronStore, NeuronStore } from "../src/format/store/index.js";
import { readConfig } from "../src/model/config.js";
import { DEFAULT_KV_CACHE } from "../src/model/kv-cache.js";
import { LlamaModel } from "../src/model/model.js";
import { residentBytes } from "../src/model/resident-bytes.js";
import { planShards, shardCapacity, type ShardPlan } from "../src/model/shards.js";
import { convertToStore } from "../src/offline/convert.js";
import { synthesize } from "../src/offline/synth.js";
import { ARENA_START } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import { CLI, greedy, greedyAsync, SHARED, tempDir } from "./helpers.js";

const CONTEXT = 48;
const BATCH = 16;
const dir = tempDir("powerinfer-shards-");

/** The smallest shard capacity that holds every layer alone (so the most shards), and the plan it gives. */
function tightestPlan(path: string): { capacity: number; plan: ShardPlan } {
  const file = isNeuronStore(path) ? NeuronStore.open(path) : GGUFFile.open(path);
  try {
    const cfg = readConfig(file);
    const r = residentBytes(file, cfg, { batchSize: BATCH, contextSize: CONTEXT, predictors: false });
    const kvPerLayer = (r.kv / cfg.nLayer) * 2; // windowed layers hold fewer rows: twice the mean covers any
    const capacity = Math.ceil(ARENA_START + r.buffers + Math.max(...r.layerWeights, r.headWeights) + kvPerLayer);
    return { capacity, plan: planShards(cfg, r, CONTEXT, BATCH, DEFAULT_KV_CACHE, capacity) };
  } finally {
    file.close();
  }
}

async function models(): Promise<[string, string][]> {
  const gemma = join(dir, "gemma3-tiny.q8_0.gguf");
  await synthesize({ shape: "gemma3-tiny", act: "gelu", type: "q8_0", seed: 5, out: gemma, fsync: false });
  return [
    ["stories260K", `${SHARED}/models/stories260K.gguf`],
    ["relu-stories Q8_0", `${SHARED}/models/relu-stories.Q8_0.gguf`],
    ["moe-stories Q8_0 (a mixture in memory)", `${SHARED}/models/moe-stories.Q8_0.gguf`],
    ["gemma3-tiny Q8_0 (post-norms, sliding windows)", gemma],
  ];
}

test("several shards compute the bits of one: greedy ids and logits, batch and token by token, 1 and 2 threads", async () => {
  const prompt = [1, 306, 4966, 304, 29871, 13, 450, 5360, 11];
  for (const [name, path] of await models()) {
    const { capacity, plan } = tightestPlan(path);
    assert.ok(plan.bytes.length >= 3, `${name}: ${plan.bytes.length} shards at ${capacity} bytes, want 3 or more`);
    for (const threads of [1, 2]) {
      const opts = { threads, contextSize: CONTEXT, batchSize: BATCH };
      const one = await LlamaModel.load(path, opts);
      const many = await LlamaModel.load(path, { ...opts, shardBytes: capacity });
      try {
        assert.equal(one.shardCount, 1);
        assert.equal(many.shardCount, plan.bytes.length, `${name}: shards as planned`);
        assert.equal(
          many.fixedArenaBytes,
          plan.bytes.reduce((a, b) => a + b, 0),
          `${name}: the memories hold what planShards computed, byte for byte`,
        );
        const ids = prompt.map((t) => t % one.config.nVocab);
        for (const batch of [true, false]) {
          const a = greedy(one, ids, 12, batch);
          const b = greedy(many, ids, 12, batch);
          const how = `${name}, ${threads} thread(s), prompt ${batch ? "as one batch" : "token by token"}`;
          assert.deepEqual(b.ids, a.ids, `${how}: greedy ids`);
          for (let k = 0; k < a.logits.length; k++) assert.deepEqual(b.logits[k], a.logits[k], `${how}: logits ${k}`);
        }
      } finally {
        await one.dispose();
        await many.dispose();
      }
    }
  }
});

test("loadModel's shardBytes reaches the model: Model.wasmMemories counts the memories planned", async () => {
  const path = `${SHARED}/models/stories260K.gguf`;
  const { capacity, plan } = tightestPlan(path);
  const model = await loadModel({
    modelPath: path,
    threads: 1,
    contextSize: CONTEXT,
    batchSize: BATCH,
    shardBytes: capacity,
  });
  try {
    assert.equal(model.wasmMemories, plan.bytes.length);
  } finally {
    await model.dispose();
  }
});

test("a pool over two memories runs each memory's kernels on that memory only, at 1 and 2 threads", async () => {
  for (const threads of [1, 2]) {
    const mems = [0, 1].map(() => new WebAssembly.Memory({ initial: 32, maximum: 64, shared: true }));
    const pool = await ThreadPool.create(mems, threads);
    try {
      const n = 1 << 16;
      const y = ARENA_START;
      const x = ARENA_START + 4 * n;
      const views = mems.map((m) => new Float32Array(m.buffer));
      views.forEach((v, s) => {
        v.fill(s + 1, y >>> 2, (y >>> 2) + n);
        v.fill(10 * (s + 1), x >>> 2, (x >>> 2) + n);
      });
      pool.run(pool.fn("add_inplace", 1), [y, x], 2, n, 64);
      assert.ok(
        views[0].subarray(y >>> 2, (y >>> 2) + n).every((v) => v === 1),
        "memory 0 untouched",
      );
      assert.ok(
        views[1].subarray(y >>> 2, (y >>> 2) + n).every((v) => v === 22),
        "memory 1: 2 + 20",
      );
      assert.notEqual(pool.fn("add_inplace", 1), pool.fn("add_inplace", 0));
      assert.throws(() => pool.fn("add_inplace", 2), /shard 2: the pool has 2 memories/);
    } finally {
      await pool.dispose();
    }
  }
});

test("a memory budget above the machine's memory is refused before loading, with both numbers (library and CLI)", async () => {
  const path = `${SHARED}/models/stories260K.gguf`;
  const budget = 2 * totalmem();
  await assert.rejects(LlamaModel.load(path, { threads: 1, memoryBudget: budget }), (e: Error) => {
    assert.match(e.message, /memory budget .* is above (the machine's memory|the cgroup limit)/);
    assert.ok(e.message.includes(String(budget)), `names the budget: ${e.message}`);
    return true;
  });
  const r = spawnSync(
    process.execPath,
    [CLI, "run", "-m", path, "-p", "x", "-n", "1", "--memory-budget", `${Math.ceil(budget / 2 ** 30)}GiB`],
    { encoding: "utf8" },
  );
  assert.notEqual(r.status, 0);
  assert.match(r.stderr, /is above (the machine's memory|the cgroup limit [^,]*), [\d.]+ GiB/, r.stderr);
});

test("a neuron store past one memory splits its layers with their FFN; a memory too small for one layer's share is refused before loading, with both numbers", async () => {
  const store = join(dir, "relu.pi");
  await convertToStore({ input: `${SHARED}/models/relu-stories.Q8_0.gguf`, output: store, fsync: false });
  const { capacity } = tightestPlan(store);
  await assert.rejects(
    LlamaModel.load(store, { threads: 1, contextSize: CONTEXT, batchSize: BATCH, shardBytes: capacity }),
    (e: Error) => {
      const m =
        /layer \d+ needs (\d+) bytes of wasm memory with the activation buffers and its share of the neuron store's FFN .* more than one memory holds \((\d+)\)/.exec(
          e.message,
        );
      assert.ok(m, e.message);
      assert.equal(Number(m[2]), capacity);
      assert.ok(Number(m[1]) > capacity, e.message);
      return true;
    },
  );
  // the fixed part fits one memory, the whole FFN cached (no budget) does not: the layers split with it
  const opts = { threads: 1, contextSize: CONTEXT };
  const layout = await LlamaModel.layoutOf(store, opts);
  const r = layout.fixedResident;
  const fixedWasm = r.weights + r.buffers + r.kv + ARENA_START;
  const one = await LlamaModel.load(store, opts);
  const split = await LlamaModel.load(store, { ...opts, shardBytes: fixedWasm + Math.ceil(layout.cacheBytes / 2) });
  try {
    assert.ok(split.shardCount >= 2, `${split.shardCount} memories`);
    assert.equal(split.offloaded!.layout.cacheBytes, layout.cacheBytes, "every bundle cached, split");
    assert.deepEqual(split.offloaded!.layout.hotPerGroup, layout.hotPerGroup, "every neuron hot");
    const prompt = [1, 306, 496, 304];
    assert.deepEqual((await greedyAsync(split, prompt, 6)).ids, (await greedyAsync(one, prompt, 6)).ids);
    assert.equal(split.offloaded!.snapshot().misses, 0, "nothing read: every bundle in memory");
  } finally {
    await one.dispose();
    await split.dispose();
  }
});

test("a shard capacity too small for one layer, or out of range, is an error naming the sizes", async () => {
  const path = `${SHARED}/models/stories260K.gguf`;
  await assert.rejects(
    LlamaModel.load(path, { threads: 1, contextSize: CONTEXT, shardBytes: ARENA_START + 4096 }),
    new RegExp(
      `layer 0 needs \\d+ bytes of wasm memory with the activation buffers, more than one memory holds \\(${ARENA_START + 4096}\\)`,
    ),
  );
  assert.throws(
    () => shardCapacity(1000),
    /shardBytes must be a whole number of bytes above 1048576 and at most 4294967296/,
  );
  assert.throws(() => shardCapacity(2 ** 33), /at most 4294967296 \(4 GiB\), got 8589934592/);
});

test("POWERINFER_SHARD_BYTES splits a model run from the CLI, with the same tokens", () => {
  const path = `${SHARED}/models/stories260K.gguf`;
  const { capacity } = tightestPlan(path);
  const run = (env: Record<string, string>) => {
    const r = spawnSync(
      process.execPath,
      [
        CLI,
        "run",
        "-m",
        path,
        "-p",
        "Once upon a time",
        ...`-n 24 --temp 0 -c ${CONTEXT} -b ${BATCH} --json`.split(" "),
      ],
      { encoding: "utf8", env: { ...process.env, ...env } },
    );
    assert.equal(r.status, 0, r.stderr);
    return { tokens: JSON.parse(r.stdout).tokens as number[], stderr: r.stderr };
  };
  const split = run({ POWERINFER_SHARD_BYTES: String(capacity) });
  const one = run({});
  assert.match(split.stderr, /MiB resident in [3-9] wasm memories,/);
  assert.doesNotMatch(one.stderr, /wasm memories/);
  assert.deepEqual(split.tokens, one.tokens);
});
