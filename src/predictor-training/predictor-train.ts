/**
 * Training PowerInfer's activation predictor for one FFN layer: a bias-free two-layer MLP,
 * `score = fc2 . relu(fc1 . x)`, that says from the residual stream x (before the FFN norm)
 * which neurons will fire; a neuron is predicted active when its score exceeds a threshold.
 *
 * - Data: n samples of x (nIn f32) and the true activation mask (nOut bits, packed in u32 words).
 * - Input scale: the residual's magnitude differs per dimension and grows with depth, so x is
 *   divided by each dimension's RMS over the training samples while training; the division is
 *   folded into fc1's columns at the end, so the engine feeds the raw residual.
 * - Loss: binary cross-entropy on the scores as logits, positives weighted (they are rare: 6-26%
 *   of neurons per token on relu-stories), minimized by minibatch Adam on the training kernels
 *   (assembly/train.ts) over the thread pool.
 * - Threshold: the engine compares every layer's scores with one global threshold, and a bias-free
 *   network cannot shift its scores by a constant. It can shift them by a multiple of its own
 *   hidden activity: subtracting `shift` from every weight of fc2 gives
 *   (fc2 - shift) . h = fc2 . h - shift * sum(h), so "score' > 0" is "score / sum(h) > shift".
 *   That ratio does not change when x is scaled, like the true ReLU mask (the FFN norm divides x
 *   by its RMS, so sign(gate) depends on x's direction only). `shift` is chosen on a validation
 *   split (samples never trained on) as the largest value whose recall there reaches the target,
 *   and folded into fc2; the predictor then fires at the global threshold 0 (PowerInfer's
 *   default), whatever each layer needed.
 *
 * Everything the kernels touch lives in one arena laid out for the largest width, so training
 * several widths and layers allocates nothing after construction.
 */
import { Arena } from "../runtime/arena.js";
import { ThreadPool } from "../runtime/pool.js";
import { TrainKernels } from "./train-kernels.js";

/** Samples of one layer: x rows (n x nIn, f32) and target bits (n x words u32, bit j of row r = neuron j fired). */
export interface LayerSamples {
  n: number;
  nIn: number;
  nOut: number;
  words: number;
  x: Float32Array;
  mask: Uint32Array;
}

/** u32 words per mask row. */
export function maskWords(nOut: number): number {
  return Math.ceil(nOut / 32);
}

export interface TrainSettings {
  hidden: number;
  /** passes over the training samples (default 8) */
  epochs?: number;
  /** samples per step (default 256) */
  batch?: number;
  /** Adam step size (default 5e-3, decayed linearly to a tenth over the run) */
  lr?: number;
  /** weight of a positive sample's loss (default: sqrt(negatives / positives), at least 1) */
  posWeight?: number;
  /** recall the threshold is chosen for on the validation samples (default 0.95) */
  recall?: number;
  seed?: number;
  /** called after every step with (steps done, steps in all) */
  onStep?: (done: number, total: number) => void;
}

/** How a predictor's active set compares with the true one on some samples. */
export interface PredictorQuality {
  samples: number;
  /** true positives / all true actives */
  recall: number;
  /** true positives / all predicted actives */
  precision: number;
  /** predicted actives / (samples x neurons) */
  predictedShare: number;
  /** true actives / (samples x neurons) */
  trueShare: number;
}

/** A predictor's weights in the engine's layout (trained here, or planted by the synthesizer). */
export interface PredictorWeights {
  hidden: number;
  nIn: number;
  nOut: number;
  /** hidden x nIn, row-major (GGUF fc1.weight: dims [nIn, hidden]); the input scale is folded in */
  fc1: Float32Array;
  /** nOut x hidden, row-major (GGUF fc2.weight: dims [hidden, nOut]) */
  fc2: Float32Array;
  /** a neuron is active when its score exceeds this */
  threshold: number;
}

export interface TrainedPredictor extends PredictorWeights {
  /**
   * a neuron is active when its score exceeds this: always 0, since the layer's own calibrated
   * threshold is folded into fc2 (see `shift`)
   */
  threshold: number;
  /**
   * The calibration folded into fc2: the validation recall target holds for
   * score > shift * sum(hidden), and (fc2 - shift) . hidden > 0 is the same test.
   */
  shift: number;
  /** on the validation samples, at `threshold` */
  validation: PredictorQuality;
  /** mean training loss of the last epoch (per output, weighted) */
  loss: number;
  seconds: number;
}

/** Counts of a predictor against the truth. */
export class QualityCounter {
  tp = 0;
  fp = 0;
  fn = 0;
  samples = 0;
  constructor(readonly nOut: number) {}

  /** Add `rows` rows of scores (nOut each) against their mask rows, at `threshold`. */
  add(scores: Float32Array, mask: Uint32Array, maskRow0: number, rows: number, words: number, threshold: number): void {
    const nOut = this.nOut;
    let tp = 0,
      fp = 0,
      fn = 0;
    for (let r = 0; r < rows; r++) {
      const s0 = r * nOut;
      const m0 = (maskRow0 + r) * words;
      for (let j = 0; j < nOut; j++) {
        const y = (mask[m0 + (j >>> 5)] >>> (j & 31)) & 1;
        const p = scores[s0 + j] > threshold;
        if (p) {
          if (y) tp++;
          else fp++;
        } else if (y) fn++;
      }
    }
    this.tp += tp;
    this.fp += fp;
    this.fn += fn;
    this.samples += rows;
  }

  merge(o: QualityCounter): void {
    this.tp += o.tp;
    this.fp += o.fp;
    this.fn += o.fn;
    this.samples += o.samples;
  }

  result(): PredictorQuality {
    const cells = this.samples * this.nOut;
    return {
      samples: this.samples,
      recall: this.tp + this.fn > 0 ? this.tp / (this.tp + this.fn) : 1,
      precision: this.tp + this.fp > 0 ? this.tp / (this.tp + this.fp) : 1,
      predictedShare: cells > 0 ? (this.tp + this.fp) / cells : 0,
      trueShare: cells > 0 ? (this.tp + this.fn) / cells : 0,
    };
  }
}

/** mulberry32: a small seeded PRNG, so a run is reproducible from --seed. */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** A standard normal sample (Box-Muller). */
function gaussian(rnd: () => number): number {
  const u = Math.max(rnd(), 1e-12);
  return Math.sqrt(-2 * Math.log(u)) * Math.cos(2 * Math.PI * rnd());
}

/** Count of set bits over a mask. */
export function countBits(mask: Uint32Array, from = 0, to = mask.length): number {
  let c = 0;
  for (let i = from; i < to; i++) {
    let v = mask[i];
    v = v - ((v >>> 1) & 0x55555555);
    v = (v & 0x33333333) + ((v >>> 2) & 0x33333333);
    c += Math.imul((v + (v >>> 4)) & 0x0f0f0f0f, 0x01010101) >>> 24;
  }
  return c;
}

/**
 * Trains predictors for layers of one shape (nIn -> nOut) up to `maxHidden` hidden units, on a
 * pool of its own. dispose() when done.
 */
export class PredictorTrainer {
  private readonly k: TrainKernels;
  private readonly f32: () => Float32Array;
  private readonly u32: () => Uint32Array;
  private readonly words: number;
  // wasm buffers (byte offsets)
  private readonly w1: number;
  private readonly w2: number;
  private readonly g1: number;
  private readonly g2: number;
  private readonly m1: number;
  private readonly m2: number;
  private readonly v1: number;
  private readonly v2: number;
  private readonly xb: number;
  private readonly hb: number;
  private readonly sb: number;
  private readonly dh: number;
  private readonly mb: number;
  private readonly lb: number;

  private constructor(
    private readonly arena: Arena,
    private readonly pool: ThreadPool,
    readonly nIn: number,
    readonly nOut: number,
    readonly maxHidden: number,
    readonly batch: number,
  ) {
    this.k = new TrainKernels(pool);
    this.words = maskWords(nOut);
    const f = (count: number) => arena.alloc(count * 4, 64);
    const p1 = maxHidden * nIn,
      p2 = nOut * maxHidden;
    this.w1 = f(p1);
    this.g1 = f(p1);
    this.m1 = f(p1);
    this.v1 = f(p1);
    this.w2 = f(p2);
    this.g2 = f(p2);
    this.m2 = f(p2);
    this.v2 = f(p2);
    this.xb = f(batch * nIn);
    this.hb = f(batch * maxHidden);
    this.dh = f(batch * maxHidden);
    this.sb = f(batch * nOut);
    this.mb = f(batch * this.words);
    this.lb = f(batch);
    this.f32 = () => new Float32Array(arena.memory.buffer);
    this.u32 = () => new Uint32Array(arena.memory.buffer);
  }

  static async create(
    nIn: number,
    nOut: number,
    maxHidden: number,
    threads: number,
    batch = 256,
  ): Promise<PredictorTrainer> {
    for (const [what, v] of [
      ["input width", nIn],
      ["output width", nOut],
      ["hidden width", maxHidden],
      ["batch", batch],
    ] as const) {
      if (!Number.isInteger(v) || v < 1)
        throw new RangeError(`predictor trainer: ${what} ${v} is not a positive integer`);
    }
    const arena = new Arena(16 << 20);
    const pool = await ThreadPool.create(arena.memory, threads);
    return new PredictorTrainer(arena, pool, nIn, nOut, maxHidden, batch);
  }

  async dispose(): Promise<void> {
    await this.pool.dispose();
  }

  /**
   * Train on samples [0, trainEnd) of `data`, choose the threshold on [trainEnd, n).
   */
  train(data: LayerSamples, trainEnd: number, s: TrainSettings): TrainedPredictor {
    const t0 = performance.now();
    const { nIn, nOut, words, batch } = this;
    const h = s.hidden;
    if (data.nIn !== nIn || data.nOut !== nOut || data.words !== words)
      throw new Error(`predictor trainer: samples are ${data.nIn} -> ${data.nOut}, the trainer ${nIn} -> ${nOut}`);
    if (!Number.isInteger(h) || h < 1 || h > this.maxHidden)
      throw new RangeError(`predictor trainer: hidden width ${h} is outside 1..${this.maxHidden}`);
    if (!(trainEnd >= batch && trainEnd < data.n))
      throw new RangeError(
        `predictor trainer: ${trainEnd} training samples of ${data.n}: need at least one batch (${batch}) to train and one sample to validate`,
      );
    this.loaded = null; // training overwrites the weight buffers
    const epochs = s.epochs ?? 8;
    const lr0 = s.lr ?? 5e-3;
    const target = s.recall ?? 0.95;
    const rnd = seededRandom(s.seed ?? 1);

    // input scale: 1 / RMS per dimension over the training samples
    const scale = inputScale(data, trainEnd);
    const pos = countBits(data.mask, 0, trainEnd * words);
    const neg = trainEnd * nOut - pos;
    const wpos = s.posWeight ?? Math.max(1, Math.sqrt(neg / Math.max(1, pos)));

    // init: He-normal fc1 (inputs have unit RMS), small fc2
    let f32 = this.f32();
    const w1 = f32.subarray(this.w1 >>> 2, (this.w1 >>> 2) + h * nIn);
    const w2 = f32.subarray(this.w2 >>> 2, (this.w2 >>> 2) + nOut * h);
    const s1 = Math.sqrt(2 / nIn),
      s2 = Math.sqrt(1 / h);
    for (let i = 0; i < w1.length; i++) w1[i] = gaussian(rnd) * s1;
    for (let i = 0; i < w2.length; i++) w2[i] = gaussian(rnd) * s2;
    for (const p of [this.m1, this.v1]) f32.fill(0, p >>> 2, (p >>> 2) + h * nIn);
    for (const p of [this.m2, this.v2]) f32.fill(0, p >>> 2, (p >>> 2) + nOut * h);

    const steps = Math.floor(trainEnd / batch);
    const total = epochs * steps;
    const order = new Int32Array(trainEnd);
    for (let i = 0; i < trainEnd; i++) order[i] = i;
    let step = 0;
    let lossSum = 0;
    for (let e = 0; e < epochs; e++) {
      // Fisher-Yates shuffle per epoch
      for (let i = trainEnd - 1; i > 0; i--) {
        const j = Math.floor(rnd() * (i + 1));
        const t = order[i];
        order[i] = order[j];
        order[j] = t;
      }
      lossSum = 0;
      for (let b = 0; b < steps; b++) {
        this.loadBatch(data, order, b * batch, batch, scale);
        const lr = lr0 * (1 - (0.9 * step) / total);
        lossSum += this.step(h, batch, wpos, ++step, lr);
        s.onStep?.(step, total);
      }
    }
    const loss = total > 0 ? lossSum / (steps * batch * nOut) : NaN;

    // Calibrate on the validation samples: a neuron is active when score > shift * |hidden|_1
    // (see `shift`), and `shift` is the largest value that keeps the recall target there.
    const ratios = this.positiveRatios(data, trainEnd, data.n, h, scale);
    const shift = thresholdForRecall(ratios, target);
    const q = new QualityCounter(nOut);
    const shifted = new Float32Array(batch * nOut);
    this.forEachScores(data, trainEnd, data.n, h, scale, (scores, row0, rows, hsum) => {
      for (let r = 0; r < rows; r++) {
        const o = shift * hsum[r];
        for (let j = 0; j < nOut; j++) shifted[r * nOut + j] = scores[r * nOut + j] - o;
      }
      q.add(shifted, data.mask, row0, rows, words, 0);
    });

    f32 = this.f32();
    const fc1 = f32.slice(this.w1 >>> 2, (this.w1 >>> 2) + h * nIn);
    for (let j = 0; j < h; j++) for (let i = 0; i < nIn; i++) fc1[j * nIn + i] *= scale[i];
    const fc2 = f32.slice(this.w2 >>> 2, (this.w2 >>> 2) + nOut * h);
    // fold the shift: (fc2 - shift) . h = fc2 . h - shift * sum(h), compared with 0
    for (let i = 0; i < fc2.length; i++) fc2[i] -= shift;
    return {
      hidden: h,
      nIn,
      nOut,
      fc1,
      fc2,
      threshold: 0,
      shift,
      validation: q.result(),
      loss,
      seconds: (performance.now() - t0) / 1000,
    };
  }

  /** the predictor whose weights sit in the weight buffers for score() */
  private loaded: TrainedPredictor | null = null;

  /**
   * Scores of a trained predictor for n raw inputs (n x nIn, n <= batch), as the engine computes
   * them: a view into wasm memory, valid until the next call. Allocates nothing.
   */
  score(p: TrainedPredictor, x: Float32Array, n: number): Float32Array {
    if (p.nIn !== this.nIn || p.nOut !== this.nOut || p.hidden > this.maxHidden)
      throw new Error(`predictor ${p.nIn} -> ${p.hidden} -> ${p.nOut} does not fit this trainer`);
    if (!(n >= 1 && n <= this.batch)) throw new RangeError(`score: ${n} rows, the batch holds 1..${this.batch}`);
    const f32 = this.f32();
    if (this.loaded !== p) {
      f32.set(p.fc1, this.w1 >>> 2);
      f32.set(p.fc2, this.w2 >>> 2);
      this.loaded = p;
    }
    f32.set(x.subarray(0, n * this.nIn), this.xb >>> 2);
    this.forward(p.hidden, n);
    return new Float32Array(this.arena.memory.buffer, this.sb, n * this.nOut);
  }

  /** Copy samples order[from..from+rows) into the batch buffers, x scaled. */
  private loadBatch(
    data: LayerSamples,
    order: Int32Array | null,
    from: number,
    rows: number,
    scale: Float32Array,
  ): void {
    const f32 = this.f32(),
      u32 = this.u32();
    const { nIn, words } = this;
    const xb = this.xb >>> 2,
      mb = this.mb >>> 2;
    for (let r = 0; r < rows; r++) {
      const i = order ? order[from + r] : from + r;
      const src = i * nIn,
        dst = xb + r * nIn;
      for (let c = 0; c < nIn; c++) f32[dst + c] = data.x[src + c] * scale[c];
      u32.set(data.mask.subarray(i * words, (i + 1) * words), mb + r * words);
    }
  }

  /** Forward pass of `rows` batch rows: H = relu(X . W1^T), S = H . W2^T. */
  private forward(h: number, rows: number): void {
    const k = this.k;
    k.mmNT(this.xb, this.w1, this.hb, rows, h, this.nIn);
    k.relu(this.hb, rows * h);
    k.mmNT(this.hb, this.w2, this.sb, rows, this.nOut, h);
  }

  /** One Adam step on the loaded batch; returns the batch's summed weighted loss. */
  private step(h: number, rows: number, wpos: number, t: number, lr: number): number {
    const k = this.k;
    const { nIn, nOut } = this;
    this.forward(h, rows);
    // dS (in place of S), averaged over the batch's outputs
    k.bce(this.sb, this.mb, this.sb, rows, nOut, this.words, wpos, 1 / rows, this.lb);
    k.mmTN(this.sb, this.hb, this.g2, nOut, h, rows); // dW2 = dS^T . H
    k.mmNN(this.sb, this.w2, this.dh, rows, h, nOut); // dH = dS . W2
    k.reluGrad(this.dh, this.hb, rows * h);
    k.mmTN(this.dh, this.xb, this.g1, h, nIn, rows); // dW1 = dH^T . X
    k.adam(this.w1, this.g1, this.m1, this.v1, h * nIn, t, lr);
    k.adam(this.w2, this.g2, this.m2, this.v2, nOut * h, t, lr);
    const f32 = this.f32();
    let loss = 0;
    for (let r = 0; r < rows; r++) loss += f32[(this.lb >>> 2) + r];
    return loss;
  }

  /**
   * Scores of samples [from, to) in batches: fn(scores view, first sample, rows, hsum), where
   * hsum[r] is the sum of row r's hidden activations (|relu(fc1 . x)|_1).
   */
  private forEachScores(
    data: LayerSamples,
    from: number,
    to: number,
    h: number,
    scale: Float32Array,
    fn: (scores: Float32Array, row0: number, rows: number, hsum: Float32Array) => void,
  ): void {
    const hsum = new Float32Array(this.batch);
    for (let r0 = from; r0 < to; r0 += this.batch) {
      const rows = Math.min(this.batch, to - r0);
      this.loadBatch(data, null, r0, rows, scale);
      this.forward(h, rows);
      const hid = new Float32Array(this.arena.memory.buffer, this.hb, rows * h);
      for (let r = 0; r < rows; r++) {
        let t = 0;
        for (let j = 0; j < h; j++) t += hid[r * h + j];
        hsum[r] = t;
      }
      fn(new Float32Array(this.arena.memory.buffer, this.sb, rows * this.nOut), r0, rows, hsum);
    }
  }

  /**
   * For every true active among samples [from, to): its score divided by the sum of its
   * sample's hidden activations (-Infinity where that sum is 0: such a sample scores 0
   * everywhere and never passes a threshold of 0).
   */
  private positiveRatios(data: LayerSamples, from: number, to: number, h: number, scale: Float32Array): Float32Array {
    const words = this.words,
      nOut = this.nOut;
    const out = new Float32Array(countBits(data.mask, from * words, to * words));
    let n = 0;
    this.forEachScores(data, from, to, h, scale, (scores, row0, rows, hsum) => {
      for (let r = 0; r < rows; r++) {
        const m0 = (row0 + r) * words;
        const inv = hsum[r] > 0 ? 1 / hsum[r] : 0;
        for (let j = 0; j < nOut; j++) {
          if ((data.mask[m0 + (j >>> 5)] >>> (j & 31)) & 1) out[n++] = inv > 0 ? scores[r * nOut + j] * inv : -Infinity;
        }
      }
    });
    return out;
  }
}

/** 1 / RMS of each input dimension over samples [0, n) (1 for a dimension that is always 0). */
export function inputScale(data: LayerSamples, n: number): Float32Array {
  const { nIn, x } = data;
  const ss = new Float64Array(nIn);
  for (let r = 0; r < n; r++) {
    const o = r * nIn;
    for (let c = 0; c < nIn; c++) ss[c] += x[o + c] * x[o + c];
  }
  const out = new Float32Array(nIn);
  for (let c = 0; c < nIn; c++) {
    const rms = Math.sqrt(ss[c] / Math.max(1, n));
    out[c] = rms > 1e-12 ? 1 / rms : 1;
  }
  return out;
}

/**
 * The largest threshold t (scores strictly above t are active) at which at least `recall` of
 * the given positive scores are active: halfway between the score that must still pass and the
 * next lower one, so f32 rounding in the engine cannot flip it.
 */
export function thresholdForRecall(positives: Float32Array, recall: number): number {
  if (!(recall > 0 && recall <= 1)) throw new RangeError(`recall target ${recall} is not in (0, 1]`);
  if (positives.length === 0) return Infinity;
  const sorted = Float32Array.from(positives).sort();
  // at most `drop` positives may fall at or below the threshold; -Infinity marks one that no
  // threshold lets through, so the best reachable is just below the lowest finite value
  let drop = Math.floor((1 - recall) * sorted.length + 1e-9);
  let finite = 0;
  while (finite < sorted.length && sorted[finite] === -Infinity) finite++;
  if (finite === sorted.length) return 0;
  if (drop < finite) drop = finite;
  const keep = sorted[drop];
  const below = drop > finite ? sorted[drop - 1] : keep - Math.max(1e-3, Math.abs(keep) * 1e-3);
  return below < keep ? (below + keep) / 2 : Math.fround(keep) - Math.max(1e-6, Math.abs(keep) * 1e-6);
}
