/**
 * How the planner turns a layer's misses into the reads the flash reader coalesces them into
 * (src/planner/read-runs.ts), checked on cases worked out by hand, and what that does to the
 * cost model's predicted decode time: a dense gate-mode layer's contiguous misses go from a read
 * per bundle to a read per MiB, scattered misses stay about a read each.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { MiB, facts, roundHardware, shape as small } from "./planner-fixture.js";
import { rng } from "./helpers.js";
import { DEFAULT_MAX_READ_BYTES } from "../src/io/flash-reader.js";
import type { HitProfile } from "../src/io/hit-model.js";
import { layoutFor, predict } from "../src/planner/cost-model.js";
import type { Hardware } from "../src/planner/hardware.js";
import type { Knobs, Workload } from "../src/planner/knobs.js";
import type { ModelShape } from "../src/planner/model-shape.js";
import type { IoTable } from "../src/planner/probe-results.js";
import {
  coalescedReads,
  expectedRuns,
  joinLags,
  layerAdjacency,
  readsOfRuns,
  runShareOf,
} from "../src/planner/read-runs.js";
import { bridgeRegionBytes } from "../src/model/offload/layout.js";
import { chunkReads, sizedBatchSecondsAt } from "../src/planner/read-table.js";

function close(actual: number, expected: number, what: string): void {
  assert.ok(Math.abs(actual - expected) <= 1e-9 * Math.abs(expected), `${what}: ${actual} vs ${expected} by hand`);
}

test("runs of adjacent misses: all missing, alternating, independent at p = 0.5", () => {
  assert.equal(expectedRuns(new Float64Array(10).fill(1)), 1);
  assert.equal(expectedRuns(Float64Array.from({ length: 10 }, (_, k) => (k % 2 === 0 ? 1 : 0))), 5);
  // the first position starts a run half the time, each later one a quarter (it misses, the one before does not)
  for (const n of [1, 2, 7, 100])
    close(expectedRuns(new Float64Array(n).fill(0.5)), 0.5 + (n - 1) * 0.25, `p 0.5, n ${n}`);
  assert.equal(expectedRuns(new Float64Array(5)), 0);
});

test("reads of runs: a run split into reads of at most the reader's largest read", () => {
  assert.equal(DEFAULT_MAX_READ_BYTES, MiB);
  // a dense layer: 8192 bundles of 4 KiB in one run is 32 MiB: 32 reads of 1 MiB
  assert.equal(readsOfRuns(1, 8192, 4096), 32);
  assert.equal(coalescedReads(8192, 0, 4096), 32, "runShare 0: one run");
  // one more bundle takes one more read
  assert.equal(readsOfRuns(1, 8193, 4096), 33);
  // 10 runs of 300 bundles (1.17 MiB each): 2 reads each
  assert.equal(readsOfRuns(10, 3000, 4096), 20);
  // every miss its own run: a read each
  assert.equal(coalescedReads(100, 1, 4096), 100);
  // a fraction of a bundle (expected values) is still at least that fraction of a read
  close(coalescedReads(0.5, 0, 4096), 0.5, "half a bundle");
  assert.equal(readsOfRuns(3, 0, 4096), 0);
});

test("a layer's run share from its firing rates: independent positions past the hot region, dense layers one run", () => {
  const n = 1000;
  const shape = { ...small, nFF: n };
  const half = { layers: [new Float64Array(n).fill(0.5), new Float64Array(n).fill(1)], source: "test" };
  const adj = layerAdjacency(shape, half, [0, 0]);
  // nothing cached: q = p, runs = 0.5 + 999 * 0.25 of 500 misses
  close(runShareOf(adj, 0, 500) * 500, 0.5 + 999 * 0.25, "runs of p 0.5");
  // half of them cached (s = 0.5): q = 0.25, runs = 0.25 + 999 * 0.25 * 0.75
  close(runShareOf(adj, 0, 250) * 250, 0.25 + 999 * 0.1875, "runs of q 0.25");
  assert.equal(adj.dense[0], 0);
  assert.equal(adj.dense[1], 1);
  assert.equal(runShareOf(adj, 1, 600), 0, "a dense layer: one run per round");
  // hot positions never miss: 100 hot leaves 900 positions past them
  const hot = layerAdjacency(shape, half, [100, 100]);
  close(runShareOf(hot, 0, 450) * 450, 0.5 + 899 * 0.25, "runs past 100 hot");
});

test("read tables by size: per-read time linear in bytes between measured sizes, chunks as their reads", () => {
  const one = (bytes: number, perSecond: number): IoTable => ({
    direct: true,
    threadPool: 4,
    loadAverage: 0,
    cells: [{ bytes, queueDepth: 1, iops: perSecond, batches: [{ n: 1, perSecond }], submit: 0 }],
  });
  const tables = [one(MiB, 500), one(4096, 1000)];
  close(sizedBatchSecondsAt(tables, 4096, 1, 2), 2e-3, "a measured size");
  close(sizedBatchSecondsAt(tables, 1024, 1, 2), 2e-3, "below the smallest: the smallest's");
  close(sizedBatchSecondsAt(tables, (4096 + MiB) / 2, 1, 2), 2 * 1.5e-3, "halfway: the mean");
  close(sizedBatchSecondsAt(tables, 2 * MiB, 1, 1), 4e-3, "past the largest: its bandwidth");
  // a 4 MiB chunk read whole 100 times a second: 4 reads of 1 MiB, 400 a second in a batch of 4
  const c = chunkReads(one(4 * MiB, 100), MiB).cells[0];
  assert.equal(c.bytes, MiB);
  assert.deepEqual(c.batches, [{ n: 4, perSecond: 400 }]);
  assert.equal(c.iops, 400);
});

test("bridged reads: a miss joins a read up to `lags` positions back; the model's runs match a simulation of the reader", () => {
  assert.equal(joinLags(4096, false), 1);
  assert.equal(joinLags(4096, true), 4, "a 12 KiB gap: three bundles between");
  assert.equal(joinLags(8192, true), 2);
  assert.equal(joinLags(12288, true), 1, "two bundles a gap apart would not fit a 32 KiB slot");
  const N = 768;
  const uniform = Float64Array.from({ length: N }, () => 0.1);
  // hot first: rates falling along the stored order, as a profile orders them
  const falling = Float64Array.from({ length: N }, (_, k) => 0.3 * Math.exp(-k / 200));
  const rnd = rng(5);
  for (const rates of [uniform, falling]) {
    const shape1: ModelShape = { ...small, nLayer: 1, experts: 0, nFF: N, facts: { ...facts, nFF: N, groups: 1 } };
    const firing = { layers: [rates], source: "test" };
    for (const [bundleBytes, lags] of [
      [4096, 1],
      [8192, 2],
      [4096, 4],
    ]) {
      const adj = layerAdjacency(
        { ...shape1, facts: { ...shape1.facts, bundleBytes } },
        { ...firing }, // (a fresh object: the sums are memoized per firing object)
        [0],
        lags > 1,
      );
      assert.equal(adj.lags, lags);
      // each position misses with its rate (s = 1: nothing cached); a read starts where none of
      // the `lags` positions before misses
      let reads = 0,
        misses = 0;
      const trials = 400;
      for (let t = 0; t < trials; t++) {
        let last = -Infinity;
        for (let k = 0; k < N; k++) {
          if (!(rnd() < rates[k])) continue;
          misses++;
          if (k - last > lags) reads++;
          last = k;
        }
      }
      const m = rates.reduce((a, b) => a + b, 0);
      const model = runShareOf(adj, 0, m);
      const simulated = reads / misses;
      assert.ok(
        Math.abs(model - simulated) < 0.03,
        `lags ${lags}: the model's ${model.toFixed(3)} reads a miss, simulated ${simulated.toFixed(3)}`,
      );
    }
  }
});

/**
 * A 2-layer store of 8192 bundles of 4 KiB a layer, every bundle missed or not as the hit
 * profile says; reads cost 100 us each plus 1 ns a byte, 1 us of each the main thread's submit.
 */
const N = 8192;
const big: ModelShape = { ...small, nFF: N, facts: { ...facts, nFF: N } };
const hw: Hardware = {
  ...roundHardware,
  batchSeconds: (bytes, _qd, n) => n * (1e-4 + bytes * 1e-9),
  submitSeconds: () => 1e-6,
  iops: () => 1e4,
};
const knobs: Knobs = {
  sparsity: "gate",
  threads: 1,
  queueDepth: 4,
  hotFraction: 0,
  residentGates: true,
  pipeline: false,
};
const workload: Workload = { contextSize: 64, promptTokens: 10, decodeTokens: 1 };
const misses = (m: number): HitProfile => ({
  firing: Float64Array.from([m, m]),
  hot: new Float64Array(2),
  cold: [new Float64Array(2)],
  coldHeld: [new Float64Array(2)],
  tau: Infinity,
});
/** A cold region of every bundle of a layer: the misses in one round. */
// (with room for the bridge region the layout sets aside from it: a 32nd, in whole slots)
const budget =
  (layoutFor(big, hw, knobs, 1000 * MiB).fixed + (N + 0.5) * 4096 + 2 * bridgeRegionBytes(N * 4096)) / 0.97;
/** Per layer, the I/O wait of n reads of `bytes`: their disk time less the main thread's submits. */
const disk = (n: number, bytes: number) => n * (1e-4 + bytes * 1e-9) - n * 1e-6;

test("predicted decode time: a dense gate-mode layer's misses read as 1 MiB reads, scattered misses about a read each", () => {
  const rates = (p: number) => ({ layers: [new Float64Array(N).fill(p), new Float64Array(N).fill(p)], source: "test" });
  // dense: every neuron fires and misses; before, 8192 reads of 4 KiB a layer, now 32 of 1 MiB
  const dense = predict(big, rates(1), hw, knobs, workload, budget, misses(N));
  assert.equal(dense.layout.hotPerLayer, 0);
  assert.ok(dense.layout.coldSlots >= N);
  const before = 2 * disk(N, 4096);
  const after = 2 * disk(32, MiB);
  close(dense.breakdown.ioWait, after, "dense I/O wait");
  // the same layer costed a read per bundle (positions never near: every eighth fires, past a bridge's gap)
  const apart = {
    layers: [0, 1].map(() => Float64Array.from({ length: N }, (_, k) => (k % 8 === 0 ? 1 : 0))),
    source: "test",
  };
  const perBundle = predict(big, apart, hw, knobs, workload, budget, misses(N / 8));
  close(perBundle.breakdown.ioWait, 2 * disk(N / 8, 4096), "every eighth bundle: a read each");
  // every other one: bridged, four to a 32 KiB slot's read (the model: at least a read per 8 bundles' bytes)
  const near = {
    layers: [0, 1].map(() => Float64Array.from({ length: N }, (_, k) => (k % 2 === 0 ? 1 : 0))),
    source: "test",
  };
  const bridged = predict(big, near, hw, knobs, workload, budget, misses(N / 2));
  assert.ok(bridged.layout.bridgeBytes > 0);
  close(bridged.breakdown.ioWait, 2 * disk(N / 16, 8 * 4096), "every other bundle: bridged");
  assert.ok(before / after > 20, `dense: ${before * 1e3} ms of reads a token before, ${after * 1e3} ms now`);
  // sparse: p = 0.02, nothing cached, 163.84 misses a layer; bridged, a read starts at a miss
  // none of the 4 positions before misses: 0.02 (1 + 0.98 + 0.98^2 + 0.98^3 + 8188 * 0.98^4)
  // = 151.1 reads of about one bundle each
  const m = 0.02 * N;
  const sparse = predict(big, rates(0.02), hw, knobs, workload, budget, misses(m));
  const runs = 0.02 * (1 + 0.98 + 0.98 ** 2 + 0.98 ** 3 + 8188 * 0.98 ** 4);
  const len = (m * 4096) / runs;
  // (the I/O wait is the reads' disk time: the probe's batch time less its reads' own submits)
  const expect = 2 * (runs * (1e-4 + len * 1e-9) - runs * 1e-6);
  // (to 1e-5: the model takes the 4 lags' mean chance, which the first positions' fewer lags shift)
  assert.ok(
    Math.abs(sparse.breakdown.ioWait - expect) <= 1e-5 * expect,
    `sparse I/O wait: ${sparse.breakdown.ioWait} vs ${expect} by hand`,
  );
  const old = 2 * disk(m, 4096);
  assert.ok(
    sparse.breakdown.ioWait / old > 0.9,
    `sparse: ${old * 1e3} ms before, ${sparse.breakdown.ioWait * 1e3} ms now`,
  );
  console.log(
    `dense gate mode, 2 x 8192 misses: reads ${(before * 1e3).toFixed(3)} -> ${(after * 1e3).toFixed(3)} ms/token; ` +
      `sparse p 0.02: ${(old * 1e3).toFixed(4)} -> ${(sparse.breakdown.ioWait * 1e3).toFixed(4)} ms/token`,
  );
});
