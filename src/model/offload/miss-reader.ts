/**
 * Reads a step's misses from flash into cold slots of the neuron cache, in rounds of as many as
 * the cold slots not in use this step allow. A round's slots stay the step's until it ends; when
 * no cold slot is free the step's earlier rounds (already computed) give theirs back.
 */
import type { FlashReader, FlashReadRequest } from "../../io/flash-reader.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { NeuronStore } from "../../format/store/index.js";
import type { NeuronLists } from "./neuron-lists.js";
import { waitForReads, type OffloadStats } from "./stats.js";

/** One round: misses [from, to) of the step's list (or of `positions` for a batch) being read. */
/** A read request kept for reuse (the hot path allocates none once warm). */
export type BundleRequest = { fileOffset: number; length: number; dst: number; tag: number };

/**
 * Fill pool[m] (made once) with the read of bundle k of group g into cache slot `slot`, the slot
 * as its tag, and return it.
 */
export function bundleRequest(
  pool: BundleRequest[],
  m: number,
  store: NeuronStore,
  cache: NeuronCache,
  g: number,
  k: number,
  slot: number,
): BundleRequest {
  const r = (pool[m] ??= { fileOffset: 0, length: 0, dst: 0, tag: 0 });
  r.fileOffset = store.bundleOffset(g, k);
  r.length = cache.slotBytes;
  r.dst = cache.address(slot);
  r.tag = slot;
  return r;
}

export interface MissRound {
  from: number;
  to: number;
  /** the reads in flight (null once landed, or when the round reads nothing) */
  reading: Promise<void> | null;
}

export class MissReader {
  private readonly round: MissRound = { from: 0, to: 0, reading: null };
  /**
   * The round's requests, the first `count` of this array: objects reused from round to round (a
   * round lands before the next starts), the array kept at its largest length.
   */
  private readonly requests: BundleRequest[] = [];
  private count = 0;

  constructor(
    private readonly store: NeuronStore,
    private readonly cache: NeuronCache,
    private readonly reader: FlashReader,
    private readonly stats: OffloadStats,
  ) {}

  /**
   * Start reading the bundles of layer `lists.layer` at stored positions positions[from..count)
   * into cold slots, as many as are free. `recycle`: everything this step read before has been
   * computed, so when no cold slot is free the step's own may be taken again.
   */
  read(lists: NeuronLists, positions: Int32Array, from: number, count: number, recycle: boolean): MissRound {
    let m = this.acquire(lists.layer, positions, from, count);
    if (m === 0 && from < count && recycle) {
      this.cache.beginStep();
      m = this.acquire(lists.layer, positions, from, count);
    }
    const r = this.round;
    r.from = from;
    r.to = from + m;
    r.reading = null;
    if (m > 0) {
      const reading = this.reader.read(this.requests, undefined, m);
      // whoever awaits it sees a failure; one left behind by an error elsewhere must not go unhandled
      reading.catch(() => undefined);
      r.reading = reading;
    }
    return r;
  }

  private acquire(layer: number, positions: Int32Array, from: number, count: number): number {
    const { cache, requests } = this;
    let m = 0;
    while (from + m < count) {
      const k = positions[from + m];
      const slot = cache.acquire(layer, k);
      if (slot < 0) break;
      bundleRequest(requests, m, this.store, cache, layer, k, slot);
      m++;
    }
    this.count = m;
    return m;
  }

  /** Wait for the round's reads (counted as I/O wait); on failure their slots hold nothing valid and are released. */
  async landed(round: MissRound): Promise<void> {
    const reading = round.reading;
    if (!reading) return;
    round.reading = null;
    try {
      await waitForReads(this.stats, reading);
    } catch (e) {
      for (let i = 0; i < this.count; i++) this.cache.release(this.requests[i].tag as number);
      throw e;
    }
    this.stats.bytesRead += (round.to - round.from) * this.cache.slotBytes;
  }
}
