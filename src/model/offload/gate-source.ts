/**
 * How an offloaded FFN step learns which neurons fire. One implementation per way:
 * - resident-gate-rows.ts: every gate row in memory, one dense matvec (gate mode);
 * - streamed-gate-rows.ts: gate rows not in memory, streamed from the store's contiguous copy in
 *   large sequential reads (gate mode; prompt batches in every mode);
 * - gate-page-reads.ts: stores without that copy: each uncached bundle's gate page read (gate mode);
 * - predictor-picks.ts: PowerInfer's predictor (predictor mode).
 */
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { SparseFFN } from "../../runtime/sparse-kernels.js";
import type { FFNStep } from "./ffn-step.js";
import type { NeuronCompute } from "./neuron-compute.js";
import type { NeuronLists } from "./neuron-lists.js";

export interface GateSource {
  /**
   * File the neurons of the step's group that fire for this token into `lists`, counted in the
   * step (x: the FFN input, already prepared in the sparse kernels; residual: the row before the
   * FFN norm). A source that reads from flash computes the hits it has filed while its reads are
   * in flight, raising the step's filedBelow as it goes.
   */
  pick(step: FFNStep, lists: NeuronLists, x: number, residual: number, compute: NeuronCompute): Promise<void> | void;
  /** After a step: start what the next layer's pick can start now (a read, counted in the step). */
  afterStep?(step: FFNStep): void;
  /** Wait out anything still in flight (before a batch, or closing). */
  settle?(): Promise<void>;
}

/** Prompt batches: the gates of every token, so that each needed bundle is read once for the batch. */
export interface BatchGateSource {
  /** gates of the step's group for n tokens (x: n rows of nEmbd f32) into `gates` (n x nFF f32, stored order) */
  batchGates(step: FFNStep, x: number, n: number, gates: number): Promise<void> | void;
}

/**
 * Gates of the bundles of the step's group that are in memory, computed from their own gate rows
 * and filed. Returns their stored positions' count; `cachedPos` gets the positions, in order.
 */
export function fileCachedGates(
  step: FFNStep,
  lists: NeuronLists,
  cache: NeuronCache,
  sparse: SparseFFN,
  cachedPos: Int32Array,
): number {
  const n = listCached(step.layer, lists, cache, cachedPos);
  const t = performance.now();
  if (n > 0) sparse.gate(lists.missList, n, lists.gateOut);
  step.computeMs += performance.now() - t;
  const g0 = lists.gateOut >>> 2;
  for (let i = 0; i < n; i++) lists.file(step, cachedPos[i], lists.f32[g0 + i]);
  return n;
}

/** The bundles of layer l in memory: their addresses into lists.missList (as scratch), stored positions into pos. Returns the count. */
export function listCached(l: number, lists: NeuronLists, cache: NeuronCache, pos: Int32Array): number {
  let n = 0;
  const a0 = lists.missList >>> 2;
  for (let k = 0; k < lists.nFF; k++) {
    const slot = cache.peek(l, k);
    if (slot < 0) continue;
    lists.i32[a0 + n] = cache.address(slot);
    pos[n++] = k;
  }
  return n;
}
