/**
 * One forward pass's state, handed from the layer loop to each part as an argument: the batch
 * (how many tokens, from which position), the per-layer activation thresholds and hooks in force
 * for this pass, and what the pass did, filled by the parts as it runs. The model keeps one and
 * fills it at the start of each pass, so a step allocates nothing; no part keeps it past the
 * pass. At its end the model's measuring hook (LlamaModel.onPass) hands it to whoever measures.
 */
import type { Tracer } from "../runtime/tracer.js";
import type { OffloadCounts } from "./offload/stats.js";

/**
 * What the dense FFN of layer `layer` sees for `n` tokens (row-major views into wasm memory, valid
 * only during the call): the residual stream before the FFN norm (the predictor's input), and the
 * gate and up projections before the activation. For offline tools (profiling, predictor training).
 */
export interface FFNObservation {
  layer: number;
  /** rows of gate and up */
  n: number;
  /** the residual stream of every token of the forward pass (n rows, or for an expert all the pass's tokens) */
  residual: Float32Array;
  gate: Float32Array;
  up: Float32Array;
  /** a mixture of experts: the expert observed, and which of the pass's tokens each gate/up row is */
  expert?: number;
  tokens?: Int32Array;
}

export interface ForwardStep {
  /** tokens in the batch (rows of the activation buffers) */
  n: number;
  /** position of the batch's first token */
  pos0: number;
  /** per-layer activation thresholds (|act(gate)| at or below counts as zero), null: none */
  thresholds: Float32Array | null;
  /** called with each dense FFN's inputs (offline tools), null: none */
  observer: ((o: FFNObservation) => void) | null;
  /** records spans of the pass, null: none */
  tracer: Tracer | null;
  /**
   * What the pass did, filled as it runs. A mixture's routing: how many (token, expert) pairs it
   * routed, and its closest call, the smallest gap between a token's last chosen expert's
   * probability and the best one left out (Infinity: nothing routed). A gap near 0 means another
   * engine's last-bit differences could route that token elsewhere.
   */
  routed: number;
  routeMargin: number;
  /**
   * A model whose FFN is offloaded to a neuron store: what its FFN did in the pass (steps and
   * neurons computed, hits, misses, reads ahead, bytes read, compute time and waits; per store
   * group too), counted from 0 by the FFN parts; null: the FFN is in memory.
   */
  offload: OffloadCounts | null;
}

export function newStep(): ForwardStep {
  return {
    n: 0,
    pos0: 0,
    thresholds: null,
    observer: null,
    tracer: null,
    routed: 0,
    routeMargin: Infinity,
    offload: null,
  };
}

/** Layer l's activation threshold in this step (0: none). */
export function cutOf(step: ForwardStep, l: number): number {
  return step.thresholds ? step.thresholds[l] : 0;
}
