/**
 * Token sampler with llama.cpp's default chain and llama-server's defaults:
 *
 *   penalties -> top_k -> top_p -> min_p -> temperature -> draw from the distribution
 *
 * temperature <= 0 is greedy: the argmax of the penalised logits (ties go to the lowest id). That
 * is what the chain gives too, since every filter keeps the best candidate.
 *
 * The chain's order matters and follows llama.cpp's: top_p and min_p see the distribution at
 * temperature 1 over the candidates that top_k left, and temperature only reshapes the survivors.
 *
 * Every buffer is sized to the vocabulary on the first call and reused afterwards, so sampling a
 * token allocates nothing (the decode loop must not feed the garbage collector).
 */
import { randomBytes } from "node:crypto";

export interface SamplerOptions {
  /** 0 (or less) = greedy. Default 0.8. */
  temperature?: number;
  /** keep the k most likely tokens; 0 or less disables. Default 40. */
  topK?: number;
  /** keep the smallest prefix whose probability reaches p; 1 disables. Default 0.95. */
  topP?: number;
  /** drop tokens whose probability is below minP times the best one's; 0 disables. Default 0.05. */
  minP?: number;
  /** divide positive (multiply negative) logits of recent tokens by this; 1 disables. Default 1. */
  repeatPenalty?: number;
  /** how many recent accepted tokens the penalties look at; 0 disables them. Default 64. */
  repeatLastN?: number;
  /** subtract this times the token's count in the window (OpenAI's frequency_penalty). Default 0. */
  frequencyPenalty?: number;
  /** subtract this once from every token present in the window (OpenAI's presence_penalty). Default 0. */
  presencePenalty?: number;
  /** RNG seed (any integer); omitted = a random seed. Same seed, same logits, same tokens. */
  seed?: number;
}

export const SAMPLER_DEFAULTS = Object.freeze({
  temperature: 0.8,
  topK: 40,
  topP: 0.95,
  minP: 0.05,
  repeatPenalty: 1.0,
  repeatLastN: 64,
  frequencyPenalty: 0,
  presencePenalty: 0,
});

/**
 * xoshiro128** (Blackman and Vigna): 128 bits of state, 32-bit output, a handful of integer ops.
 * Seeded through splitmix32 so that nearby seeds give unrelated streams and no state is all zero.
 */
export class Xoshiro128 {
  private s0 = 0;
  private s1 = 0;
  private s2 = 0;
  private s3 = 0;

  constructor(seed: number) {
    this.seed(seed);
  }

  seed(seed: number): void {
    // Fold a seed above 2^32 into 32 bits without losing its high part.
    let x = (seed >>> 0) ^ Math.floor(seed / 4294967296);
    const next = () => {
      x = (x + 0x9e3779b9) | 0;
      let z = x;
      z = Math.imul(z ^ (z >>> 16), 0x85ebca6b);
      z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35);
      return (z ^ (z >>> 16)) | 0;
    };
    this.s0 = next();
    this.s1 = next();
    this.s2 = next();
    this.s3 = next();
    if ((this.s0 | this.s1 | this.s2 | this.s3) === 0) this.s0 = 1;
  }

  /** Next 32 random bits as an unsigned integer. */
  nextU32(): number {
    const s0 = this.s0,
      s1 = this.s1,
      s2 = this.s2,
      s3 = this.s3;
    const r = Math.imul(rotl(Math.imul(s1, 5), 7), 9);
    const t = s1 << 9;
    const n2 = s2 ^ s0;
    const n3 = s3 ^ s1;
    this.s1 = s1 ^ n2;
    this.s0 = s0 ^ n3;
    this.s2 = n2 ^ t;
    this.s3 = rotl(n3, 11);
    return r >>> 0;
  }

  /** Uniform double in [0, 1) with 53 random bits. */
  nextFloat(): number {
    const hi = this.nextU32() >>> 5; // 27 bits
    const lo = this.nextU32() >>> 6; // 26 bits
    return (hi * 67108864 + lo) / 9007199254740992;
  }
}

function rotl(x: number, k: number): number {
  return (x << k) | (x >>> (32 - k));
}

function checkFinite(name: string, v: number): number {
  if (!Number.isFinite(v)) throw new RangeError(`sampler option ${name} must be a finite number, got ${v}`);
  return v;
}

export class Sampler {
  readonly temperature: number;
  readonly topK: number;
  readonly topP: number;
  readonly minP: number;
  readonly repeatPenalty: number;
  readonly repeatLastN: number;
  readonly frequencyPenalty: number;
  readonly presencePenalty: number;
  readonly seed: number;
  private rng: Xoshiro128;

  /** recent accepted tokens (ring buffer) for the penalties */
  private history: Int32Array;
  private historyLen = 0;
  private historyPos = 0;

  // Sized to the vocabulary on the first sample().
  private nVocab = 0;
  /** penalised logits */
  private work = new Float32Array(0);
  /** candidate token ids; after selection, idx[0..n) is sorted best first */
  private idx = new Int32Array(0);
  /** probabilities of the candidates */
  private prob = new Float64Array(0);
  /** per-token count within the penalty window (zeroed again after each use) */
  private counts = new Int32Array(0);
  /** sort keys for sortAll */
  private keys = new Float64Array(0);
  private workBits = new Uint32Array(0);
  /** selectNucleus's sum of exp(logit - max) over every candidate */
  private nucleusTotal = 0;
  /** the last draw's candidates (idx/prob[0..drawn), weights summing to drawnSum); 0 after a greedy pick */
  private drawn = 0;
  private drawnSum = 0;

  constructor(options: SamplerOptions = {}) {
    const o = { ...SAMPLER_DEFAULTS, ...stripUndefined(options) };
    this.temperature = checkFinite("temperature", o.temperature);
    this.topK = Math.trunc(checkFinite("topK", o.topK));
    this.topP = checkFinite("topP", o.topP);
    this.minP = checkFinite("minP", o.minP);
    this.repeatPenalty = checkFinite("repeatPenalty", o.repeatPenalty);
    this.repeatLastN = Math.trunc(checkFinite("repeatLastN", o.repeatLastN));
    this.frequencyPenalty = checkFinite("frequencyPenalty", o.frequencyPenalty);
    this.presencePenalty = checkFinite("presencePenalty", o.presencePenalty);
    if (this.topP < 0 || this.topP > 1) throw new RangeError(`sampler option topP must be in [0, 1], got ${this.topP}`);
    if (this.minP < 0 || this.minP > 1) throw new RangeError(`sampler option minP must be in [0, 1], got ${this.minP}`);
    if (this.repeatPenalty <= 0)
      throw new RangeError(`sampler option repeatPenalty must be > 0, got ${this.repeatPenalty}`);
    if (this.repeatLastN < 0) throw new RangeError(`sampler option repeatLastN must be >= 0, got ${this.repeatLastN}`);
    if (options.seed !== undefined && !Number.isInteger(options.seed))
      throw new RangeError(`sampler option seed must be an integer, got ${options.seed}`);
    this.seed = options.seed ?? randomBytes(4).readUInt32LE(0);
    this.rng = new Xoshiro128(this.seed);
    // Grown as tokens arrive (accept): a window larger than the tokens ever seen (repeatLastN 1e9)
    // must not reserve memory for them.
    this.history = new Int32Array(Math.min(this.repeatLastN, 256));
  }

  /** Forget the penalty history and restart the RNG from the seed. */
  reset(): void {
    this.historyLen = 0;
    this.historyPos = 0;
    this.rng.seed(this.seed);
  }

  /** Record a token (prompt or generated) for the repetition penalties. */
  accept(token: number): void {
    if (this.repeatLastN === 0) return;
    if (this.historyLen === this.history.length && this.historyLen < this.repeatLastN) {
      // Not yet wrapped (it wraps only at full repeatLastN), so the tokens are in order: copy them.
      const grown = new Int32Array(Math.min(this.repeatLastN, 2 * this.history.length));
      grown.set(this.history);
      this.history = grown;
    }
    this.history[this.historyPos] = token;
    this.historyPos = (this.historyPos + 1) % this.repeatLastN;
    if (this.historyLen < this.repeatLastN) this.historyLen++;
  }

  /**
   * Pick the next token from a row of logits (which is not modified). `allowed`: when given, only
   * tokens whose entry is non-zero can be picked (constrained decoding's mask).
   */
  sample(logits: Float32Array, allowed?: Uint8Array): number {
    const n = logits.length;
    if (n === 0) throw new RangeError("sampler: empty logits");
    this.ensureCapacity(n);
    const work = this.work;
    work.set(logits);
    if (allowed) for (let i = 0; i < n; i++) if (allowed[i] === 0) work[i] = -Infinity;
    this.applyPenalties(work, n);
    this.drawn = 0;

    if (this.temperature <= 0) return this.argmax(work, n);

    // top_k (with selection, so that a small k costs O(n log k) instead of a full sort); top_p
    // needs its candidates sorted, so without top_k it sorts them all.
    let m: number;
    const k = this.topK > 0 && this.topK < n ? this.topK : n;
    // Probability mass of all candidates relative to the best, when idx holds only a prefix.
    let prefixOnlyTotal = 0;
    if (k < n) {
      m = this.selectTop(work, n, k);
    } else if (this.topP < 1) {
      m = this.selectNucleus(work, n);
      prefixOnlyTotal = this.nucleusTotal;
    } else {
      m = 0;
      for (let i = 0; i < n; i++) if (work[i] === work[i] && work[i] !== -Infinity) this.idx[m++] = i;
    }
    if (m === 0) throw new RangeError("sampler: every logit is -Infinity or NaN");
    const idx = this.idx;
    const prob = this.prob;

    let maxLogit = -Infinity;
    for (let i = 0; i < m; i++) if (work[idx[i]] > maxLogit) maxLogit = work[idx[i]];

    // top_p on the temperature-1 distribution of the survivors.
    if (this.topP < 1) {
      let sum = 0;
      for (let i = 0; i < m; i++) {
        const p = Math.exp(work[idx[i]] - maxLogit);
        prob[i] = p;
        sum += p;
      }
      const target = this.topP * (prefixOnlyTotal > 0 ? prefixOnlyTotal : sum);
      let cum = 0;
      let keep = m;
      for (let i = 0; i < m; i++) {
        cum += prob[i];
        if (cum >= target) {
          keep = i + 1;
          break;
        }
      }
      m = keep;
    }

    // min_p: p_i >= minP * p_max  <=>  logit_i >= maxLogit + ln(minP); the best always stays.
    if (this.minP > 0) {
      const threshold = maxLogit + Math.log(this.minP);
      let w = 0;
      for (let i = 0; i < m; i++) {
        const t = idx[i];
        if (work[t] >= threshold) idx[w++] = t;
      }
      m = w;
    }

    // temperature, then one draw.
    const invT = 1 / this.temperature;
    let sum = 0;
    for (let i = 0; i < m; i++) {
      const p = Math.exp((work[idx[i]] - maxLogit) * invT);
      prob[i] = p;
      sum += p;
    }
    this.drawn = m;
    this.drawnSum = sum;
    const r = this.rng.nextFloat() * sum;
    let cum = 0;
    for (let i = 0; i < m; i++) {
      cum += prob[i];
      if (r < cum) return idx[i];
    }
    // Rounding can leave r a hair above the final sum: the last candidate with weight takes it.
    for (let i = m - 1; i >= 0; i--) if (prob[i] > 0) return idx[i];
    return idx[0];
  }

  /**
   * The distribution the last sample() drew from, for OpenAI's logprobs: the log-probability of
   * `chosen` and of the `top` most probable tokens, best first. Sampling (temperature > 0): the
   * candidates the filters kept, at the temperature (a token the filters dropped had probability
   * 0 and is not listed, so fewer than `top` may come back). Greedy: the softmax of the penalised
   * logits at temperature 1, whose most probable token greedy picks. Call it only when logprobs
   * are asked for: it allocates the answer.
   */
  lastLogprobs(chosen: number, top: number): TokenLogprobs {
    const work = this.work;
    const n = this.nVocab;
    const picks: { id: number; logprob: number }[] = [];
    if (this.drawn === 0) {
      let max = -Infinity;
      for (let i = 0; i < n; i++) if (work[i] > max) max = work[i];
      let sum = 0;
      for (let i = 0; i < n; i++) if (work[i] > -Infinity) sum += Math.exp(work[i] - max);
      const norm = max + Math.log(sum);
      for (const id of topIndices(work, n, top)) picks.push({ id, logprob: work[id] - norm });
      return { id: chosen, logprob: work[chosen] - norm, top: picks };
    }
    const m = this.drawn;
    const logSum = Math.log(this.drawnSum);
    let logprob = -Infinity;
    for (let i = 0; i < m; i++) if (this.idx[i] === chosen) logprob = Math.log(this.prob[i]) - logSum;
    // the candidates' weights, best first (idx order is not always sorted)
    const weights = this.keys.subarray(0, m);
    for (let i = 0; i < m; i++) weights[i] = this.prob[i];
    for (const i of topIndices(weights, m, top))
      picks.push({ id: this.idx[i], logprob: Math.log(this.prob[i]) - logSum });
    return { id: chosen, logprob, top: picks };
  }

  private ensureCapacity(n: number): void {
    if (n === this.nVocab) return;
    if (this.nVocab !== 0) throw new RangeError(`sampler: logits length changed from ${this.nVocab} to ${n}`);
    this.nVocab = n;
    this.work = new Float32Array(n);
    this.idx = new Int32Array(n);
    this.prob = new Float64Array(n);
    this.counts = new Int32Array(n);
    if (n > MAX_SORT_VOCAB)
      throw new RangeError(`sampler: vocabulary of ${n} tokens is above the supported ${MAX_SORT_VOCAB}`);
    this.keys = new Float64Array(n);
    this.workBits = new Uint32Array(this.work.buffer);
  }

  private applyPenalties(work: Float32Array, n: number): void {
    const len = this.historyLen;
    if (len === 0) return;
    if (this.repeatPenalty === 1 && this.frequencyPenalty === 0 && this.presencePenalty === 0) return;
    const h = this.history;
    const counts = this.counts;
    for (let i = 0; i < len; i++) {
      const t = h[i];
      if (t >= 0 && t < n) counts[t]++;
    }
    for (let i = 0; i < len; i++) {
      const t = h[i];
      if (t < 0 || t >= n) continue;
      const c = counts[t];
      if (c === 0) continue; // already penalised (repeat penalty counts a token once, as llama.cpp does)
      let l = work[t];
      l = l <= 0 ? l * this.repeatPenalty : l / this.repeatPenalty;
      l -= c * this.frequencyPenalty + this.presencePenalty;
      work[t] = l;
      counts[t] = 0;
    }
  }

  private argmax(work: Float32Array, n: number): number {
    let best = -1;
    let bestV = -Infinity;
    for (let i = 0; i < n; i++) {
      const v = work[i];
      if (v > bestV) {
        bestV = v;
        best = i;
      }
    }
    if (best < 0) throw new RangeError("sampler: every logit is -Infinity or NaN");
    return best;
  }

  /**
   * Without top_k, top_p still needs its candidates in order, but only as far as the cut: select
   * the best 256 and check that their mass reaches top_p of the whole (a full sort of a 32K vocabulary
   * costs ~20x more). Returns a sorted prefix that contains top_p's survivors.
   */
  private selectNucleus(work: Float32Array, n: number): number {
    let maxLogit = -Infinity;
    for (let i = 0; i < n; i++) if (work[i] > maxLogit) maxLogit = work[i];
    if (maxLogit === -Infinity) return 0;
    let total = 0;
    for (let i = 0; i < n; i++) {
      const v = work[i];
      if (v > -Infinity) total += Math.exp(v - maxLogit);
    }
    const target = this.topP * total;
    this.nucleusTotal = total;
    // One cheap try for a peaked distribution (the usual case), else sort everything.
    for (let k = 256; ; k = n) {
      if (k * 4 >= n) return this.sortAll(work, n);
      const m = this.selectTop(work, n, k);
      if (m < k) return m; // everything else is -Infinity
      let cum = 0;
      for (let i = 0; i < m; i++) cum += Math.exp(work[this.idx[i]] - maxLogit);
      if (cum >= target) return m;
    }
  }

  /**
   * Every candidate, best first, by the engine's native numeric sort (about twice as fast as the
   * heap here). Each key packs the logit's bits, mapped so that unsigned order is float order and
   * inverted so that ascending means best first, above the token id, which breaks ties towards
   * the lower id. 32 bits + 20 bits stays exact in a double.
   */
  private sortAll(work: Float32Array, n: number): number {
    const bits = this.workBits;
    const keys = this.keys;
    let m = 0;
    for (let i = 0; i < n; i++) {
      if (!(work[i] > -Infinity)) continue;
      const b = bits[i];
      const ordered = b & 0x80000000 ? ~b >>> 0 : (b | 0x80000000) >>> 0;
      keys[m++] = (0xffffffff - ordered) * 1048576 + i;
    }
    // Sort the whole buffer (a subarray view would allocate): the unused tail sorts last.
    keys.fill(Infinity, m, n);
    keys.sort();
    const idx = this.idx;
    for (let i = 0; i < m; i++) idx[i] = keys[i] % 1048576;
    return m;
  }

  /**
   * The k best candidates (higher logit first, lower id first on ties) into idx[0..k), sorted.
   * A min-heap of size k keeps the best seen so far; its root is the weakest of them. NaN and
   * -Infinity never enter. Returns how many were found (fewer than k if the rest are -Infinity).
   */
  private selectTop(work: Float32Array, n: number, k: number): number {
    const idx = this.idx;
    let size = 0;
    for (let i = 0; i < n; i++) {
      const v = work[i];
      if (!(v > -Infinity)) continue;
      if (size < k) {
        // sift up: the new element rises while it is weaker than its parent
        let c = size++;
        while (c > 0) {
          const p = (c - 1) >> 1;
          const pi = idx[p];
          if (!worse(v, i, work[pi], pi)) break;
          idx[c] = pi;
          c = p;
        }
        idx[c] = i;
      } else {
        const r = idx[0];
        // i arrives after r, so it wins only with a strictly greater logit
        if (!(v > work[r])) continue;
        siftDown(work, idx, size, i);
      }
    }
    // Heap sort in place: repeatedly move the weakest to the end, leaving best-first order.
    for (let end = size - 1; end > 0; end--) {
      const weakest = idx[0];
      const last = idx[end];
      idx[end] = weakest;
      siftDown(work, idx, end, last);
    }
    return size;
  }
}

/** A sampled token's log-probability and the most probable alternatives (lastLogprobs). */
export interface TokenLogprobs {
  id: number;
  logprob: number;
  top: { id: number; logprob: number }[];
}

/** Indices of the k largest finite values of v[0..n), largest first (ties: lower index first). One pass. */
function topIndices(v: ArrayLike<number>, n: number, k: number): number[] {
  const out: number[] = [];
  if (k <= 0) return out;
  for (let i = 0; i < n; i++) {
    const x = v[i];
    if (!(x > -Infinity)) continue;
    if (out.length === k && !(x > v[out[k - 1]])) continue;
    // in place of the weakest (or appended), then moved up past weaker ones; equals stay behind
    let j: number;
    if (out.length < k) j = out.push(i) - 1;
    else out[(j = k - 1)] = i;
    while (j > 0 && x > v[out[j - 1]]) {
      out[j] = out[j - 1];
      out[--j] = i;
    }
  }
  return out;
}

/** sortAll packs token ids into 20 bits */
const MAX_SORT_VOCAB = 1 << 20;

/** Whether candidate a (logit va, id ia) ranks below candidate b. */
function worse(va: number, ia: number, vb: number, ib: number): boolean {
  return va < vb || (va === vb && ia > ib);
}

/** Put token t at the root of a min-heap idx[0..size) and sink it to its place. */
function siftDown(work: Float32Array, idx: Int32Array, size: number, t: number): void {
  const v = work[t];
  let c = 0;
  for (;;) {
    const l = 2 * c + 1;
    if (l >= size) break;
    let w = l;
    const r = l + 1;
    if (r < size && worse(work[idx[r]], idx[r], work[idx[l]], idx[l])) w = r;
    const wi = idx[w];
    if (!worse(work[wi], wi, v, t)) break;
    idx[c] = wi;
    c = w;
  }
  idx[c] = t;
}

function stripUndefined<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
