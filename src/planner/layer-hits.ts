/**
 * The hit profile per layer, what the step models work with: for a mixture of experts, sums over
 * the layer's experts of the per-token figures (firing, hot hits, cold hits), and of what the
 * routed experts hold (positions pinned hot, bundles in the cold region), weighted by routing:
 * only a routed expert's gates are computed or streamed. A dense model's profile passes through.
 */
import type { HitProfile } from "../io/hit-model.js";
import type { OffloadLayout } from "../model/offload/layout.js";
import { routedShare, type ModelShape } from "./model-shape.js";

export interface LayerHits extends HitProfile {
  /** per layer: the routed experts' positions pinned in the hot region (expected) */
  hotHeld: Float64Array;
  /** FFNs each token runs per layer (1: dense) */
  routedExperts: number;
}

export function layerHits(shape: ModelShape, layout: OffloadLayout, hp: HitProfile): LayerHits {
  const E = shape.experts;
  if (E === 0) {
    return { ...hp, hotHeld: new Float64Array(shape.nLayer).fill(layout.hotPerLayer), routedExperts: 1 };
  }
  const L = shape.nLayer;
  const sum = (a: Float64Array, weighted: boolean) => {
    const out = new Float64Array(L);
    for (let g = 0; g < a.length; g++) out[Math.floor(g / E)] += (weighted ? routedShare(shape, g) : 1) * a[g];
    return out;
  };
  const pinned = Float64Array.from(layout.hotPerGroup);
  return {
    firing: sum(hp.firing, false),
    hot: sum(hp.hot, false),
    cold: hp.cold.map((c) => sum(c, false)),
    coldHeld: hp.coldHeld.map((c) => sum(c, true)),
    tau: hp.tau,
    hotHeld: sum(pinned, true),
    routedExperts: shape.expertsUsed,
  };
}
