/**
 * Predictor mode: the predictor's scores pick a token's neurons; no gate row is read or kept (a
 * picked neuron's whole bundle is computed, and a false alarm's gate computes to zero). Exactly
 * the picked neurons are computed, whatever the hot region holds: computing a hot cluster whole
 * (its unpicked neurons too) would make the output depend on the budget that sized the hot region.
 */
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { MatrixRunner } from "../matrix-runner.js";
import type { GateSource } from "./gate-source.js";
import type { FFNStep } from "./ffn-step.js";
import type { NeuronLists } from "./neuron-lists.js";
import type { Predictor } from "./predictor.js";

/**
 * Share of a hot cluster's neurons the predictor picks above which the planner's cost model
 * (src/planner/hot-runs.ts) prices the cluster as one run over contiguous slots.
 */
export const HOT_DENSE_SHARE = 0.75;

export class PredictorPicks implements GateSource {
  constructor(
    readonly predictor: Predictor,
    private readonly mm: MatrixRunner,
    private readonly cache: NeuronCache,
    private readonly nEmbd: number,
    /** a neuron is picked when its score exceeds this */
    private readonly threshold: number,
  ) {}

  pick(step: FFNStep, lists: NeuronLists, _x: number, residual: number): void {
    const l = step.layer;
    const t = performance.now();
    this.predictor.scores(this.mm, l, residual, this.nEmbd, lists.gateOut);
    step.computeMs += performance.now() - t;
    const f32 = lists.f32;
    // scores come in the store's order (the predictor's fc2 rows were loaded in it)
    const s0 = lists.gateOut >>> 2;
    const thr = this.threshold;
    for (let k = 0; k < lists.nFF; k++) if (f32[s0 + k] > thr) lists.file(step, k, 1);
  }
}
