/**
 * Seconds of the dense parts of a decode token, per layer or per token: attention (its matvecs,
 * the pool's dispatches, the KV cache's reads), a mixture's router, the predictors, the output
 * matvec. The same in both sparsity modes.
 */
import { GGMLType } from "../format/ggml-types.js";
import { DEFAULT_KV_CACHE, kvElementBytes } from "../model/kv-cache.js";
import type { Hardware } from "./hardware.js";
import type { MatrixShape, ModelShape } from "./model-shape.js";

/** Pool dispatches of a layer's attention block besides its matvecs: norms (2), rope (2), attention, add (2), activation prepare. */
const ATTENTION_OPS = 8;

/**
 * Attention's reads of the KV cache at position `pos`: every query head streams its group's keys
 * and values (the runtime's default cache types: f16).
 */
export function kvReadSeconds(shape: ModelShape, pos: number, hw: Hardware): number {
  const bytes = kvElementBytes(DEFAULT_KV_CACHE.k) + kvElementBytes(DEFAULT_KV_CACHE.v);
  return (pos * shape.nHead * shape.headDim * bytes) / hw.memoryBandwidth;
}

/** Seconds of one decode matvec of m's shape, the pool's dispatch not included. */
function matvecComputeSeconds(m: MatrixShape, hw: Hardware): number {
  return (m.rows * m.cols) / hw.matvecRate(m.type);
}

/** A decode matvec dispatched to the pool on its own. */
export function matvecSeconds(m: MatrixShape, hw: Hardware): number {
  return matvecComputeSeconds(m, hw) + hw.dispatch;
}

/**
 * Seconds of a layer's attention matrices at decode: q, k and v go to the pool as one group (one
 * dispatch: llama.ts), the output projection as another.
 */
export function attentionMatvecSeconds(shape: ModelShape, hw: Hardware): number {
  return shape.layerMatrices.reduce((a, m) => a + matvecComputeSeconds(m, hw), 0) + 2 * hw.dispatch;
}

/** Seconds of the attention block of one layer at KV position `pos`: matvecs, the other ops' dispatches, the KV cache's reads. */
export function attentionSeconds(shape: ModelShape, hw: Hardware, pos: number): number {
  return attentionMatvecSeconds(shape, hw) + ATTENTION_OPS * hw.dispatch + kvReadSeconds(shape, pos, hw);
}

/** Seconds of a layer's router (a mixture: nEmbd x experts logits in F32, and the top-k); 0 for a dense FFN. */
export function routerSeconds(shape: ModelShape, hw: Hardware): number {
  if (shape.experts === 0) return 0;
  return matvecSeconds({ type: GGMLType.F32, rows: shape.experts, cols: shape.nEmbd }, hw);
}

/** Seconds of a layer's predictors in predictor mode: one per routed expert, and the router that picks them. */
export function predictorsSeconds(shape: ModelShape, hw: Hardware, routedExperts: number): number {
  return routerSeconds(shape, hw) + routedExperts * hw.predictorSeconds;
}

/** Seconds of the output matvec and the two dispatches before it (the final norm, the input prepared for the matrix kernel). */
export function outputSeconds(shape: ModelShape, hw: Hardware): number {
  return matvecSeconds(shape.output, hw) + 2 * hw.dispatch;
}
