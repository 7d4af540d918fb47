/**
 * The KV cache's element types and sizes, in one place: the layout (resident-bytes.ts), the
 * context cap (llama.ts), the planner and the flags all take their bytes from here.
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

/** Bytes of keys and values of all layers per position of context. */
export function kvBytesPerPosition(cfg: ModelConfig, types: KvCacheTypes): number {
  return cfg.nLayer * (kvRowBytes(cfg, types.k) + kvRowBytes(cfg, types.v));
}

/** A cache type given by name (a flag or an option), checked; `where` names it in the error. */
export function parseKvCacheType(value: unknown, where: string): KvCacheType {
  if (typeof value === "string" && (KV_CACHE_TYPES as readonly string[]).includes(value.toLowerCase()))
    return value.toLowerCase() as KvCacheType;
  throw new Error(`${where} must be ${KV_CACHE_TYPES.join(" or ")}, got ${JSON.stringify(value)}`);
}
