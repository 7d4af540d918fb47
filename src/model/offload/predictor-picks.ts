/**
 * Predictor mode: the predictor's scores pick a token's neurons; no gate row is read or kept (a
 * picked neuron's whole bundle is computed, and a false alarm's gate computes to zero). The hot
 * region is scanned in clusters of HOT_CLUSTER neurons, adjacent in the hot-first order and so
 * of similar firing rates: a cluster of which the predictor picks at least HOT_DENSE_SHARE is
 * computed whole in one run over its contiguous slots; of the others just the picked neurons.
 * With a power law of firing rates the top clusters fire nearly whole and the tail of a large hot
 * region fires a few percent: computing it all would multiply the FFN's work.
 */
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { MatrixRunner } from "../matrix-runner.js";
import type { GateSource } from "./gate-source.js";
import { HOT_CLUSTER, type NeuronLists } from "./neuron-lists.js";
import type { Predictor } from "./predictor.js";
import type { OffloadStats } from "./stats.js";

/** Share of a hot cluster's neurons the predictor must pick for the cluster to be computed whole. */
export const HOT_DENSE_SHARE = 0.75;

export class PredictorPicks implements GateSource {
  /** the stored positions the predictor picked in the cluster being scanned */
  private readonly inCluster = new Int32Array(HOT_CLUSTER);

  constructor(
    readonly predictor: Predictor,
    private readonly mm: MatrixRunner,
    private readonly cache: NeuronCache,
    private readonly nEmbd: number,
    /** a neuron is picked when its score exceeds this */
    private readonly threshold: number,
    private readonly stats: OffloadStats,
  ) {}

  pick(lists: NeuronLists, _x: number, residual: number): void {
    const l = lists.layer;
    const t = performance.now();
    this.predictor.scores(this.mm, l, residual, this.nEmbd, lists.gateOut);
    this.stats.computeMs += performance.now() - t;
    const f32 = lists.f32;
    const hot = this.cache.hotCount[l];
    // scores come in the store's order (the predictor's fc2 rows were loaded in it)
    const s0 = lists.gateOut >>> 2;
    const thr = this.threshold;
    const inCluster = this.inCluster;
    for (let c0 = 0; c0 < hot; c0 += HOT_CLUSTER) {
      const c1 = Math.min(hot, c0 + HOT_CLUSTER);
      let picked = 0;
      for (let k = c0; k < c1; k++) if (f32[s0 + k] > thr) inCluster[picked++] = k;
      if (picked === 0) continue;
      if (picked >= HOT_DENSE_SHARE * (c1 - c0)) lists.fileRun(c0, c1 - c0, picked);
      else for (let i = 0; i < picked; i++) lists.file(inCluster[i], 1);
    }
    for (let k = hot; k < lists.nFF; k++) if (f32[s0 + k] > thr) lists.file(k, 1);
  }
}
