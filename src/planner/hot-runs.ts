/**
 * Predictor mode's hot clusters (predictor-picks.ts): a cluster of HOT_CLUSTER adjacent hot
 * neurons is computed whole when at least HOT_DENSE_SHARE of it is picked. The picked count is a
 * sum of independent Bernoulli trials (the firing rates); its chance to reach the cut, and the
 * picks it then covers, from a normal approximation with a continuity correction. An expert's
 * clusters are looked at only when a token is routed to it: its rates given that (per token
 * divided by the routing share), the result weighted by the share.
 */
import { normalCdf, type Firing } from "../io/hit-model.js";
import { HOT_CLUSTER } from "../model/offload/neuron-lists.js";
import { HOT_DENSE_SHARE } from "../model/offload/predictor-picks.js";
import { routedShare, type ModelShape } from "./model-shape.js";

/** Per layer: expected neurons of the hot clusters computed whole, and how many of their picks those cover. */
export interface HotRuns {
  neurons: Float64Array;
  picked: Float64Array;
}

/**
 * What `make` computes from these rates and this hot split, kept: the search asks for the same
 * rates and hot split many times (every queue depth, thread count, pipeline).
 */
export function perSplit<T>(
  memo: WeakMap<Firing, Map<string, T>>,
  firing: Firing,
  hotPerGroup: readonly number[],
  make: () => T,
): T {
  let byKey = memo.get(firing);
  if (!byKey) memo.set(firing, (byKey = new Map()));
  const key = hotPerGroup.join(",");
  let have = byKey.get(key);
  if (have === undefined) byKey.set(key, (have = make()));
  return have;
}

const runsMemo = new WeakMap<Firing, Map<string, HotRuns>>();

export function hotRuns(shape: ModelShape, firing: Firing, hotPerGroup: readonly number[]): HotRuns {
  return perSplit(runsMemo, firing, hotPerGroup, () => computeHotRuns(shape, firing, hotPerGroup));
}

function computeHotRuns(shape: ModelShape, firing: Firing, hotPerGroup: readonly number[]): HotRuns {
  const perLayer = Math.max(1, shape.experts);
  const runs: HotRuns = { neurons: new Float64Array(shape.nLayer), picked: new Float64Array(shape.nLayer) };
  for (let g = 0; g < firing.layers.length; g++) {
    const l = Math.floor(g / perLayer);
    const share = routedShare(shape, g);
    if (!(share > 0)) continue;
    const p = firing.layers[g];
    const hot = hotPerGroup[g];
    for (let c0 = 0; c0 < Math.min(hot, p.length); c0 += HOT_CLUSTER) {
      const c1 = Math.min(hot, p.length, c0 + HOT_CLUSTER);
      let mu = 0,
        v = 0;
      for (let k = c0; k < c1; k++) {
        const q = Math.min(1, p[k] / share);
        mu += q;
        v += q * (1 - q);
      }
      const cut = Math.ceil(HOT_DENSE_SHARE * (c1 - c0) - 1e-9);
      let chance: number, covered: number;
      if (v < 1e-12) {
        chance = mu >= cut - 1e-9 ? 1 : 0;
        covered = chance * mu;
      } else {
        const sd = Math.sqrt(v);
        const z = (cut - 0.5 - mu) / sd;
        chance = 1 - normalCdf(z);
        covered = Math.min(mu, Math.max(0, mu * chance + sd * normalPdf(z)));
      }
      runs.neurons[l] += share * chance * (c1 - c0);
      runs.picked[l] += share * covered;
    }
  }
  return runs;
}

function normalPdf(z: number): number {
  return Math.exp(-0.5 * z * z) / Math.sqrt(2 * Math.PI);
}
