/**
 * How a model's resident bytes split among wasm32 memories (shards). One memory addresses 4 GiB;
 * a model past that (an 8B model at Q4_K is 4.9 GB) keeps whole layers in several memories, each
 * with its own instance of the kernel module (ThreadPool: fn(name, shard)) and its own activation
 * buffers, and the layer loop carries the residual stream's rows (a few KB per token) across when
 * the shard changes (forward.ts). Memory64 was measured and not chosen: docs/architecture.md,
 * "Memory".
 *
 * Each shard holds, in load order: the kernels' static region, its layers' weights, the output
 * norm and matrix if it is the last, then the activation buffers and its layers' KV cache. The
 * split is greedy in layer order, so one memory is the common case and nothing below 4 GiB
 * changes.
 */
import { ARENA_MAX_BYTES, ARENA_START } from "../runtime/arena.js";
import type { ModelConfig } from "./config.js";
import { kvCacheBytes, type KvCacheTypes } from "./kv-cache.js";
import type { LayerRange, ResidentBytes } from "./resident-bytes.js";

/** The environment variable that sets the most bytes one shard's memory may hold (tests force several shards with it). */
export const SHARD_BYTES_ENV = "POWERINFER_SHARD_BYTES";

export interface ShardPlan {
  /** the shard of each layer */
  layerShard: number[];
  /** each shard's layers (the last may hold none: then only the output) */
  layers: LayerRange[];
  /** the shard of the output norm and matrix: the last */
  headShard: number;
  /** bytes each shard's memory holds once loaded, its static region (and an address floor) included */
  bytes: number[];
}

/** The most bytes one shard may hold: `given` (LoadOptions.shardBytes), else $POWERINFER_SHARD_BYTES, else all wasm32 addresses. */
export function shardCapacity(given?: number): number {
  const env = typeof process !== "undefined" ? process.env?.[SHARD_BYTES_ENV] : undefined;
  const value = given ?? (env !== undefined && env !== "" ? Number(env) : ARENA_MAX_BYTES);
  const where = given !== undefined ? "shardBytes" : SHARD_BYTES_ENV;
  if (!(Number.isInteger(value) && value > ARENA_START && value <= ARENA_MAX_BYTES))
    throw new RangeError(
      `${where} must be a whole number of bytes above ${ARENA_START} and at most ${ARENA_MAX_BYTES} (4 GiB), got ${given ?? env}`,
    );
  return value;
}

const align64 = (n: number) => Math.ceil(n / 64) * 64;

/**
 * The bytes a memory holding layers [from, to) (and the output, `head`) takes once loaded: the
 * static region, the floor, the activation buffers, the layers' weights and KV cache, a store's
 * offloaded FFN's share.
 */
export function shardBytesOf(
  cfg: ModelConfig,
  r: ResidentBytes,
  ctx: number,
  batch: number,
  kv: KvCacheTypes,
  floor: number,
  ffn?: ShardFFN,
): (from: number, to: number, head: boolean) => number {
  // every shard: the static region, the floor, the activation buffers (all but the KV cache)
  const base = ARENA_START + align64(floor) + r.buffers;
  const kvOf = (from: number, to: number) =>
    align64(kvCacheBytes(cfg, kv.k, ctx, batch, from, to)) + align64(kvCacheBytes(cfg, kv.v, ctx, batch, from, to));
  const weightsOf = (from: number, to: number) => r.layerWeights.slice(from, to).reduce((a, b) => a + b, 0);
  const ffnOf = (from: number, to: number) =>
    !ffn || to === from ? 0 : ffn.shardBytes + ffn.layerBytes.slice(from, to).reduce((a, b) => a + b, 0);
  return (from, to, head) =>
    base + weightsOf(from, to) + kvOf(from, to) + ffnOf(from, to) + (head ? r.headWeights - (ffn?.headMoved ?? 0) : 0);
}

/**
 * A neuron store's offloaded FFN in a split model (store-shards.ts): what each layer's share puts
 * in its shard's memory, and what every shard holding layers adds once.
 */
export interface ShardFFN {
  /** per layer: its groups' predictors, resident gate rows, hot slots and share of the cold slots */
  layerBytes: number[];
  /** per shard holding layers: the FFN's buffers, staging area, predictor activations and page padding */
  shardBytes: number;
  /** bytes of r.headWeights that go with the layers instead (the predictors, counted in layerBytes and shardBytes) */
  headMoved: number;
}

/**
 * Split the model's layers among memories of at most `capacity` bytes each, greedily in layer
 * order; `floor` bytes are left unused at the bottom of every memory (the addressFloor test hook).
 * `ffn`: a neuron store's offloaded FFN, split with its layers. A layer that cannot fit in one
 * memory even alone is an error naming its size.
 */
export function planShards(
  cfg: ModelConfig,
  r: ResidentBytes,
  ctx: number,
  batch: number,
  kv: KvCacheTypes,
  capacity: number,
  floor = 0,
  ffn?: ShardFFN,
): ShardPlan {
  const bytesOf = shardBytesOf(cfg, r, ctx, batch, kv, floor, ffn);
  const layers: LayerRange[] = [];
  let from = 0;
  for (let l = 0; l < cfg.nLayer; l++) {
    if (bytesOf(from, l + 1, false) <= capacity) continue;
    if (l === from)
      throw new Error(
        ffn
          ? `layer ${l} needs ${bytesOf(l, l + 1, false)} bytes of wasm memory with the activation buffers and its share of the neuron store's FFN (${ffn.layerBytes[l]} bytes of cache, gate rows and predictors, ${ffn.shardBytes} of the FFN's buffers), more than one memory holds (${capacity}): a smaller memory budget or cacheBytes, a shorter context or smaller batch may fit`
          : `layer ${l} needs ${bytesOf(l, l + 1, false)} bytes of wasm memory with the activation buffers, more than one memory holds (${capacity}): a shorter context or smaller batch may fit`,
      );
    layers.push({ from, to: l });
    from = l;
  }
  if (bytesOf(from, cfg.nLayer, true) <= capacity) layers.push({ from, to: cfg.nLayer });
  else {
    layers.push({ from, to: cfg.nLayer });
    if (bytesOf(cfg.nLayer, cfg.nLayer, true) > capacity)
      throw new Error(
        `the output matrix needs ${bytesOf(cfg.nLayer, cfg.nLayer, true)} bytes of wasm memory with the activation buffers, more than one memory holds (${capacity})`,
      );
    layers.push({ from: cfg.nLayer, to: cfg.nLayer });
  }
  const layerShard: number[] = [];
  layers.forEach((range, s) => {
    for (let l = range.from; l < range.to; l++) layerShard.push(s);
  });
  const last = layers.length - 1;
  return {
    layerShard,
    layers,
    headShard: last,
    bytes: layers.map((range, s) => bytesOf(range.from, range.to, s === last)),
  };
}
