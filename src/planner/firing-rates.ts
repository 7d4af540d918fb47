/**
 * Per-neuron firing rates of a store, the cost model's input: the profile's, the rates a
 * synthetic model's generator planted, or one assumed rate.
 */
import type { NeuronStore } from "../format/store/index.js";
import { evenRoutingShare, type Firing } from "../io/hit-model.js";
import type { ModelConfig } from "../model/config.js";
import { plannedFiring } from "../model/firing.js";

/** Firing assumed per neuron when a store has no profile (a ReLU-fied model's typical ~90% sparsity). */
export const ASSUMED_FIRING = 0.1;

/**
 * Per-neuron firing probability per token, in stored order: the profile's frequencies when the
 * store was converted with one; else, for a synthetic model (synth metadata), the rates its
 * generator planted; else every neuron alike at `assumed` (SiLU without thresholds: 1, since no
 * activation is exactly zero).
 */
export function firingOf(store: NeuronStore, cfg: ModelConfig, assumed?: number): Firing {
  // per group: the layers, or a mixture's (layer, expert) groups, each with its per-token rates
  const L = store.ffn.layers.length;
  const layers: Float64Array[] = [];
  if (assumed === undefined && store.ffn.layers.every((l) => l.frequency !== null)) {
    for (let l = 0; l < L; l++) {
      const Ls = store.layer(l);
      const p = new Float64Array(Ls.neurons);
      for (let k = 0; k < Ls.neurons; k++) p[k] = Math.min(1, Math.max(0, Ls.frequency![Ls.order[k]]));
      layers.push(p);
    }
    const prof = store.manifest.profile;
    return {
      layers,
      source: `the store's activation profile${prof?.file ? ` (${prof.file}${prof.tokens ? `, ${prof.tokens} tokens` : ""})` : ""}`,
    };
  }
  if (assumed === undefined && store.has("synth.sparsity") && store.has("synth.seed")) {
    // stored as f32: back to the decimal synth was given (0.9, not 0.8999999762)
    const sparsity = Number(store.getNumber("synth.sparsity").toPrecision(6));
    const alpha = store.has("synth.alpha") ? Number(store.getNumber("synth.alpha").toPrecision(6)) : undefined;
    const seed = Number(store.metadata.get("synth.seed"));
    // a mixture: each expert's own planted rates when routed, times its routing share (the
    // generator plants firing, not routing: every expert taken as routed alike)
    const E = store.ffn.experts;
    const share = evenRoutingShare(E, cfg.nExpertUsed);
    for (let g = 0; g < L; g++) {
      const Ls = store.layer(g);
      const planted =
        E > 0
          ? plannedFiring(seed, Math.floor(g / E), Ls.neurons, sparsity, alpha, g % E)
          : plannedFiring(seed, g, Ls.neurons, sparsity, alpha);
      const p = new Float64Array(Ls.neurons);
      for (let k = 0; k < Ls.neurons; k++) p[k] = share * planted[Ls.order[k]];
      layers.push(p);
    }
    return {
      layers,
      source: `no profile in the store: the firing rates its generator planted (synthetic model, sparsity ${sparsity}${alpha !== undefined ? `, alpha ${alpha}` : ""})`,
    };
  }
  const silu =
    (cfg.activation === "silu" || cfg.activation === "gelu") && !store.has("powerinfer.activation_thresholds");
  const p0 = assumed ?? (silu ? 1 : ASSUMED_FIRING);
  if (!(p0 > 0 && p0 <= 1)) throw new RangeError(`firing rate must be in (0, 1], got ${p0}`);
  // per token: a mixture's expert fires only on the tokens routed to it, taken as routed alike
  const share = evenRoutingShare(store.ffn.experts, cfg.nExpertUsed);
  for (let l = 0; l < L; l++) layers.push(new Float64Array(store.layer(l).neurons).fill(p0 * share));
  const why =
    assumed !== undefined
      ? "as given"
      : silu
        ? `${cfg.activation} without activation thresholds: no activation is exactly zero`
        : "assumed (no profile in the store; convert with --profile for a better plan)";
  return {
    layers,
    source: `every neuron fires with probability ${p0}${store.ffn.experts > 0 ? ` on the tokens routed to its expert (every expert routed alike: ${+share.toFixed(4)} of tokens)` : ""} (${why}); no hot-first order, so the hot set is no hotter than the rest`,
  };
}

/** Expected firing neurons per token over every group: the sum of the rates. */
export function firingSum(f: Firing): number {
  return f.layers.reduce((a, p) => a + p.reduce((s, v) => s + v, 0), 0);
}
