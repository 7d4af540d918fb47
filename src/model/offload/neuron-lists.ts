/**
 * The neurons one FFN step (a token of a layer) computes, filed as they are found:
 * - hits: bundles in memory, as lists the sparse kernels read (addresses and gate values in wasm
 *   memory);
 * - misses: stored positions and gate values of bundles to read from flash first;
 * - landing hits: bundles whose read ahead is still in flight (their slots pinned), by stored
 *   position and gate value, computed once the reads for the group have landed;
 * - dense runs (predictor mode): hot clusters computed whole over their contiguous slots.
 * Laid out once; `begin` starts a step.
 */
import { ACTIVATIONS, gateActivation } from "../../format/activations.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { Arena } from "../../runtime/arena.js";
import type { SparseActivation } from "../../runtime/sparse-kernels.js";
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
  /** whether the hits have been computed (flash gate sources compute them while their reads are in flight) */
  hitsDone = false;
  /** dense runs: stored start and count of each hot cluster computed whole, and their neurons */
  runs = 0;
  runNeurons = 0;
  readonly runStart: Int32Array;
  readonly runCount: Int32Array;
  /** wasm addresses: gate values (or predictor scores) of the step, hit bundle addresses and gates, miss bundle addresses and gates */
  readonly gateOut: number;
  readonly hitList: number;
  readonly hitGates: number;
  readonly missList: number;
  readonly missGates: number;
  /** the misses' stored positions and gate values */
  readonly missPos: Int32Array;
  readonly missGateValues: Float32Array;
  /** the landing hits' stored positions and gate values */
  readonly landingPos: Int32Array;
  readonly landingGateValues: Float32Array;
  /** views over the whole wasm memory: see takeViews */
  f32: Float32Array = new Float32Array(0);
  i32: Int32Array = new Int32Array(0);

  constructor(
    arena: Arena,
    readonly nFF: number,
    private readonly cache: NeuronCache,
    private readonly act: SparseActivation,
    private readonly mode: SparsityMode,
  ) {
    // five of ffnBufferBytes' six lists (the sixth is the read-ahead's scores)
    this.gateOut = arena.alloc(nFF * 4, 64);
    this.hitList = arena.alloc(nFF * 4, 64);
    this.hitGates = arena.alloc(nFF * 4, 64);
    this.missList = arena.alloc(nFF * 4, 64);
    this.missGates = arena.alloc(nFF * 4, 64);
    this.missPos = new Int32Array(nFF);
    this.missGateValues = new Float32Array(nFF);
    this.landingPos = new Int32Array(nFF);
    this.landingGateValues = new Float32Array(nFF);
    this.runStart = new Int32Array(Math.ceil(nFF / HOT_CLUSTER));
    this.runCount = new Int32Array(Math.ceil(nFF / HOT_CLUSTER));
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
    this.hits = this.misses = this.landing = this.runs = this.runNeurons = 0;
    this.hitsDone = false;
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
    const slot = this.cache.lookup(this.layer, k);
    if (slot >= 0 && this.cache.isPinned(slot)) {
      this.landingPos[this.landing] = k;
      this.landingGateValues[this.landing++] = g;
    } else if (slot >= 0) {
      this.i32[(this.hitList >>> 2) + this.hits] = this.cache.address(slot);
      this.f32[(this.hitGates >>> 2) + this.hits] = g;
      this.hits++;
    } else this.fileMiss(k, g);
  }

  /** File the neuron at stored position k with gate value g as a miss. */
  fileMiss(k: number, g: number): void {
    this.missPos[this.misses] = k;
    this.missGateValues[this.misses++] = g;
  }

  /** A hot cluster [start, start + count) computed whole; `picked` of its neurons were asked for (counted as hot hits). */
  fileRun(start: number, count: number, picked: number): void {
    this.runStart[this.runs] = start;
    this.runCount[this.runs++] = count;
    this.runNeurons += count;
    this.cache.countHot(this.layer, picked);
  }
}
