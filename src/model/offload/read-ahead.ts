/**
 * Predictor mode's read-ahead: while layer l computes, layer l+1's predictor runs on layer l's
 * input (the residual stream changes little from one layer to the next, so it picks most of what
 * it will pick from its own input), and the cold bundles it picks that are not in memory are read
 * into cold slots now, while layer l's neurons and layer l+1's attention compute. Layer l+1's own
 * predictor decides later what is computed; a bundle read ahead for nothing is just a cold slot's
 * content. The cache counts a bundle read ahead and then used as a miss served early, not as a hit.
 */
import type { FlashReader, FlashReadRequest } from "../../io/flash-reader.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { NeuronStore } from "../../format/store.js";
import type { Arena } from "../../runtime/arena.js";
import type { MatrixRunner } from "../matrix-runner.js";
import type { NeuronLists } from "./neuron-lists.js";
import type { Predictor } from "./predictor.js";
import { waitForReads, type OffloadStats } from "./stats.js";

/**
 * Read-ahead takes the next layer's picks whose score (from this layer's input) clears the
 * threshold by this many standard deviations of the layer's cold scores: the disk's IOPS are what
 * limits a token, so a read for nothing costs as much as a useful one, and picks near the
 * threshold from the previous layer's input are mostly wrong (docs/benchmarks.md, "Read-ahead margin").
 */
const READ_AHEAD_MARGIN = 0.2;

export class ReadAhead {
  /** the read in flight, for which layer, and its requests */
  private reading: Promise<void> | null = null;
  private layer = -1;
  private requests: FlashReadRequest[] = [];
  /** predictor scores of the layer read for (nFF f32, the sixth of ffnBufferBytes' lists) */
  private readonly scores: number;

  constructor(
    private readonly store: NeuronStore,
    private readonly cache: NeuronCache,
    private readonly reader: FlashReader,
    private readonly predictor: Predictor,
    private readonly mm: MatrixRunner,
    private readonly lists: NeuronLists,
    arena: Arena,
    private readonly nEmbd: number,
    private readonly threshold: number,
    private readonly stats: OffloadStats,
  ) {
    this.scores = arena.alloc(store.layer(0).neurons * 4, 64);
  }

  /** Start reading the cold bundles layer l's predictor picks clearly from the residual row at `residual`. */
  start(l: number, residual: number): void {
    const cache = this.cache;
    const f32 = this.lists.f32;
    const nFF = this.store.layer(l).neurons;
    const t = performance.now();
    this.predictor.scores(this.mm, l, residual, this.nEmbd, this.scores);
    this.stats.computeMs += performance.now() - t;
    const order = this.store.layer(l).order;
    const s0 = this.scores >>> 2;
    const hot = cache.hotCount[l];
    let sum = 0,
      sq = 0;
    for (let k = hot; k < nFF; k++) {
      const v = f32[s0 + order[k]];
      sum += v;
      sq += v * v;
    }
    const n = nFF - hot;
    const mean = sum / n;
    const thr = this.threshold + READ_AHEAD_MARGIN * Math.sqrt(Math.max(0, sq / n - mean * mean));
    const requests: FlashReadRequest[] = [];
    for (let k = hot; k < nFF; k++) {
      if (!(f32[s0 + order[k]] > thr) || cache.peek(l, k) >= 0) continue;
      const slot = cache.acquire(l, k, true);
      if (slot < 0) break;
      requests.push({
        fileOffset: this.store.bundleOffset(l, k),
        length: cache.slotBytes,
        dst: cache.address(slot),
        tag: slot,
      });
    }
    if (requests.length === 0) return;
    this.stats.readAhead += requests.length;
    this.stats.bytesRead += requests.length * cache.slotBytes;
    const reading = this.reader.read(requests);
    reading.catch(() => undefined);
    this.reading = reading;
    this.layer = l;
    this.requests = requests;
  }

  /**
   * Wait for what was read ahead (counted as I/O wait). On failure its slots are released, and the
   * error is thrown when it was read for layer `l` (about to compute): a read-ahead left over from
   * a pass that failed elsewhere is not this pass's error. l = -1: only let it settle.
   */
  async landed(l: number): Promise<void> {
    const reading = this.reading;
    if (!reading) return;
    const requests = this.requests;
    const forLayer = this.layer === l;
    this.reading = null;
    this.layer = -1;
    try {
      await waitForReads(this.stats, reading);
    } catch (e) {
      for (const r of requests) this.cache.release(r.tag as number);
      if (forLayer) throw e;
    }
  }
}
