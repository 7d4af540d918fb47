/**
 * The expected behaviour of the segmented neuron cache (neuron-cache.ts) from per-neuron firing
 * rates: how often a token's firing neurons hit the hot region and the cold LRU. The planner's
 * cost model builds on it, and the runtime uses it to pick a default hot share.
 *
 * Hits (independent firing per token, neuron i of layer l with probability p): a hot neuron always
 * hits. The cold LRU follows Che's approximation: the cache keeps what was asked for within the
 * last tau tokens, tau solving  sum over cold neurons (1 - (1 - p)^tau) = cold slots; it starts
 * empty, so at decode step j (after a prompt of P tokens, whose batched prefill touches the union
 * of their neurons) a cold neuron hits when it was asked for within the last P + j tokens and
 * survived since (whole tokens, a survival chance per age: see below; in effect
 * 1 - (1 - p)^floor(tau) with a soft edge).
 */

/**
 * Per-neuron firing probability per token, per layer, in stored order (position k = the k-th
 * bundle of the layer). A mixture of experts has one entry per (layer, expert) group, layer-major,
 * each neuron's rate per token (its expert's routing share times its firing when routed).
 */
export interface Firing {
  layers: Float64Array[];
  /** where the numbers come from, in words (profile, planted by synth, assumed) */
  source: string;
}

/**
 * A mixture's routing share per expert when nothing measured it: each token runs `used` of
 * `experts`, every expert taken as routed alike (1 for a dense FFN: experts 0).
 */
export function evenRoutingShare(experts: number, used: number): number {
  return experts > 0 ? used / experts : 1;
}

/** Log-spaced bins of firing probability: enough resolution for the hit model, fast to sum. */
const BINS = 240;
const P_MIN = 1e-7;
const binOf = (p: number) =>
  Math.min(BINS - 1, Math.max(0, Math.floor((Math.log(p / P_MIN) / Math.log(1 / P_MIN)) * BINS)));

/** Expected cache behaviour per layer at each decode step. */
export interface HitProfile {
  /** firing neurons per token, per layer */
  firing: Float64Array;
  /** hot hits per token, per layer */
  hot: Float64Array;
  /** [step][layer]: cold hits per token */
  cold: Float64Array[];
  /** [step][layer]: bundles of the layer in the cold region (the gate-reading mode computes their gates from memory) */
  coldHeld: Float64Array[];
  /** Che's characteristic time in tokens (Infinity: the cold region holds every cold neuron that fires) */
  tau: number;
}

/**
 * Expected hits of a cache with `hot` pinned positions per layer (or per group: a mixture's
 * experts each their own) and `coldSlots` LRU slots, at
 * decode steps 0..steps-1 after a prompt of `prompt` tokens.
 */
export function hitProfile(
  firing: Firing,
  hot: number | ArrayLike<number>,
  coldSlots: number,
  prompt: number,
  steps: number,
): HitProfile {
  const L = firing.layers.length;
  const count = new Float64Array(L * BINS);
  const sumP = new Float64Array(L * BINS);
  const fire = new Float64Array(L);
  const hotHits = new Float64Array(L);
  let coldItems = 0;
  for (let l = 0; l < L; l++) {
    const p = firing.layers[l];
    const hotHere = typeof hot === "number" ? hot : hot[l];
    for (let k = 0; k < p.length; k++) {
      const v = p[k];
      if (!(v > 0)) continue;
      fire[l] += v;
      if (k < hotHere) {
        hotHits[l] += v;
        continue;
      }
      const b = l * BINS + binOf(v);
      count[b]++;
      sumP[b] += v;
      coldItems++;
    }
  }
  // representative probability of each (layer, bin): the mean of its neurons
  const rep = new Float64Array(L * BINS);
  for (let i = 0; i < rep.length; i++) rep[i] = count[i] > 0 ? Math.min(1, sumP[i] / count[i]) : 0;
  // How many distinct cold bundles some tokens ask for does not depend on their layer: the sums
  // that find tau and the survival chances run over the bins of all layers together (a bin is 7%
  // wide in probability; a mixture's thousand groups times 240 bins, summed ~100 times, were
  // seconds of a load)
  const allCount = new Float64Array(BINS);
  const allSumP = new Float64Array(BINS);
  for (let i = 0; i < count.length; i++) {
    allCount[i % BINS] += count[i];
    allSumP[i % BINS] += sumP[i];
  }
  let used = 0;
  const usedCount = new Float64Array(BINS);
  const usedRep = new Float64Array(BINS);
  for (let b = 0; b < BINS; b++)
    if (allCount[b] > 0) {
      usedCount[used] = allCount[b];
      usedRep[used++] = Math.min(1, allSumP[b] / allCount[b]);
    }
  const occupancy = (t: number) => {
    let s = 0;
    for (let u = 0; u < used; u++) s += usedCount[u] * (1 - Math.pow(1 - usedRep[u], t));
    return s;
  };
  let tau = Infinity;
  if (coldItems > coldSlots) {
    if (coldSlots <= 0) tau = 0;
    else {
      // occupancy grows with t from 0 to coldItems: bisect in log t
      let lo = 0,
        hi = 1;
      while (occupancy(hi) < coldSlots && hi < 1e12) hi *= 2;
      for (let it = 0; it < 80; it++) {
        const mid = (lo + hi) / 2;
        if (occupancy(mid) < coldSlots) lo = mid;
        else hi = mid;
      }
      tau = (lo + hi) / 2;
    }
  }
  // The runtime visits layers in order, each (layer, neuron) at most once per token, so a cold
  // bundle is asked for again whole tokens later, and it is still there when fewer than
  // `coldSlots` other bundles were asked for in between (LRU). survives[k - 1]: the chance of that
  // k tokens on, the distinct bundles asked for in k tokens taken as a normal variable (a sum of
  // independent firings). A cold region that a single token's misses overrun keeps nothing until
  // the same layer comes round again (measured: 0 cold hits), where Che's continuous approximation
  // would still give 1 - (1 - p)^tau.
  const most = prompt + steps;
  const survives: number[] = [];
  for (let k = 1; k <= most; k++) {
    if (tau === Infinity) {
      survives.push(1);
      continue;
    }
    let mean = 0,
      variance = 0;
    for (let u = 0; u < used; u++) {
      const q = 1 - Math.pow(1 - usedRep[u], k);
      mean += usedCount[u] * q;
      variance += usedCount[u] * q * (1 - q);
    }
    const z = (coldSlots - 0.5 - mean) / Math.sqrt(Math.max(variance, 1e-12));
    const sk = normalCdf(z);
    if (sk < 1e-7) break;
    survives.push(sk);
  }
  // per (layer, bin): the chance a neuron asked for within the last `age` tokens is still held
  const heldWithin = (i: number, age: number) => {
    let q = 0,
      last = 1;
    const r = rep[i];
    for (let k = 1; k <= Math.min(age, survives.length); k++) {
      q += last * r * survives[k - 1];
      last *= 1 - r;
    }
    return q;
  };
  const cold: Float64Array[] = [];
  const held: Float64Array[] = [];
  for (let j = 0; j < steps; j++) {
    const c = new Float64Array(L);
    const h = new Float64Array(L);
    for (let l = 0; l < L; l++) {
      let hits = 0,
        n = 0;
      for (let b = 0; b < BINS; b++) {
        const i = l * BINS + b;
        if (count[i] === 0) continue;
        const q = heldWithin(i, prompt + j);
        hits += sumP[i] * q;
        n += count[i] * q;
      }
      c[l] = hits;
      h[l] = n;
    }
    cold.push(c);
    held.push(h);
  }
  return { firing: fire, hot: hotHits, cold, coldHeld: held, tau };
}

/** The standard normal CDF (Abramowitz and Stegun 7.1.26, error under 1.5e-7). */
export function normalCdf(z: number): number {
  const x = Math.abs(z) / Math.SQRT2;
  const t = 1 / (1 + 0.3275911 * x);
  const erf =
    1 -
    ((((1.061405429 * t - 1.453152027) * t + 1.421413741) * t - 0.284496736) * t + 0.254829592) * t * Math.exp(-x * x);
  return z >= 0 ? 0.5 * (1 + erf) : 0.5 * (1 - erf);
}
