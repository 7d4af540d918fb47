/**
 * The memory layout of a neuron store run under a budget: how the budget splits into what must
 * stay resident (the runtime, the fixed weights, the KV cache, the offloaded FFN's buffers, the
 * gate rows or their staging) and the neuron cache (hot slots packed per layer, cold slots).
 *
 * One function, `offloadLayout`, computes it. `LlamaModel.load` calls it before loading anything
 * (to refuse a budget that cannot run) and builds the runtime from what it returns;
 * `OffloadedFFN` allocates exactly what it lists; the planner calls it for every candidate;
 * `powerinfer demo` picks its default budget with it. Nothing else computes any part of it.
 */
import type { NeuronStore } from "../../format/store/index.js";
import type { GGMLType } from "../../format/ggml-types.js";
import { BRIDGE_REGION_BYTES, BRIDGE_SLOT_BYTES } from "../../io/read-bridge.js";
import { defaultHotFraction, hotPerLayer, NeuronCache } from "../../io/neuron-cache.js";
import { partialBytes, segmentBytes, sparseActivationBytes } from "../../runtime/sparse-kernels.js";
import { weightKernel } from "../../runtime/weight-kernels.js";
import type { ModelConfig } from "../config.js";

/**
 * Which neurons run: "gate" computes every gate and then up/down where the activation is not
 * zero (exact for ReLU-family models, and for SiLU ones with activation thresholds); "predictor"
 * computes the neurons PowerInfer's predictor (fc1/fc2) picks; "dense" computes every neuron,
 * each bundle whole, with nothing to pick (the default where the activation has no exact zeros
 * and no thresholds: every neuron fires anyway; and the ablation's naive baseline).
 */
export type SparsityMode = "dense" | "gate" | "predictor";

/** Share of the budget the layout hands out: the rest is for what cannot be counted (JS heap growth, stacks). */
export const BUDGET_ROOM = 0.97;
/** Gate pages read per round, and gate rows per streamed prompt batch round: the staging area's size in neurons. */
export const STAGE_NEURONS = 2048;
/**
 * What the process gains after the layout is made that the layout does not list: the JS buffers
 * loading reads through (the weight loader's and the hot region's 2 MiB chunks, kept for reuse),
 * code the JIT compiles, the reader's rings, the generator's heap (RUNTIME_GROWTH_BYTES), and the
 * tokenizer, which grows with the vocabulary (TOKENIZER_BYTES_PER_TOKEN). Measured: 11-13 MiB
 * above the weights' own memory once a 1B model has loaded; a tokenizer keeps 90-170 bytes a
 * vocabulary entry alive once it has encoded (Gemma 3's 262K SentencePiece entries 90, Qwen3's
 * 152K BPE entries with their merges 124, gpt-oss's 201K 135, Llama 3's 128K with 280K merges
 * 170), and the trie a JSON-constrained request builds 31-33 more (token-trie.ts);
 * test/tokenizer-memory.test.ts holds their sum to this figure. Plus what building them leaves to
 * collect. On top of that V8's young generation: the bursts of loading and of the first prompt
 * grow its semi-spaces (up to 16 MiB each) and they stay grown; on the demo's store the peak was
 * 6-9 MiB above a run with --max-semi-space-size=2, which a library's host process cannot be
 * made to pass. The base itself is measured after a full collection (collectGarbage): the
 * store's manifest parse leaves 30-40 MiB of garbage that V8 may otherwise keep until decode.
 */
export const RUNTIME_GROWTH_BYTES = 24 << 20;
export const TOKENIZER_BYTES_PER_TOKEN = 224;
/** The smallest neuron cache that runs, in bundles (a layer's misses are served in rounds of what is free). */
const MIN_CACHE_BUNDLES = 4;
/** Slack for an allocation aligned to a 4 KiB page (the staging area, the cache). */
const PAGE_PAD = 4096;

/** What the layout needs to know about a store and its model (storeFacts reads it). */
export interface StoreFacts {
  /** groups of bundles: the layers, or for a mixture of experts layers x experts (each expert's FFN its own group) */
  groups: number;
  /** experts per layer (0: a dense FFN), and how many each token runs (1 for a dense FFN) */
  experts: number;
  expertsUsed: number;
  nFF: number;
  nEmbd: number;
  ffnType: GGMLType;
  /** one neuron bundle on flash (gate row | up row | down column, 4 KiB padded) */
  bundleBytes: number;
  /** one gate or up row of a bundle */
  rowBytes: number;
  /** a bundle's parts (and biases) without its padding: what a packed hot slot holds */
  dataBytes: number;
  /** one layer's gate rows packed for the dense kernel (when they stay resident) */
  gateRowBytes: number;
  /** the pages holding one bundle's gate row: what a gate-page read reads */
  gateReadBytes: number;
  /** every layer has a contiguous copy of its gate rows (gates can stream in large reads) */
  gateCopy: boolean;
  /** the vocabulary's size (the tokenizer's memory grows with it) */
  nVocab: number;
  /** bytes of the reader's once-per-chunk checksum marks (one byte per 4 KiB chunk) */
  checksumMarkBytes: number;
  /** each layer's firing rates in stored order, from the profile the store was ordered by (null: none) */
  firing: Float32Array[] | null;
}

/** What the loaded model keeps in wasm memory besides the offloaded FFN (residentBytes computes it), and the runtime itself. */
export interface FixedResident {
  /** the process before any weight loads: node, the engine's modules, the thread pool, the store's manifest (measured) */
  base: number;
  /** packed weights kept in memory (attention, norms, output, predictors) */
  weights: number;
  /** activation buffers for a batch */
  buffers: number;
  /** the KV cache */
  kv: number;
  /** what the process gains once running beyond these (default runtimeGrowthBytes; 0 when the budget counts wasm memory only) */
  growth?: number;
}

/** The knobs of the layout. */
export interface LayoutKnobs {
  sparsity: SparsityMode;
  /** compute threads (the sparse kernels keep a partial sum per thread) */
  threads: number;
  /** keep every gate row in memory; undefined: when they fit beside a cache of a layer's bundles (gate mode; predictor mode never) */
  residentGates?: boolean;
  /** share of the cache pinned to each layer's hottest neurons; undefined: from the store's profile (defaultHotFraction) */
  hotFraction?: number;
  /** a neuron cache of at most this many bytes instead of what the budget leaves */
  cacheBytes?: number;
  /** checksums checked on a chunk's first read only ("once", the default): the reader keeps a mark per chunk */
  verifyOnce?: boolean;
  /**
   * wasm memories the store's layers are split among (default 1): each runs an offloaded FFN of
   * its own, with its own buffers, staging area and page-aligned cache (src/model/store-shards.ts)
   */
  shards?: number;
}

/** One memory's part of a store's offloaded FFN, where the layers are split among several. */
export interface LayoutShard {
  /** the store groups (layers, or layers x experts) whose FFN this memory runs: [from, to) */
  groups: { from: number; to: number };
  /** bytes of its neuron cache, its cold slots, and its hot slots (its groups' hotPerGroup summed) */
  cacheBytes: number;
  coldSlots: number;
  hotSlots: number;
  /** its resident gate rows or staging area */
  gateBytes: number;
}

export interface OffloadLayout {
  /** the memory budget (undefined: none, the cache holds every bundle unless cacheBytes caps it) */
  budget: number | undefined;
  /** what the layout hands out: BUDGET_ROOM of the budget */
  room: number;
  fixedResident: FixedResident;
  /** what the process gains once running that the other parts do not list (runtimeGrowthBytes) */
  runtimeGrowth: number;
  /**
   * the offloaded FFN's own buffers: neuron lists, the sparse kernels' activation and partial
   * sums, checksum marks, the flash reader's bridge region
   */
  ffnBuffers: number;
  /** of those, each memory's flash reader bridge region (bridgeRegionBytes; 0: none) */
  bridgeBytes: number;
  /** gate rows in memory (else the staging area gate reads land in) */
  residentGates: boolean;
  /** bytes of the resident gate rows, or of the staging area */
  gateBytes: number;
  /** everything but the neuron cache */
  fixed: number;
  /** bytes of the neuron cache's slots as laid out */
  cacheBytes: number;
  slots: number;
  /** stored positions of each group (layer, or expert of a layer) pinned in the hot region, as if alike */
  hotPerLayer: number;
  /**
   * the same per group: all alike for a dense FFN; a mixture of experts with firing rates shares
   * the same slots out by rate (per token: an expert's firing times its routing), so popular
   * experts' hot neurons are pinned before rare experts' lukewarm ones
   */
  hotPerGroup: number[];
  /** bytes per hot slot: a bundle without its read padding when that pins more neurons */
  hotSlotBytes: number;
  coldSlots: number;
  /** the share of the cache asked to be pinned hot (the knob, or the profile's default) */
  hotFraction: number;
  /** whether the budget holds the fixed part and a minimal cache */
  fits: boolean;
  /** the smallest budget that runs with these knobs */
  minBudget: number;
  /**
   * a store split among several memories: each memory's share (cacheBytes, slots, coldSlots,
   * gateBytes and ffnBuffers above are their sums); absent in one memory
   */
  shards?: LayoutShard[];
}

/** What the process gains once running that the layout's other parts do not list (see RUNTIME_GROWTH_BYTES). */
export function runtimeGrowthBytes(facts: Pick<StoreFacts, "nVocab">): number {
  return RUNTIME_GROWTH_BYTES + TOKENIZER_BYTES_PER_TOKEN * facts.nVocab;
}

/** Bytes of the pages holding one bundle's gate row: what a first-phase gate read reads. */
export function gateReadBytesOf(ffn: { parts: { gate: number }; rowBytes: number }): number {
  return Math.ceil((ffn.parts.gate + ffn.rowBytes) / 4096) * 4096;
}

/**
 * How gate rows stream from a store's contiguous gate-row copy through the staging area, split in
 * two halves (one is read while the other's gates compute): rows per chunk (0: a chunk's page span
 * would not fit a half) and the bytes of a half. The planner models the same reads.
 */
export function gateStreamGeometry(
  nFF: number,
  gateReadBytes: number,
  rowBytes: number,
): { rows: number; halfBytes: number } {
  const stage = Math.min(nFF, STAGE_NEURONS);
  const halfBytes = Math.floor((stage * gateReadBytes) / 2 / 4096) * 4096;
  return { rows: Math.max(0, Math.min(stage, Math.floor((halfBytes - 2 * 4096) / rowBytes))), halfBytes };
}

/** Each layer's firing rates in stored order, from the profile the store was ordered by (null without one). */
export function storedFiring(store: NeuronStore): Float32Array[] | null {
  const out: Float32Array[] = [];
  for (let l = 0; l < store.ffn.layers.length; l++) {
    const L = store.layer(l);
    if (!L.frequency) return null;
    const f = new Float32Array(L.neurons);
    for (let k = 0; k < L.neurons; k++) f[k] = L.frequency[L.order[k]];
    out.push(f);
  }
  return out;
}

/** The facts of a store the layout depends on. */
export function storeFacts(store: NeuronStore, cfg: ModelConfig): StoreFacts {
  const ffn = store.ffn;
  if (ffn.nEmbd !== cfg.nEmbd)
    throw new Error(`${store.path}: FFN rows are ${ffn.nEmbd} wide, the model is ${cfg.nEmbd}`);
  return {
    groups: ffn.layers.length,
    experts: ffn.experts,
    expertsUsed: ffn.experts > 0 ? cfg.nExpertUsed : 1,
    nFF: cfg.nFF,
    nEmbd: cfg.nEmbd,
    ffnType: ffn.type,
    bundleBytes: ffn.bundleBytes,
    rowBytes: ffn.rowBytes,
    dataBytes: ffn.dataBytes,
    gateRowBytes: weightKernel(ffn.type).packedBytes(cfg.nFF, cfg.nEmbd),
    gateReadBytes: gateReadBytesOf(ffn),
    gateCopy: ffn.layers.every((L) => L.gateRows !== null),
    nVocab: cfg.nVocab,
    checksumMarkBytes: store.checksumTable("always").crcs.length,
    firing: storedFiring(store),
  };
}

const align64 = (n: number) => Math.ceil(n / 64) * 64;

/**
 * The offloaded FFN's own buffers, as OffloadedFFN allocates them (each 64-byte aligned): per
 * step, six lists of nFF entries (gate outputs, hit addresses and gates, miss addresses and gates,
 * read-ahead scores); the sparse kernels' prepared activation, per-thread partial sums and the
 * segments' partial sums; the reader's checksum marks. (The reader's bridge region is laid out
 * with the cache: bridgeRegionBytes.)
 */
export function ffnBufferBytes(facts: StoreFacts, threads: number, verifyOnce: boolean): number {
  return (
    6 * align64(facts.nFF * 4) +
    align64(sparseActivationBytes(facts.ffnType, facts.nEmbd)) +
    align64(partialBytes(facts.nEmbd, threads)) +
    align64(segmentBytes(facts.nEmbd)) +
    (verifyOnce ? facts.checksumMarkBytes : 0)
  );
}

/**
 * Bytes of one memory's flash reader bridge region (FlashReaderOptions.bridge) beside a neuron
 * cache of `cacheRoom` bytes that does not hold every bundle: a 32nd of it in whole slots, at most
 * BRIDGE_REGION_BYTES (64 slots: on the 4B mixture's decode at queue depth 256, 256 slots bridged
 * 27% of the misses instead of 25%, in single runs); 0 where no slot fits, and nothing is bridged.
 */
export function bridgeRegionBytes(cacheRoom: number): number {
  return Math.max(0, Math.floor(Math.min(BRIDGE_REGION_BYTES, cacheRoom / 32) / BRIDGE_SLOT_BYTES)) * BRIDGE_SLOT_BYTES;
}

/** The most neurons one group fires a token: by the store's profile, else all of them (a dense FFN). */
function firingPerGroup(facts: StoreFacts): number {
  if (!facts.firing) return facts.nFF;
  let most = 0;
  for (const rates of facts.firing) {
    let sum = 0;
    for (let i = 0; i < rates.length; i++) sum += rates[i];
    most = Math.max(most, sum);
  }
  return Math.min(facts.nFF, most);
}

/**
 * The staging area gate reads land in when the gate rows are not resident, and its list; none in
 * dense mode, which reads no gate before a bundle.
 */
export function stagingBytes(facts: StoreFacts, sparsity: SparsityMode): number {
  if (sparsity === "dense") return 0;
  const neurons = Math.min(facts.nFF, STAGE_NEURONS);
  return PAGE_PAD + neurons * facts.gateReadBytes + align64(neurons * 4);
}

/**
 * The layout for `budget` (undefined: none) with `knobs`, given what the rest of the model keeps
 * resident. Never throws for a budget too small: `fits` says, and budgetError words it.
 */
export function offloadLayout(
  facts: StoreFacts,
  resident: FixedResident,
  budget: number | undefined,
  knobs: LayoutKnobs,
): OffloadLayout {
  const { groups, nFF, bundleBytes } = facts;
  // each memory of a split store has its own FFN buffers, staging area and page-aligned cache
  const shards = knobs.shards ?? 1;
  const allFFN = groups * nFF * bundleBytes;
  const minCache = Math.min(allFFN, shards * MIN_CACHE_BUNDLES * bundleBytes);
  const ffnBuffers = shards * ffnBufferBytes(facts, knobs.threads, knobs.verifyOnce ?? true);
  const growth = resident.growth ?? runtimeGrowthBytes(facts);
  const base = resident.base + resident.weights + resident.buffers + resident.kv + growth + ffnBuffers;
  const gateRows = groups * facts.gateRowBytes;
  const staging = shards * stagingBytes(facts, knobs.sparsity);
  const room = budget === undefined ? Infinity : budget * BUDGET_ROOM;
  // Predictor and dense mode compute a token's gates from the bundles they run: no resident gate
  // rows (predictor mode keeps the staging area: prompt batches stream the gate rows through it,
  // where dense mode needs no gate at all). In gate mode they stay
  // resident when they fit beside a cache that holds what a layer fires (of the experts a token
  // runs, for a mixture); otherwise they are read from flash. A cache smaller than a layer's
  // misses reads them in rounds that wait on each other: on a dense 0.6B shape, gate rows kept
  // with a 5 MiB cache ran at a third of the speed of the same budget as a 36 MiB cache.
  const layerBundles = Math.min(
    allFFN,
    Math.max(minCache, Math.ceil(facts.expertsUsed * firingPerGroup(facts) * bundleBytes)),
  );
  // (Gate rows no larger than the staging area they would replace need only the smallest cache.)
  const cacheBeside = gateRows <= staging ? minCache : layerBundles;
  const residentGates =
    knobs.sparsity === "gate" && (knobs.residentGates ?? base + gateRows + shards * PAGE_PAD + cacheBeside <= room);
  const gateBytes = residentGates ? gateRows : staging;
  // the cache's base is page aligned: its padding is counted with the fixed part
  const fixedParts = base + gateBytes + shards * PAGE_PAD;
  // each memory's reader bridges reads in a region taken from the cache's room (none if it holds every bundle)
  const roomLeft = Math.min(allFFN, knobs.cacheBytes ?? Infinity, room - fixedParts);
  const bridgeBytes = roomLeft < allFFN ? bridgeRegionBytes(roomLeft / shards) : 0;
  // counted with the FFN's buffers (page aligned: its pad with it)
  const bridges = bridgeBytes > 0 ? shards * (bridgeBytes + PAGE_PAD) : 0;
  const fixed = fixedParts + bridges;
  const cacheRoom = Math.min(allFFN, knobs.cacheBytes ?? Infinity, room - fixed);
  const fits = cacheRoom >= minCache;
  const slots = fits ? Math.floor(cacheRoom / bundleBytes) : 0;
  const hotFraction =
    knobs.hotFraction ??
    (knobs.sparsity === "dense" && facts.experts === 0 && !facts.firing
      ? scanHotFraction(slots, groups, nFF)
      : defaultHotFraction(
          facts.firing,
          slots,
          nFF,
          facts.experts > 0 ? { experts: facts.experts, used: facts.expertsUsed } : undefined,
        ));
  let hot = hotPerLayer(slots, hotFraction, groups, nFF);
  // a split store: a cold slot for each memory's misses at least
  if (shards > 1 && hot < nFF) hot = Math.max(0, Math.min(hot, Math.floor((slots - shards) / groups)));
  const cold = slots - hot * groups;
  // Pinned bundles are read once at load, never by a direct read: packed without the padding
  // that 4 KiB-aligns flash reads, the bytes that padding took pin more neurons; the cold region
  // keeps its slots (and starts 4 KiB aligned after the hot region).
  let hotSlotBytes = bundleBytes;
  const packed = facts.dataBytes;
  if (fits && packed < bundleBytes && hot > 0 && hot < nFF) {
    const more = Math.min(nFF, Math.floor((cacheRoom - shards * PAGE_PAD - cold * bundleBytes) / (groups * packed)));
    if (more >= hot) {
      hot = more;
      hotSlotBytes = packed;
    }
  }
  const cacheBytes = fits ? NeuronCache.bytesFor(hot * groups, cold, bundleBytes, hotSlotBytes) : 0;
  const hotPerGroup =
    facts.experts > 0 && facts.firing && hot > 0 && hot < nFF
      ? shareByRate(facts.firing, hot * groups, nFF)
      : Array<number>(groups).fill(hot);
  return {
    budget,
    room,
    fixedResident: resident,
    runtimeGrowth: growth,
    ffnBuffers: ffnBuffers + bridges,
    residentGates,
    gateBytes,
    fixed,
    cacheBytes,
    slots: hot * groups + cold,
    hotPerLayer: hot,
    hotPerGroup,
    hotSlotBytes,
    coldSlots: cold,
    hotFraction,
    fits,
    bridgeBytes,
    minBudget: Math.ceil((fixedParts + minCache) / BUDGET_ROOM),
  };
}

/**
 * Dense mode over a dense FFN: every neuron runs every token, layer after layer, a cyclic scan in
 * which an LRU region never keeps a bundle until its next use. So as many are pinned as leave the
 * cold region room for two layers' misses (the layer computing and the next one read ahead).
 */
function scanHotFraction(slots: number, groups: number, nFF: number): number {
  if (slots <= 0) return 0;
  if (slots >= groups * nFF) return 1;
  const hot = Math.max(0, Math.min(nFF, Math.floor((slots - 2 * nFF) / Math.max(1, groups - 2))));
  // the share hotPerLayer turns back into `hot` per layer
  return (hot * groups + 0.5) / slots;
}

/**
 * `total` hot slots shared out among groups whose neurons fire at `rates` (stored order, hot
 * first, per token): the neurons above one rate threshold, found by bisection, at most nFF per
 * group; what rounding leaves over goes to the groups in order.
 */
function shareByRate(rates: Float32Array[], total: number, nFF: number): number[] {
  const above = (t: number) =>
    rates.map((r) => {
      let lo = 0,
        hi = Math.min(nFF, r.length);
      // the first stored position at or below t (rates are non-increasing along the stored order)
      while (lo < hi) {
        const mid = (lo + hi) >> 1;
        if (r[mid] > t) lo = mid + 1;
        else hi = mid;
      }
      return lo;
    });
  let lo = 0,
    hi = 1;
  for (let it = 0; it < 60; it++) {
    const mid = (lo + hi) / 2;
    const n = above(mid).reduce((a, b) => a + b, 0);
    if (n > total) lo = mid;
    else hi = mid;
  }
  const counts = above(hi);
  let left = total - counts.reduce((a, b) => a + b, 0);
  for (let g = 0; left > 0 && g < counts.length; g = (g + 1) % counts.length) {
    if (counts[g] < nFF) {
      counts[g]++;
      left--;
    }
  }
  return counts;
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;

/** The parts of what stays in memory, in words: "runtime 62.1 MiB, weights 5.0 MiB, ...". */
export function fixedPartsText(layout: OffloadLayout): string {
  const r = layout.fixedResident;
  return (
    `runtime ${mib(r.base)}, weights ${mib(r.weights)}, buffers ${mib(r.buffers + layout.ffnBuffers)}, ` +
    `KV cache ${mib(r.kv)}, ${layout.gateBytes > 0 ? `${layout.residentGates ? "gate rows" : "gate staging"} ${mib(layout.gateBytes)}, ` : ""}` +
    `growth allowance ${mib(layout.runtimeGrowth)}`
  );
}

/** A budget too small for a store: says why, with the budget that would run; carries the layout. */
export class BudgetError extends Error {
  override name = "BudgetError";
  constructor(
    readonly layout: OffloadLayout,
    path: string,
  ) {
    super(
      `memory budget ${mib(layout.budget ?? 0)} is too small for ${path}: the part that stays in memory ` +
        `(${fixedPartsText(layout)}) needs ${mib(layout.fixed)}; at least ${mib(layout.minBudget)} would run (with a minimal neuron cache)`,
    );
  }
}
