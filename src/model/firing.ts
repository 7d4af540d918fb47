/**
 * The firing law a synthetic model plants (src/offline/synth.ts, `--sparsity`): per layer, the
 * FFN neuron of rank r fires with probability c (r+1)^-alpha, clamped to [FIRING_FLOOR,
 * FIRING_CAP], c chosen so the mean is 1 - sparsity; ranks are dealt to neuron indices by a
 * seeded shuffle per layer, so hot neurons are scattered across the matrix. `plannedFiring` gives
 * the rate planted in each neuron: what a profile of the model should find, and what the planner
 * and the benchmarks assume of a synthetic model without profiling it.
 *
 * The seeded random streams the shuffle draws from are here too: the synthetic generator draws
 * every tensor from the same kind of stream, seeded from (seed, tensor name).
 */

// ---------------------------------------------------------------------------------------------
// Random streams

/** 64-bit FNV-1a of a string, folded to 32 bits: a stable per-tensor stream id. */
function hashName(s: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < s.length; i++) {
    h ^= s.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** xoshiro128** state, advanced in bulk by fillRandom. */
export class SynthStream {
  s = new Int32Array(4);
  constructor(seed: number, name: string) {
    let x = (hashName(name) ^ Math.imul(seed >>> 0, 0x9e3779b1) ^ Math.floor(seed / 4294967296)) | 0;
    for (let i = 0; i < 4; i++) {
      // splitmix32
      x = (x + 0x9e3779b9) | 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      this.s[i] = z ^ (z >>> 16);
    }
    if ((this.s[0] | this.s[1] | this.s[2] | this.s[3]) === 0) this.s[0] = 1;
  }
}

/** Fill words[0..n) with random bits. State lives in locals for the loop (this is the hot loop). */
export function fillRandom(st: SynthStream, words: Uint32Array, n: number): void {
  let s0 = st.s[0],
    s1 = st.s[1],
    s2 = st.s[2],
    s3 = st.s[3];
  for (let i = 0; i < n; i++) {
    const m = Math.imul(s1, 5);
    const r = (m << 7) | (m >>> 25);
    words[i] = Math.imul(r, 9);
    const t = s1 << 9;
    s2 ^= s0;
    s3 ^= s1;
    s1 ^= s2;
    s0 ^= s3;
    s2 ^= t;
    s3 = (s3 << 11) | (s3 >>> 21);
  }
  st.s[0] = s0;
  st.s[1] = s1;
  st.s[2] = s2;
  st.s[3] = s3;
}

// ---------------------------------------------------------------------------------------------
// The law

/** Like measured ReLU LLMs: the top 10% of neurons give about half the firings at sparsity 0.9. */
export const SPARSITY_ALPHA_DEFAULT = 1;
/** Even the hottest neuron of a real ReLU model rests sometimes. */
export const FIRING_CAP = 0.95;
/** Keeps the biases bounded (|z| < 3.8) when alpha is large. */
export const FIRING_FLOOR = 1e-4;

const lawCache = new Map<string, Float64Array>();

/**
 * Firing probability of the neuron of each rank (descending): c (r+1)^-alpha clamped to
 * [FIRING_FLOOR, FIRING_CAP], with c set so the mean is 1 - sparsity.
 */
export function powerLawFrequencies(n: number, sparsity: number, alpha: number): Float64Array {
  const key = `${n}:${sparsity}:${alpha}`;
  const hit = lawCache.get(key);
  if (hit) return hit;
  const target = 1 - sparsity;
  if (!(target > FIRING_FLOOR && target < FIRING_CAP))
    throw new RangeError(`firing frequencies: mean ${target} is outside (${FIRING_FLOOR}, ${FIRING_CAP})`);
  const base = new Float64Array(n);
  for (let r = 0; r < n; r++) base[r] = Math.pow(r + 1, -alpha);
  const p = new Float64Array(n);
  const fill = (logc: number) => {
    const c = Math.exp(logc);
    let s = 0;
    for (let r = 0; r < n; r++) s += p[r] = Math.min(FIRING_CAP, Math.max(FIRING_FLOOR, c * base[r]));
    return s / n;
  };
  // the mean is non-decreasing in c: bisect on log c
  let lo = -80;
  let hi = 80;
  for (let it = 0; it < 200; it++) {
    const mid = (lo + hi) / 2;
    if (fill(mid) < target) lo = mid;
    else hi = mid;
  }
  fill((lo + hi) / 2);
  if (lawCache.size >= 16) lawCache.clear();
  lawCache.set(key, p);
  return p;
}

/** Seeded shuffle: order[r] is the neuron index that gets rank r in layer `layer` (or its expert `expert`). */
function neuronOrder(seed: number, layer: number, n: number, expert: number): Uint32Array {
  const order = new Uint32Array(n);
  for (let i = 0; i < n; i++) order[i] = i;
  const words = new Uint32Array(n);
  const key = expert < 0 ? `synth.neuron_order.${layer}` : `synth.neuron_order.${layer}.${expert}`;
  fillRandom(new SynthStream(seed, key), words, n);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor((words[i] / 4294967296) * (i + 1));
    const t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  return order;
}

/**
 * The firing probability planted in each neuron (by index) of one layer: what a profile of the
 * model on varied input should find, up to the accuracy of the construction. For tests and
 * reports; the engine never sees it.
 */
export function plannedFiring(
  seed: number,
  layer: number,
  ffn: number,
  sparsity: number,
  alpha = SPARSITY_ALPHA_DEFAULT,
  /** a mixture's expert (each has its own hot neurons); -1 for a dense layer */
  expert = -1,
): Float64Array {
  const law = powerLawFrequencies(ffn, sparsity, alpha);
  const order = neuronOrder(seed, layer, ffn, expert);
  const p = new Float64Array(ffn);
  for (let r = 0; r < ffn; r++) p[order[r]] = law[r];
  return p;
}
