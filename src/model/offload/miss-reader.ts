/**
 * Reads a step's misses from flash into cold slots of the neuron cache, in rounds of as many as
 * the cold slots not in use this step allow. A round's slots stay the step's until it ends; when
 * no cold slot is free the step's slots of neurons already computed give theirs back (those still
 * to compute in the fixed order are kept, unless they hold every cold slot: then they too may be
 * evicted and are read again in their turn). A prompt batch gathers the reads of whole segments
 * (`beginBatch`, `fit`, `readBatch`).
 */
import type { FlashReader } from "../../io/flash-reader.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { GroupStore } from "./store-groups.js";
import type { FFNStep } from "./ffn-step.js";
import type { FixedOrder } from "./fixed-order.js";
import { waitForReads } from "./stats.js";

/** A read request kept for reuse (the hot path allocates none once warm). */
export type BundleRequest = { fileOffset: number; length: number; dst: number; tag: number };

/**
 * Fill pool[m] (made once) with the read of bundle k of group g into cache slot `slot`, the slot
 * as its tag, and return it.
 */
export function bundleRequest(
  pool: BundleRequest[],
  m: number,
  store: GroupStore,
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

/** One round: misses [from, to) of the step's list (or of `positions` for a batch) being read. */
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
    private readonly store: GroupStore,
    private readonly cache: NeuronCache,
    private readonly reader: FlashReader,
    private readonly order: FixedOrder,
  ) {}

  /**
   * Start reading the bundles of the step's group at stored positions positions[from..count) into
   * cold slots, as many as are free (counted in the step's reads). `recycle`: every read of this
   * step has landed, so when no cold slot is free the step's own may be taken again (those of
   * neurons still to compute last).
   */
  read(step: FFNStep, positions: Int32Array, from: number, count: number, recycle: boolean): MissRound {
    const layer = step.layer;
    let m = this.acquire(layer, positions, from, count);
    if (m === 0 && from < count && recycle) {
      this.cache.beginStep();
      this.order.keepPending(step);
      m = this.acquire(layer, positions, from, count);
      if (m === 0) {
        this.cache.beginStep();
        m = this.acquire(layer, positions, from, count);
      }
    }
    this.order.reading(positions, from, from + m);
    return this.start(step, from, from + m);
  }

  private start(step: FFNStep, from: number, to: number): MissRound {
    step.reads += to - from;
    const r = this.round;
    r.from = from;
    r.to = to;
    r.reading = null;
    if (to > from) {
      const reading = this.reader.read(this.requests, undefined, this.count);
      // whoever awaits it sees a failure; one left behind by an error elsewhere must not go unhandled
      reading.catch(() => undefined);
      r.reading = reading;
    }
    return r;
  }

  /** Start gathering a prompt batch's reads. */
  beginBatch(): void {
    this.count = 0;
  }

  /**
   * A batch's bundles of group `layer` at positions[from, to): the cached ones kept for this step,
   * cold slots taken for the others, all or none: false (the slots taken here given back) when
   * the cold slots not in use this step run out.
   */
  fit(layer: number, positions: Int32Array, from: number, to: number): boolean {
    const { cache, requests } = this;
    const start = this.count;
    let slot = -1;
    for (let i = from; i < to; i++) {
      const k = positions[i];
      if (cache.keep(layer, k)) {
        slot = -1;
        continue;
      }
      // next to the slot just taken when k follows its bundle on flash (NeuronCache.takable)
      slot = cache.acquire(layer, k, false, i > from && positions[i - 1] === k - 1 ? slot : -1);
      if (slot < 0) {
        for (let j = start; j < this.count; j++) cache.release(requests[j].tag as number);
        this.count = start;
        return false;
      }
      bundleRequest(requests, this.count++, this.store, cache, layer, k, slot);
    }
    return true;
  }

  /** Start reading what `fit` gathered (a round over [0, its count)), counted in the step's reads. */
  readBatch(step: FFNStep): MissRound {
    return this.start(step, 0, this.count);
  }

  private acquire(layer: number, positions: Int32Array, from: number, count: number): number {
    const { cache, requests } = this;
    let m = 0,
      slot = -1;
    while (from + m < count) {
      const k = positions[from + m];
      // next to the slot just taken when k follows its bundle on flash (NeuronCache.takable)
      slot = cache.acquire(layer, k, false, m > 0 && positions[from + m - 1] === k - 1 ? slot : -1);
      if (slot < 0) break;
      bundleRequest(requests, m, this.store, cache, layer, k, slot);
      m++;
    }
    this.count = m;
    return m;
  }

  /**
   * Wait for the round's reads (the wait and the bytes counted in the step); on failure their
   * slots hold nothing valid and are released. `positions`: the round's (a step's rounds: to
   * compute now).
   */
  async landed(step: FFNStep, round: MissRound, positions: Int32Array | null): Promise<void> {
    const reading = round.reading;
    if (!reading) return;
    round.reading = null;
    try {
      await waitForReads(step, reading);
    } catch (e) {
      for (let i = 0; i < this.count; i++) this.cache.release(this.requests[i].tag as number);
      throw e;
    }
    step.bytesRead += (round.to - round.from) * this.cache.slotBytes;
    if (positions) this.order.landed(positions, round.from, round.to);
  }
}
