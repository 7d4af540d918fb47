/**
 * A neuron store whose layout (fixed part, neuron cache and the offloaded FFN's buffers) needs more
 * than one wasm32 memory: its layers split among several (shards.ts), each memory holding its
 * layers' fixed weights, KV cache and activation buffers and an offloaded FFN over just its
 * layers' store groups: its own neuron cache (its groups' hot slots, its share of the cold ones),
 * its own resident gate rows or staging area, predictors, buffers and kernels.
 *
 * The layout is the one offloadLayout makes for the same budget, with what each extra memory adds
 * counted in its fixed part (activation buffers, the FFN's buffers, a staging area, page padding;
 * the process's base is measured with every memory made), so the budget promise holds as in one
 * memory. Each group keeps the hot slots that layout gives it; the cold slots are shared out in
 * proportion to the groups (one each first, so that every memory can read its misses). A layer's
 * bytes are then known before the split, and the split is shards.ts's greedy one.
 */
import type { ModelConfig } from "./config.js";
import type { KvCacheTypes } from "./kv-cache.js";
import type { ResidentBytes } from "./resident-bytes.js";
import { predictorBytes } from "./offload/predictor.js";
import { planShards, shardBytesOf, type ShardFFN, type ShardPlan } from "./shards.js";
import {
  offloadLayout,
  stagingBytes,
  type FixedResident,
  type LayoutKnobs,
  type LayoutShard,
  type OffloadLayout,
  type StoreFacts,
} from "./offload/layout.js";
import { NeuronCache } from "../io/neuron-cache.js";

/** Slack per memory for the offloaded FFN's allocations aligned to a 4 KiB page (cache, cold region, staging). */
const PAGE_SLACK = 4 * 4096;

const align64 = (n: number) => Math.ceil(n / 64) * 64;

/** What a store's split is computed from. */
export interface StoreShardInput {
  cfg: ModelConfig;
  facts: StoreFacts;
  resident: ResidentBytes;
  contextSize: number;
  batchSize: number;
  kvCache: KvCacheTypes;
  /** the most bytes one memory holds, and the unused bytes at the bottom of each (addressFloor) */
  capacity: number;
  floor: number;
  /** the fixed part as one memory counts it (the base measured with the memories made) */
  fixed: FixedResident;
  budget: number | undefined;
  knobs: LayoutKnobs;
}

export interface StoreShards {
  /** layers (and the output) per memory */
  plan: ShardPlan;
  /** the whole layout, its `shards` each memory's share */
  layout: OffloadLayout;
  /** per memory holding layers, its offloaded FFN's own layout (indexed like plan.layers) */
  parts: (OffloadLayout | null)[];
}

/**
 * Whether one memory of `capacity` bytes holds the fixed part (`fixedBytes`, as planShards counts
 * it) and the layout's offloaded FFN (each of its regions may be padded to a 4 KiB page).
 */
export function storeFitsOneMemory(layout: OffloadLayout, fixedBytes: number, capacity: number): boolean {
  return fixedBytes + storeFFNBytes(layout) <= capacity;
}

/** The wasm bytes a one-memory layout's offloaded FFN takes: its buffers, gate rows or staging, cache. */
export function storeFFNBytes(layout: OffloadLayout): number {
  return layout.ffnBuffers + layout.gateBytes + layout.cacheBytes + PAGE_SLACK;
}

/** A budget too small: the layout that did not fit, and how many memories holding layers it was made for. */
export interface UnfitStoreLayout {
  fits: false;
  layout: OffloadLayout;
  shards: number;
}

/** What storeLayout makes: the layout (and the split, where one memory does not hold it), or why not. */
export type StoreLayout = { fits: true; layout: OffloadLayout; split?: StoreShards } | UnfitStoreLayout;

/**
 * The layout `load` makes for a store with `memories` wasm memories made (the base in `s.fixed`
 * measured with them): the budget's layout in one memory where the fixed part (`onePlan`, the
 * split of everything but the FFN) and the offloaded FFN fit it, else split among the fewest
 * memories, at least `minShards` of them holding layers (planStoreShards). The runtime and the
 * planner both call it, so that the planner's layout is the one a run makes. A budget too small
 * gives the layout that did not fit (the runtime words it as a BudgetError, the planner skips
 * it); a layer whose share alone is more than a memory holds throws.
 */
export function storeLayout(s: StoreShardInput, onePlan: ShardPlan, memories: number, minShards: number): StoreLayout {
  const layout = offloadLayout(s.facts, s.fixed, s.budget, s.knobs);
  if (!layout.fits) return { fits: false, layout, shards: 1 };
  if (memories === 1 && storeFitsOneMemory(layout, onePlan.bytes[0], s.capacity)) return { fits: true, layout };
  const split = planStoreShards(s, minShards, memories);
  return "fits" in split ? split : { fits: true, layout: split.layout, split };
}

/**
 * The split with the fewest memories, at least `minShards` of them holding layers and at least
 * `minMemories` in all (the memories already made), or the layout that did not fit once each
 * memory's own buffers are counted. Throws where a layer's share alone is more than a memory
 * holds (both numbers).
 */
export function planStoreShards(
  s: StoreShardInput,
  minShards: number,
  minMemories: number,
): StoreShards | UnfitStoreLayout {
  const { cfg } = s;
  let last: unknown = null;
  for (let n = Math.max(2, minShards); n <= cfg.nLayer; n++) {
    // the output may need a memory of its own (then it holds no layers)
    for (let memories = Math.max(n, minMemories); memories <= n + 1; memories++) {
      const layout = shardedLayout(s, n, memories);
      if (!layout.fits) return { fits: false, layout, shards: n };
      const ffn = shardFFN(s, layout, n);
      let plan: ShardPlan;
      try {
        plan = planShards(cfg, s.resident, s.contextSize, s.batchSize, s.kvCache, s.capacity, s.floor, ffn.ffn);
      } catch (e) {
        last = e;
        break;
      }
      const ranges = plan.layers.filter((r) => r.to > r.from);
      if (ranges.length > n) break;
      if (plan.layers.length > memories) continue;
      const split = splitTo(plan, n, s, ffn.ffn);
      if (split.layers.length < minMemories) continue;
      return { plan: split, ...shareOut(s, layout, split, ffn.cold) };
    }
  }
  throw last ?? new Error(`${cfg.nLayer} layers cannot be split among memories of ${s.capacity} bytes`);
}

/** The budget's layout for `shards` memories holding layers, `memories` in all. */
function shardedLayout(s: StoreShardInput, shards: number, memories: number): OffloadLayout {
  const predictorHidden = hiddenBytes(s.resident);
  return offloadLayout(
    s.facts,
    {
      ...s.fixed,
      // each memory's activation buffers, each shard's predictor activations
      buffers: s.fixed.buffers * memories,
      weights: s.fixed.weights + (shards - 1) * predictorHidden,
    },
    s.budget,
    { ...s.knobs, shards },
  );
}

/** The predictors' hidden activations (one per Predictor). */
function hiddenBytes(r: ResidentBytes): number {
  return r.predictors ? align64(Math.max(...r.predictors.map((p) => p.hidden)) * 4) : 0;
}

/**
 * Each layer's bytes of the offloaded FFN in its memory (its groups' predictors, resident gate
 * rows, hot slots and cold share), and what a memory holding layers adds once. Cold slots: one per
 * shard (when there are enough), the rest by cumulative floors over the groups, so that any run of
 * layers' share is exact and additive.
 */
function shardFFN(
  s: StoreShardInput,
  layout: OffloadLayout,
  shards: number,
): { ffn: ShardFFN; cold: { reserve: number; before: (g: number) => number } } {
  const { facts, resident: r } = s;
  const E = Math.max(1, facts.experts);
  const G = facts.groups;
  const reserve = layout.coldSlots >= shards ? 1 : 0;
  const rest = layout.coldSlots - reserve * shards;
  const before = (g: number) => Math.floor((rest * g) / G);
  const predictor = (g: number) => (r.predictors ? predictorBytes(r.predictors[g]) : 0);
  const layerBytes: number[] = [];
  let predictors = 0;
  for (let l = 0; l < s.cfg.nLayer; l++) {
    let bytes = 0;
    for (let g = l * E; g < (l + 1) * E; g++) {
      predictors += predictor(g);
      bytes +=
        predictor(g) +
        (layout.residentGates ? align64(facts.gateRowBytes) : 0) +
        layout.hotPerGroup[g] * layout.hotSlotBytes +
        (before(g + 1) - before(g)) * facts.bundleBytes;
    }
    layerBytes.push(bytes);
  }
  const hidden = hiddenBytes(r);
  return {
    ffn: {
      layerBytes,
      shardBytes:
        layout.ffnBuffers / shards +
        (layout.residentGates ? 0 : stagingBytes(facts, s.knobs.sparsity)) +
        hidden +
        reserve * facts.bundleBytes +
        PAGE_SLACK,
      headMoved: predictors + hidden,
    },
    cold: { reserve, before },
  };
}

/**
 * The greedy plan with exactly n memories holding layers: where it needs fewer, the memory with
 * the most layers is halved until there are n (a part of a memory that fit fits).
 */
function splitTo(plan: ShardPlan, n: number, s: StoreShardInput, ffn: ShardFFN): ShardPlan {
  const { cfg } = s;
  const ranges = plan.layers.filter((r) => r.to > r.from);
  const headOnly = plan.layers.length > ranges.length;
  while (ranges.length < n) {
    let widest = 0;
    for (let i = 1; i < ranges.length; i++)
      if (ranges[i].to - ranges[i].from > ranges[widest].to - ranges[widest].from) widest = i;
    const r = ranges[widest];
    const mid = r.from + Math.ceil((r.to - r.from) / 2);
    ranges.splice(widest, 1, { from: r.from, to: mid }, { from: mid, to: r.to });
  }
  const layers = headOnly ? [...ranges, { from: cfg.nLayer, to: cfg.nLayer }] : ranges;
  const layerShard: number[] = [];
  layers.forEach((range, i) => {
    for (let l = range.from; l < range.to; l++) layerShard.push(i);
  });
  const bytesOf = shardBytesOf(cfg, s.resident, s.contextSize, s.batchSize, s.kvCache, s.floor, ffn);
  const bytes = layers.map((range, i) => bytesOf(range.from, range.to, i === layers.length - 1));
  return { layerShard, layers, headShard: layers.length - 1, bytes };
}

/**
 * Each memory's share of the layout: its groups' hot slots, its cold slots, its gate rows; the
 * whole layout's cache and slot counts become their sums.
 */
function shareOut(
  s: StoreShardInput,
  layout: OffloadLayout,
  plan: ShardPlan,
  cold: { reserve: number; before: (g: number) => number },
): { layout: OffloadLayout; parts: (OffloadLayout | null)[] } {
  const { facts } = s;
  const E = Math.max(1, facts.experts);
  const ffnBuffers = layout.ffnBuffers / plan.layers.filter((r) => r.to > r.from).length;
  const shards: LayoutShard[] = [];
  const parts = plan.layers.map((range) => {
    if (range.to === range.from) return null;
    const groups = { from: range.from * E, to: range.to * E };
    const hotPerGroup = layout.hotPerGroup.slice(groups.from, groups.to);
    const hotSlots = hotPerGroup.reduce((a, b) => a + b, 0);
    const coldSlots = cold.reserve + cold.before(groups.to) - cold.before(groups.from);
    const cacheBytes = NeuronCache.bytesFor(hotSlots, coldSlots, facts.bundleBytes, layout.hotSlotBytes);
    const gateBytes = layout.residentGates
      ? (groups.to - groups.from) * facts.gateRowBytes
      : stagingBytes(facts, s.knobs.sparsity);
    shards.push({ groups, cacheBytes, coldSlots, hotSlots, gateBytes });
    return {
      ...layout,
      ffnBuffers,
      gateBytes,
      cacheBytes,
      slots: hotSlots + coldSlots,
      hotPerGroup,
      coldSlots,
    };
  });
  const sum = (f: (x: LayoutShard) => number) => shards.reduce((a, x) => a + f(x), 0);
  return {
    layout: {
      ...layout,
      cacheBytes: sum((x) => x.cacheBytes),
      coldSlots: sum((x) => x.coldSlots),
      slots: sum((x) => x.hotSlots + x.coldSlots),
      gateBytes: sum((x) => x.gateBytes),
      shards,
    },
    parts,
  };
}
