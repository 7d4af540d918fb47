/**
 * The fixed summation order of an offloaded FFN step: its result does not depend on which
 * neurons were in memory, on when their reads landed, on the budget or on the thread count.
 *
 * A layer's stored positions fall into SUM_SEGMENTS fixed segments (consecutive positions), each
 * with a partial slot of its own. A segment's firing neurons are added into its slot in position
 * order; the slots go into the output one after the other in segment order. What was a hit or a
 * miss only decides when a neuron can be computed: each segment is computed as far as its bundles
 * are in memory (a "wave", one kernel call for all segments), so the hits still compute while the
 * misses are read, and a segment waits at its first neuron not yet in memory. The kernels give
 * the same bits for a segment computed in one call or in several (assembly/sparse_segments.ts).
 *
 * Per step: `begin`, `mark` each firing neuron (NeuronLists.file does), the step's `filedBelow`
 * raised as the gate source has filed every position below it, waves as bundles arrive, `finish`
 * once `done`. The step's group and how far it has filed are the step's (ffn-step.ts), passed to
 * each call; what is kept here is the per-position state, laid out once.
 */
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { FFNStep } from "./ffn-step.js";
import { SUM_SEGMENTS, type SparseActivation, type SparseFFN } from "../../runtime/sparse-kernels.js";

/** A stored position's state in a step. */
const NOT_FIRING = 0,
  FIRES = 1,
  /** fires, and its bundle is being read into the slot it has */
  READING = 2;

export class FixedOrder {
  /** stored positions per segment */
  readonly segSize: number;
  private readonly state: Uint8Array;
  private readonly gateOf: Float32Array;
  /** per segment: the next stored position to compute */
  private readonly cursor: Int32Array;
  private readonly touched: Uint8Array;

  constructor(
    readonly nFF: number,
    private readonly sparse: SparseFFN,
    private readonly cache: NeuronCache,
    private readonly act: SparseActivation,
    /** predictor mode: whole bundles (gates computed by the kernel; no gate values) */
    private readonly wholeBundles: boolean,
  ) {
    this.segSize = Math.ceil(nFF / SUM_SEGMENTS);
    this.state = new Uint8Array(nFF);
    this.gateOf = new Float32Array(nFF);
    this.cursor = new Int32Array(SUM_SEGMENTS);
    this.touched = new Uint8Array(SUM_SEGMENTS);
  }

  /** Start a step: nothing fires yet. */
  begin(): void {
    this.state.fill(NOT_FIRING);
    this.touched.fill(0);
    for (let s = 0; s < SUM_SEGMENTS; s++) this.cursor[s] = Math.min(this.nFF, s * this.segSize);
  }

  /** The neuron at stored position k fires with gate value g (predictor mode: any). */
  mark(k: number, g: number): void {
    this.state[k] = FIRES;
    this.gateOf[k] = g;
  }

  /** First stored position of segment s (s = SUM_SEGMENTS: the end). */
  segStart(s: number): number {
    return Math.min(this.nFF, s * this.segSize);
  }

  /** Positions[from, to) are being read (not computable until `landed`). */
  reading(positions: Int32Array, from: number, to: number): void {
    for (let i = from; i < to; i++) if (this.state[positions[i]] === FIRES) this.state[positions[i]] = READING;
  }

  /** Positions[from, to) have landed. */
  landed(positions: Int32Array, from: number, to: number): void {
    for (let i = from; i < to; i++) if (this.state[positions[i]] === READING) this.state[positions[i]] = FIRES;
  }

  /**
   * Compute each segment from its cursor as far as its firing neurons' bundles are in memory (and
   * filed in the step), all segments in one kernel call. `list`, `gates`: wasm scratch for nFF
   * addresses and gate values; i32 / f32: views over the whole memory. Returns the neurons computed.
   */
  wave(step: FFNStep, list: number, gates: number, i32: Int32Array, f32: Float32Array): number {
    const { state, gateOf, cursor, cache } = this;
    const { layer, filedBelow } = step;
    const a0 = list >>> 2,
      g0 = gates >>> 2,
      it = this.sparse.items >>> 2;
    let n = 0,
      items = 0;
    for (let s = 0; s < SUM_SEGMENTS; s++) {
      const end = Math.min(this.segStart(s + 1), filedBelow);
      const from = n;
      let p = cursor[s];
      for (; p < end; p++) {
        const st = state[p];
        if (st === NOT_FIRING) continue;
        if (st === READING) break;
        const slot = cache.peek(layer, p);
        if (slot < 0 || cache.isPinned(slot)) break;
        i32[a0 + n] = cache.address(slot);
        f32[g0 + n] = gateOf[p];
        n++;
      }
      cursor[s] = p;
      if (n === from) continue;
      i32[it + 3 * items] = from;
      i32[it + 3 * items + 1] = n;
      i32[it + 3 * items + 2] = s;
      items++;
      this.touched[s] = 1;
    }
    this.sparse.segments(list, gates, items, this.wholeBundles, this.act);
    return n;
  }

  /** Whether every firing neuron of the step has been computed. */
  done(step: FFNStep): boolean {
    if (step.filedBelow < this.nFF) return false;
    for (let s = 0; s < SUM_SEGMENTS; s++) if (this.cursor[s] < this.segStart(s + 1)) return false;
    return true;
  }

  /**
   * The firing neurons not yet computed whose bundles are in no slot (never read, or evicted
   * before their turn), in segment order, into out; returns their count. The first is the first
   * unfinished segment's next neuron, so reading it always lets a wave progress.
   */
  needed(step: FFNStep, out: Int32Array): number {
    const { state, cursor, cache } = this;
    const layer = step.layer;
    let m = 0;
    for (let s = 0; s < SUM_SEGMENTS; s++) {
      const end = this.segStart(s + 1);
      for (let p = cursor[s]; p < end; p++) if (state[p] === FIRES && cache.peek(layer, p) < 0) out[m++] = p;
    }
    return m;
  }

  /**
   * After the cache started a new step (to reuse the cold slots of neurons already computed):
   * keep the bundles still to be computed, so that the reads that follow do not evict them.
   */
  keepPending(step: FFNStep): void {
    const { state, cursor, cache } = this;
    const layer = step.layer;
    for (let s = 0; s < SUM_SEGMENTS; s++) {
      const end = this.segStart(s + 1);
      for (let p = cursor[s]; p < end; p++) if (state[p] !== NOT_FIRING) cache.keep(layer, p);
    }
  }

  /** y (nEmbd f32 at y) += the segments computed since `begin`, in segment order; their slots cleared. */
  finish(y: number, i32: Int32Array): void {
    const sl = this.sparse.slotList >>> 2;
    let m = 0;
    for (let s = 0; s < SUM_SEGMENTS; s++) if (this.touched[s]) i32[sl + m++] = s;
    this.touched.fill(0);
    this.sparse.sumSegments(y, m);
  }
}
