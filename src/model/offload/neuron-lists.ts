/**
 * The lists an FFN step (a token of a group) files its neurons into, laid out once: each firing
 * neuron marked in the step's fixed order (fixed-order.ts, which computes them) and counted in the
 * step (ffn-step.ts) as
 * - a hit: its bundle in memory;
 * - a miss: its stored position kept, to read its bundle from flash;
 * - a landing hit: its bundle's read ahead still in flight (its slot pinned), computed once the
 *   reads for the group have landed.
 * The step's own facts (its group, threshold and counts) are the step's, passed to each call.
 */
import { ACTIVATIONS, gateActivation } from "../../format/activations.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { Arena } from "../../runtime/arena.js";
import type { SparseActivation } from "../../runtime/sparse-kernels.js";
import type { FFNStep } from "./ffn-step.js";
import type { FixedOrder } from "./fixed-order.js";
import type { SparsityMode } from "./layout.js";

/** Neurons of the hot region computed as one run when the predictor picks this many of them (predictor mode). */
export const HOT_CLUSTER = 32;

export class NeuronLists {
  /**
   * wasm addresses: gate values (or predictor scores) of the step; the addresses and gates of
   * the neurons a wave computes (fixed-order.ts); scratch addresses and gates for the gate sources
   */
  readonly gateOut: number;
  readonly hitList: number;
  readonly hitGates: number;
  readonly missList: number;
  readonly missGates: number;
  /** the misses' stored positions (and, as the step goes on, of the bundles read next) */
  readonly missPos: Int32Array;
  /** views over the whole wasm memory: see takeViews */
  f32: Float32Array = new Float32Array(0);
  i32: Int32Array = new Int32Array(0);

  constructor(
    arena: Arena,
    readonly nFF: number,
    private readonly cache: NeuronCache,
    private readonly act: SparseActivation,
    private readonly mode: SparsityMode,
    readonly order: FixedOrder,
  ) {
    // five of ffnBufferBytes' six lists (the sixth is the read-ahead's scores)
    this.gateOut = arena.alloc(nFF * 4, 64);
    this.hitList = arena.alloc(nFF * 4, 64);
    this.hitGates = arena.alloc(nFF * 4, 64);
    this.missList = arena.alloc(nFF * 4, 64);
    this.missGates = arena.alloc(nFF * 4, 64);
    this.missPos = new Int32Array(nFF);
  }

  /**
   * Take the views over the whole memory that every part of the FFN writes its lists through:
   * after the last allocation (an allocation may grow the memory, and a view taken before it
   * does not reach the new part).
   */
  takeViews(arena: Arena): void {
    this.f32 = new Float32Array(arena.memory.buffer);
    this.i32 = new Int32Array(arena.memory.buffer);
  }

  /**
   * Whether a gate value makes its neuron fire: ReLU family g > 0, otherwise any non-zero
   * activation; with a threshold `cut` (the step's), |act(g)| above it (as the dense path's ffn_act_cut).
   */
  fires(cut: number, g: number): boolean {
    if (this.mode === "dense") return true;
    if (!ACTIVATIONS[this.act].exactZeros) return cut === 0 ? g !== 0 : Math.abs(gateActivation(this.act, g)) > cut;
    return g > cut;
  }

  /**
   * File the neuron at stored position k of the step's group with gate value g (predictor mode: 1)
   * as a hit, a landing hit (its slot still being read ahead) or a miss, if it fires (the cache
   * counts what its lookup found in the step too).
   */
  file(step: FFNStep, k: number, g: number): void {
    if (!this.fires(step.cut, g)) return;
    this.order.mark(k, g);
    const slot = this.cache.lookup(step.layer, k, step);
    if (slot >= 0 && this.cache.isPinned(slot)) step.landing++;
    else if (slot >= 0) step.hits++;
    else this.missPos[step.misses++] = k;
  }
}
