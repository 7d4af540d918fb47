/**
 * Read-ahead: bundles a group's step will compute are read into cold slots before the step,
 * while other work computes. In predictor mode the predictor picks them; in dense mode (no
 * predictor) every neuron runs, so they are exactly the group's bundles not in memory.
 *
 * - A dense model: while layer l computes, layer l+1's predictor runs on layer l's input (the
 *   residual stream changes little from one layer to the next, so it picks most of what it will
 *   pick from its own input), and the cold bundles it picks clearly are read now, while layer l's
 *   neurons and layer l+1's attention compute.
 * - A mixture of experts: while a token's first routed expert of layer l computes, its next
 *   routed expert's predictor runs on the same residual row, so its picks are exactly those that
 *   expert's step will make ("exact"); and after layer l, the experts layer l+1's router picks
 *   on the current residual get their likely bundles read while layer l+1's attention computes.
 *
 * The group's own predictor decides later what is computed; a bundle read ahead for nothing is
 * just a cold slot's content. The cache counts a bundle read ahead and then used as a miss served
 * early, not as a hit. Several reads may be in flight at once (one per group); each one's slots
 * are pinned in the cache until it has landed (no acquire can take them and read into them
 * again), and a group's step waits for the reads for it before it looks anything up.
 */
import type { FlashReader, FlashReadRequest } from "../../io/flash-reader.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { GroupStore } from "./store-groups.js";
import type { Arena } from "../../runtime/arena.js";
import type { MatrixRunner } from "../matrix-runner.js";
import type { NeuronLists } from "./neuron-lists.js";
import type { Predictor } from "./predictor.js";
import { bundleRequest, type BundleRequest } from "./miss-reader.js";
import { waitForReads, type Spent } from "./stats.js";

/**
 * Read-ahead takes the next layer's picks whose score (from this layer's input) clears the
 * threshold by this many standard deviations of the layer's cold scores: the disk's IOPS are what
 * limits a token, so a read for nothing costs as much as a useful one, and picks near the
 * threshold from the previous layer's input are mostly wrong (docs/benchmarks-log.md, "Read-ahead margin").
 * Exact reads (a mixture's routed experts once it has routed: the input their steps see) take the picks themselves.
 */
const READ_AHEAD_MARGIN = 0.2;

/** Reads ahead in flight at most (groups): a mixture's routed experts, or the next layer's top-k. */
const MAX_PENDING = 16;

/** One group's read in flight. */
interface Pending {
  group: number;
  /** read in an earlier forward pass (one that failed before using it): its failure is no step's error */
  stale: boolean;
  reading: Promise<void> | null;
  /** the first `count` are this read's: objects reused from read to read, the array kept at its largest length */
  requests: BundleRequest[];
  count: number;
}

export class ReadAhead {
  private readonly pending: Pending[] = [];
  /** entries not in flight */
  private readonly free: Pending[] = [];
  /** predictor scores of the group read for (nFF f32, the sixth of ffnBufferBytes' lists) */
  private readonly scores: number;
  private readonly experts: number;
  /** cold slots read-ahead may pin at once: half the cold region (the step's own misses need the rest) */
  private readonly maxPinned: number;

  constructor(
    private readonly store: GroupStore,
    private readonly cache: NeuronCache,
    private readonly reader: FlashReader,
    /** null: dense mode, every neuron is a pick */
    private readonly predictor: Predictor | null,
    private readonly mm: MatrixRunner,
    private readonly lists: NeuronLists,
    arena: Arena,
    private readonly nEmbd: number,
    private readonly threshold: number,
  ) {
    this.scores = arena.alloc(store.layer(0).neurons * 4, 64);
    this.experts = store.ffn.experts;
    this.maxPinned = Math.floor(cache.coldSlots / 2);
    for (let i = 0; i < MAX_PENDING; i++)
      this.free.push({ group: -1, stale: false, reading: null, requests: [], count: 0 });
  }

  /** The model layer of a group. */
  private layerOf(g: number): number {
    return this.experts > 0 ? Math.floor(g / this.experts) : g;
  }

  /** Whether a read ahead for group g is in flight. */
  has(g: number): boolean {
    for (const p of this.pending) if (p.group === g) return true;
    return false;
  }

  /**
   * Start reading the cold bundles group g's predictor picks from the residual row at `residual`:
   * those that clear the threshold by the margin, or with `exact` (the same input the group's step
   * will see) exactly its picks; the picks already cached are kept (touched) so that these reads
   * do not evict them. The predictor's time and the bytes are counted in `spent`; returns the
   * bundles it started reading.
   */
  start(g: number, residual: number, exact: boolean, spent: Spent): number {
    const cache = this.cache;
    if (this.free.length === 0 || cache.pinnedCount >= this.maxPinned) return 0;
    const f32 = this.lists.f32;
    const nFF = this.store.layer(g).neurons;
    const hot = cache.hotCount[g];
    const s0 = this.scores >>> 2;
    let thr = this.threshold;
    if (this.predictor) {
      // only the cold region's scores (in the store's order: Predictor.load's rowOrder) are read
      const t = performance.now();
      this.predictor.scores(this.mm, g, residual, this.nEmbd, this.scores, hot);
      spent.computeMs += performance.now() - t;
    } else {
      // every neuron is a pick: a score above any threshold
      f32.fill(1, s0 + hot, s0 + nFF);
      thr = 0;
    }
    if (!exact && this.predictor) {
      let sum = 0,
        sq = 0;
      for (let k = hot; k < nFF; k++) {
        const v = f32[s0 + k];
        sum += v;
        sq += v * v;
      }
      const n = nFF - hot;
      const mean = sum / n;
      thr += READ_AHEAD_MARGIN * Math.sqrt(Math.max(0, sq / n - mean * mean));
    }
    const p = this.free[this.free.length - 1];
    const requests = p.requests;
    let m = 0;
    if (exact) for (let k = hot; k < nFF; k++) if (f32[s0 + k] > thr) cache.keep(g, k);
    // the slot of the bundle at k - 1 when it was just acquired: k's is taken next to it if it can be
    let prev = -1;
    for (let k = hot; k < nFF; k++) {
      if (!(f32[s0 + k] > thr) || cache.peek(g, k) >= 0) {
        prev = -1;
        continue;
      }
      if (cache.pinnedCount >= this.maxPinned) break;
      const slot = (prev = cache.acquire(g, k, exact ? 2 : 1, prev));
      if (slot < 0) break;
      cache.pin(slot);
      bundleRequest(requests, m, this.store, cache, g, k, slot);
      m++;
    }
    if (m === 0) return 0;
    this.free.pop();
    spent.bytesRead += m * cache.slotBytes;
    p.count = m;
    const reading = this.reader.read(requests, undefined, m);
    reading.catch(() => undefined);
    p.group = g;
    p.stale = false;
    p.reading = reading;
    this.pending.push(p);
    return m;
  }

  /** A forward pass starts: reads ahead still in flight were made by an earlier one (that failed, or read for nothing). */
  newPass(): void {
    for (const p of this.pending) p.stale = true;
  }

  /**
   * In group g's step, before its slots read ahead are computed: wait for the reads ahead for it
   * (counted as I/O wait), and for those of earlier layers (read for nothing by now); a mixture's
   * reads for other experts of g's layer, and the reads for later layers (the next layer's,
   * started in this step), stay in flight. Each landed read's slots are unpinned; on failure they
   * are released, and the error is thrown when it was read for g (about to compute): a read-ahead
   * left over from a pass that failed elsewhere is not this pass's error. g = -1: let every read
   * settle. The waits are counted in `spent` (null: no pass's, as when closing).
   */
  async landed(g: number, spent: Spent | null): Promise<void> {
    if (this.pending.length === 0) return;
    const layer = g < 0 ? -1 : this.layerOf(g);
    let error: unknown = null;
    for (let i = 0; i < this.pending.length;) {
      const p = this.pending[i];
      if (g >= 0 && p.group !== g && this.layerOf(p.group) >= layer) {
        i++;
        continue;
      }
      this.pending[i] = this.pending[this.pending.length - 1];
      this.pending.pop();
      const reading = p.reading!;
      p.reading = null;
      try {
        await waitForReads(spent, reading);
        for (let i = 0; i < p.count; i++) this.cache.unpin(p.requests[i].tag as number);
      } catch (e) {
        for (let i = 0; i < p.count; i++) this.cache.release(p.requests[i].tag as number);
        if (p.group === g && !p.stale && error === null) error = e;
      }
      this.free.push(p);
    }
    if (error !== null) throw error;
  }
}
