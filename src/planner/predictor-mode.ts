/**
 * Predictor mode's step model, and dense mode's (every neuron a pick, known without a predictor:
 * nothing computed to pick, and the next layer's picks read ahead exactly), one token at a time through the layers, with the main thread and
 * the disk as two timelines: a layer's attention; the wait for what was read ahead for it; its
 * predictor and the filing of its picks; its misses' reads issued (queued on the disk behind
 * whatever is there); the next layer's predictor on this layer's input and its read-ahead issued;
 * the hits computed (hot clusters whole, the other hits and the bundles read ahead one by one);
 * the wait for the misses; the misses computed (in rounds when the cold region is smaller than
 * them). Every moment of the main thread lands in one part of the breakdown.
 *
 * The picked neurons are taken to be the firing ones: the predictor's precision and recall are
 * not modelled, calibration absorbs them.
 */
import type { Firing } from "../io/hit-model.js";
import type { OffloadLayout } from "../model/offload/layout.js";
import { readAheadGroup, readsAhead } from "../model/offload/read-ahead-condition.js";
import { attentionSeconds, outputSeconds, predictorsSeconds } from "./dense-costs.js";
import type { Hardware } from "./hardware.js";
import { hotRuns } from "./hot-runs.js";
import { decodeSteps, EXACT_READ_AHEAD, type PlannedKnobs, type ReadAheadRates, type Workload } from "./knobs.js";
import type { LayerHits } from "./layer-hits.js";
import type { ModelShape } from "./model-shape.js";
import { addBreakdown, perToken, zeroBreakdown, type Prediction } from "./prediction.js";
import { missTime, rounds, roundsOf } from "./read-costs.js";
import { runShareOf, type LayerAdjacency } from "./read-runs.js";

/** A floor on the read-ahead's used share when it sets the reads taken (ahead / used): a measured share near 0 would make them unbounded. */
const MIN_READ_AHEAD_USED = 0.05;

export function predictorMode(
  shape: ModelShape,
  firing: Firing,
  hw: Hardware,
  knobs: PlannedKnobs,
  workload: Workload,
  layout: OffloadLayout,
  hp: LayerHits,
  adj: LayerAdjacency,
  measured: ReadAheadRates,
): Prediction {
  const { nLayer, nFF, bundleBytes } = shape;
  const k = hp.routedExperts;
  const dense = knobs.sparsity === "dense";
  const predictors = dense ? 0 : predictorsSeconds(shape, hw, k);
  const ra = dense ? EXACT_READ_AHEAD : measured;
  const sp = hw.sparse;
  const qd = knobs.queueDepth;
  const cold = layout.coldSlots;
  const steps = decodeSteps(workload);
  const runs = hotRuns(shape, firing, layout.hotPerGroup);
  const output = outputSeconds(shape, hw);
  // A mixture reads no next layer ahead by default (the runtime's expert read-ahead reads the
  // second routed expert's picks during the first's step: with every miss of a layer issued
  // before its hits compute, the step model below already overlaps them so)
  const lookahead = readsAhead(knobs.sparsity, knobs.pipeline, true, layout.hotPerLayer, nFF) && shape.experts === 0;
  const submit = hw.submitSeconds(bundleBytes, qd);
  /** disk seconds of a batch of n missed bundles (runShare runs per bundle) besides the main thread's submits */
  const disk = (n: number, runShare: number) =>
    n > 0 ? Math.max(0, missTime(hw, bundleBytes, n, qd, runShare) - n * submit) : 0;
  const total = zeroBreakdown();
  let fired = 0,
    hitsSum = 0,
    hotSum = 0,
    readBytes = 0,
    maxRounds = 0;
  const misses = new Float64Array(nLayer);
  for (let j = 0; j < steps; j++) {
    const attn = attentionSeconds(shape, hw, workload.promptTokens + j);
    const b = zeroBreakdown();
    for (let l = 0; l < nLayer; l++) misses[l] = Math.max(0, hp.firing[l] - hp.hot[l] - hp.cold[j][l]);
    let t = 0;
    let diskFree = 0;
    /** when what was read ahead for the current layer lands, and how many of its misses that covers */
    let aheadDone = 0;
    let ahead = 0;
    for (let l = 0; l < nLayer; l++) {
      const f = hp.firing[l];
      const m = misses[l];
      fired += f;
      hitsSum += f - m;
      hotSum += hp.hot[l];
      t += attn;
      b.attention += attn;
      if (aheadDone > t) {
        b.ioWait += aheadDone - t;
        t = aheadDone;
      }
      const rest = Math.max(0, m - ahead);
      const scan = k * nFF * hw.scan.perNeuron + f * hw.scan.perLookup + rest * (hw.scan.perMiss + submit);
      t += predictors + scan;
      b.gate += predictors;
      b.scan += scan;
      // the first round of the misses' reads, queued on the disk
      const n1 = Math.min(rest, Math.max(1, cold));
      const runShare = runShareOf(adj, l, rest);
      maxRounds = Math.max(maxRounds, roundsOf(rest, cold));
      let missDone: number;
      if (hw.overlap) {
        diskFree = Math.max(t, diskFree) + disk(n1, runShare);
        missDone = diskFree;
      } else {
        t += disk(n1, runShare);
        b.ioWait += disk(n1, runShare);
        missDone = t;
      }
      if (!knobs.pipeline && missDone > t) {
        b.ioWait += missDone - t;
        t = missDone;
      }
      // the next layer's read-ahead (the runtime's condition: read-ahead-condition.ts)
      ahead = 0;
      aheadDone = 0;
      const next = lookahead ? readAheadGroup(l, nLayer, 0, n1, rest) : -1;
      if (next >= 0) {
        ahead = ra.coverage * misses[next];
        const reads = ahead / Math.max(MIN_READ_AHEAD_USED, ra.used);
        const aheadShare = runShareOf(adj, next, reads);
        t += predictors + reads * submit;
        b.gate += predictors;
        b.scan += reads * submit;
        readBytes += reads * bundleBytes;
        if (hw.overlap) {
          diskFree = Math.max(t, diskFree) + disk(reads, aheadShare);
          aheadDone = diskFree;
        } else {
          t += disk(reads, aheadShare);
          b.ioWait += disk(reads, aheadShare);
        }
      }
      // the hits: hot clusters whole, the other hits (and what was read ahead for this layer) one by one
      const served = m - rest;
      const tHits =
        k * sp.layerFixed +
        runs.neurons[l] * sp.ffnRunPerNeuron +
        Math.max(0, hp.hot[l] - runs.picked[l] + hp.cold[j][l] + served) * sp.ffnPerNeuron;
      t += tHits;
      b.ffnCompute += tHits;
      if (missDone > t) {
        b.ioWait += missDone - t;
        t = missDone;
      }
      const more = rounds(hw, bundleBytes, rest - n1, cold, qd, sp.ffnPerNeuron, runShare);
      const tMiss = n1 * sp.ffnPerNeuron + (n1 > 0 ? hw.dispatch : 0) + more.compute;
      t += tMiss + more.io;
      b.ffnCompute += tMiss;
      b.ioWait += more.io;
      readBytes += rest * bundleBytes;
    }
    b.output = output;
    addBreakdown(total, b);
  }
  return perToken(knobs, layout, steps, total, { fired, hits: hitsSum, hot: hotSum, readBytes, maxRounds });
}
