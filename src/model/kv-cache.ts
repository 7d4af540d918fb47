/**
 * The KV cache's element types and sizes, in one place: the layout (resident-bytes.ts), the
 * shard plan (shards.ts), the planner and the flags all take their bytes from here.
 *
 * f16 is llama.cpp's default: half the memory of f32 inside a budget and half the bytes attention
 * streams per token, at the cost of rounding each key and value to 11 significant bits (llama.cpp
 * rounds them the same way; greedy tokens on the shared models stay the same).
 */
import type { ModelConfig } from "./config.js";

export const KV_CACHE_TYPES = ["f16", "f32"] as const;
export type KvCacheType = (typeof KV_CACHE_TYPES)[number];

/** Keys and values may be stored as different types (llama.cpp's --cache-type-k / --cache-type-v). */
export interface KvCacheTypes {
  k: KvCacheType;
  v: KvCacheType;
}

export const DEFAULT_KV_CACHE: KvCacheTypes = { k: "f16", v: "f16" };

export function kvElementBytes(type: KvCacheType): number {
  return type === "f16" ? 2 : 4;
}

/** Bytes the keys (or values) of one layer take per position. */
export function kvRowBytes(cfg: ModelConfig, type: KvCacheType): number {
  return cfg.nHeadKV * cfg.headDim * kvElementBytes(type);
}

/**
 * Rows of the KV cache of each layer for a context of `ctx` positions and batches of up to
 * `batch` tokens: ctx, or for a sliding-window layer only its window and a batch (a ring: a batch
 * writes its rows before it attends, so its first token's window must survive the batch's writes).
 */
export function kvLayerRows(cfg: ModelConfig, ctx: number, batch: number): number[] {
  return cfg.windows.map((w) => (w > 0 ? Math.min(ctx, w + batch - 1) : ctx));
}

/**
 * Bytes of the keys (or values) of layers [from, to) (default every layer), for a context of
 * `ctx` and batches of `batch`.
 */
export function kvCacheBytes(
  cfg: ModelConfig,
  type: KvCacheType,
  ctx: number,
  batch: number,
  from = 0,
  to = cfg.nLayer,
): number {
  let rows = 0;
  for (const r of kvLayerRows(cfg, ctx, batch).slice(from, to)) rows += r;
  return rows * kvRowBytes(cfg, type);
}

/** A cache type given by name (a flag or an option), checked; `where` names it in the error. */
export function parseKvCacheType(value: unknown, where: string): KvCacheType {
  if (typeof value === "string" && (KV_CACHE_TYPES as readonly string[]).includes(value.toLowerCase()))
    return value.toLowerCase() as KvCacheType;
  throw new Error(`${where} must be ${KV_CACHE_TYPES.join(" or ")}, got ${JSON.stringify(value)}`);
}
