/**
 * The planner's cost model: seconds per decode token of a neuron store run under a memory budget
 * with given knobs, from the hardware probe, the model's shapes and its neurons' firing rates.
 * It follows what the runtime does (src/model/llama.ts forwardAsync, src/model/offload/), step
 * by step, with expected values; docs/planner.md writes the formulas out.
 *
 * Budget: the runtime's own layout function (src/model/offload/layout.ts offloadLayout), fed
 * what loading the store keeps resident (src/model/resident-bytes.ts) and the runtime's measured
 * base: the split predicted is the split the runtime makes.
 *
 * Hits: src/io/hit-model.ts (hot neurons always hit; the cold LRU by Che's approximation).
 *
 * A mixture of experts: the hit model runs per (layer, expert) group on per-token rates; the
 * step model then works per layer on sums over the experts (layerHits), the per-expert fixed
 * costs (predictor, gate matvec, scan, the sparse kernels' set-up) taken once per routed expert.
 *
 * Gate mode: gate rows resident (one matvec), or streamed from the store's gate-row copy, or
 * read as gate pages; the misses read in rounds, the first round overlapping the hits' compute.
 *
 * Predictor mode: the predictor's matvecs (probed on the store's own predictor); the picked
 * neurons (taken to be the firing ones: the predictor's precision and recall are not modelled,
 * calibration absorbs them); hot clusters computed whole when the predictor picks at least
 * HOT_DENSE_SHARE of them (the chance from a normal approximation of the picked count); the
 * misses' reads and the next layer's read-ahead on one disk queue, simulated layer by layer
 * against the main thread's work.
 */
import { GGMLType } from "../format/ggml-types.js";
import type { ScanSpeed, SparseSpeed } from "./probe.js";
import { evenRoutingShare, hitProfile, normalCdf, type Firing, type HitProfile } from "../io/hit-model.js";
import {
  offloadLayout,
  STAGE_NEURONS,
  type FixedResident,
  type OffloadLayout,
  type StoreFacts,
} from "../model/offload/layout.js";
import { HOT_CLUSTER } from "../model/offload/neuron-lists.js";
import { HOT_DENSE_SHARE } from "../model/offload/predictor-picks.js";
import type { PredictorShape } from "../model/offload/predictor.js";
import { DEFAULT_KV_CACHE, kvElementBytes } from "../model/kv-cache.js";

export { hitProfile, type Firing, type HitProfile };

export interface MatrixShape {
  type: GGMLType;
  rows: number;
  cols: number;
}

/** What the cost model needs to know about the model (see shapeOfStore in plan.ts). */
export interface ModelShape {
  /** the store as the layout sees it */
  facts: StoreFacts;
  /** what loading the store keeps in wasm memory at the plan's context and batch (residentBytes) */
  resident: Omit<FixedResident, "base">;
  nLayer: number;
  /** a mixture of experts: experts per layer (0: a dense FFN) and how many each token runs */
  experts: number;
  expertsUsed: number;
  /** per (layer, expert) group, the share of tokens routed to it (null: dense, or every expert alike) */
  routed: Float64Array | null;
  nEmbd: number;
  /** neurons of one FFN (of one expert) */
  nFF: number;
  nHead: number;
  nHeadKV: number;
  headDim: number;
  nVocab: number;
  ffnType: GGMLType;
  bundleBytes: number;
  /** bytes of a first-phase gate read (the pages holding a gate row) */
  gateReadBytes: number;
  /** the dense matrices of one layer's attention (wq, wk, wv, wo) */
  layerMatrices: MatrixShape[];
  output: MatrixShape;
  /**
   * When every layer has a contiguous copy of its gate rows (stores converted since it exists):
   * gates not resident are streamed from it in chunks of `rows` rows (`bytes` per read, as
   * StreamedGateRows reads them), double-buffered, the first chunk read during the attention
   * block. null: each uncached bundle's gate pages are read instead.
   */
  gateStream: { rows: number; bytes: number; rowBytes: number } | null;
  /** layer 0's activation predictor as it sits in memory (null: the store has none) */
  predictor: PredictorShape | null;
}

/** The measured machine, for one thread count (see hardwareFromProbe in plan.ts). */
export interface Hardware {
  threads: number;
  /** seconds per pool.run (waking the workers) */
  dispatch: number;
  /** bytes per second streamed */
  memoryBandwidth: number;
  /** multiply-adds per second of a matvec of this weight type */
  matvecRate(type: GGMLType): number;
  sparse: SparseSpeed;
  scan: ScanSpeed;
  /** seconds of one layer's predictor scores (predictor mode) */
  predictorSeconds: number;
  /** seconds to read one chunk of a layer's gate-row copy (ModelShape.gateStream) at queue depth qd */
  streamChunkSeconds(qd: number): number;
  /** wall seconds of one batch of n random reads of `bytes` from the store at queue depth qd (submit included) */
  batchSeconds(bytes: number, qd: number, n: number): number;
  /** main-thread seconds per read to submit it */
  submitSeconds(bytes: number, qd: number): number;
  /** reads per second while the queue stays full */
  iops(bytes: number, qd: number): number;
  /**
   * whether reads progress while the compute threads run: with native AIO they do (the device
   * works while the kernels compute); through libuv's pool not when compute takes every core
   * (the read threads then wait for the CPU), so compute and reads add up
   */
  overlap: boolean;
  /** resident bytes of the runtime before any weight loads (node, the engine, the thread pool, the store's manifest), as `run` measures it */
  base: number;
}

export interface Knobs {
  sparsity: "gate" | "predictor";
  threads: number;
  queueDepth: number;
  /** share of the cache pinned hot; undefined: what the runtime picks from the store's profile */
  hotFraction?: number;
  /** gate mode: keep the gate rows in memory (false: read them from flash); undefined: when they fit */
  residentGates?: boolean;
  pipeline: boolean;
}

/** Predictor mode's read-ahead, as measured (the calibration run) or assumed. */
export interface ReadAheadRates {
  /** share of a layer's misses read ahead during the layer before */
  coverage: number;
  /** share of the bundles read ahead that the layer's own predictor then picks */
  used: number;
}

/**
 * Read-ahead when nothing measured it: on the Mistral-7B-shape synthetic with planted
 * predictors it read 78% of a layer's misses ahead, 97% of what it read then used
 * (docs/benchmarks-log.md).
 */
export const ASSUMED_READ_AHEAD: ReadAheadRates = { coverage: 0.78, used: 0.97 };

export interface Workload {
  /** KV cache positions (the budget counts all of them) */
  contextSize: number;
  /** prompt tokens before decoding (their prefill warms the cold cache) */
  promptTokens: number;
  /** decode tokens the prediction averages over */
  decodeTokens: number;
}

/** Seconds per decode token, by where they go. */
export interface Breakdown {
  /** attention matvecs, KV cache reads, norms, rope */
  attention: number;
  /** which neurons fire: resident gate matvec, gates computed from cached bundles and read gate pages, or the predictor */
  gate: number;
  /** waiting for gate pages (non-resident gate rows) */
  gateReads: number;
  /** JS: filing firing neurons as hits and misses, taking slots and submitting the misses' reads */
  scan: number;
  /** up/down (or whole bundles) of the neurons computed, and the layer's fixed sparse cost */
  ffnCompute: number;
  /** waiting for the misses' bundles beyond what overlaps compute */
  ioWait: number;
  /** output matvec */
  output: number;
}

/** Knobs as a layout resolved them: the hot share the runtime picks, whether gate rows stay resident. */
export type PlannedKnobs = Knobs & { hotFraction: number; residentGates: boolean };

export interface Prediction {
  knobs: PlannedKnobs;
  layout: OffloadLayout;
  tokensPerSecond: number;
  secondsPerToken: number;
  breakdown: Breakdown;
  /** per decode token, over all layers */
  firingPerToken: number;
  hitsPerToken: number;
  hotHitsPerToken: number;
  missesPerToken: number;
  /** bundle (and gate page) bytes read per decode token */
  readBytesPerToken: number;
  hitRate: number;
  /** most read rounds a layer needs in a step (misses / cold slots, expected values): more than 1 means the cold region is smaller than a layer's misses */
  maxRounds: number;
}

/** The budget's layout with these knobs: the runtime's own (layout.ts), with the runtime's base as measured. */
export function layoutFor(
  shape: ModelShape,
  hw: Pick<Hardware, "base" | "threads">,
  knobs: Knobs,
  budget: number,
): OffloadLayout {
  return offloadLayout(shape.facts, { base: hw.base, ...shape.resident }, budget, {
    sparsity: knobs.sparsity,
    threads: knobs.threads,
    residentGates: knobs.sparsity === "gate" ? knobs.residentGates : undefined,
    hotFraction: knobs.hotFraction,
  });
}

// ---------------------------------------------------------------------------------------------
// Layers and experts

/** Groups of bundles: the layers, or for a mixture of experts every (layer, expert). */
export function groupsOf(shape: Pick<ModelShape, "nLayer" | "experts">): number {
  return shape.nLayer * Math.max(1, shape.experts);
}

/** The share of tokens routed to group g (1 for a dense layer; every expert alike when the store does not say). */
function routedShare(shape: ModelShape, g: number): number {
  if (shape.experts === 0) return 1;
  return shape.routed ? shape.routed[g] : evenRoutingShare(shape.experts, shape.expertsUsed);
}

/** Seconds of a layer's router (a mixture: nEmbd x experts logits in F32, and the top-k); 0 for a dense FFN. */
/**
 * Attention's reads of the KV cache at position `pos`: every query head streams its group's keys
 * and values (the runtime's default cache types: f16).
 */
function kvReadSeconds(shape: ModelShape, pos: number, hw: Hardware): number {
  const bytes = kvElementBytes(DEFAULT_KV_CACHE.k) + kvElementBytes(DEFAULT_KV_CACHE.v);
  return (pos * shape.nHead * shape.headDim * bytes) / hw.memoryBandwidth;
}

/** Seconds of one decode matvec of m's shape, the pool's dispatch not included. */
function matvecComputeSeconds(m: MatrixShape, hw: Hardware): number {
  return (m.rows * m.cols) / hw.matvecRate(m.type);
}

/** A decode matvec dispatched to the pool on its own. */
function matvecSeconds(m: MatrixShape, hw: Hardware): number {
  return matvecComputeSeconds(m, hw) + hw.dispatch;
}

/**
 * Seconds of a layer's attention matrices at decode: q, k and v go to the pool as one group (one
 * dispatch: llama.ts), the output projection as another.
 */
function attentionMatvecSeconds(shape: ModelShape, hw: Hardware): number {
  return shape.layerMatrices.reduce((a, m) => a + matvecComputeSeconds(m, hw), 0) + 2 * hw.dispatch;
}

function routerSeconds(shape: ModelShape, hw: Hardware): number {
  if (shape.experts === 0) return 0;
  return matvecSeconds({ type: GGMLType.F32, rows: shape.experts, cols: shape.nEmbd }, hw);
}

/**
 * The hit profile per layer, what the step model works with: for a mixture of experts, sums over
 * the layer's experts of the per-token figures (firing, hot hits, cold hits), and of what the
 * routed experts hold (positions pinned hot, bundles in the cold region), weighted by routing:
 * only a routed expert's gates are computed or streamed. A dense model's profile passes through.
 */
export interface LayerHits extends HitProfile {
  /** per layer: the routed experts' positions pinned in the hot region (expected) */
  hotHeld: Float64Array;
  /** FFNs each token runs per layer (1: dense) */
  routedExperts: number;
}

function layerHits(shape: ModelShape, layout: OffloadLayout, hp: HitProfile): LayerHits {
  const E = shape.experts;
  if (E === 0) {
    return { ...hp, hotHeld: new Float64Array(shape.nLayer).fill(layout.hotPerLayer), routedExperts: 1 };
  }
  const L = shape.nLayer;
  const sum = (a: Float64Array, weighted: boolean) => {
    const out = new Float64Array(L);
    for (let g = 0; g < a.length; g++) out[Math.floor(g / E)] += (weighted ? routedShare(shape, g) : 1) * a[g];
    return out;
  };
  const pinned = Float64Array.from(layout.hotPerGroup);
  return {
    firing: sum(hp.firing, false),
    hot: sum(hp.hot, false),
    cold: hp.cold.map((c) => sum(c, false)),
    coldHeld: hp.coldHeld.map((c) => sum(c, true)),
    tau: hp.tau,
    hotHeld: sum(pinned, true),
    routedExperts: shape.expertsUsed,
  };
}

// ---------------------------------------------------------------------------------------------
// Time

/** Seconds of a batch of n reads of `bytes` at queue depth qd, with nothing else to do meanwhile (submit included). */
function readTime(hw: Hardware, bytes: number, n: number, qd: number): number {
  if (n <= 0) return 0;
  return hw.batchSeconds(bytes, Math.max(1, Math.min(qd, Math.ceil(n))), n);
}

/**
 * A batch of n reads submitted just before `compute` seconds of main-thread work: only the first
 * QD reads proceed during the compute (new reads are issued from completion callbacks, which wait
 * for the main thread); the rest go as a batch of their own afterwards. Wall time, submit included.
 */
function overlapped(hw: Hardware, bytes: number, n: number, qd: number, compute: number): number {
  if (n <= 0) return compute;
  if (!hw.overlap) return compute + readTime(hw, bytes, n, qd);
  const submit = n * hw.submitSeconds(bytes, qd);
  const rest = Math.max(0, n - qd);
  const after = rest > 0 ? readTime(hw, bytes, rest, qd) - rest * hw.submitSeconds(bytes, qd) : 0;
  return Math.max(submit + compute + after, readTime(hw, bytes, n, qd));
}

/** Reads of `n` bundles in rounds of at most `cold` (each round read, then computed). */
function rounds(
  hw: Hardware,
  bytes: number,
  n: number,
  cold: number,
  qd: number,
  up: number,
): { io: number; compute: number } {
  let io = 0,
    compute = 0;
  let left = n;
  while (left > 1e-9) {
    const r = Math.min(left, Math.max(1, cold));
    io += readTime(hw, bytes, r, qd);
    compute += r * up + hw.dispatch;
    left -= r;
  }
  return { io, compute };
}

export function predict(
  shape: ModelShape,
  firing: Firing,
  hw: Hardware,
  knobs: Knobs,
  workload: Workload,
  budget: number,
  hits?: HitProfile,
  readAhead: ReadAheadRates = ASSUMED_READ_AHEAD,
): Prediction {
  const groups = groupsOf(shape);
  if (firing.layers.length !== groups)
    throw new Error(
      `firing rates for ${firing.layers.length} groups, the model has ${groups}${shape.experts > 0 ? ` (${shape.nLayer} layers x ${shape.experts} experts)` : " layers"}`,
    );
  const layout = layoutFor(shape, hw, knobs, budget);
  const steps = Math.max(1, Math.floor(workload.decodeTokens));
  const resolved: PlannedKnobs = { ...knobs, hotFraction: layout.hotFraction, residentGates: layout.residentGates };
  if (!layout.fits) {
    return {
      knobs: resolved,
      layout,
      tokensPerSecond: 0,
      secondsPerToken: Infinity,
      breakdown: zeroBreakdown(),
      firingPerToken: 0,
      hitsPerToken: 0,
      hotHitsPerToken: 0,
      missesPerToken: 0,
      readBytesPerToken: 0,
      hitRate: 0,
      maxRounds: Infinity,
    };
  }
  const hp = layerHits(
    shape,
    layout,
    hits ?? hitProfile(firing, layout.hotPerGroup, layout.coldSlots, workload.promptTokens, steps),
  );
  if (knobs.sparsity === "predictor")
    return predictorMode(shape, firing, hw, resolved, workload, layout, hp, readAhead);
  const { nLayer, nFF, nEmbd, bundleBytes, gateReadBytes } = shape;
  const sp = hw.sparse;
  const up = sp.upDownPerNeuron;
  const qd = knobs.queueDepth;
  const cold = layout.coldSlots;
  const zero = zeroBreakdown();

  // Dense work per token (the same at every step but for the attention's growing span).
  const attnMatvecs = attentionMatvecSeconds(shape, hw);
  // norms (2), rope (2), attention, add (2), activation prepare: one dispatch each
  const attnOps = 8 * hw.dispatch;
  const k = hp.routedExperts;
  const gateMatvec = layout.residentGates ? k * matvecSeconds({ type: shape.ffnType, rows: nFF, cols: nEmbd }, hw) : 0;
  const router = routerSeconds(shape, hw);
  const output = matvecSeconds(shape.output, hw) + 2 * hw.dispatch;

  const total: Breakdown = { ...zero };
  let fired = 0,
    hitsSum = 0,
    hotSum = 0,
    readBytes = 0,
    maxRounds = 0;
  for (let j = 0; j < steps; j++) {
    const pos = workload.promptTokens + j;
    const kvRead = kvReadSeconds(shape, pos, hw);
    const b: Breakdown = { ...zero };
    b.attention = nLayer * (attnMatvecs + attnOps + kvRead);
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
      maxRounds = Math.max(maxRounds, Math.ceil(m / Math.max(1, cold) - 1e-9));
      if (layout.residentGates) {
        b.gate += gateMatvec;
        const r1 = knobs.pipeline
          ? overlapped(hw, bundleBytes, n1, qd, tHits)
          : readTime(hw, bundleBytes, n1, qd) + tHits;
        const more = rounds(hw, bundleBytes, m - n1, cold, qd, up);
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
        b.gate += cached > 0 ? k * sp.gateFixed + cached * sp.gatePerNeuron : 0;
        if (shape.gateStream) {
          const g = shape.gateStream;
          const rows = k * nFF - hp.hotHeld[l]; // streamed from the end of the hot cluster on
          const chunks = Math.ceil(rows / g.rows - 1e-9);
          const tc = hw.streamChunkSeconds(qd);
          // share of the streamed rows not in the cold region: their gates are computed
          const fresh = rows > 0 ? uncached / rows : 0;
          // the first chunk was read ahead while this layer's attention computed
          let now = 0;
          let ready = Math.max(
            0,
            tc - (attnMatvecs + attnOps + kvRead) - (cached > 0 ? k * sp.gateFixed + cached * sp.gatePerNeuron : 0),
          );
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
          readBytes += chunks * g.bytes + m * bundleBytes;
        } else {
          let left = uncached;
          let first = true;
          while (left > 1e-9) {
            const r = Math.min(left, STAGE_NEURONS);
            const io =
              first && knobs.pipeline
                ? overlapped(hw, gateReadBytes, r, qd, tHits) - tHits
                : readTime(hw, gateReadBytes, r, qd);
            const submit = r * hw.submitSeconds(gateReadBytes, qd);
            b.scan += submit;
            b.gateReads += io - submit;
            b.gate += sp.gateFixed + r * sp.gatePerNeuron;
            first = false;
            left -= r;
          }
          readBytes += uncached * gateReadBytes + m * bundleBytes;
        }
        // misses: read after every gate is known, nothing left to overlap them with
        const miss = rounds(hw, bundleBytes, m, cold, qd, up);
        const submit = m * hw.submitSeconds(bundleBytes, qd);
        b.scan += submit;
        b.ioWait += miss.io - submit;
        b.ffnCompute += k * sp.layerFixed + tHits + miss.compute;
      }
    }
    for (const k of Object.keys(total) as (keyof Breakdown)[]) total[k] += b[k];
  }
  return perToken(resolved, layout, steps, total, { fired, hits: hitsSum, hot: hotSum, readBytes, maxRounds });
}

/** A prediction from totals summed over `steps` decode tokens. */
function perToken(
  knobs: PlannedKnobs,
  layout: OffloadLayout,
  steps: number,
  total: Breakdown,
  sums: { fired: number; hits: number; hot: number; readBytes: number; maxRounds: number },
): Prediction {
  for (const k of Object.keys(total) as (keyof Breakdown)[]) total[k] /= steps;
  const secondsPerToken = Object.values(total).reduce((a, v) => a + v, 0);
  return {
    knobs,
    layout,
    tokensPerSecond: 1 / secondsPerToken,
    secondsPerToken,
    breakdown: total,
    firingPerToken: sums.fired / steps,
    hitsPerToken: sums.hits / steps,
    hotHitsPerToken: sums.hot / steps,
    missesPerToken: (sums.fired - sums.hits) / steps,
    readBytesPerToken: sums.readBytes / steps,
    hitRate: sums.fired > 0 ? sums.hits / sums.fired : 1,
    maxRounds: sums.maxRounds,
  };
}

function zeroBreakdown(): Breakdown {
  return { attention: 0, gate: 0, gateReads: 0, scan: 0, ffnCompute: 0, ioWait: 0, output: 0 };
}

/** Per layer: expected neurons of the hot clusters computed whole, and how many of their picks those cover. */
interface HotRuns {
  neurons: Float64Array;
  picked: Float64Array;
}

const runsMemo = new WeakMap<Firing, Map<string, HotRuns>>();

/**
 * Predictor mode's hot clusters (predictor-picks.ts): a cluster of HOT_CLUSTER adjacent hot
 * neurons is computed whole when at least HOT_DENSE_SHARE of it is picked. The picked count is a
 * sum of independent Bernoulli trials (the firing rates); its chance to reach the cut, and the
 * picks it then covers, from a normal approximation with a continuity correction. An expert's
 * clusters are looked at only when a token is routed to it: its rates given that (per token
 * divided by the routing share), the result weighted by the share.
 */
function hotRuns(shape: ModelShape, firing: Firing, hotPerGroup: readonly number[]): HotRuns {
  let memo = runsMemo.get(firing);
  if (!memo) runsMemo.set(firing, (memo = new Map()));
  const key = hotPerGroup.join(",");
  const have = memo.get(key);
  if (have) return have;
  const perLayer = Math.max(1, shape.experts);
  const runs: HotRuns = { neurons: new Float64Array(shape.nLayer), picked: new Float64Array(shape.nLayer) };
  for (let g = 0; g < firing.layers.length; g++) {
    const l = Math.floor(g / perLayer);
    const share = routedShare(shape, g);
    if (!(share > 0)) continue;
    const p = firing.layers[g];
    const hot = hotPerGroup[g];
    for (let c0 = 0; c0 < Math.min(hot, p.length); c0 += HOT_CLUSTER) {
      const c1 = Math.min(hot, p.length, c0 + HOT_CLUSTER);
      let mu = 0,
        v = 0;
      for (let k = c0; k < c1; k++) {
        const q = Math.min(1, p[k] / share);
        mu += q;
        v += q * (1 - q);
      }
      const cut = Math.ceil(HOT_DENSE_SHARE * (c1 - c0) - 1e-9);
      let chance: number, covered: number;
      if (v < 1e-12) {
        chance = mu >= cut - 1e-9 ? 1 : 0;
        covered = chance * mu;
      } else {
        const sd = Math.sqrt(v);
        const z = (cut - 0.5 - mu) / sd;
        chance = 1 - normalCdf(z);
        covered = Math.min(mu, Math.max(0, mu * chance + sd * normalPdf(z)));
      }
      runs.neurons[l] += share * chance * (c1 - c0);
      runs.picked[l] += share * covered;
    }
  }
  memo.set(key, runs);
  return runs;
}

function normalPdf(z: number): number {
  return Math.exp(-0.5 * z * z) / Math.sqrt(2 * Math.PI);
}

/**
 * Predictor mode, one token at a time through the layers, with the main thread and the disk as
 * two timelines: a layer's attention; the wait for what was read ahead for it; its predictor and
 * the filing of its picks; its misses' reads issued (queued on the disk behind whatever is
 * there); the next layer's predictor on this layer's input and its read-ahead issued; the hits
 * computed (hot clusters whole, the other hits and the bundles read ahead one by one); the wait
 * for the misses; the misses computed (in rounds when the cold region is smaller than them).
 * Every moment of the main thread lands in one part of the breakdown.
 */
function predictorMode(
  shape: ModelShape,
  firing: Firing,
  hw: Hardware,
  knobs: PlannedKnobs,
  workload: Workload,
  layout: OffloadLayout,
  hp: LayerHits,
  ra: ReadAheadRates,
): Prediction {
  const { nLayer, nFF, bundleBytes } = shape;
  const k = hp.routedExperts;
  const router = routerSeconds(shape, hw);
  /** seconds of a layer's predictors: one per routed expert (and the router that picks them) */
  const predictors = router + k * hw.predictorSeconds;
  const sp = hw.sparse;
  const qd = knobs.queueDepth;
  const cold = layout.coldSlots;
  const steps = Math.max(1, Math.floor(workload.decodeTokens));
  const runs = hotRuns(shape, firing, layout.hotPerGroup);
  const attnMatvecs = attentionMatvecSeconds(shape, hw);
  const attnOps = 8 * hw.dispatch;
  const output = matvecSeconds(shape.output, hw) + 2 * hw.dispatch;
  // A mixture reads no next layer ahead by default (the runtime's expert read-ahead reads the
  // second routed expert's picks during the first's step: with every miss of a layer issued
  // before its hits compute, the step model below already overlaps them so)
  const lookahead = knobs.pipeline && layout.hotPerLayer < nFF && shape.experts === 0;
  const submit = hw.submitSeconds(bundleBytes, qd);
  /** disk seconds of a batch of n reads besides the main thread's submits */
  const disk = (n: number) => (n > 0 ? Math.max(0, readTime(hw, bundleBytes, n, qd) - n * submit) : 0);
  const total = zeroBreakdown();
  let fired = 0,
    hitsSum = 0,
    hotSum = 0,
    readBytes = 0,
    maxRounds = 0;
  const misses = new Float64Array(nLayer);
  for (let j = 0; j < steps; j++) {
    const kvRead = kvReadSeconds(shape, workload.promptTokens + j, hw);
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
      const attn = attnMatvecs + attnOps + kvRead;
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
      maxRounds = Math.max(maxRounds, Math.ceil(rest / Math.max(1, cold) - 1e-9));
      let missDone: number;
      if (hw.overlap) {
        diskFree = Math.max(t, diskFree) + disk(n1);
        missDone = diskFree;
      } else {
        t += disk(n1);
        b.ioWait += disk(n1);
        missDone = t;
      }
      if (!knobs.pipeline && missDone > t) {
        b.ioWait += missDone - t;
        t = missDone;
      }
      // the next layer's read-ahead, when this layer's misses took one round
      ahead = 0;
      aheadDone = 0;
      if (lookahead && l + 1 < nLayer && n1 >= rest - 1e-9) {
        ahead = ra.coverage * misses[l + 1];
        const reads = ahead / Math.max(0.05, ra.used);
        t += predictors + reads * submit;
        b.gate += predictors;
        b.scan += reads * submit;
        readBytes += reads * bundleBytes;
        if (hw.overlap) {
          diskFree = Math.max(t, diskFree) + disk(reads);
          aheadDone = diskFree;
        } else {
          t += disk(reads);
          b.ioWait += disk(reads);
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
      const more = rounds(hw, bundleBytes, rest - n1, cold, qd, sp.ffnPerNeuron);
      const tMiss = n1 * sp.ffnPerNeuron + (n1 > 0 ? hw.dispatch : 0) + more.compute;
      t += tMiss + more.io;
      b.ffnCompute += tMiss;
      b.ioWait += more.io;
      readBytes += rest * bundleBytes;
    }
    b.output = output;
    for (const k of Object.keys(total) as (keyof Breakdown)[]) total[k] += b[k];
  }
  return perToken(knobs, layout, steps, total, { fired, hits: hitsSum, hot: hotSum, readBytes, maxRounds });
}
