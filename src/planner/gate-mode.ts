/**
 * Gate mode's step model: every gate is computed (or the resident gate rows' matvec), then
 * up/down of the firing neurons. Gate rows resident (one matvec), or streamed from the store's
 * gate-row copy, or read as gate pages; the misses read in rounds of the cold region, the first
 * round overlapping the hits' compute when the gates are resident (with gates from flash every
 * gate must be known first: nothing is left to overlap the misses with).
 */
import { STAGE_NEURONS, type OffloadLayout } from "../model/offload/layout.js";
import { attentionSeconds, matvecSeconds, outputSeconds, routerSeconds } from "./dense-costs.js";
import type { Hardware } from "./hardware.js";
import { decodeSteps, type PlannedKnobs, type Workload } from "./knobs.js";
import type { LayerHits } from "./layer-hits.js";
import type { ModelShape } from "./model-shape.js";
import { addBreakdown, perToken, zeroBreakdown, type Breakdown, type Prediction } from "./prediction.js";
import { missTime, overlapped, readTime, rounds, roundsOf } from "./read-costs.js";
import { runShareOf, type LayerAdjacency } from "./read-runs.js";

export function gateMode(
  shape: ModelShape,
  hw: Hardware,
  knobs: PlannedKnobs,
  workload: Workload,
  layout: OffloadLayout,
  hp: LayerHits,
  adj: LayerAdjacency,
): Prediction {
  const { nLayer, nFF, nEmbd, bundleBytes } = shape;
  const sp = hw.sparse;
  const up = sp.upDownPerNeuron;
  const qd = knobs.queueDepth;
  const cold = layout.coldSlots;
  const steps = decodeSteps(workload);
  const zero = zeroBreakdown();

  // Dense work per token (the same at every step but for the attention's growing span).
  const k = hp.routedExperts;
  const gateMatvec = layout.residentGates ? k * matvecSeconds({ type: shape.ffnType, rows: nFF, cols: nEmbd }, hw) : 0;
  const router = routerSeconds(shape, hw);
  const output = outputSeconds(shape, hw);

  const total: Breakdown = { ...zero };
  let fired = 0,
    hitsSum = 0,
    hotSum = 0,
    readBytes = 0,
    maxRounds = 0;
  for (let j = 0; j < steps; j++) {
    const attn = attentionSeconds(shape, hw, workload.promptTokens + j);
    const b: Breakdown = { ...zero };
    b.attention = nLayer * attn;
    b.gate += nLayer * router;
    b.output = output;
    for (let l = 0; l < nLayer; l++) {
      const f = hp.firing[l];
      const h = Math.min(f, hp.hot[l] + hp.cold[j][l]);
      const m = Math.max(0, f - h);
      fired += f;
      hitsSum += h;
      hotSum += hp.hot[l];
      b.scan += k * nFF * hw.scan.perNeuron + f * hw.scan.perLookup + m * hw.scan.perMiss;
      const tHits = h > 0 ? h * up : 0;
      const n1 = Math.min(m, Math.max(1, cold));
      const runShare = runShareOf(adj, l, m);
      maxRounds = Math.max(maxRounds, roundsOf(m, cold));
      if (layout.residentGates) {
        b.gate += gateMatvec;
        const r1 = knobs.pipeline
          ? overlapped(hw, bundleBytes, n1, qd, tHits, runShare)
          : missTime(hw, bundleBytes, n1, qd, runShare) + tHits;
        const more = rounds(hw, bundleBytes, m - n1, cold, qd, up, runShare);
        const submit = m * hw.submitSeconds(bundleBytes, qd);
        b.scan += submit;
        b.ioWait += r1 - tHits + more.io - submit;
        b.ffnCompute += k * sp.layerFixed + tHits + n1 * up + (n1 > 0 ? hw.dispatch : 0) + more.compute;
        readBytes += m * bundleBytes;
      } else {
        // gates of the bundles in memory, then the others': streamed from the gate-row copy, or
        // each uncached bundle's gate pages read in rounds
        const cached = Math.min(k * nFF, hp.hotHeld[l] + hp.coldHeld[j][l]);
        const uncached = k * nFF - cached;
        const cachedGates = cached > 0 ? k * sp.gateFixed + cached * sp.gatePerNeuron : 0;
        b.gate += cachedGates;
        const gateBytes = shape.gateStream
          ? streamGates(shape, hw, qd, k * nFF - hp.hotHeld[l], uncached, attn, cachedGates, tHits, b)
          : readGatePages(shape, hw, qd, knobs.pipeline, uncached, tHits, b);
        readBytes += gateBytes + m * bundleBytes;
        // misses: read after every gate is known, nothing left to overlap them with
        const miss = rounds(hw, bundleBytes, m, cold, qd, up, runShare);
        const submit = m * hw.submitSeconds(bundleBytes, qd);
        b.scan += submit;
        b.ioWait += miss.io - submit;
        b.ffnCompute += k * sp.layerFixed + tHits + miss.compute;
      }
    }
    addBreakdown(total, b);
  }
  return perToken(knobs, layout, steps, total, { fired, hits: hitsSum, hot: hotSum, readBytes, maxRounds });
}

/**
 * A layer's gates streamed from its gate-row copy: `rows` rows from the end of the hot cluster
 * on, in chunks double-buffered against the gates' compute, the first chunk read while the
 * layer's attention (and the cached bundles' gates) computed; the hits' compute comes before the
 * first chunk's gates. Only the share of the rows not in the cold region has its gates computed
 * from the chunk. Adds the waits and the gates' compute to `b`; returns the bytes read.
 */
function streamGates(
  shape: ModelShape,
  hw: Hardware,
  qd: number,
  rows: number,
  uncached: number,
  attention: number,
  cachedGates: number,
  tHits: number,
  b: Breakdown,
): number {
  const g = shape.gateStream!;
  const sp = hw.sparse;
  const chunks = Math.ceil(rows / g.rows - 1e-9);
  const tc = hw.streamChunkSeconds(qd);
  // share of the streamed rows not in the cold region: their gates are computed
  const fresh = rows > 0 ? uncached / rows : 0;
  let now = 0;
  let ready = Math.max(0, tc - attention - cachedGates);
  let waited = 0,
    computed = 0;
  for (let c = 0; c < chunks; c++) {
    const r = Math.min(g.rows, rows - c * g.rows);
    const nextReady = c + 1 < chunks ? Math.max(now, ready) + tc : 0;
    if (c === 0) now += tHits;
    if (ready > now) {
      waited += ready - now;
      now = ready;
    }
    const visit = sp.gateFixed + r * fresh * sp.gatePerNeuron;
    now += visit;
    computed += visit;
    ready = nextReady;
  }
  b.gateReads += waited;
  b.gate += computed;
  return chunks * g.bytes;
}

/**
 * The gate pages of a layer's `uncached` bundles, read in rounds of the staging area
 * (STAGE_NEURONS), each round's gates computed once it landed; with the pipeline the first
 * round overlaps the hits' compute. Adds the submits, waits and gates' compute to `b`; returns
 * the bytes read.
 */
function readGatePages(
  shape: ModelShape,
  hw: Hardware,
  qd: number,
  pipeline: boolean,
  uncached: number,
  tHits: number,
  b: Breakdown,
): number {
  const { gateReadBytes } = shape;
  const sp = hw.sparse;
  let left = uncached;
  let first = true;
  while (left > 1e-9) {
    const r = Math.min(left, STAGE_NEURONS);
    const io =
      first && pipeline ? overlapped(hw, gateReadBytes, r, qd, tHits) - tHits : readTime(hw, gateReadBytes, r, qd);
    const submit = r * hw.submitSeconds(gateReadBytes, qd);
    b.scan += submit;
    b.gateReads += io - submit;
    b.gate += sp.gateFixed + r * sp.gatePerNeuron;
    first = false;
    left -= r;
  }
  return uncached * gateReadBytes;
}
