import { test } from "node:test";
import assert from "node:assert/strict";
import { facts, MiB, shape } from "./planner-fixture.js";
import { copyFileSync, existsSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { GGMLType } from "../src/format/ggml-types.js";
import { NeuronStore } from "../src/format/store/index.js";
import { convertToStore } from "../src/offline/convert.js";
import { plannedFiring, synthesize } from "../src/offline/synth.js";
import { readConfig } from "../src/model/config.js";
import {
  BUDGET_ROOM,
  BudgetError,
  bridgeRegionBytes,
  ffnBufferBytes,
  offloadLayout,
  runtimeGrowthBytes,
} from "../src/model/offload/layout.js";
import { hitProfile, type Firing } from "../src/io/hit-model.js";
import { layoutFor, predict } from "../src/planner/cost-model.js";
import type { Hardware } from "../src/planner/hardware.js";
import type { Knobs } from "../src/planner/knobs.js";
import type { ModelShape } from "../src/planner/model-shape.js";
import { batchSecondsAt, iopsAt, submitAt } from "../src/planner/read-table.js";
import { gateStreamOf } from "../src/planner/store-shape.js";
import { machineDifference, machineFingerprint, machineId } from "../src/planner/machine.js";
import { probeCachePath } from "../src/planner/probe-cache.js";
import { probeMachine } from "../src/planner/probe.js";
import type { IoTable } from "../src/planner/probe-results.js";
import { calibrated, calibration, type CalibrationJob, type CalibrationRun } from "../src/planner/calibrate.js";
import { applyPlan, checkPlan } from "../src/planner/apply-plan.js";
import { defaultPlanPath, readPlan, writePlan, PlanError } from "../src/planner/plan-file.js";
import { firingOf } from "../src/planner/firing-rates.js";
import { makePlan } from "../src/planner/plan-search.js";
import { shapeOfStore } from "../src/planner/store-shape.js";
import { sizeText } from "../src/planner/plan-text.js";
import { measureRuntimeBase } from "../src/planner/runtime-base.js";
import { LlamaModel } from "../src/model/model.js";
import { NeuronCache } from "../src/io/neuron-cache.js";
import { CLI, rng, tempDir } from "./helpers.js";

// ---------------------------------------------------------------------------------------------
// Cost model on hand-made inputs

const hw: Hardware = {
  threads: 1,
  dispatch: 0,
  memoryBandwidth: 1e12,
  matvecRate: () => 1e9, // 1 ns per multiply-add
  sparse: {
    upDownPerNeuron: 1e-6,
    layerFixed: 0,
    gatePerNeuron: 1e-7,
    gateFixed: 0,
    ffnPerNeuron: 1.5e-6,
    ffnRunPerNeuron: 1e-6,
  },
  scan: { perNeuron: 0, perLookup: 0, perMiss: 0 },
  predictorSeconds: 0,
  // 1 ms per read at any depth: I/O time = reads / 1000
  batchSeconds: (_b, _q, n) => n / 1000,
  streamChunkSeconds: () => 0.01,
  submitSeconds: () => 0,
  iops: () => 1000,
  base: 20 * MiB,
  overlap: true,
};
const knobs: Knobs = {
  sparsity: "gate",
  threads: 1,
  queueDepth: 4,
  hotFraction: 0.5,
  residentGates: true,
  pipeline: true,
};
const uniform = (p: number): Firing => ({
  layers: [new Float64Array(100).fill(p), new Float64Array(100).fill(p)],
  source: "test",
});
/**
 * Rates averaging `p` per layer with no two positions past the first `hot` adjacent (the hot ones
 * `p` each): every miss is a read of its own (read-runs.ts), as the per-read sums below count.
 */
const apart = (p: number, hot = 0): Firing => {
  const rest = Math.ceil((100 - hot) / 2);
  const at = (k: number) => (k < hot ? p : (k - hot) % 2 === 0 ? (p * (100 - hot)) / rest : 0);
  return { layers: [0, 1].map(() => Float64Array.from({ length: 100 }, (_, k) => at(k))), source: "test" };
};
const workload = { contextSize: 1024, promptTokens: 0, decodeTokens: 1 };
/** everything but the cache: base 20 + weights 10 + KV 1 MiB + runtime growth + the FFN's buffers + gate rows (or staging) + the cache's page alignment */
const fixedOf = (gates: number) => 31 * MiB + runtimeGrowthBytes(facts) + ffnBufferBytes(facts, 1, true) + gates + 4096;
/** a budget that leaves `slots` (and half a) bundles of cache, resident gate rows */
const budgetFor = (slots: number, gates = 8 * MiB) => (fixedOf(gates) + (slots + 0.5) * 4096) / 0.97;

test("budget layout: what the runtime's layout leaves for the neuron cache, hot and cold slots", () => {
  const budget = 100 * MiB;
  const s = layoutFor(shape, hw, knobs, budget);
  assert.equal(s.fixed, fixedOf(8 * MiB));
  assert.equal(s.fixedResident.kv, 1 * MiB);
  assert.equal(s.slots, 200); // the whole FFN fits: everything hot
  assert.equal(s.hotPerLayer, 100);
  assert.equal(s.coldSlots, 0);
  assert.equal(s.cacheBytes, 200 * 4096);
  const tight = layoutFor(shape, hw, knobs, budgetFor(41));
  assert.ok(tight.fits);
  assert.equal(tight.slots, 41);
  assert.equal(tight.hotPerLayer, Math.min(Math.floor((41 * 0.5) / 2), Math.floor(40 / 2)));
  assert.equal(tight.coldSlots, 41 - 2 * tight.hotPerLayer);
  const none = layoutFor(shape, hw, knobs, fixedOf(8 * MiB));
  assert.equal(none.fits, false);
  assert.equal(none.minBudget, Math.ceil((fixedOf(8 * MiB) + 4 * 4096) / 0.97));
  // gate rows read from flash: their room, less the staging area, goes to the cache
  const flash = layoutFor(shape, hw, { ...knobs, residentGates: false }, budgetFor(41));
  assert.equal(flash.gateBytes, 4096 + 100 * 4096 + 448);
  assert.equal(flash.slots, 200, "without resident gate rows their room goes to the cache: all of the FFN here");
  // predictor mode never keeps gate rows
  const pred = layoutFor(shape, hw, { ...knobs, sparsity: "predictor" }, budgetFor(41));
  assert.equal(pred.residentGates, false);
  // undefined: gate rows resident when they fit beside a cache of a layer's bundles (100 here), else read from flash
  assert.equal(layoutFor(shape, hw, { ...knobs, residentGates: undefined }, budgetFor(100)).residentGates, true);
  assert.equal(layoutFor(shape, hw, { ...knobs, residentGates: undefined }, budgetFor(99)).residentGates, false);
  assert.equal(layoutFor(shape, hw, { ...knobs, residentGates: undefined }, budgetFor(2)).residentGates, false);
});

test("budget layout, dense mode over a dense FFN without a profile: every neuron runs every token (a cyclic scan an LRU keeps nothing of), so all is pinned but room for two layers' misses; no gate rows or staging", () => {
  const six = { ...facts, groups: 6 };
  const resident = { base: 0, weights: 0, buffers: 0, kv: 0, growth: 0 };
  const at = (slots: number, sparsity: "dense" | "gate") =>
    offloadLayout(six, resident, 2 ** 40, { sparsity, threads: 1, cacheBytes: slots * 4096, residentGates: false });
  for (const slots of [150, 201, 350, 599]) {
    const d = at(slots, "dense");
    assert.equal(d.gateBytes, 0);
    assert.equal(d.slots, slots);
    // the most hot per layer with 6 * hot + 2 * (100 - hot) <= slots
    const hot = Math.max(0, Math.floor((slots - 200) / 4));
    assert.equal(d.hotPerLayer, hot, `${slots} slots`);
    assert.ok(d.coldSlots >= Math.min(slots, 2 * (100 - hot)));
    // gate mode keeps the profile-less default: half
    assert.equal(at(slots, "gate").hotFraction, 0.5);
  }
  assert.equal(at(600, "dense").hotPerLayer, 100, "the whole FFN fits: all pinned");
});

test("the flash reader's bridge region: a 32nd of the cache room in 32 KiB slots, at most 2 MiB a memory, none when every bundle is cached", () => {
  assert.equal(bridgeRegionBytes(-1), 0);
  assert.equal(bridgeRegionBytes(32 * 32768 - 1), 0);
  assert.equal(bridgeRegionBytes(32 * 32768), 32768);
  assert.equal(bridgeRegionBytes(100 * MiB), 2 * MiB);
  const six = { ...facts, groups: 6 };
  const resident = { base: 0, weights: 0, buffers: 0, kv: 0, growth: 0 };
  const knobs = { sparsity: "gate" as const, threads: 1, residentGates: false };
  const all = 6 * facts.nFF * facts.bundleBytes;
  const free = offloadLayout(six, resident, undefined, knobs);
  assert.equal(free.bridgeBytes, 0, "every bundle cached: nothing to read");
  // a budget whose cache room is half the FFN: a 32nd of that set aside, counted with the buffers and in the fixed part
  const plain = offloadLayout(six, resident, undefined, { ...knobs, cacheBytes: all });
  const budget = (plain.fixed + all / 2) / BUDGET_ROOM;
  const half = offloadLayout(six, resident, budget, knobs);
  assert.equal(half.bridgeBytes, bridgeRegionBytes(all / 2));
  assert.ok(half.bridgeBytes > 0);
  assert.equal(half.ffnBuffers, plain.ffnBuffers + half.bridgeBytes + 4096);
  assert.equal(half.fixed, plain.fixed + half.bridgeBytes + 4096);
  assert.ok(half.fixed + half.cacheBytes <= half.room);
});

/** The real NeuronCache under independent per-token firing, layers in order as the runtime visits them: its cold hit rate once warm. */
function simulateLru(rates: Float64Array[], coldSlots: number, tokens: number): number {
  const L = rates.length;
  const cache = new NeuronCache(
    0,
    4096,
    coldSlots,
    rates.map((p) => p.length),
    Array(L).fill(0),
  );
  const rnd = rng(7);
  let hits = 0,
    asked = 0;
  const warm = Math.floor(tokens / 4);
  const counts = { hotHits: 0, coldHits: 0, aheadUsed: 0, aheadExact: 0 };
  for (let t = 0; t < tokens; t++) {
    for (let l = 0; l < L; l++) {
      cache.beginStep();
      const missed: number[] = [];
      for (let k = 0; k < rates[l].length; k++) {
        if (rnd() >= rates[l][k]) continue;
        const hit = cache.lookup(l, k, counts) >= 0;
        if (!hit) missed.push(k);
        if (t >= warm) {
          asked++;
          if (hit) hits++;
        }
      }
      for (const k of missed) cache.acquire(l, k);
    }
  }
  return hits / asked;
}

test("hit model: hot neurons always hit; the cold LRU's hits as the real cache's under independent firing", () => {
  const f = uniform(0.2);
  // all hot
  const allHot = hitProfile(f, 100, 0, 0, 1);
  assert.ok(Math.abs(allHot.hot[0] - 20) < 1e-9);
  assert.equal(allHot.cold[0][0], 0);
  // Once warm, against the NeuronCache itself: alike neurons, and a power law of rates, at cold
  // regions from under one token's misses to many tokens' worth
  const power = (n: number, s: number) => Float64Array.from({ length: n }, (_, k) => Math.min(1, s / (1 + k / 20)));
  for (const [rates, cold] of [
    [[new Float64Array(100).fill(0.2), new Float64Array(100).fill(0.2)], 50],
    [[power(600, 0.5), power(600, 0.5), power(600, 0.5)], 150],
    [[power(600, 0.5), power(600, 0.5), power(600, 0.5)], 400],
    [[power(600, 0.5), power(600, 0.5), power(600, 0.5)], 900],
  ] as [Float64Array[], number][]) {
    const hp = hitProfile({ layers: rates, source: "test" }, 0, cold, 10_000, 1);
    let hits = 0,
      fired = 0;
    for (let l = 0; l < rates.length; l++) {
      hits += hp.cold[0][l];
      fired += hp.firing[l];
    }
    const model = hits / fired;
    const sim = simulateLru(rates, cold, 4000);
    assert.ok(
      Math.abs(model - sim) < 0.02,
      `${cold} cold slots: model ${model.toFixed(3)}, the real cache ${sim.toFixed(3)}`,
    );
  }
  // cold start: nothing cached before the first token
  const cold = hitProfile(f, 0, 50, 0, 3);
  assert.equal(cold.cold[0][0], 0);
  assert.ok(cold.cold[1][0] > 0 && cold.cold[1][0] <= cold.cold[2][0] + 1e-12, "the cache warms up step by step");
  // a cold region smaller than one token's misses (tau < 1 token) is overrun before any layer
  // comes round again: no cold hits, as the runtime measures
  const thrash = hitProfile(f, 0, 5, 10_000, 2);
  assert.ok(thrash.tau < 1, `tau ${thrash.tau}`);
  assert.equal(thrash.cold[1][0] + thrash.cold[1][1], 0);
  // a cold region larger than every neuron: after t tokens a neuron hits with 1 - (1 - p)^t
  const big = hitProfile(f, 0, 1000, 3, 1);
  assert.equal(big.tau, Infinity);
  assert.ok(Math.abs(big.cold[0][0] - 100 * 0.2 * (1 - 0.8 ** 3)) < 1e-6);
});

test("predicted time: everything cached means no reads; a cache of the minimum reads every miss at the probed rate", () => {
  const f = apart(0.2);
  const all = predict(shape, f, hw, knobs, workload, 100 * MiB);
  assert.equal(all.missesPerToken, 0);
  assert.equal(all.breakdown.ioWait, 0);
  // attention: 64x64 at 1 GMAC/s per layer; gate 100x64; up/down 20 neurons x 1 us; output 50x64
  const want = 2 * (64 * 64 * 1e-9) + 2 * (100 * 64 * 1e-9) + 2 * 20 * 1e-6 + 50 * 64 * 1e-9;
  assert.ok(Math.abs(all.secondsPerToken - want) < 1e-9, `${all.secondsPerToken} vs ${want}`);
  const sum = Object.values(all.breakdown).reduce((a, v) => a + v, 0);
  assert.ok(Math.abs(sum - all.secondsPerToken) < 1e-12, "the breakdown adds up to the total");

  // 4 bundles of cache, hot share 0: at step 0 nothing is cached, 40 misses per token
  const tiny = predict(shape, f, hw, { ...knobs, hotFraction: 0 }, workload, budgetFor(4));
  assert.equal(tiny.layout.slots, 4);
  assert.ok(Math.abs(tiny.missesPerToken - 40) < 1e-9);
  // 20 misses per layer in rounds of 4 cold slots: 5 rounds of 4 reads, 4 ms each
  assert.ok(Math.abs(tiny.breakdown.ioWait - 2 * 5 * 0.004) < 1e-9, `I/O wait ${tiny.breakdown.ioWait}`);
  assert.equal(tiny.maxRounds, 5);
  assert.equal(all.maxRounds, 0);
  assert.ok(Math.abs(tiny.readBytesPerToken - 40 * 4096) < 1e-6);
  assert.ok(tiny.tokensPerSecond < all.tokensPerSecond);
});

test("predicted time: the pipeline hides reads behind the hits' compute, only the first queue-depth's worth", () => {
  const f = apart(0.5, 15);
  const slow: Hardware = { ...hw, sparse: { ...hw.sparse, upDownPerNeuron: 1e-3 } }; // hits compute 1 ms each
  const budget = budgetFor(60); // 60 slots: 15 hot per layer, 30 cold
  const on = predict(
    shape,
    f,
    slow,
    { ...knobs, hotFraction: 0.5, queueDepth: 4 },
    { ...workload, promptTokens: 0 },
    budget,
  );
  const off = predict(
    shape,
    f,
    slow,
    { ...knobs, hotFraction: 0.5, queueDepth: 4, pipeline: false },
    { ...workload, promptTokens: 0 },
    budget,
  );
  assert.equal(on.layout.hotPerLayer, 15);
  // per layer: 7.5 hot hits (7.5 ms of compute), 42.5 misses, round 1 = 30 reads (cold slots)
  const hits = 7.5e-3;
  const r1 = Math.max(hits + (30 - 4) / 1000, 30 / 1000);
  const r2 = 12.5 / 1000;
  assert.ok(Math.abs(on.breakdown.ioWait - 2 * (r1 - hits + r2)) < 1e-9, `pipelined wait ${on.breakdown.ioWait}`);
  assert.ok(Math.abs(off.breakdown.ioWait - 2 * (30 / 1000 + r2)) < 1e-9, `unpipelined wait ${off.breakdown.ioWait}`);
  assert.ok(on.secondsPerToken < off.secondsPerToken);
  // compute threads on every core: the reads wait for the CPU, nothing overlaps
  const busy = predict(
    shape,
    f,
    { ...slow, overlap: false },
    { ...knobs, hotFraction: 0.5, queueDepth: 4 },
    { ...workload, promptTokens: 0 },
    budget,
  );
  assert.ok(Math.abs(busy.breakdown.ioWait - off.breakdown.ioWait) < 1e-12);
  // a deeper queue never predicts slower when the device scales with depth
  const scaling: Hardware = {
    ...hw,
    batchSeconds: (_b, qd, n) => n / (1000 * Math.min(qd, 16)) + 1e-4,
    submitSeconds: () => 1e-6,
    iops: (_b, qd) => 1000 * Math.min(qd, 16),
  };
  let prev = 0;
  for (const qd of [1, 2, 4, 8, 16]) {
    const p = predict(shape, f, scaling, { ...knobs, queueDepth: qd }, workload, budget);
    assert.ok(p.tokensPerSecond >= prev, `QD ${qd}`);
    prev = p.tokensPerSecond;
  }
});

test("gates not resident, streamed from the store's gate-row copy: chunk reads double-buffered behind the gates' compute", () => {
  const streamed: ModelShape = { ...shape, gateStream: { rows: 50, bytes: 50 * 64, rowBytes: 64 } };
  const budget = budgetFor(100, 4096 + 100 * 4096 + 448); // gate staging instead of rows: 100 cache slots
  const slowReads: Hardware = { ...hw, streamChunkSeconds: () => 0.01 };
  const p = predict(
    streamed,
    uniform(0),
    slowReads,
    { ...knobs, residentGates: false, hotFraction: 0 },
    workload,
    budget,
  );
  assert.equal(p.layout.hotPerLayer, 0);
  // per layer 2 chunks of 10 ms: the first read during attention (4.1 us), the second issued
  // when the first is consumed, so it lands 10 ms after the first: ~20 ms of waiting per layer
  const attn = 64 * 64 * 1e-9;
  const gate0 = 0; // nothing cached, nothing fires
  const want = 2 * (0.01 - attn - gate0 + 0.01 - (100 * 1e-7) / 2);
  assert.ok(Math.abs(p.breakdown.gateReads - want) < 2e-4, `gate reads ${p.breakdown.gateReads} vs ~${want}`);
  assert.ok(Math.abs(p.readBytesPerToken - 2 * 2 * 50 * 64) < 1e-6);
  // compute-bound gates: reads hide behind them but for the first chunk
  const fastReads: Hardware = { ...hw, streamChunkSeconds: () => 1e-6 };
  const q = predict(
    streamed,
    uniform(0),
    fastReads,
    { ...knobs, residentGates: false, hotFraction: 0 },
    workload,
    budget,
  );
  assert.ok(q.breakdown.gateReads < 1e-5);
});

test("a mixture of experts: hits per (layer, expert), a layer's work over its routed experts, one predictor per routed expert", () => {
  // 2 layers x 4 experts of 100 neurons, top-2; experts 0 and 1 take 80% of the routing each
  const routed = Float64Array.from([0.8, 0.8, 0.2, 0.2, 0.8, 0.8, 0.2, 0.2]);
  // a routed expert fires 10% of its neurons (the first ones more often): per token, its share of that
  const firing: Firing = {
    layers: Array.from(routed, (r) => Float64Array.from({ length: 100 }, (_, i) => (0.15 - i * 0.001) * r)),
    source: "test",
  };
  const moe: ModelShape = {
    ...shape,
    // the store's profile (the layout shares hot slots out by it)
    facts: { ...facts, groups: 8, experts: 4, expertsUsed: 2, firing: firing.layers.map((p) => Float32Array.from(p)) },
    experts: 4,
    expertsUsed: 2,
    routed,
  };
  const moeHw: Hardware = { ...hw, predictorSeconds: 1e-4 };
  const k: Knobs = { ...knobs, sparsity: "predictor", pipeline: false, hotFraction: 1 };
  const p = predict(moe, firing, moeHw, k, workload, 100 * MiB);
  assert.ok(p.layout.fits);
  assert.equal(p.layout.slots, 800, "the whole mixture fits");
  assert.ok(Math.abs(p.firingPerToken - 2 * 2 * 10.05) < 1e-9, "2 layers x 2 routed experts x 10.05 neurons");
  assert.equal(p.missesPerToken, 0);
  // per layer the router (64 x 4 multiply-adds at 1 ns) and a predictor per routed expert
  assert.ok(Math.abs(p.breakdown.gate - 2 * (256e-9 + 2e-4)) < 1e-12, `gate ${p.breakdown.gate}`);
  // the same rates as a dense model of 2 layers: no router, one predictor per layer
  const dense = predict(
    shape,
    { layers: [firing.layers[0], firing.layers[4]], source: "test" },
    moeHw,
    k,
    workload,
    100 * MiB,
  );
  assert.ok(Math.abs(dense.breakdown.gate - 2e-4) < 1e-12);
  // a small cache: the popular experts' neurons are pinned first (shared out by rate), so the
  // routing skew makes more hits than pinning every expert alike would
  const budget = budgetFor(240, 4096 + 100 * 4096 + 448);
  const skewed = predict(moe, firing, moeHw, { ...k, hotFraction: 0.9 }, workload, budget);
  assert.ok(skewed.layout.fits);
  const hot = skewed.layout.hotPerGroup;
  assert.ok(hot[0] > hot[2] && hot[4] > hot[6], `hot per group ${hot.join(", ")}`);
  const alike = hitProfile(firing, skewed.layout.hotPerLayer, skewed.layout.coldSlots, 0, 1);
  const byRate = hitProfile(firing, hot, skewed.layout.coldSlots, 0, 1);
  const hotHits = (h: typeof alike) => h.hot.reduce((a, v) => a + v, 0);
  assert.ok(hotHits(byRate) > hotHits(alike), `${hotHits(byRate)} hot hits by rate, ${hotHits(alike)} alike`);
  // the rates must match the groups
  assert.throws(
    () => predict(moe, uniform(0.1), moeHw, k, workload, 100 * MiB),
    /firing rates for 2 groups, the model has 8 \(2 layers x 4 experts\)/,
  );
});

test("read tables: rates interpolated between measured depths and batch sizes, never past the deepest queue", () => {
  const cell = (q: number, iops: number) => ({
    bytes: 4096,
    queueDepth: q,
    iops,
    submit: 1e-6 * q,
    batches: [
      { n: q, perSecond: iops / 2 },
      { n: 4 * q, perSecond: iops * 0.8 },
      { n: 16 * q, perSecond: iops },
    ],
  });
  const t: IoTable = {
    direct: true,
    threadPool: 16,
    loadAverage: 0,
    cells: [cell(1, 1000), cell(4, 4000), cell(16, 16000)],
  };
  assert.equal(iopsAt(t, 4), 4000);
  assert.equal(iopsAt(t, 2), 1000 + 0.5 * 3000);
  assert.equal(iopsAt(t, 64), 16000);
  assert.equal(iopsAt({ ...t, threadPool: 4 }, 16), 4000, "no deeper than libuv's pool runs");
  const noisy: IoTable = { ...t, cells: [cell(1, 1000), cell(4, 5000), cell(16, 3000)] };
  assert.equal(iopsAt(noisy, 16), 5000, "a deeper queue is at least as fast as a shallower one");
  assert.equal(submitAt(t, 2), 1e-6 + 0.5 * 3e-6);
  // batches at QD 4: 4 reads at 2000/s, 16 at 3200/s, 64 at 4000/s; between sizes in log n
  assert.equal(batchSecondsAt(t, 4, 4), 4 / 2000);
  assert.equal(batchSecondsAt(t, 4, 2), 2 / 2000, "a smaller batch: the smallest measured batch's rate");
  assert.ok(Math.abs(batchSecondsAt(t, 4, 8) - 8 / 2600) < 1e-12);
  assert.equal(batchSecondsAt(t, 4, 1000), 1000 / 4000);
  assert.equal(batchSecondsAt(t, 4, 0), 0);
  const dip: IoTable = { ...t, cells: [cell(1, 1000), cell(4, 8000), cell(16, 2000)] };
  assert.equal(batchSecondsAt(dip, 16, 1000), 1000 / 8000, "a deeper queue is at least as fast for the same batch");
});

// ---------------------------------------------------------------------------------------------
// On a real (tiny, synthetic) store: probe, plan, plan file, applyPlan

const dir = tempDir("powerinfer-planner-");
const cacheDir = join(dir, "cache");
let storePath = "";
let profiledPath = "";
let predictorPath = "";

async function stores(): Promise<void> {
  if (storePath) return;
  const gguf = join(dir, "tiny.gguf");
  await synthesize({ shape: "tiny", act: "relu", type: "q4_1", seed: 5, sparsity: 0.9, out: gguf, fsync: false });
  storePath = join(dir, "tiny.pi");
  await convertToStore({ input: gguf, output: storePath, fsync: false });
  const profile = {
    layers: Array.from({ length: 4 }, (_, l) => ({ frequency: Array.from(plannedFiring(5, l, 768, 0.9)) })),
  };
  profiledPath = join(dir, "tiny.hot.pi");
  await convertToStore({ input: gguf, output: profiledPath, profile, fsync: false });
  // predictable, with the predictors synth plants, hot-first by the planted rates
  const pgguf = join(dir, "tiny-pred.gguf");
  const predictors = join(dir, "tiny-pred.predictors.gguf");
  await synthesize({
    shape: "tiny",
    act: "relu",
    type: "q4_1",
    seed: 5,
    sparsity: 0.9,
    gateRank: 16,
    predictorsOut: predictors,
    out: pgguf,
    fsync: false,
  });
  predictorPath = join(dir, "tiny-pred.pi");
  await convertToStore({ input: pgguf, output: predictorPath, profile, predictors, fsync: false });
}

const FAST = { scale: 0.02, cacheDir, threads: [1], queueDepths: [1, 2] };

/** A plan for the profiled tiny store (or `more.modelPath`) at one thread, with quick probes and no calibration unless asked. */
const tinyPlan = (budget: number, more: Partial<Parameters<typeof makePlan>[0]> = {}) =>
  makePlan({
    modelPath: profiledPath,
    budget,
    probe: FAST,
    threads: 1,
    promptTokens: 8,
    decodeTokens: 16,
    contextSize: 64,
    runtimeBase: 0,
    ...more,
  });

test("probe: measures every part with tiny durations, caches it per machine, re-probes on request", async () => {
  await stores();
  const store = NeuronStore.open(storePath);
  try {
    const r = await probeMachine(store, FAST);
    assert.ok(r.dispatch[1] >= 0 && r.memoryBandwidth[1] > 0);
    assert.ok(Object.values(r.matvec).every((v) => v > 0 && Number.isFinite(v)));
    const sp = Object.values(r.sparse)[0];
    assert.ok(sp.upDownPerNeuron > 0 && sp.gatePerNeuron > 0);
    const keys = Object.keys(r.io);
    // bundle and gate page are both 4 KiB here: one table of random reads (at one thread count),
    // and one of gate-row chunks (this store has the contiguous gate-row copy)
    assert.equal(keys.filter((k) => k.includes("|4096|")).length, 1, keys.join(", "));
    const stream = gateStreamOf(store);
    assert.ok(stream !== null);
    assert.equal(keys.filter((k) => k.includes(`|stream ${stream!.bytes}|`)).length, 1, keys.join(", "));
    // and one of runs of adjacent bundles: a layer's bundles here, fewer than 4 MiB
    const layerBytes = store.layer(0).neurons * store.layer(0).bundleBytes;
    assert.ok(layerBytes < 4 * MiB);
    assert.equal(keys.filter((k) => k.includes(`|run ${layerBytes}|`)).length, 1, keys.join(", "));
    const io = Object.values(r.io);
    assert.ok(io.every((t) => t.cells.map((c) => c.queueDepth).join() === "1,2"));
    assert.ok(io.every((t) => t.cells.every((c) => c.iops > 0 && c.batches.every((b) => b.perSecond > 0))));
    const file = probeCachePath(cacheDir, r.fingerprint);
    assert.ok(existsSync(file));
    const again = await probeMachine(store, FAST);
    assert.deepEqual(again.io, r.io, "a second probe reuses the cache");
    assert.equal(again.matvec[Object.keys(r.matvec)[0]], r.matvec[Object.keys(r.matvec)[0]]);
    assert.ok(again.seconds - r.seconds < 0.5, "nothing measured twice");
    const fresh = await probeMachine(store, { ...FAST, reprobe: true });
    assert.ok(fresh.notes.compute.at >= r.notes.compute.at, "a re-probe measures again");
    assert.ok(Object.keys(fresh.matvec).length > 0 && Object.keys(fresh.io).length === 3);
  } finally {
    store.close();
  }
});

test("machine fingerprint: same machine, and what differs when not", async () => {
  await stores();
  const fp = machineFingerprint(storePath);
  assert.ok(fp.cores >= 1 && fp.totalMemory > 0 && fp.device.length > 0);
  assert.equal(machineDifference(fp, machineFingerprint(storePath)), null);
  assert.match(machineDifference({ ...fp, hostname: "elsewhere" }, fp)!, /host "elsewhere"/);
  assert.match(machineDifference({ ...fp, cores: fp.cores + 1 }, fp)!, /cores/);
  // the kernel build counts; a fingerprint from before there were two builds was SIMD128's
  const other = fp.kernels === "relaxed" ? "simd128" : "relaxed";
  assert.match(machineDifference({ ...fp, kernels: other }, fp)!, new RegExp(`kernel build ${other} vs ${fp.kernels}`));
  const { kernels: _, ...old } = fp;
  assert.equal(machineDifference(old, fp) === null, fp.kernels === "simd128");
  assert.equal(machineId(old) === machineId(fp), fp.kernels === "simd128");
});

test("firing rates: the profile in stored (hot-first) order, else synth's planted rates, else an assumption", async () => {
  await stores();
  const hot = NeuronStore.open(profiledPath);
  const plain = NeuronStore.open(storePath);
  try {
    const fh = firingOf(hot, readConfig(hot));
    assert.match(fh.source, /profile/);
    for (let k = 1; k < 768; k++)
      assert.ok(fh.layers[0][k] <= fh.layers[0][k - 1] + 1e-12, "hot-first: non-increasing along the stored order");
    const fp = firingOf(plain, readConfig(plain));
    assert.match(fp.source, /planted/);
    const planted = plannedFiring(5, 2, 768, 0.9);
    assert.equal(fp.layers[2][7], planted[plain.layer(2).order[7]]);
    const fa = firingOf(plain, readConfig(plain), 0.25);
    assert.ok(fa.layers.every((p) => p.every((v) => v === 0.25)));
  } finally {
    hot.close();
    plain.close();
  }
});

test("the planner's layout is the runtime's: the same split at several budgets, both sparsity modes, with and without a profile", async () => {
  await stores();
  // Budgets over this process's own resident size (the layout's base: everything resident counts),
  // taken before each load: a disposed model's wasm memory stays resident until a garbage
  // collection, so the size grows from load to load by more than the smaller budgets leave
  const overBase = [4, 12, 40, 48, 64, 400].map((m) => m * MiB);
  let compared = 0,
    refused = 0;
  for (const path of [storePath, profiledPath, predictorPath]) {
    const store = NeuronStore.open(path);
    const cfg = readConfig(store);
    const modes = store.tensors.has("blk.0.fc1.weight") ? (["gate", "predictor"] as const) : (["gate"] as const);
    try {
      for (const sparsity of modes) {
        const shape = shapeOfStore(store, cfg, sparsity, 256, 64);
        for (const over of overBase) {
          const budget = process.memoryUsage.rss() + over;
          const opts = { threads: 1, contextSize: 64, memoryBudget: budget, offload: { sparsity } };
          const knobs: Knobs = { sparsity, threads: 1, queueDepth: 8, pipeline: true };
          let runtime;
          try {
            runtime = await LlamaModel.load(path, opts);
          } catch (e) {
            // refused: the planner's layout for the runtime's base is the refused one, and does not fit either
            if (!(e instanceof BudgetError)) throw e;
            const planned = layoutFor(shape, { base: e.layout.fixedResident.base, threads: 1 }, knobs, budget);
            assert.deepEqual(planned, e.layout, `${path} ${sparsity}: refused at base + ${over / MiB} MiB`);
            assert.equal(planned.fits, false);
            refused++;
            continue;
          }
          try {
            const made = runtime.offloaded!.layout;
            const planned = layoutFor(shape, { base: made.fixedResident.base, threads: 1 }, knobs, budget);
            assert.deepEqual(planned, made, `${path} ${sparsity} at base + ${over / MiB} MiB`);
            // what the layout counts for the model's own wasm memory is what loading allocated
            const r = made.fixedResident;
            assert.equal(runtime.fixedArenaBytes, (1 << 20) + r.weights + r.buffers + r.kv, "resident bytes as loaded");
            compared++;
          } finally {
            await runtime.dispose();
          }
        }
      }
    } finally {
      store.close();
    }
  }
  assert.ok(compared >= 8 && refused >= 2, `${compared} layouts made, ${refused} refused`);
});

test("the runtime's base as the planner measures it (a fresh process, as run makes it) is within a few MiB of run's", async () => {
  await stores();
  const { base, memories } = await measureRuntimeBase({
    store: predictorPath,
    threads: 1,
    contextSize: 64,
    batchSize: 256,
    sparsity: "predictor",
    budget: 128 * MiB,
  });
  const r = spawnSync(
    process.execPath,
    [CLI, "run", "-m", predictorPath, "-p", "a", "-n", "1", "-t", "1", "-c", "64", "--memory-budget", "128MiB"],
    { encoding: "utf8" },
  );
  assert.equal(r.status, 0, r.stderr);
  const m = /memory: budget [\d.]+ MiB = runtime ([\d.]+) MiB/.exec(r.stderr);
  assert.ok(m, r.stderr);
  const runBase = Number(m[1]) * MiB;
  assert.ok(Math.abs(base - runBase) < 6 * MiB, `planner ${(base / MiB).toFixed(1)} MiB, run ${m[1]} MiB`);
  assert.equal(memories, 1);
});

test("plan: written, read back, applied to load options; never predicted slower than the defaults", async () => {
  await stores();
  const budget = 32 * MiB;
  const r = await tinyPlan(budget);
  assert.ok(r.best.tokensPerSecond >= r.defaults.tokensPerSecond);
  assert.ok(r.candidates.length > 10);
  const path = join(dir, "p.json");
  writePlan(path, r.plan);
  const p = readPlan(path);
  assert.deepEqual(p.knobs, r.plan.knobs);
  assert.equal(p.budget, budget);
  assert.equal(p.contextSize, 64);
  assert.equal(checkPlan(p, profiledPath, budget, undefined), null);
  const opts = applyPlan({ modelPath: profiledPath, memoryBudget: budget }, path);
  assert.equal(opts.offload?.hotFraction, p.knobs.hotFraction);
  assert.equal(opts.offload?.queueDepth, p.knobs.queueDepth);
  assert.equal(opts.threads, p.knobs.threads);
  assert.equal(opts.contextSize, 64);
  // options set explicitly (flags) win over the plan's knobs
  const explicit = applyPlan(
    { modelPath: profiledPath, memoryBudget: budget, offload: { hotFraction: 0.25, queueDepth: 3 } },
    path,
  );
  assert.equal(explicit.offload?.hotFraction, 0.25);
  assert.equal(explicit.offload?.queueDepth, 3);
  // -t given wins over the plan's threads; no budget given adopts the plan's
  const given = applyPlan({ modelPath: profiledPath, threads: 3 }, path);
  assert.equal(given.threads, 3);
  assert.equal(given.memoryBudget, budget);
  assert.equal(applyPlan({ modelPath: profiledPath, memoryBudget: budget }, "none").offload, undefined);
});

test("plan mismatches: another machine, model, budget or context is a clear error (explicit plan) or a note (found next to the model)", async () => {
  await stores();
  const budget = 32 * MiB;
  const r = await tinyPlan(budget);
  const write = (name: string, edit: (p: typeof r.plan) => void) => {
    const p = structuredClone(r.plan);
    edit(p);
    const path = join(dir, name);
    writePlan(path, p);
    return path;
  };
  const other = write("other-machine.json", (p) => (p.machine.hostname = "some-other-host"));
  assert.throws(
    () => applyPlan({ modelPath: profiledPath, memoryBudget: budget }, other),
    (e: Error) =>
      e instanceof PlanError &&
      /another machine \(host "some-other-host"/.test(e.message) &&
      /re-plan with: powerinfer plan/.test(e.message),
  );
  const good = write("good.json", () => {});
  assert.throws(
    () => applyPlan({ modelPath: profiledPath, memoryBudget: 40 * MiB }, good),
    (e: Error) =>
      /made for --memory-budget 32MiB, this run has 40MiB; re-plan with: powerinfer plan -m .* --memory-budget 40MiB/.test(
        e.message,
      ),
  );
  assert.throws(
    () => applyPlan({ modelPath: profiledPath, memoryBudget: budget, contextSize: 128 }, good),
    /context of 64 tokens/,
  );
  assert.throws(
    () => applyPlan({ modelPath: storePath, memoryBudget: budget }, good),
    /does not match .*tiny\.pi: the plan is for (another store|a store of)/,
  );
  assert.throws(() => readPlan(join(dir, "missing.json")), /cannot read plan/);
  writeFileSync(join(dir, "junk.json"), '{"format":"something else"}');
  assert.throws(() => readPlan(join(dir, "junk.json")), /is not a plan file/);

  // Found next to the model: used when it matches the budget, otherwise a note and no change.
  const copy = join(dir, "copy.hot.pi");
  copyFileSync(profiledPath, copy);
  writePlan(defaultPlanPath(copy), r.plan);
  const notes: string[] = [];
  const base = { modelPath: copy, memoryBudget: budget, offload: {} };
  const used = applyPlan(base, undefined, (m) => notes.push(m));
  assert.equal(used.offload?.hotFraction, r.plan.knobs.hotFraction, "a copy of the store (same content) matches");
  assert.match(notes.pop()!, /using plan .*copy\.hot\.pi\.plan\.json/);
  const unchanged = applyPlan({ ...base, memoryBudget: 20 * MiB }, undefined, (m) => notes.push(m));
  assert.deepEqual(unchanged, { ...base, memoryBudget: 20 * MiB });
  assert.match(notes.pop()!, /not using .* was made for --memory-budget 32MiB, this run has 20MiB; re-plan/);
  writePlan(defaultPlanPath(copy), JSON.parse(readFileSync(other, "utf8")));
  assert.deepEqual(
    applyPlan(base, undefined, (m) => notes.push(m)),
    base,
  );
  assert.match(notes.pop()!, /another machine/);
  assert.equal(sizeText(3.75 * 2 ** 30), "3.75GiB");
});

test("calibration: a run's compute and read waits scale every prediction by their own factors", async () => {
  await stores();
  const budget = 32 * MiB;
  const plain = await tinyPlan(budget);
  const jobs: CalibrationJob[] = [];
  // a stand-in run: whatever the model predicts for the defaults' steps, twice the compute and three times the waiting
  const slow = async (job: CalibrationJob): Promise<CalibrationRun> => {
    jobs.push(job);
    const io = plain.defaults.breakdown.ioWait + plain.defaults.breakdown.gateReads;
    return {
      knobs: job.knobs,
      promptTokens: job.promptTokens,
      steps: job.decodeTokens,
      secondsPerToken: 2 * (plain.defaults.secondsPerToken - io) + 3 * io,
      ioWaitPerToken: 3 * io,
      loadAverage: 1,
    };
  };
  const r = await tinyPlan(budget, { probe: { ...FAST, reprobe: false }, calibrate: slow, calibrationTokens: 4 });
  assert.equal(jobs.length, 1);
  assert.deepEqual(jobs[0].knobs, r.defaults.knobs, "the calibration runs the defaults");
  assert.equal(jobs[0].decodeTokens, 4);
  const c = r.calibration!;
  // the stand-in measured the defaults' whole-workload figures, not those of its 4 steps, so
  // the factors are near 2 and 3, not exactly
  assert.ok(c.computeFactor > 1.5 && c.computeFactor < 2.5, `compute x${c.computeFactor}`);
  assert.ok(
    plain.defaults.breakdown.ioWait + plain.defaults.breakdown.gateReads === 0 || (c.ioFactor > 2 && c.ioFactor < 4),
    `reads x${c.ioFactor}`,
  );
  const d = r.defaults.breakdown,
    d0 = plain.defaults.breakdown;
  assert.ok(Math.abs(d.attention - c.computeFactor * d0.attention) < 1e-12);
  assert.ok(Math.abs(d.ioWait - c.ioFactor * d0.ioWait) < 1e-12);
  assert.ok(r.defaults.tokensPerSecond < plain.defaults.tokensPerSecond);
  assert.ok(r.best.tokensPerSecond >= r.defaults.tokensPerSecond);
  assert.equal(r.plan.calibration?.computeFactor, c.computeFactor);
  // the math alone
  const fake = {
    ...plain.defaults,
    breakdown: { attention: 1, gate: 0, gateReads: 0.5, scan: 0, ffnCompute: 1, ioWait: 0.5, output: 0 },
    secondsPerToken: 3,
  };
  const cal = calibration(
    { knobs: fake.knobs, promptTokens: 1, steps: 1, secondsPerToken: 5, ioWaitPerToken: 3, loadAverage: 0 },
    fake,
  );
  assert.equal(cal.computeFactor, 1);
  assert.equal(cal.ioFactor, 3);
  assert.equal(calibrated(fake, cal).secondsPerToken, 5);
  // a disturbed run is kept within a factor of 10
  assert.equal(
    calibration(
      { knobs: fake.knobs, promptTokens: 1, steps: 1, secondsPerToken: 100, ioWaitPerToken: 1, loadAverage: 0 },
      fake,
    ).computeFactor,
    10,
  );
});

test("powerinfer plan: writes MODEL.plan.json next to the model and prints the prediction and where the time goes", async () => {
  await stores();
  const r = spawnSync(
    process.execPath,
    [
      CLI,
      "plan",
      "-m",
      profiledPath,
      "--memory-budget",
      "512MiB",
      "-t",
      "1",
      "-c",
      "64",
      "--prompt-tokens",
      "8",
      "--decode-tokens",
      "8",
      "--probe-scale",
      "0.02",
    ],
    {
      encoding: "utf8",
      env: { ...process.env, POWERINFER_CACHE_DIR: cacheDir },
    },
  );
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stdout, /predicted decode: [\d.]+ tok\/s/);
  // the real calibration run (a child process under the budget)
  assert.match(
    r.stdout,
    /calibration: a 8-token decode with these knobs measured [\d.]+ tok\/s .* compute scaled x[\d.]+ and its waiting for reads x[\d.]+/,
  );
  assert.match(r.stdout, /waiting for missed bundles|up\/down of firing neurons/);
  assert.match(r.stdout, /wrote .*tiny\.hot\.pi\.plan\.json/);
  const p = readPlan(defaultPlanPath(profiledPath));
  assert.equal(p.budget, 512 * MiB);
  const bad = spawnSync(process.execPath, [CLI, "plan", "-m", profiledPath], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--memory-budget SIZE is required/);
  const small = spawnSync(
    process.execPath,
    [CLI, "plan", "-m", profiledPath, "--memory-budget", "1MiB", "-t", "1", "--probe-scale", "0.02"],
    { encoding: "utf8", env: { ...process.env, POWERINFER_CACHE_DIR: cacheDir } },
  );
  assert.equal(small.status, 1);
  assert.match(small.stderr, /too small .* at least [\d.]+ MiB would run/);
});

test("plan: a store with predictors is planned in predictor mode, as run runs it; the smallest budget run accepts is planned", async () => {
  await stores();
  const job = {
    store: predictorPath,
    threads: 1,
    contextSize: 64,
    batchSize: 256,
    sparsity: "predictor" as const,
    budget: 128 * MiB,
  };
  const { base } = await measureRuntimeBase(job);
  const store = NeuronStore.open(predictorPath);
  const shape = shapeOfStore(store, readConfig(store), "predictor", 256, 64);
  store.close();
  const knobs: Knobs = { sparsity: "predictor", threads: 1, queueDepth: 8, pipeline: true };
  const smallest = layoutFor(shape, { base, threads: 1 }, knobs, 2 ** 40).minBudget;
  const r = await makePlan({
    modelPath: predictorPath,
    budget: smallest,
    probe: FAST,
    threads: 1,
    promptTokens: 8,
    decodeTokens: 16,
    contextSize: 64,
    runtimeBase: base,
  });
  assert.equal(r.plan.knobs.sparsity, "predictor");
  assert.ok(r.best.layout.fits && r.best.breakdown.gate > 0, "the predictor's own cost is part of the prediction");
  assert.ok(r.candidates.every((p) => p.knobs.sparsity === "predictor"));
  // run takes the plan's mode and knobs (its own base differs from the measured one by a little: a little room)
  const budget = smallest + 8 * MiB;
  const plan = await tinyPlan(budget, { modelPath: predictorPath, runtimeBase: base });
  const path = join(dir, "pred.plan.json");
  writePlan(path, plan.plan);
  const opts = applyPlan({ modelPath: predictorPath, memoryBudget: budget }, path);
  assert.equal(opts.offload?.sparsity, "predictor");
  const run = spawnSync(
    process.execPath,
    [CLI, "run", "-m", predictorPath, "-p", "Once", "-n", "4", "--plan", path, "--memory-budget", String(budget)],
    { encoding: "utf8" },
  );
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stderr, /using plan .*: predictor sparsity/);
  // a plan for one mode does not apply to a run of the other
  assert.throws(
    () => applyPlan({ modelPath: predictorPath, memoryBudget: budget, offload: { sparsity: "gate" } }, path),
    /made for --sparsity predictor, this run asks for gate/,
  );
});

test("plan: a SiLU store without thresholds is planned in dense mode, as run runs it: no predictor, no gate rows; run --plan takes it", async () => {
  await stores();
  const gguf = join(dir, "tiny-silu.gguf");
  await synthesize({ shape: "tiny", act: "silu", type: "q4_1", seed: 5, out: gguf, fsync: false });
  const silu = join(dir, "tiny-silu.pi");
  await convertToStore({ input: gguf, output: silu, fsync: false });
  const budget = 160 * MiB;
  const r = await tinyPlan(budget, { modelPath: silu });
  assert.equal(r.plan.knobs.sparsity, "dense");
  assert.ok(r.candidates.every((p) => p.knobs.sparsity === "dense"));
  assert.ok(r.best.layout.fits);
  assert.equal(r.best.layout.gateBytes, 0, "no gate rows or staging");
  assert.equal(r.best.breakdown.gate, 0, "no predictor and no gate matvec");
  assert.match(r.plan.firing.source, /silu without activation thresholds/);
  const path = join(dir, "silu.plan.json");
  writePlan(path, r.plan);
  const run = spawnSync(
    process.execPath,
    [CLI, "run", "-m", silu, "-p", "Once", "-n", "4", "--plan", path, "--memory-budget", String(budget)],
    { encoding: "utf8" },
  );
  assert.equal(run.status, 0, run.stderr);
  assert.match(run.stderr, /using plan .*: dense sparsity/);
});
