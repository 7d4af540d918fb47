/**
 * How a layer's expected misses become physical reads. The neuron cache hands out cold slots in
 * address order (the least recently used cold slot is the lowest), so misses taken in stored
 * order land in consecutive slots, and the flash reader coalesces requests adjacent in the file
 * and in memory (and consecutive in submission) into reads of at most DEFAULT_MAX_READ_BYTES. A
 * run of adjacent missed positions is therefore one read per maxRead bytes, not one per bundle.
 *
 * Positions missing independently with probability q_k form sum_k q_k (1 - q_{k-1}) runs in
 * expectation (a run starts where a miss follows a non-miss); the bytes do not change. Per layer
 * the planner has the firing rates p_k and an expected miss count m, not a per-position cold hit
 * chance: it takes q_k = s p_k past the hot region (hot positions never miss) with s = m / sum p,
 * so runs = m - s^2 sum p_k p_{k-1}. A dense FFN (every rate ~1) is different: its cold positions
 * cycle through an LRU smaller than them, so a layer's misses are one contiguous run per round
 * of the cold region, not scattered as independence would say.
 *
 * Where the reader bridges (the layout gave it a bridge region), a miss also joins the read of a
 * miss up to `lags` positions before it (the gap between them, at most BRIDGE_GAP_BYTES, read for
 * nothing): a read starts at a miss none of whose `lags` predecessors misses. With q the mean
 * chance that a given predecessor of a miss misses, q = s sum_{j=1..lags} sum_k p_k p_{k-j} /
 * (lags sum p), that is (1 - q)^lags of the misses (1 - s pairs / fires for lags 1, as above;
 * the power keeps it a share where first order would pass 0). The gap bytes those reads also carry are not
 * costed (on the 4B shape 5.9 KB a bridged bundle: ~3 us of this disk's time against the ~10 us
 * a read it saves).
 */
import type { Firing } from "../io/hit-model.js";
import { DEFAULT_MAX_READ_BYTES } from "../io/flash-reader.js";
import { BRIDGE_GAP_BYTES, BRIDGE_SLOT_BYTES } from "../io/read-bridge.js";
import { perSplit } from "./hot-runs.js";
import type { ModelShape } from "./model-shape.js";

/** Mean firing rate past the hot region at or above which a layer is read as one contiguous run per round. */
export const DENSE_FIRING = 0.99;

/** Expected runs of adjacent misses among positions missing independently with probabilities q. */
export function expectedRuns(q: ArrayLike<number>): number {
  let runs = 0;
  for (let k = 0; k < q.length; k++) runs += q[k] * (1 - (k > 0 ? q[k - 1] : 0));
  return runs;
}

/**
 * Reads a batch of `bundles` missed bundles of `bundleBytes` becomes when they form `runs` runs
 * (expected values): each run of the mean length split into reads of at most maxRead bytes.
 */
export function readsOfRuns(
  runs: number,
  bundles: number,
  bundleBytes: number,
  maxRead: number = DEFAULT_MAX_READ_BYTES,
): number {
  if (bundles <= 0) return 0;
  const r = Math.min(bundles, Math.max(runs, Math.min(1, bundles)));
  return r * Math.ceil(((bundles / r) * bundleBytes) / maxRead - 1e-9);
}

/**
 * Reads a batch of n missed bundles becomes when a layer's misses form `runShare` runs per
 * bundle (1: every miss alone; 0: one contiguous run).
 */
export function coalescedReads(
  n: number,
  runShare: number,
  bundleBytes: number,
  maxRead: number = DEFAULT_MAX_READ_BYTES,
): number {
  return readsOfRuns(n * runShare, n, bundleBytes, maxRead);
}

/** Per layer: sums over the positions past the hot region that set the runs of its misses. */
export interface LayerAdjacency {
  /** sum of p_k: the expected firing past the hot region */
  fires: Float64Array;
  /**
   * sum of p_k p_{k-j} over positions both past the hot region, j = 1..lags: adjacent ones, and
   * those a bridged read joins
   */
  pairs: Float64Array;
  /** whether every group of the layer fires densely (mean rate past hot >= DENSE_FIRING) */
  dense: Uint8Array;
  /** how many positions back a miss joins another's read (joinLags) */
  lags: number;
  /** the fewest reads a miss: a bridged read spans at most a bridge slot */
  minShare: number;
}

const adjacencyMemo = new WeakMap<Firing, Map<string, LayerAdjacency>>();

/**
 * How many positions back a miss joins another's read: 1 (adjacent) without a bridge region, else
 * also across a gap of up to BRIDGE_GAP_BYTES of bundles, the two within a bridge slot.
 */
export function joinLags(bundleBytes: number, bridged: boolean): number {
  if (!bridged) return 1;
  return Math.max(
    1,
    Math.min(1 + Math.floor(BRIDGE_GAP_BYTES / bundleBytes), Math.floor(BRIDGE_SLOT_BYTES / bundleBytes) - 1),
  );
}

/** The adjacency sums of each layer (a mixture's experts summed: each expert's positions are its own). */
export function layerAdjacency(
  shape: ModelShape,
  firing: Firing,
  hotPerGroup: readonly number[],
  bridged = false,
): LayerAdjacency {
  const lags = joinLags(shape.facts.bundleBytes, bridged);
  return perSplit(adjacencyMemo, firing, [lags, shape.facts.bundleBytes, ...hotPerGroup], () =>
    adjacency(shape, firing, hotPerGroup, lags),
  );
}

function adjacency(shape: ModelShape, firing: Firing, hotPerGroup: readonly number[], lags: number): LayerAdjacency {
  const L = shape.nLayer;
  const perLayer = Math.max(1, shape.experts);
  const adj: LayerAdjacency = {
    fires: new Float64Array(L),
    pairs: new Float64Array(L),
    dense: new Uint8Array(L).fill(1),
    lags,
    minShare: lags > 1 ? Math.min(1, shape.facts.bundleBytes / BRIDGE_SLOT_BYTES) : 0,
  };
  for (let g = 0; g < firing.layers.length; g++) {
    const l = Math.floor(g / perLayer);
    const p = firing.layers[g];
    const hot = Math.min(p.length, Math.max(0, Math.round(hotPerGroup[g] ?? 0)));
    let fires = 0,
      pairs = 0;
    for (let k = hot; k < p.length; k++) {
      fires += p[k];
      for (let j = 1; j <= lags && k - j >= hot; j++) pairs += p[k] * p[k - j];
    }
    adj.fires[l] += fires;
    adj.pairs[l] += pairs;
    if (p.length > hot && fires < DENSE_FIRING * (p.length - hot)) adj.dense[l] = 0;
  }
  return adj;
}

/**
 * Runs per missed bundle of layer l when it misses `misses` bundles (expected): 0 for a dense
 * layer (one run per round), else (1 - q)^lags with q = s pairs / (lags fires), s = m / fires
 * (bridged: at least a read per slot's worth of bundles).
 */
export function runShareOf(adj: LayerAdjacency, l: number, misses: number): number {
  if (adj.dense[l] || misses <= 0) return adj.dense[l] ? 0 : 1;
  const fires = adj.fires[l];
  if (!(fires > 0)) return 1;
  const s = Math.min(1, misses / fires);
  const q = Math.min(1, Math.max(0, (s * adj.pairs[l]) / (adj.lags * fires)));
  return Math.max(adj.minShare, (1 - q) ** adj.lags);
}
