/**
 * The cost model (src/planner/cost-model.ts) on inputs small enough to follow by hand: a 2-layer
 * model, round numbers for every rate, and the hit profile given instead of modelled, so that each
 * expected token time below is worked out step by step in the comments and asserted to 1e-9
 * relative.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { MiB, roundHardware, shape } from "./planner-fixture.js";
import { GGMLType } from "../src/format/ggml-types.js";
import type { HitProfile } from "../src/io/hit-model.js";
import { readAheadGroup, readsAhead } from "../src/model/offload/read-ahead-condition.js";
import { layoutFor, predict } from "../src/planner/cost-model.js";
import type { Hardware } from "../src/planner/hardware.js";
import type { Knobs, Workload } from "../src/planner/knobs.js";
import { overlapped } from "../src/planner/read-costs.js";

/**
 * Round rates. Shared by every case:
 *   attention per layer = 64*64 MACs / 1e9 (4.096 us) + 2 dispatches (q/k/v group, output
 *     projection: 2 us) + 8 dispatches of the other ops (8 us) + the KV cache's reads: at
 *     position 10, 10 * 4 heads * 16 dims * (2 + 2 bytes of f16 key and value) = 2560 bytes at
 *     2.56e9 B/s = 1 us; in all 15.096 us
 *   output = 50*64 MACs / 1e9 (3.2 us) + 1 dispatch + 2 dispatches = 6.2 us
 *   resident gate matvec per layer = 100*64 MACs / 1e9 (6.4 us) + 1 dispatch = 7.4 us
 *   scan per layer = 100 neurons * 0.01 us + firing * 0.1 us + misses * 1 us
 *   reads: 1 ms each at any queue depth, 10 us of each on the main thread to submit it
 */
const hw = roundHardware;

const ATTENTION = 15.096e-6;
const OUTPUT = 6.2e-6;
const GATE_MATVEC = 7.4e-6;

/** One decode step after a 10-token prompt: the KV cache's position 10. */
const workload: Workload = { contextSize: 64, promptTokens: 10, decodeTokens: 1 };

const gateKnobs: Knobs = {
  sparsity: "gate",
  threads: 1,
  queueDepth: 4,
  hotFraction: 0,
  residentGates: true,
  pipeline: true,
};
const predictorKnobs: Knobs = { sparsity: "predictor", threads: 1, queueDepth: 4, hotFraction: 0, pipeline: true };

/**
 * A budget that leaves `slots` bundles of neuron cache: what the layout keeps besides the cache
 * (its `fixed`, the same at any budget that fits) plus the slots and half a slot, over the share
 * of the budget the layout hands out (0.97).
 */
function budgetFor(knobs: Knobs, slots: number): number {
  const fixed = layoutFor(shape, hw, knobs, 1000 * MiB).fixed;
  return (fixed + (slots + 0.5) * 4096) / 0.97;
}

/** The hit profile of one decode step: per layer, firing neurons, hot hits and cold hits. */
function hits(firing: number[], hot: number[], cold: number[]): HitProfile {
  return {
    firing: Float64Array.from(firing),
    hot: Float64Array.from(hot),
    cold: [Float64Array.from(cold)],
    coldHeld: [Float64Array.from(cold)],
    tau: Infinity,
  };
}

/**
 * Rates to pass along with a given hit profile. They set the hot clusters (none here: nothing is
 * hot) and how the misses coalesce (read-runs.ts): every other position fires, never two adjacent
 * ones, so every miss is a read of its own and the sums below stay one read per miss.
 */
const alternate = () => Float64Array.from({ length: 100 }, (_, k) => (k % 2 === 0 ? 0.4 : 0));
const firing = { layers: [alternate(), alternate()], source: "test" };

function close(actual: number, expected: number, what: string): void {
  assert.ok(Math.abs(actual - expected) <= 1e-9 * Math.abs(expected), `${what}: ${actual} vs ${expected} by hand`);
}

test("cost model by hand: every firing neuron in the cache (gate mode, resident gate rows)", () => {
  // The whole FFN fits: every neuron hot, 20 firing per layer, all hits, no reads.
  const budget = 1000 * MiB;
  const p = predict(
    shape,
    firing,
    hw,
    { ...gateKnobs, hotFraction: 0.5 },
    workload,
    budget,
    hits([20, 20], [20, 20], [0, 0]),
  );
  assert.equal(p.layout.hotPerLayer, 100);
  assert.equal(p.layout.coldSlots, 0);
  // Per layer:
  //   gate      7.4 us (the resident gate matvec)
  //   scan      100 * 0.01 + 20 * 0.1 + 0 misses = 3 us
  //   ffn       layer fixed 2 us + 20 hits * 1 us up/down = 22 us
  //   I/O wait  0 (no misses: the pipelined first round is the hits' compute itself)
  // Per token: attention 2 * 15.096 = 30.192 us, gate 14.8, scan 6, ffn 44, output 6.2
  //   = 101.192 us
  const b = p.breakdown;
  close(b.attention, 2 * ATTENTION, "attention");
  close(b.gate, 2 * GATE_MATVEC, "gate");
  close(b.scan, 6e-6, "scan");
  close(b.ffnCompute, 44e-6, "ffn");
  assert.equal(b.ioWait, 0);
  assert.equal(b.gateReads, 0);
  close(b.output, OUTPUT, "output");
  close(p.secondsPerToken, 101.192e-6, "token");
  close(p.tokensPerSecond, 1 / 101.192e-6, "tok/s");
  assert.equal(p.missesPerToken, 0);
  assert.equal(p.readBytesPerToken, 0);
  assert.equal(p.hitRate, 1);
});

test("cost model by hand: every firing neuron read from flash (gate mode, no pipeline)", () => {
  // Nothing hot, an empty cold region of 40 slots: the 20 firing neurons of each layer all miss,
  // read in one round (20 <= 40) at queue depth 4.
  const budget = budgetFor(gateKnobs, 40);
  const p = predict(
    shape,
    firing,
    hw,
    { ...gateKnobs, pipeline: false },
    workload,
    budget,
    hits([20, 20], [0, 0], [0, 0]),
  );
  assert.equal(p.layout.hotPerLayer, 0);
  assert.equal(p.layout.coldSlots, 40);
  // Per layer:
  //   round 1   the reads, then the (no) hits: 20 reads * 1 ms = 20 ms, of which the 20 submits
  //             (20 * 10 us = 0.2 ms) are the main thread's, counted as scan
  //   I/O wait  20 ms - 0.2 ms = 19.8 ms
  //   scan      100 * 0.01 + 20 * 0.1 + 20 misses * 1 + submits 200 = 223 us
  //   ffn       layer fixed 2 + 0 hits + 20 misses * 1 us + 1 dispatch = 23 us
  //   gate      7.4 us
  // Per token: 2 * 19.8 ms = 39.6 ms waiting, plus attention 30.192 us, gate 14.8, scan 446,
  //   ffn 46, output 6.2 (543.192 us) = 40.143192 ms
  const b = p.breakdown;
  close(b.ioWait, 39.6e-3, "I/O wait");
  close(b.scan, 446e-6, "scan");
  close(b.ffnCompute, 46e-6, "ffn");
  close(b.gate, 2 * GATE_MATVEC, "gate");
  close(p.secondsPerToken, 40.143192e-3, "token");
  assert.equal(p.missesPerToken, 40);
  assert.equal(p.readBytesPerToken, 40 * 4096);
  assert.equal(p.maxRounds, 1);
  assert.equal(p.hitRate, 0);
});

test("cost model by hand: reads overlap the hits' compute, the first queue depth's worth only", () => {
  // The rule alone (read-costs.ts overlapped): n reads submitted, then `compute` seconds of main
  // thread work. Only QD reads progress during the compute; the other n - QD are issued after it.
  //   10 reads at QD 4 before 10 ms of compute: submits 10 * 10 us = 0.1 ms, then 10 ms, then the
  //   6 reads left: 6 ms less their submits (already counted) 0.06 ms = 5.94 ms. All 10 alone
  //   would take 10 ms. max(0.1 + 10 + 5.94, 10) = 16.04 ms
  close(overlapped(hw, 4096, 10, 4, 10e-3), 16.04e-3, "compute-bound");
  //   before 2 ms of compute: max(0.1 + 2 + 5.94, 10) = 10 ms: the reads take longer than all that
  close(overlapped(hw, 4096, 10, 4, 2e-3), 10e-3, "read-bound");
  //   without overlap (compute threads on every core, reads through libuv): they add, 2 + 10 ms
  close(overlapped({ ...hw, overlap: false }, 4096, 10, 4, 2e-3), 12e-3, "no overlap");

  // In a token: hits computing 1 ms each (slow up/down), 20 firing per layer, 10 of them hot
  // (hits), 10 misses read in one round of a 40-slot cold region.
  const slow: Hardware = { ...hw, sparse: { ...hw.sparse, upDownPerNeuron: 1e-3 } };
  const budget = budgetFor(gateKnobs, 40);
  const hp = hits([20, 20], [10, 10], [0, 0]);
  const p = predict(shape, firing, slow, gateKnobs, workload, budget, hp);
  // Per layer:
  //   round 1   16.04 ms (the compute-bound case above: 10 reads, 10 ms of hits)
  //   I/O wait  16.04 - 10 ms of hits - 0.1 ms of submits = 5.94 ms
  //   ffn       layer fixed 0.002 + hits 10 + misses 10 * 1 ms + 1 dispatch 0.001 = 20.003 ms
  //   scan      100 * 0.01 + 20 * 0.1 + 10 misses * 1 + submits 100 = 113 us
  // Per token: ffn 40.006 ms + waits 11.88 ms + attention 30.192 us + gate 14.8 + scan 226
  //   + output 6.2 (277.192 us) = 52.163192 ms
  close(p.breakdown.ioWait, 11.88e-3, "pipelined I/O wait");
  close(p.breakdown.ffnCompute, 40.006e-3, "ffn");
  close(p.breakdown.scan, 226e-6, "scan");
  close(p.secondsPerToken, 52.163192e-3, "pipelined token");
  // Without overlap: round 1 = 10 ms of hits + 10 ms of reads; the wait 20 - 10 - 0.1 = 9.9 ms per
  // layer: 40.006 + 19.8 ms + 277.192 us = 60.083192 ms
  const busy = predict(shape, firing, { ...slow, overlap: false }, gateKnobs, workload, budget, hp);
  close(busy.breakdown.ioWait, 19.8e-3, "unoverlapped I/O wait");
  close(busy.secondsPerToken, 60.083192e-3, "unoverlapped token");
});

test("cost model by hand: predictor mode reads the next layer's misses ahead, on one disk queue", () => {
  // Nothing hot, a 40-slot cold region, 10 cold hits per layer; layer 0 picks 20 (10 misses),
  // layer 1 picks 22 (12 misses). The read-ahead covers half the next layer's misses, and every
  // bundle it reads is used.
  const budget = budgetFor(predictorKnobs, 40);
  const hp = hits([20, 22], [0, 0], [10, 10]);
  const p = predict(shape, firing, hw, predictorKnobs, workload, budget, hp, { coverage: 0.5, used: 1 });
  assert.equal(p.layout.hotPerLayer, 0);
  assert.equal(p.layout.coldSlots, 40);
  // Two timelines, the main thread's t and the disk's; a batch of n reads keeps the disk
  // n * (1 ms - 10 us of submit) = n * 0.99 ms.
  // Layer 0:
  //   t = 15.096 us               attention
  //   + 5 predictor + 113 scan    scan: 100 * 0.01 + 20 * 0.1 + 10 * (1 miss + 10 submit) = 113 us
  //   t = 133.096 us              10 misses queued: the disk busy until 133.096 us + 9.9 ms
  //                               = 10.033096 ms
  //   The first round took every miss (10 <= 40 slots): layer 1's read-ahead, 0.5 * 12 = 6
  //   bundles: + 5 predictor + 6 * 10 submit = 65 us, t = 198.096 us; queued behind the misses,
  //   it lands at 10.033096 + 5.94 = 15.973096 ms
  //   + 22 hits                   layer fixed 2 + 10 cold hits * 2 us; t = 220.096 us
  //   wait for the misses         10.033096 ms - 220.096 us = 9.813 ms
  //   + 21 misses                 10 * 2 us + 1 dispatch; t = 10.054096 ms
  // Layer 1:
  //   t = 10.069192 ms            attention
  //   wait for the read-ahead     15.973096 - 10.069192 = 5.903904 ms; t = 15.973096 ms
  //   + 5 predictor + 69.2 scan   6 misses left: 1 + 22 * 0.1 + 6 * 11 = 69.2 us;
  //                               t = 16.047296 ms; the 6 reads queued (the disk free), landing
  //                               at 16.047296 + 5.94 = 21.987296 ms; no read-ahead after the
  //                               last layer
  //   + 34 hits                   2 + (10 cold hits + 6 read ahead) * 2 us; t = 16.081296 ms
  //   wait for the misses         21.987296 - 16.081296 = 5.906 ms
  //   + 13 misses                 6 * 2 us + 1 dispatch; t = 22.000296 ms
  // + output 6.2 us: 22.006496 ms
  const b = p.breakdown;
  close(b.attention, 2 * ATTENTION, "attention");
  close(b.gate, 15e-6, "predictors (layer 0, layer 1's read-ahead, layer 1)");
  close(b.scan, 242.2e-6, "scan and submits");
  close(b.ffnCompute, 90e-6, "ffn");
  close(b.ioWait, 9.813e-3 + 5.903904e-3 + 5.906e-3, "I/O wait");
  close(p.secondsPerToken, 22.006496e-3, "token");
  // bundles read: 10 + 6 misses, 6 ahead
  assert.equal(p.readBytesPerToken, 22 * 4096);

  // Without read-ahead coverage, layer 1 reads its 12 misses itself, after its own predictor.
  // Layer 0 as above, but its read-ahead reads nothing (the predictor still runs: 5 us): t after
  // layer 0 = 10.054096 ms. Layer 1: attention, 10.069192 ms; + 5 predictor + 135.2 scan
  // (1 + 2.2 + 12 * 11), 10.209392 ms; its 12 misses queued (the disk free since 10.033096 ms),
  // landing at 10.209392 + 11.88 = 22.089392 ms; + 22 hits; wait; + 25 misses: 22.114392 ms;
  // + output 6.2 us = 22.120592 ms, 0.114096 ms more than with half the misses read ahead
  const none = predict(shape, firing, hw, predictorKnobs, workload, budget, hp, { coverage: 0, used: 1 });
  close(none.secondsPerToken, 22.120592e-3, "token without read-ahead coverage");
});

test("cost model by hand: dense mode picks without a predictor and reads the next layer's misses ahead exactly", () => {
  // The predictor-mode case above in dense mode: no predictor to run, and the read-ahead covers
  // all of the next layer's misses (every neuron is a pick, so they are known), every one used.
  const denseKnobs: Knobs = { ...predictorKnobs, sparsity: "dense" };
  const budget = budgetFor(denseKnobs, 40);
  const hp = hits([20, 22], [0, 0], [10, 10]);
  const p = predict(shape, firing, hw, denseKnobs, workload, budget, hp, { coverage: 0.5, used: 0.5 });
  assert.equal(p.layout.coldSlots, 40);
  assert.equal(p.layout.gateBytes, 0, "no gate rows or staging");
  // Layer 0:
  //   t = 15.096 us               attention
  //   + 113 scan                  100 * 0.01 + 20 * 0.1 + 10 * (1 + 10) us; t = 128.096 us; the
  //                               10 misses queued, landing at 128.096 us + 9.9 ms = 10.028096 ms
  //   read-ahead of layer 1's 12 misses (the measured rates given are not dense mode's):
  //   + 12 * 10 submit            t = 248.096 us; landing at 10.028096 + 11.88 = 21.908096 ms
  //   + 22 hits                   2 + 10 cold hits * 2 us; t = 270.096 us
  //   wait for the misses         10.028096 - 0.270096 = 9.758 ms
  //   + 21 misses                 10 * 2 us + 1 dispatch; t = 10.049096 ms
  // Layer 1:
  //   t = 10.064192 ms            attention
  //   wait for the read-ahead     21.908096 - 10.064192 = 11.843904 ms
  //   + 3.2 scan                  1 + 22 * 0.1, nothing left to read; t = 21.911296 ms
  //   + 46 hits                   2 + (10 cold hits + 12 read ahead) * 2 us; t = 21.957296 ms
  // + output 6.2 us: 21.963496 ms
  const b = p.breakdown;
  close(b.attention, 2 * ATTENTION, "attention");
  assert.equal(b.gate, 0, "no predictor");
  close(b.scan, 236.2e-6, "scan and submits");
  close(b.ffnCompute, 89e-6, "ffn");
  close(b.ioWait, 9.758e-3 + 11.843904e-3, "I/O wait");
  close(p.secondsPerToken, 21.963496e-3, "token");
  assert.equal(p.readBytesPerToken, 22 * 4096);
});

test("read-ahead condition: the runtime's and the cost model's", () => {
  // at all: predictor mode, pipelined, asked for, something not hot
  assert.equal(readsAhead("predictor", true, true, 10, 100), true);
  assert.equal(readsAhead("dense", true, true, 10, 100), true);
  assert.equal(readsAhead("gate", true, true, 10, 100), false);
  assert.equal(readsAhead("predictor", false, true, 10, 100), false);
  assert.equal(readsAhead("predictor", true, false, 10, 100), false);
  assert.equal(readsAhead("predictor", true, true, 100, 100), false);
  // per step: only when the first round took every miss; the next layer, none after the last
  assert.equal(readAheadGroup(0, 2, 0, 10, 10), 1);
  assert.equal(readAheadGroup(1, 2, 0, 10, 10), -1);
  assert.equal(readAheadGroup(0, 2, 0, 9, 10), -1);
  assert.equal(readAheadGroup(0, 2, 0, 10 - 1e-12, 10), 1, "expected values within 1e-9 take every miss");
  // a mixture's step reads nothing ahead: its routed experts were all read ahead when it routed
  assert.equal(readAheadGroup(4, 2, 4, 3, 3), -1);
  // in the cost model: a cold region too small for one round of layer 0's misses reads nothing
  // ahead (layer 1 then pays for all its misses itself)
  const tight = budgetFor(predictorKnobs, 8);
  const small = predict(shape, firing, hw, predictorKnobs, workload, tight, hits([20, 20], [0, 0], [10, 10]), {
    coverage: 0.5,
    used: 1,
  });
  assert.equal(small.layout.coldSlots, 8);
  close(small.breakdown.gate, 2 * 5e-6, "the two layers' predictors, no read-ahead's");
});
