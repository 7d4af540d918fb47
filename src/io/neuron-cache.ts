/**
 * The segmented neuron cache: fixed-size slots of one neuron bundle each, in wasm memory.
 *
 * - hot region: the first slots, holding each layer's hottest neurons (the first positions of
 *   its hot-first stored order) as one contiguous cluster per layer, loaded once and kept;
 * - cold region: the other slots, one neuron each, replaced least-recently-used first.
 *
 * Hot slots may be packed tighter than cold ones (`hotSlotBytes`: a bundle's three parts without
 * the padding that keeps flash reads 4 KiB aligned; pinned bundles are loaded once and never
 * take a direct read), so the same bytes pin more neurons. The cold region then starts at the
 * next 4 KiB boundary.
 *
 * Evicted bundles are simply overwritten (flash is the source of truth). A slot used during the
 * current step (token x layer) is never evicted within that step, so the bundles a kernel is
 * about to read stay put; `acquire` returns -1 when every cold slot is in use this step, and the
 * caller computes what it has before asking again.
 *
 * A slot can be filled ahead of need (`acquire(..., kind)`: read ahead because a predictor
 * expects its neuron soon). The first lookup that finds it counts it as a miss served early
 * (`aheadUsed`), not as a hit: it was read for this use, only sooner. While such a read is in
 * flight its slot is pinned (`pin`: out of the LRU list, so no later acquire can take it and
 * start a second read into it, whatever the step); `unpin` puts it back once the read landed.
 * The owner of a read ahead must make sure it landed before a lookup can serve it.
 *
 * A lookup counts what it found in the counts its caller passes (an FFN step's); the cache keeps
 * no counts of its own. A layer here is a store group: a layer, or one expert of a mixture's layer.
 */
import { evenRoutingShare, hitProfile, type Firing } from "./hit-model.js";

/** What lookups found, counted where the caller says. A lookup that finds nothing counts nothing (its caller reads it). */
export interface LookupCounts {
  hotHits: number;
  coldHits: number;
  /** lookups that found a bundle read ahead for them (misses served early, not hits), and of those the ones read for a certain need */
  aheadUsed: number;
  aheadExact: number;
}

export class NeuronCache {
  readonly slotBytes: number;
  /** bytes per hot slot (slotBytes unless packed) */
  readonly hotSlotBytes: number;
  readonly base: number;
  /** address of the first cold slot */
  readonly coldBase: number;
  readonly slots: number;
  readonly hotSlots: number;
  /** per layer: how many leading stored positions live in the hot region, and where */
  readonly hotCount: Int32Array;
  readonly hotStart: Int32Array;
  /** slots pinned now (reads ahead in flight) */
  pinnedCount = 0;
  /** per layer, stored position -> cold slot or -1 */
  private readonly where: Int32Array[];
  private readonly ownerLayer: Int32Array;
  private readonly ownerPos: Int32Array;
  private readonly stamp: Int32Array;
  /** per slot: the kind of read ahead (1 likely, 2 exact) while it holds a bundle read ahead and not yet looked up, else 0 */
  private readonly early: Uint8Array;
  /** per slot: 1 while its read ahead is in flight (out of the LRU list) */
  private readonly pinned: Uint8Array;
  private readonly prev: Int32Array;
  private readonly next: Int32Array;
  /** LRU list of cold slots: head = most recent, tail = least */
  private head = -1;
  private tail = -1;
  private step = 1;

  /**
   * @param base  wasm address of slot 0 (4 KiB aligned); slot i is at base + i * slotBytes
   * @param hotPerLayer how many hot neurons of each layer to pin (their slots are contiguous)
   */
  constructor(
    base: number,
    slotBytes: number,
    slots: number,
    neuronsPerLayer: number[],
    hotPerLayer: number[],
    hotSlotBytes = slotBytes,
  ) {
    this.base = base;
    this.slotBytes = slotBytes;
    this.hotSlotBytes = hotSlotBytes;
    this.slots = slots;
    const layers = neuronsPerLayer.length;
    this.hotCount = Int32Array.from(hotPerLayer);
    this.hotStart = new Int32Array(layers);
    let s = 0;
    for (let l = 0; l < layers; l++) {
      this.hotStart[l] = s;
      s += hotPerLayer[l];
    }
    if (s > slots) throw new RangeError(`hot region of ${s} neurons does not fit ${slots} slots`);
    this.hotSlots = s;
    this.coldBase = NeuronCache.coldOffset(s, slotBytes, hotSlotBytes) + base;
    this.where = neuronsPerLayer.map((n) => new Int32Array(n).fill(-1));
    this.ownerLayer = new Int32Array(slots).fill(-1);
    this.ownerPos = new Int32Array(slots).fill(-1);
    this.stamp = new Int32Array(slots);
    this.early = new Uint8Array(slots);
    this.pinned = new Uint8Array(slots);
    this.prev = new Int32Array(slots).fill(-1);
    this.next = new Int32Array(slots).fill(-1);
    // The least recently used slot is the lowest: misses taken in file order then get slots in
    // address order, and the reader coalesces adjacent ones into one read (flash-reader.ts).
    for (let i = s; i < slots; i++) this.pushFront(i);
  }

  get coldSlots(): number {
    return this.slots - this.hotSlots;
  }

  address(slot: number): number {
    return slot < this.hotSlots
      ? this.base + slot * this.hotSlotBytes
      : this.coldBase + (slot - this.hotSlots) * this.slotBytes;
  }

  /** Bytes the slots take, hot and cold. */
  get bytes(): number {
    return this.coldBase - this.base + this.coldSlots * this.slotBytes;
  }

  /** Where the cold region starts, relative to the base: after the hot slots, 4 KiB aligned when packed. */
  static coldOffset(hotSlots: number, slotBytes: number, hotSlotBytes: number): number {
    const end = hotSlots * hotSlotBytes;
    return hotSlotBytes === slotBytes ? end : Math.ceil(end / 4096) * 4096;
  }

  /** Bytes for hotSlots packed hot slots and coldSlots cold ones. */
  static bytesFor(hotSlots: number, coldSlots: number, slotBytes: number, hotSlotBytes: number): number {
    return NeuronCache.coldOffset(hotSlots, slotBytes, hotSlotBytes) + coldSlots * slotBytes;
  }

  /** Start a new step: slots touched before it may be evicted again. */
  beginStep(): void {
    this.step++;
  }

  /** The slot holding (layer, stored position), or -1; a hit counted in `counts`, and touched. */
  lookup(layer: number, pos: number, counts: LookupCounts): number {
    if (pos < this.hotCount[layer]) {
      counts.hotHits++;
      return this.hotStart[layer] + pos;
    }
    const slot = this.where[layer][pos];
    if (slot < 0) return -1;
    if (this.early[slot]) {
      if (this.early[slot] === 2) counts.aheadExact++;
      this.early[slot] = 0;
      counts.aheadUsed++;
    } else counts.coldHits++;
    this.touch(slot);
    return slot;
  }

  /**
   * Keep (layer, pos) if cached in a cold slot: touch it without counting, so that reads ahead
   * in this step do not evict what is about to be used. Returns whether it is cached.
   */
  keep(layer: number, pos: number): boolean {
    if (pos < this.hotCount[layer]) return true;
    const slot = this.where[layer][pos];
    if (slot < 0) return false;
    this.touch(slot);
    return true;
  }

  /** The slot holding (layer, stored position), or -1, without counting or touching it. */
  peek(layer: number, pos: number): number {
    return pos < this.hotCount[layer] ? this.hotStart[layer] + pos : this.where[layer][pos];
  }

  /**
   * A cold slot for (layer, pos), which must not be cached: the least recently used slot not
   * touched in this step, now owned by (layer, pos) and touched. -1 when there is none.
   * `ahead`: it is filled ahead of need (see above; 1 or true: a likely need, 2: a certain one).
   * `after`: the slot just acquired for the bundle before this one on flash (see takable).
   */
  acquire(layer: number, pos: number, ahead: boolean | 1 | 2 = false, after = -1): number {
    const slot = after >= this.hotSlots && this.takable(after + 1) ? after + 1 : this.tail;
    if (slot < 0 || this.stamp[slot] === this.step) return -1;
    const l = this.ownerLayer[slot];
    if (l >= 0) this.where[l][this.ownerPos[slot]] = -1;
    this.ownerLayer[slot] = layer;
    this.ownerPos[slot] = pos;
    this.where[layer][pos] = slot;
    this.early[slot] = ahead === 2 ? 2 : ahead ? 1 : 0;
    this.touch(slot);
    return slot;
  }

  /**
   * Whether acquire may take cold slot `slot` out of LRU order: `after + 1`, where the bundle
   * being acquired follows on flash the one just given slot `after`. Reads that are adjacent both
   * on flash and in memory coalesce into one (flash-reader.ts), and on a disk that is bound by
   * its reads per second, one 8 KiB read costs far less than two of 4 KiB. Without this, slots
   * come back to the LRU list in the order their reads landed, which soon scatters neighbours.
   * The slot given up may be more recent than the tail: a small cost where the cold region's
   * hits are rare (a hot-first store's), where most of its use is as the misses' landing place.
   */
  private takable(slot: number): boolean {
    // not one in use this step, nor one whose read is in flight, nor one read ahead and not yet used
    return slot < this.slots && this.stamp[slot] !== this.step && this.pinned[slot] === 0 && this.early[slot] === 0;
  }

  /** Take a cold slot out of the LRU list while a read into it is in flight: no acquire can take it. */
  pin(slot: number): void {
    if (this.pinned[slot]) return;
    this.unlink(slot);
    this.pinned[slot] = 1;
    this.pinnedCount++;
  }

  /** Its read landed: the slot goes back to the recent end of the LRU list. */
  unpin(slot: number): void {
    if (!this.pinned[slot]) return;
    this.pinned[slot] = 0;
    this.pinnedCount--;
    this.pushFront(slot);
  }

  /** Whether a read into the slot is in flight (pinned). */
  isPinned(slot: number): boolean {
    return this.pinned[slot] === 1;
  }

  /** Forget (layer, pos) (its read failed): the slot goes back to the cold end of the list. */
  release(slot: number): void {
    const l = this.ownerLayer[slot];
    if (l >= 0) this.where[l][this.ownerPos[slot]] = -1;
    this.ownerLayer[slot] = -1;
    this.ownerPos[slot] = -1;
    this.stamp[slot] = 0;
    this.early[slot] = 0;
    if (this.pinned[slot]) {
      this.pinned[slot] = 0;
      this.pinnedCount--;
    } else this.unlink(slot);
    this.pushBack(slot);
  }

  private touch(slot: number): void {
    this.stamp[slot] = this.step;
    // a pinned slot stays out of the list until its read lands
    if (this.head === slot || this.pinned[slot]) return;
    this.unlink(slot);
    this.pushFront(slot);
  }

  private unlink(slot: number): void {
    const p = this.prev[slot];
    const n = this.next[slot];
    if (p >= 0) this.next[p] = n;
    else if (this.head === slot) this.head = n;
    if (n >= 0) this.prev[n] = p;
    else if (this.tail === slot) this.tail = p;
    this.prev[slot] = this.next[slot] = -1;
  }

  private pushFront(slot: number): void {
    this.prev[slot] = -1;
    this.next[slot] = this.head;
    if (this.head >= 0) this.prev[this.head] = slot;
    this.head = slot;
    if (this.tail < 0) this.tail = slot;
  }

  private pushBack(slot: number): void {
    this.next[slot] = -1;
    this.prev[slot] = this.tail;
    if (this.tail >= 0) this.next[this.tail] = slot;
    this.tail = slot;
    if (this.head < 0) this.head = slot;
  }
}

/**
 * Stored positions pinned hot per layer for `slots` slots and a hot `share`: a cache that holds
 * the whole FFN pins all of it; otherwise at least one cold slot stays, so that misses can always
 * be served.
 */
export function hotPerLayer(slots: number, share: number, layers: number, neuronsPerLayer: number): number {
  if (slots >= layers * neuronsPerLayer) return neuronsPerLayer;
  return Math.max(0, Math.min(neuronsPerLayer, Math.floor((slots * share) / layers), Math.floor((slots - 1) / layers)));
}

/** The hot share when nothing better is known (no firing rates). */
export const DEFAULT_HOT_FRACTION = 0.5;

/**
 * The default share of `slots` pinned hot, from each layer's firing rates in stored (hot-first)
 * order: of the shares from half up, the one with the most expected hits per token once the cold
 * LRU has warmed (hit-model.ts: hot neurons always hit, the cold region by Che's approximation,
 * nothing when a token's misses overrun it), keeping room in the cold region to read two layers'
 * misses at once. Pinning is never below half: the hit model takes firing as independent from
 * token to token, which favours the LRU less than real text might. Without rates: half.
 */
export function defaultHotFraction(
  firing: ArrayLike<number>[] | null,
  slots: number,
  neuronsPerLayer: number,
  /** a mixture of experts: `firing` has a group per (layer, expert), rates per token; `used` experts run per token */
  mixture?: { experts: number; used: number },
): number {
  if (!firing || firing.length === 0 || slots <= 0) return DEFAULT_HOT_FRACTION;
  const layers = firing.length;
  const rates: Firing = { layers: firing.map((f) => Float64Array.from(f)), source: "profile" };
  const hotOf = (share: number) => hotPerLayer(slots, share, layers, neuronsPerLayer);
  const E = mixture && mixture.experts > 0 ? mixture.experts : 1;
  const used = mixture && mixture.experts > 0 ? mixture.used : 1;
  /**
   * the most one layer misses per token beyond `hot` pinned neurons; a mixture's layer: its
   * `used` experts with the most misses when routed (a group's per-token misses over its routing
   * share, taken as used / experts), all read in the layer's step
   */
  const mostMisses = (hot: number) => {
    let most = 0;
    const perExpert = new Float64Array(E);
    for (let l0 = 0; l0 < layers; l0 += E) {
      for (let e = 0; e < E && l0 + e < layers; e++) {
        const f = rates.layers[l0 + e];
        let s = 0;
        for (let k = Math.min(hot, f.length); k < f.length; k++) s += f[k];
        perExpert[e] = s / evenRoutingShare(E, used);
      }
      const top = Array.from(perExpert).sort((a, b) => b - a);
      let s = 0;
      for (let i = 0; i < used; i++) s += top[i];
      most = Math.max(most, s);
    }
    return most;
  };
  const shares: number[] = [];
  for (let i = 10; i <= 20; i++) shares.push(i / 20);
  // the most that leaves two layers' misses of room
  const reserve = Math.max(1, Math.round(2 * mostMisses(hotOf(DEFAULT_HOT_FRACTION))));
  shares.push(Math.max(DEFAULT_HOT_FRACTION, (slots - reserve) / slots));
  let best = DEFAULT_HOT_FRACTION,
    bestHits = -Infinity;
  for (const share of shares) {
    const hot = hotOf(share);
    const cold = slots - hot * layers;
    if (share > DEFAULT_HOT_FRACTION && cold < 2 * mostMisses(hot) && hot < neuronsPerLayer) continue;
    const hp = hitProfile(rates, hot, cold, STEADY_PROMPT, 1);
    let hits = 0;
    for (let l = 0; l < layers; l++) hits += hp.hot[l] + hp.cold[0][l];
    // a larger share must gain something real to be taken
    if (hits > bestHits * (1 + 1e-3)) {
      best = share;
      bestHits = hits;
    }
  }
  return best;
}

/** Tokens of history the default assumes (the LRU's steady state after a prompt). */
const STEADY_PROMPT = 64;
