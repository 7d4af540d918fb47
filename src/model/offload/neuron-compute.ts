/**
 * Computes the neurons a step filed (neuron-lists.ts) with the sparse FFN kernels, in the step's
 * fixed order (fixed-order.ts): waves of whatever is in memory (the hits while the misses are
 * read, then what each round of reads lets on), and for prompt batches each token's own firing
 * neurons among bundles in memory.
 */
import type { FlashReader } from "../../io/flash-reader.js";
import type { SparseFFN } from "../../runtime/sparse-kernels.js";
import type { FFNStep } from "./ffn-step.js";
import type { FixedOrder } from "./fixed-order.js";
import type { NeuronLists } from "./neuron-lists.js";
import type { Tracer } from "../../runtime/tracer.js";

export class NeuronCompute {
  constructor(
    private readonly sparse: SparseFFN,
    private readonly order: FixedOrder,
    private readonly reader: FlashReader,
    private readonly tracer: Tracer | null = null,
  ) {}

  /**
   * A wave: every segment of the step as far as its bundles are in memory and filed. The reader
   * is serviced after it: reads that finished meanwhile make room for queued ones (native AIO
   * reports completions only when asked), so the disk stays busy.
   */
  wave(step: FFNStep, lists: NeuronLists, what = "compute"): void {
    const t = performance.now();
    const n = this.order.wave(step, lists.hitList, lists.hitGates, lists.i32, lists.f32);
    step.computeMs += performance.now() - t;
    if (this.reader.pending > 0) this.reader.service();
    if (n > 0) this.tracer?.span(what, "compute", this.tracer.fromClock(t), { neurons: n });
  }

  /** What a gate source can compute while its own reads are in flight: a wave. */
  hits(step: FFNStep, lists: NeuronLists): void {
    this.wave(step, lists, "hit compute");
  }

  /**
   * Prompt batches: for each of the n tokens (rows of nEmbd f32 at x, residual rows at y, gates
   * n x nFF at `gates`), its own firing neurons among the stored positions positions[from..to)
   * of the step's group (all in memory, the whole of some consecutive segments), added into its
   * residual row in the fixed order: the same sums a decode step of that token makes.
   */
  tokens(
    step: FFNStep,
    lists: NeuronLists,
    x: number,
    y: number,
    n: number,
    gates: number,
    positions: Int32Array,
    from: number,
    to: number,
  ): void {
    const { f32 } = lists;
    const order = this.order;
    const rowBytes = this.sparse.nEmbd * 4;
    const t0 = performance.now();
    for (let t = 0; t < n; t++) {
      this.markToken(step, lists, gates, t, positions, from, to);
      this.sparse.prepare(x + t * rowBytes);
      order.wave(step, lists.hitList, lists.hitGates, lists.i32, f32);
      if (!order.done(step))
        throw new Error(`offloaded FFN: group ${step.layer}'s batch neurons were not all in memory (internal)`);
      order.finish(y + t * rowBytes, lists.i32);
    }
    step.computeMs += performance.now() - t0;
    this.tracer?.span("batch compute", "compute", this.tracer.fromClock(t0), {
      bundles: to - from,
    });
  }

  /** Start token t's step of the batch: its firing neurons among positions[from..to) marked. */
  markToken(
    step: FFNStep,
    lists: NeuronLists,
    gates: number,
    t: number,
    positions: Int32Array,
    from: number,
    to: number,
  ): void {
    const { f32, nFF } = lists;
    const order = this.order;
    order.begin();
    const g0 = (gates >>> 2) + t * nFF;
    for (let i = from; i < to; i++) {
      const k = positions[i];
      const g = f32[g0 + k];
      if (lists.fires(step.cut, g)) order.mark(k, g);
    }
    step.filedBelow = nFF;
  }
}
