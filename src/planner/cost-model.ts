/**
 * The planner's cost model: seconds per decode token of a neuron store run under a memory budget
 * with given knobs, from the hardware probe, the model's shapes and its neurons' firing rates.
 *
 * It follows what the runtime does (src/model/llama.ts forwardAsync, src/model/offloaded-ffn.ts
 * in `gate` sparsity), step by step, with expected values:
 *
 * Budget (as LlamaModel.offload): room = 0.97 budget; fixed = resident runtime and weights + KV
 * cache + sparse scratch + (resident gate rows | gate staging); cache = min(all bundles, room -
 * fixed) in whole bundles; hot = min(nFF, floor(slots * hotFraction / nLayer), floor((slots - 1)
 * / nLayer)) per layer, pinned to the first stored positions; the rest is one cold LRU.
 *
 * Hits (independent firing per token, neuron i of layer l with probability p): a hot neuron always
 * hits. The cold LRU follows Che's approximation: the cache keeps what was asked for within the
 * last tau tokens, tau solving  sum over cold neurons (1 - (1 - p)^tau) = cold slots; it starts
 * empty, so at decode step j (after a prompt of P tokens, whose batched prefill touches the union
 * of their neurons) a cold neuron hits with probability 1 - (1 - p)^min(P + j, tau).
 *
 * Reads (probe.ts): a batch of n reads at queue depth QD takes B(n, QD) seconds, measured for
 * batches as the runtime issues them (one submit, wait for the last; the submit's JS included),
 * of which n s(QD) are the main thread's submit calls; X(QD) is the rate while the queue stays full.
 *
 * Time per layer, resident gates (pipeline on):
 *   gate    = nFF nEmbd / matvec rate + dispatch
 *   JS      = nFF c_scan + firing c_lookup + misses (c_miss + s(QD))   (filing, slots, submits)
 *   round 1 = max(n1 s + hits c_up + B(n1 - QD, QD) - (n1 - QD) s,  B(n1, QD))
 *             n1 = min(misses, cold slots); only the QD reads issued before the hits are computed
 *             overlap them: the reader issues new reads from its completion callbacks, which wait
 *             while the main thread computes
 *   misses  = n1 c_up (+ further rounds of B(n, QD) + n c_up when misses exceed the cold slots)
 *   fixed   = prepare + reduce (probed as a layer's fixed cost)
 * Without the pipeline round 1 is B(n1, QD) + hits c_up. Without resident gates, the gates of
 * cached bundles are computed from them and the others' come from the store's gate-row copy,
 * streamed in chunks, double-buffered (chunk i + 1 is read while chunk i's gates compute; the
 * first was read during the attention block), or, in stores without that copy, from each
 * uncached bundle's gate pages read in rounds of 2048 (the first overlapping the hits); then the
 * misses are read, with nothing left to overlap.
 * Attention: its four matvecs at the probed rates, the KV cache read at memory bandwidth, and a
 * dispatch per kernel call; the output matvec once per token. The prediction is the mean over the
 * decode steps (the cold region warms up along them).
 */
import type { GGMLType } from "../format/ggml-types.js";
import type { ScanSpeed, SparseSpeed } from "./probe.js";
import { hitProfile, type Firing, type HitProfile } from "../io/hit-model.js";

export { hitProfile, type Firing, type HitProfile };

export interface MatrixShape {
  type: GGMLType;
  rows: number;
  cols: number;
}

/** What the cost model needs to know about the model (see shapeOfStore in plan.ts). */
export interface ModelShape {
  nLayer: number;
  nEmbd: number;
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
  /** packed resident gate rows of all layers */
  gateBytes: number;
  /** staging for first-phase gate reads (when the gate rows are not resident) */
  stagingBytes: number;
  /**
   * When every layer has a contiguous copy of its gate rows (stores converted since it exists):
   * gates not resident are streamed from it in chunks of `rows` rows (`bytes` per read, as
   * OffloadedFFN reads them), double-buffered, the first chunk read during the attention block.
   * null: each uncached bundle's gate pages are read instead.
   */
  gateStream: { rows: number; bytes: number; rowBytes: number } | null;
  /** sparse kernels' scratch, as LlamaModel.offload counts it */
  scratchBytes: number;
  /** resident bytes of weights and buffers once loaded, before the KV cache and the FFN (wasm arena touched + the JS-side embedding table) */
  weightBytes: number;
  /** KV cache bytes per context position (f32 K and V, all layers) */
  kvBytesPerPosition: number;
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
  /** seconds to read one chunk of a layer's gate-row copy (ModelShape.gateStream) at queue depth qd */
  streamChunkSeconds(qd: number): number;
  /** wall seconds of one batch of n random reads of `bytes` from the store at queue depth qd (submit included) */
  batchSeconds(bytes: number, qd: number, n: number): number;
  /** main-thread seconds per read to submit it */
  submitSeconds(bytes: number, qd: number): number;
  /** reads per second while the queue stays full */
  iops(bytes: number, qd: number): number;
  /**
   * whether reads progress while the compute threads run: not when they take every core (the
   * read threads then wait for the CPU; measured on a 2-core machine), so compute and reads add up
   */
  overlap: boolean;
  /** resident bytes of the process before any weight is loaded (runtime, the store's manifest, the thread pool) */
  runtimeBytes: number;
}

export interface Knobs {
  threads: number;
  queueDepth: number;
  hotFraction: number;
  /** keep the gate rows in memory (false: read gate pages every token) */
  residentGates: boolean;
  pipeline: boolean;
}

export interface Workload {
  /** KV cache positions (the budget counts all of them) */
  contextSize: number;
  /** prompt tokens before decoding (their prefill warms the cold cache) */
  promptTokens: number;
  /** decode tokens the prediction averages over */
  decodeTokens: number;
}

export interface MemorySplit {
  budget: number;
  /** 97% of the budget: LlamaModel.offload leaves 3% for what is hard to count */
  room: number;
  runtimeBytes: number;
  weightBytes: number;
  kvBytes: number;
  scratchBytes: number;
  /** resident gate rows or gate staging */
  gateBytes: number;
  residentGates: boolean;
  cacheBytes: number;
  slots: number;
  hotPerLayer: number;
  coldSlots: number;
  /** whether the budget runs at all (a cache of at least 4 bundles) */
  fits: boolean;
  /** the smallest budget that runs with these knobs */
  minBudget: number;
}

/** Seconds per decode token, by where they go. */
export interface Breakdown {
  /** attention matvecs, KV cache reads, norms, rope */
  attention: number;
  /** resident gate matvec, or gates computed from cached bundles and read gate pages */
  gate: number;
  /** waiting for gate pages (non-resident gate rows) */
  gateReads: number;
  /** JS: filing firing neurons as hits and misses, taking slots and submitting the misses' reads */
  scan: number;
  /** up/down of firing neurons (hits and misses) and the layer's fixed sparse cost */
  ffnCompute: number;
  /** waiting for the misses' bundles beyond what overlaps the hits' compute */
  ioWait: number;
  /** output matvec */
  output: number;
}

export interface Prediction {
  knobs: Knobs;
  split: MemorySplit;
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

/** Gate pages read per round when the gate rows are not resident (OffloadedFFN's STAGE_NEURONS). */
export const STAGE_NEURONS = 2048;
/** Share of the budget LlamaModel.offload leaves unallocated. */
export const BUDGET_ROOM = 0.97;

/** The budget's split with these knobs, as LlamaModel.offload will make it. */
export function splitBudget(
  shape: ModelShape,
  hw: Pick<Hardware, "runtimeBytes">,
  knobs: Pick<Knobs, "residentGates" | "hotFraction">,
  workload: Pick<Workload, "contextSize">,
  budget: number,
): MemorySplit {
  const { nLayer, nFF, bundleBytes } = shape;
  const kvBytes = shape.kvBytesPerPosition * workload.contextSize;
  const allFFN = nLayer * nFF * bundleBytes;
  const minCache = Math.min(allFFN, 4 * bundleBytes);
  const base = hw.runtimeBytes + shape.weightBytes + kvBytes + shape.scratchBytes;
  const gateBytes = knobs.residentGates ? shape.gateBytes : shape.stagingBytes;
  const fixed = base + gateBytes;
  const room = budget * BUDGET_ROOM;
  const cacheBytes = Math.max(0, Math.min(allFFN, room - fixed));
  const fits = cacheBytes >= minCache;
  const slots = fits ? Math.floor(cacheBytes / bundleBytes) : 0;
  const hot = !fits
    ? 0
    : slots >= nLayer * nFF
      ? nFF
      : Math.max(0, Math.min(nFF, Math.floor((slots * knobs.hotFraction) / nLayer), Math.floor((slots - 1) / nLayer)));
  return {
    budget,
    room,
    runtimeBytes: hw.runtimeBytes,
    weightBytes: shape.weightBytes,
    kvBytes,
    scratchBytes: shape.scratchBytes,
    gateBytes,
    residentGates: knobs.residentGates,
    cacheBytes,
    slots,
    hotPerLayer: hot,
    coldSlots: slots - hot * nLayer,
    fits,
    minBudget: Math.ceil((fixed + minCache) / BUDGET_ROOM),
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
): Prediction {
  if (firing.layers.length !== shape.nLayer)
    throw new Error(`firing rates for ${firing.layers.length} layers, the model has ${shape.nLayer}`);
  const split = splitBudget(shape, hw, knobs, workload, budget);
  const steps = Math.max(1, Math.floor(workload.decodeTokens));
  const zero: Breakdown = { attention: 0, gate: 0, gateReads: 0, scan: 0, ffnCompute: 0, ioWait: 0, output: 0 };
  if (!split.fits) {
    return {
      knobs,
      split,
      tokensPerSecond: 0,
      secondsPerToken: Infinity,
      breakdown: zero,
      firingPerToken: 0,
      hitsPerToken: 0,
      hotHitsPerToken: 0,
      missesPerToken: 0,
      readBytesPerToken: 0,
      hitRate: 0,
      maxRounds: Infinity,
    };
  }
  const hp = hits ?? hitProfile(firing, split.hotPerLayer, split.coldSlots, workload.promptTokens, steps);
  const { nLayer, nFF, nEmbd, bundleBytes, gateReadBytes } = shape;
  const sp = hw.sparse;
  const up = sp.upDownPerNeuron;
  const qd = knobs.queueDepth;
  const cold = split.coldSlots;

  // Dense work per token (the same at every step but for the attention's growing span).
  const mv = (m: MatrixShape) => (m.rows * m.cols) / hw.matvecRate(m.type) + hw.dispatch;
  const attnMatvecs = shape.layerMatrices.reduce((a, m) => a + mv(m), 0);
  // norms (2), rope (2), attention, add (2), activation prepare: one dispatch each
  const attnOps = 8 * hw.dispatch;
  const gateMatvec = knobs.residentGates ? mv({ type: shape.ffnType, rows: nFF, cols: nEmbd }) : 0;
  const output = mv(shape.output) + 2 * hw.dispatch;

  const total: Breakdown = { ...zero };
  let fired = 0,
    hitsSum = 0,
    hotSum = 0,
    readBytes = 0,
    maxRounds = 0;
  for (let j = 0; j < steps; j++) {
    const pos = workload.promptTokens + j;
    const kvRead = (2 * pos * shape.nHead * shape.headDim * 4) / hw.memoryBandwidth;
    const b: Breakdown = { ...zero };
    b.attention = nLayer * (attnMatvecs + attnOps + kvRead);
    b.output = output;
    for (let l = 0; l < nLayer; l++) {
      const f = hp.firing[l];
      const h = Math.min(f, hp.hot[l] + hp.cold[j][l]);
      const m = Math.max(0, f - h);
      fired += f;
      hitsSum += h;
      hotSum += hp.hot[l];
      b.scan += nFF * hw.scan.perNeuron + f * hw.scan.perLookup + m * hw.scan.perMiss;
      const tHits = h > 0 ? h * up : 0;
      const n1 = Math.min(m, Math.max(1, cold));
      maxRounds = Math.max(maxRounds, Math.ceil(m / Math.max(1, cold) - 1e-9));
      if (knobs.residentGates) {
        b.gate += gateMatvec;
        const r1 = knobs.pipeline
          ? overlapped(hw, bundleBytes, n1, qd, tHits)
          : readTime(hw, bundleBytes, n1, qd) + tHits;
        const more = rounds(hw, bundleBytes, m - n1, cold, qd, up);
        const submit = m * hw.submitSeconds(bundleBytes, qd);
        b.scan += submit;
        b.ioWait += r1 - tHits + more.io - submit;
        b.ffnCompute += sp.layerFixed + tHits + n1 * up + (n1 > 0 ? hw.dispatch : 0) + more.compute;
        readBytes += m * bundleBytes;
      } else {
        // gates of the bundles in memory, then the others': streamed from the gate-row copy, or
        // each uncached bundle's gate pages read in rounds
        const cached = Math.min(nFF, split.hotPerLayer + hp.coldHeld[j][l]);
        const uncached = nFF - cached;
        b.gate += cached > 0 ? sp.gateFixed + cached * sp.gatePerNeuron : 0;
        if (shape.gateStream) {
          const g = shape.gateStream;
          const rows = nFF - split.hotPerLayer; // streamed from the end of the hot cluster on
          const chunks = Math.ceil(rows / g.rows - 1e-9);
          const tc = hw.streamChunkSeconds(qd);
          // share of the streamed rows not in the cold region: their gates are computed
          const fresh = rows > 0 ? uncached / rows : 0;
          // the first chunk was read ahead while this layer's attention computed
          let now = 0;
          let ready = Math.max(
            0,
            tc - (attnMatvecs + attnOps + kvRead) - (cached > 0 ? sp.gateFixed + cached * sp.gatePerNeuron : 0),
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
        b.ffnCompute += sp.layerFixed + tHits + miss.compute;
      }
    }
    for (const k of Object.keys(total) as (keyof Breakdown)[]) total[k] += b[k];
  }
  for (const k of Object.keys(total) as (keyof Breakdown)[]) total[k] /= steps;
  const secondsPerToken = Object.values(total).reduce((a, v) => a + v, 0);
  return {
    knobs,
    split,
    tokensPerSecond: 1 / secondsPerToken,
    secondsPerToken,
    breakdown: total,
    firingPerToken: fired / steps,
    hitsPerToken: hitsSum / steps,
    hotHitsPerToken: hotSum / steps,
    missesPerToken: (fired - hitsSum) / steps,
    readBytesPerToken: readBytes / steps,
    hitRate: fired > 0 ? hitsSum / fired : 1,
    maxRounds,
  };
}
