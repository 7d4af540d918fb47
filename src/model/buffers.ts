/**
 * The forward pass's buffers in wasm memory, laid out once at load (resident-bytes.ts sizes them,
 * in this order): the residual stream and its normed copy, attention's rows, the FFN's gate and
 * up rows, the logits, positions, the RoPE table, the KV cache, a mixture's routing rows, and one
 * quantized copy of the input per activation format the matrices want. A model in several
 * memories has a set in each, each with the KV cache of its own layers.
 */
import type { Arena } from "../runtime/arena.js";
import type { ActivationFormat } from "../runtime/weight-kernels.js";
import type { ModelConfig } from "./config.js";
import type { KvCacheTypes } from "./kv-cache.js";
import { bufferBytes, type BufferBytes, type LayerRange } from "./resident-bytes.js";

/** Byte addresses of the forward pass's buffers. */
export type Buffers = Record<keyof BufferBytes, number> & { act: Record<ActivationFormat, number> };

export function allocBuffers(
  arena: Arena,
  cfg: ModelConfig,
  ctx: number,
  batch: number,
  quantized: ReadonlyMap<ActivationFormat, number>,
  kv: KvCacheTypes,
  /** the layers whose KV cache this memory holds (default all) */
  layers?: LayerRange,
): Buffers {
  const act = { f32: 0, q8_0: 0, q8_1: 0, q8_K: 0 } as Record<ActivationFormat, number>;
  for (const [fmt, bytes] of quantized) act[fmt] = arena.alloc(bytes, 64);
  const sizes = bufferBytes(cfg, ctx, batch, kv, layers);
  const at = {} as Record<keyof typeof sizes, number>;
  for (const [name, n] of Object.entries(sizes) as [keyof typeof sizes, number][]) at[name] = arena.alloc(n, 64);
  return { ...at, act };
}
