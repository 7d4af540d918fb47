/**
 * The neurons one FFN step (a token of a layer) computes, filed as they are found: each marked
 * firing in the step's fixed order (fixed-order.ts, which computes them) and counted as
 * - a hit: its bundle in memory;
 * - a miss: its stored position kept, to read its bundle from flash;
 * - a landing hit: its bundle's read ahead still in flight (its slot pinned), computed once the
 *   reads for the group have landed.
 * Laid out once; `begin` starts a step.
 */
import { ACTIVATIONS, gateActivation } from "../../format/activations.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { Arena } from "../../runtime/arena.js";
import type { SparseActivation } from "../../runtime/sparse-kernels.js";
import type { FixedOrder } from "./fixed-order.js";
import type { SparsityMode } from "./layout.js";

/** Neurons of the hot region computed as one run when the predictor picks this many of them (predictor mode). */
export const HOT_CLUSTER = 32;

export class NeuronLists {
  /** the layer of the step */
  layer = 0;
  /** a neuron fires when its activation passes this (0: any non-zero activation) */
  cut = 0;
  hits = 0;
  misses = 0;
  landing = 0;
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

  /** Start a step of layer l; `cut`: its activation threshold (0: none). */
  begin(l: number, cut: number): this {
    this.layer = l;
    this.cut = cut;
    this.hits = this.misses = this.landing = 0;
    this.order.begin(l);
    return this;
  }

  /**
   * Whether a gate value makes its neuron fire: ReLU family g > 0, otherwise any non-zero
   * activation; with a threshold, |act(g)| above it (as the dense path's ffn_act_cut).
   */
  fires(g: number): boolean {
    if (this.mode === "dense") return true;
    const cut = this.cut;
    if (!ACTIVATIONS[this.act].exactZeros) return cut === 0 ? g !== 0 : Math.abs(gateActivation(this.act, g)) > cut;
    return g > cut;
  }

  /**
   * File the neuron at stored position k with gate value g (predictor mode: 1) as a hit, a landing
   * hit (its slot still being read ahead) or a miss, if it fires.
   */
  file(k: number, g: number): void {
    if (!this.fires(g)) return;
    this.order.mark(k, g);
    const slot = this.cache.lookup(this.layer, k);
    if (slot >= 0 && this.cache.isPinned(slot)) this.landing++;
    else if (slot >= 0) this.hits++;
    else this.missPos[this.misses++] = k;
  }
}
