/**
 * The offloaded FFN's figures, derived in one place (src/model/offload/stats.ts): the difference
 * of two snapshots, per group too, and the hit rate and computed share every report shows; the
 * meter (src/model/offload/meter.ts) that adds up the passes' counts, and the measuring hook that
 * feeds it, every pass's counts adding up to what the reports read.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { LlamaModel } from "../src/model/model.js";
import { OffloadMeter } from "../src/model/offload/meter.js";
import { GROUP_FIELDS, newGroupStats, newStats, offloadFigures, statsSince } from "../src/model/offload/stats.js";
import { convertToStore } from "../src/offline/convert.js";
import { greedyAsync, SHARED, tempDir } from "./helpers.js";

test("statsSince: every total and every group's counter as after minus before", () => {
  const before = {
    ...newStats(),
    steps: 4,
    neuronsTotal: 400,
    neuronsComputed: 100,
    hotHits: 30,
    coldHits: 10,
    misses: 60,
  };
  before.groups = newGroupStats(2, 0);
  before.groups.misses.set([20, 40]);
  const after = {
    ...before,
    steps: 6,
    neuronsTotal: 600,
    neuronsComputed: 180,
    hotHits: 50,
    coldHits: 20,
    misses: 70,
    bytesRead: 4096,
  };
  after.groups = newGroupStats(2, 0);
  after.groups.misses.set([25, 45]);
  const d = statsSince(before, after);
  assert.deepEqual(
    [d.steps, d.neuronsTotal, d.neuronsComputed, d.hotHits, d.coldHits, d.misses, d.bytesRead],
    [2, 200, 80, 20, 10, 10, 4096],
  );
  assert.deepEqual([...d.groups!.misses], [5, 5]);
  assert.deepEqual([...after.groups.misses], [25, 45], "the snapshots are left as they were");
});

test("offloadFigures: hits over lookups and computed over total, 0 when nothing ran", () => {
  const f = offloadFigures({ hotHits: 30, coldHits: 10, misses: 60, neuronsComputed: 100, neuronsTotal: 400 });
  assert.deepEqual(f, { hits: 40, lookups: 100, hitRate: 0.4, computedShare: 0.25 });
  assert.deepEqual(offloadFigures(newStats()), { hits: 0, lookups: 0, hitRate: 0, computedShare: 0 });
});

test("the meter: passes added counter by counter and group by group; a mixture's own counters only for a mixture", () => {
  const dense = new OffloadMeter(2, 0);
  const pass = dense.newPass();
  pass.misses = 3;
  pass.bytesRead = 3 * 4096;
  pass.groups.misses.set([1, 2]);
  dense.add(pass);
  pass.misses = 1;
  pass.groups.misses.set([0, 1]);
  dense.add(pass);
  const s = dense.snapshot();
  assert.deepEqual([s.misses, s.bytesRead], [4, 6 * 4096]);
  assert.deepEqual([...s.groups!.misses], [1, 3]);
  assert.equal("readAheadExact" in s, false, "no mixture counters for a dense FFN");
  dense.add(pass);
  assert.deepEqual([...s.groups!.misses], [1, 3], "a snapshot is a copy");
  assert.equal(dense.totals.misses, 5);
  const moe = new OffloadMeter(4, 2).snapshot();
  assert.deepEqual([moe.readAheadExact, moe.readAheadExactUsed, moe.readAheadRouted], [0, 0, 0]);
});

test("the measuring hook: every pass's counts add up to the meter's totals (the reports' figures), for a prompt batch and tokens one by one", async () => {
  const pi = join(tempDir(), "relu.pi");
  await convertToStore({ input: `${SHARED}/models/relu-stories.gguf`, output: pi, fsync: false });
  const bundle = 4096;
  // a quarter of the FFN in memory, gate rows read from flash: every counter moves
  const model = await LlamaModel.load(pi, {
    threads: 2,
    contextSize: 64,
    offload: { cacheBytes: (6 * 1024 * bundle) / 4, residentGates: false },
  });
  try {
    const nLayer = model.config.nLayer;
    const sum = { ...newStats(), groups: newGroupStats(nLayer, 0) };
    const passes: { n: number; steps: number; groupSteps: number[] }[] = [];
    const unsubscribe = model.onPass((step) => {
      const c = step.offload!;
      for (const k of Object.keys(newStats()) as (keyof typeof c & keyof typeof sum)[])
        (sum[k] as number) += c[k] as number;
      for (const f of GROUP_FIELDS) for (let g = 0; g < nLayer; g++) sum.groups[f][g] += c.groups[f][g];
      passes.push({ n: step.n, steps: c.steps, groupSteps: [...c.groups.steps] });
    });
    await greedyAsync(model, [1, 403, 283, 102, 263, 31], 6);
    assert.equal(passes.length, 6, "a prompt pass and 5 token passes");
    for (const p of passes) {
      assert.equal(p.steps, p.n * nLayer, "each pass's steps: its tokens through every layer");
      assert.deepEqual(p.groupSteps, Array(nLayer).fill(p.n));
    }
    assert.deepEqual(
      passes.map((p) => p.n),
      [6, 1, 1, 1, 1, 1],
    );
    assert.ok(sum.misses > 0 && sum.hotHits > 0 && sum.bytesRead > sum.misses * bundle, "gate rows and misses read");
    // what the reports read is exactly the passes' sum (the same additions in the same order)
    const s = model.offloaded!.snapshot();
    for (const k of Object.keys(newStats()) as (keyof ReturnType<typeof newStats>)[])
      assert.equal(s[k], sum[k], `the meter's ${k}`);
    for (const f of GROUP_FIELDS) assert.deepEqual([...s.groups![f]], [...sum.groups[f]], `the meter's groups' ${f}`);
    assert.equal(model.offloaded!.ioWaitMs, sum.ioWaitMs);
    unsubscribe();
    await model.forwardAsync([1], 1, 0);
    assert.equal(passes.length, 6, "nothing after unsubscribing");
    assert.equal(model.offloaded!.snapshot().steps, sum.steps + nLayer, "the meter still counts");
  } finally {
    await model.dispose();
  }
  const dense = await LlamaModel.load(`${SHARED}/models/relu-stories.gguf`, { threads: 2, contextSize: 16 });
  try {
    let offload: unknown = undefined;
    const unsubscribe = dense.onPass((step) => void (offload = step.offload));
    dense.forward([1], 1, 0);
    unsubscribe();
    assert.equal(offload, null, "a model in memory counts no offloaded FFN");
  } finally {
    await dense.dispose();
  }
});
