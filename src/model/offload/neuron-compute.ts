/**
 * Computes the neurons a step filed (neuron-lists.ts) with the sparse FFN kernels, accumulating
 * into the kernels' partial sums until the step's finish: the hits (and whole hot clusters), the
 * misses once their bundles have landed, and for prompt batches each token's own firing neurons
 * among bundles in memory.
 */
import type { FlashReader } from "../../io/flash-reader.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { SparseActivation, SparseFFN } from "../../runtime/sparse-kernels.js";
import type { NeuronLists } from "./neuron-lists.js";
import type { OffloadStats } from "./stats.js";
import type { Tracer } from "../../runtime/tracer.js";

/**
 * Cached neurons computed per kernel call between services of the reader (a few hundred
 * microseconds) while reads are in flight. With none in flight the hits go in one call: each call
 * is a dispatch to the pool's threads and a wait for the slower one (at 2 threads on a store held
 * in memory, whole lists ran the kernel ~4% faster per neuron than pieces of 128: four alternating
 * pairs, within this host's noise).
 */
const HIT_PIECE = 128;

export class NeuronCompute {
  constructor(
    private readonly sparse: SparseFFN,
    private readonly cache: NeuronCache,
    private readonly reader: FlashReader,
    private readonly act: SparseActivation,
    /** predictor mode: gates are computed from the bundles (no gate values filed) */
    private readonly wholeBundles: boolean,
    private readonly stats: OffloadStats,
    private readonly tracer: Tracer | null = null,
  ) {}

  /**
   * The step's dense runs and hits, once. In pieces, with the reader serviced in between: reads
   * that finish meanwhile make room for queued ones (native AIO reports completions only when
   * asked), so the disk stays busy.
   */
  hits(lists: NeuronLists): void {
    if (lists.hitsDone) return;
    lists.hitsDone = true;
    const t = performance.now();
    const cache = this.cache;
    const hot0 = cache.hotStart[lists.layer];
    for (let i = 0; i < lists.runs; i++) {
      this.sparse.ffnRun(cache.address(hot0 + lists.runStart[i]), cache.hotSlotBytes, lists.runCount[i], this.act);
      if ((i & 3) === 3) this.reader.service();
    }
    for (let i = 0, n = 0; i < lists.hits; i += n) {
      n = this.reader.pending > 0 ? Math.min(HIT_PIECE, lists.hits - i) : lists.hits - i;
      if (this.wholeBundles) this.sparse.ffn(lists.hitList + 4 * i, n, this.act);
      else this.sparse.upDown(lists.hitList + 4 * i, n, lists.hitGates + 4 * i, this.act);
      this.reader.service();
    }
    this.stats.computeMs += performance.now() - t;
    this.tracer?.span("hit compute", "compute", this.tracer.fromClock(t), {
      neurons: lists.hits + lists.runNeurons,
    });
  }

  /**
   * The step's landing hits, once the reads ahead for its group have landed: each still cached is
   * computed; one whose read failed (its slot was released) is filed as a miss, to be read with
   * the step's own misses.
   */
  landed(lists: NeuronLists): void {
    const n = lists.landing;
    if (n === 0) return;
    lists.landing = 0;
    const { f32, i32 } = lists;
    const cache = this.cache;
    let count = 0;
    for (let i = 0; i < n; i++) {
      const k = lists.landingPos[i];
      const slot = cache.peek(lists.layer, k);
      if (slot < 0) {
        lists.fileMiss(k, lists.landingGateValues[i]);
        continue;
      }
      if (cache.isPinned(slot))
        throw new Error(`neuron cache: group ${lists.layer}'s bundle ${k} is still being read after its reads landed`);
      i32[(lists.missList >>> 2) + count] = cache.address(slot);
      f32[(lists.missGates >>> 2) + count] = lists.landingGateValues[i];
      count++;
    }
    if (count === 0) return;
    const t = performance.now();
    if (this.wholeBundles) this.sparse.ffn(lists.missList, count, this.act);
    else this.sparse.upDown(lists.missList, count, lists.missGates, this.act);
    this.stats.computeMs += performance.now() - t;
    this.tracer?.span("landed compute", "compute", this.tracer.fromClock(t), { neurons: count });
  }

  /** Misses [from, to) of the step, whose bundles are now in their cold slots. */
  misses(lists: NeuronLists, from: number, to: number): void {
    if (to <= from) return;
    const { f32, i32 } = lists;
    const cache = this.cache;
    for (let i = from; i < to; i++) {
      i32[(lists.missList >>> 2) + i - from] = cache.address(cache.peek(lists.layer, lists.missPos[i]));
      f32[(lists.missGates >>> 2) + i - from] = lists.missGateValues[i];
    }
    const t = performance.now();
    if (this.wholeBundles) this.sparse.ffn(lists.missList, to - from, this.act);
    else this.sparse.upDown(lists.missList, to - from, lists.missGates, this.act);
    this.stats.computeMs += performance.now() - t;
    this.tracer?.span("miss compute", "compute", this.tracer.fromClock(t), {
      neurons: to - from,
    });
  }

  /**
   * Prompt batches: for each of the n tokens (rows of nEmbd f32 at x, residual rows at y, gates
   * n x nFF at `gates`), up/down of its own firing neurons among the stored positions
   * positions[from..to) of layer `lists.layer` (all in memory), added into its residual row.
   */
  tokens(
    lists: NeuronLists,
    x: number,
    y: number,
    n: number,
    gates: number,
    positions: Int32Array,
    from: number,
    to: number,
  ): void {
    const { f32, i32 } = lists;
    const cache = this.cache;
    const nFF = lists.nFF;
    const rowBytes = this.sparse.nEmbd * 4;
    const t0 = performance.now();
    for (let t = 0; t < n; t++) {
      const g0 = (gates >>> 2) + t * nFF;
      let count = 0;
      for (let i = from; i < to; i++) {
        const k = positions[i];
        const g = f32[g0 + k];
        if (!lists.fires(g)) continue;
        i32[(lists.hitList >>> 2) + count] = cache.address(cache.peek(lists.layer, k));
        f32[(lists.hitGates >>> 2) + count] = g;
        count++;
      }
      if (count === 0) continue;
      this.sparse.prepare(x + t * rowBytes);
      this.sparse.upDown(lists.hitList, count, lists.hitGates, this.act);
      this.sparse.finish(y + t * rowBytes);
    }
    this.stats.computeMs += performance.now() - t0;
    this.tracer?.span("batch compute", "compute", this.tracer.fromClock(t0), {
      bundles: to - from,
    });
  }
}
