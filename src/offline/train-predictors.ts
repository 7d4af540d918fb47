/**
 * `powerinfer train-predictors`: PowerInfer's activation predictors for a dense GGUF model.
 *
 * 1. Collect: run the model over a text corpus (in context windows, as profile and perplexity
 *    do) and record, per layer and token, the FFN's input as the engine's predictor sees it (the
 *    residual stream before the FFN norm) and which neurons fire: the ReLU gate is positive (dReLU:
 *    gate and up both), or |act(gate)| exceeds the layer's activation threshold where the model
 *    has thresholds (SiLU/GELU models need them: without, every neuron fires).
 * 2. Train: per layer, the bias-free MLP score = fc2 . relu(fc1 . x) (src/predictor-training/predictor-train.ts)
 *    on the first 90% of the samples, calibrated on the last 10% to the recall target plus a
 *    margin; the hidden width grows (64, 128, 256, ...) until the calibrated precision reaches
 *    `minPrecision` or the width reaches `maxHidden`.
 * 3. Measure: run held-out text (another file, or corpus text never trained on) and count, per
 *    layer, the predictor's decisions against the neurons that really fire.
 *
 * The samples of a layer take tokens x (nEmbd + nFF / 32) x 4 bytes; layers are collected in
 * groups that fit `memoryBytes` (one corpus pass per group).
 */
import { GGUFFile } from "../format/gguf.js";
import { f16ToF32, f32ToF16 } from "../format/half.js";
import { readConfig, type Activation, type ModelConfig } from "../model/config.js";
import { isNeuronStore, LlamaModel, THRESHOLDS_KEY } from "../model/model.js";
import { gateMagnitudes } from "./profile.js";
import { Tokenizer } from "../tokenizer/index.js";
import { corpusTokens, readCorpus } from "./corpus.js";
import {
  maskWords,
  PredictorTrainer,
  QualityCounter,
  type LayerSamples,
  type PredictorQuality,
  type TrainedPredictor,
} from "../predictor-training/predictor-train.js";

export class PredictorTrainingError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PredictorTrainingError";
  }
}

export interface TrainPredictorsProgress {
  stage: "collect" | "train" | "heldout";
  /** layer being trained (train), else -1 */
  layer: number;
  /** a mixture of experts: the expert of that layer being trained */
  expert?: number;
  /** hidden width being trained (train), else 0 */
  hidden: number;
  /** units done / in all for this stage: tokens (collect, heldout) or training steps of this width (train) */
  done: number;
  total: number;
}

export interface TrainPredictorsOptions {
  /** a dense GGUF model (not a neuron store: its FFN cannot be observed) */
  model: string;
  /** UTF-8 text to train on */
  corpus: string;
  /** UTF-8 text to measure on; default: corpus text after the training tokens */
  heldout?: string;
  /** training tokens (default 60000); the last 10% of them calibrate the threshold */
  tokens?: number;
  /** held-out tokens (default 30000) */
  heldoutTokens?: number;
  /** recall the predictors should reach on held-out tokens (default 0.95) */
  recall?: number;
  /**
   * recall the threshold is calibrated to on the validation samples (default: recall plus a fifth
   * of what is missing to 1, e.g. 0.96 for 0.95; two fifths for a mixture of experts, 0.97), a
   * margin for the difference between validation and held-out text. A mixture has eight times
   * as many predictors as layers, each calibrated on a quarter of the tokens, so its worst
   * group strays further: on moe-stories at 0.96, 2 of 48 experts measured 94.8-95.0% held out.
   */
  calibrationRecall?: number;
  /** grow the hidden width until the validation precision reaches this (default 0.9) */
  minPrecision?: number;
  /** first hidden width tried (default 64) */
  minHidden?: number;
  /** largest hidden width (default min(1024, nFF)) */
  maxHidden?: number;
  epochs?: number;
  lr?: number;
  /** samples per training step (default: 256, less for small budgets so an epoch has ~128 steps or more) */
  batch?: number;
  seed?: number;
  threads?: number;
  /** context window (default: the model's training context, at most 512) */
  contextSize?: number;
  /** per-layer activation thresholds (e.g. from a profile); default: the model's metadata */
  activationThresholds?: Float32Array;
  /**
   * the type the predictors will be stored in: "f16" rounds the trained weights to f16 before
   * the held-out measurement, so that it measures what is written (default "f32")
   */
  weightType?: "f32" | "f16";
  /** bytes of samples held at once (default 1 GiB) */
  memoryBytes?: number;
  signal?: AbortSignal;
  onProgress?: (p: TrainPredictorsProgress) => void;
}

export interface WidthTrial {
  hidden: number;
  recall: number;
  precision: number;
  seconds: number;
}

export interface LayerReport {
  /** the layer (reports are indexed by group: a layer, or for a mixture layer * experts + expert) */
  layer: number;
  /** a mixture of experts: the expert, and how many routed tokens it was trained and calibrated on */
  expert?: number;
  samples?: number;
  hidden: number;
  /** the calibration folded into fc2 (see TrainedPredictor.shift) */
  shift: number;
  /** every width tried, in order */
  tried: WidthTrial[];
  validation: PredictorQuality;
  heldout: PredictorQuality;
  /** training time of this layer, all widths */
  seconds: number;
}

export interface TrainPredictorsResult {
  predictors: TrainedPredictor[];
  layers: LayerReport[];
  tokens: { train: number; validation: number; heldout: number };
  /** what the masks counted as firing */
  criterion: string;
  recallTarget: number;
  calibrationRecall: number;
  minPrecision: number;
  seconds: { collect: number; train: number; heldout: number; total: number };
  notes: string[];
}

const tick = () => new Promise<void>((r) => setImmediate(r));

/**
 * Which neurons of n rows fire: bit j of row r (row0 + r of `out`, `words` u32 per row) set when
 * neuron j's FFN output is not zero under the model's activation and cut.
 */
export function firingMask(
  kind: Activation,
  cut: number,
  gate: Float32Array,
  up: Float32Array,
  n: number,
  nFF: number,
  out: Uint32Array,
  row0: number,
  words: number,
  mag: Float32Array,
): void {
  out.fill(0, row0 * words, (row0 + n) * words);
  gateMagnitudes(kind, gate, n * nFF, mag);
  for (let r = 0; r < n; r++) {
    const o = (row0 + r) * words;
    const g0 = r * nFF;
    for (let j = 0; j < nFF; j++) {
      // relu family: magnitude = max(gate, 0), so "> cut" with cut 0 is "gate > 0"
      if (mag[g0 + j] > cut && (kind !== "drelu" || up[g0 + j] > 0)) out[o + (j >>> 5)] |= 1 << (j & 31);
    }
  }
}

/** The training tokens and the held-out tokens. */
function readTokens(
  opts: TrainPredictorsOptions,
  tokenizer: Tokenizer,
  train: number,
  heldout: number,
  notes: string[],
): { train: Int32Array; heldout: Int32Array } {
  if (opts.heldout !== undefined) {
    const t = corpusTokens(tokenizer, readCorpus(opts.corpus), { maxTokens: train });
    const h = corpusTokens(tokenizer, readCorpus(opts.heldout), { maxTokens: heldout });
    if (t.length < train)
      notes.push(`the corpus has only ${t.length} tokens (asked for ${train}): trained on all of them`);
    return { train: t, heldout: h };
  }
  // One file: the held-out tokens come after the training tokens, never trained on.
  const all = corpusTokens(tokenizer, readCorpus(opts.corpus), { maxTokens: train + heldout });
  if (all.length >= train + Math.min(heldout, 2048))
    return { train: all.subarray(0, train), heldout: all.subarray(train) };
  const cut = Math.floor(all.length * 0.8);
  notes.push(
    `the corpus has ${all.length} tokens, fewer than ${train} to train plus held-out ones: trained on the first ${cut}, measured on the other ${all.length - cut} (give --heldout FILE for a separate text)`,
  );
  return { train: all.subarray(0, cut), heldout: all.subarray(cut) };
}

/** Run tokens through the model in context windows (each starting with BOS, as profile and perplexity do). */
async function runWindows(
  model: LlamaModel,
  tokens: Int32Array,
  ctx: number,
  batch: number,
  bos: number,
  signal: AbortSignal | undefined,
  onTokens: (done: number) => void,
): Promise<void> {
  const window = new Int32Array(ctx);
  for (let start = 0; start < tokens.length; start += ctx) {
    const len = Math.min(ctx, tokens.length - start);
    window.set(tokens.subarray(start, start + len));
    if (bos >= 0) window[0] = bos;
    for (let j = 0; j < len; j += batch) {
      if (signal?.aborted)
        throw signal.reason instanceof Error ? signal.reason : new PredictorTrainingError("training aborted");
      const n = Math.min(batch, len - j);
      model.forward(window.subarray(j, j + n), n, j);
      onTokens(start + j + n);
      await tick();
    }
  }
}

export async function trainPredictors(opts: TrainPredictorsOptions): Promise<TrainPredictorsResult> {
  const t0 = performance.now();
  if (isNeuronStore(opts.model)) {
    throw new PredictorTrainingError(
      `${opts.model} is a neuron store: training observes the dense FFN, so give the GGUF model it was converted from`,
    );
  }
  const recall = opts.recall ?? 0.95;
  if (!(recall > 0 && recall < 1))
    throw new PredictorTrainingError(`recall target must be between 0 and 1 (exclusive), got ${recall}`);
  if (opts.calibrationRecall !== undefined && !(opts.calibrationRecall >= recall && opts.calibrationRecall <= 1))
    throw new PredictorTrainingError(
      `calibration recall must be between the target ${recall} and 1, got ${opts.calibrationRecall}`,
    );
  const minPrecision = opts.minPrecision ?? 0.9;
  if (!(minPrecision >= 0 && minPrecision <= 1))
    throw new PredictorTrainingError(`minimum precision must be between 0 and 1, got ${minPrecision}`);
  const trainTokens = opts.tokens ?? 60000;
  const heldoutTokens = opts.heldoutTokens ?? 30000;
  for (const [what, v, min] of [
    ["training tokens", trainTokens, 64],
    ["held-out tokens", heldoutTokens, 1],
  ] as const) {
    if (!(Number.isInteger(v) && v >= min))
      throw new PredictorTrainingError(`${what} must be an integer >= ${min}, got ${v}`);
  }

  // Shape and tokenizer first, so bad input fails before the model loads.
  const file = GGUFFile.open(opts.model);
  let cfg: ModelConfig, tokenizer: Tokenizer, hasThresholds: boolean;
  try {
    cfg = readConfig(file);
    tokenizer = Tokenizer.fromGGUF(file);
    hasThresholds = opts.activationThresholds !== undefined || file.has(THRESHOLDS_KEY);
  } finally {
    file.close();
  }
  const kind = cfg.activation;
  const relu = kind === "relu" || kind === "drelu";
  if (!relu && !hasThresholds) {
    throw new PredictorTrainingError(
      `${opts.model} uses ${kind}: its activations are almost never exactly zero, so every neuron fires on every token and there is nothing to predict. ` +
        `Calibrate activation thresholds first (powerinfer profile -m MODEL --corpus FILE --target-sparsity 0.5 -o PROFILE.json) and pass --thresholds PROFILE.json`,
    );
  }
  const { nLayer, nEmbd, nFF } = cfg;
  const calib = opts.calibrationRecall ?? recall + ((1 - recall) * (cfg.nExpert > 0 ? 2 : 1)) / 5;
  const maxHidden = opts.maxHidden ?? Math.min(1024, nFF);
  const minHidden = Math.min(opts.minHidden ?? 64, maxHidden);
  if (!(Number.isInteger(maxHidden) && maxHidden >= 1 && maxHidden <= nFF))
    throw new PredictorTrainingError(
      `largest hidden width must be an integer in 1..${nFF} (the FFN width), got ${maxHidden}`,
    );
  if (!(Number.isInteger(minHidden) && minHidden >= 1))
    throw new PredictorTrainingError(`first hidden width must be a positive integer, got ${opts.minHidden}`);
  const widths: number[] = [];
  for (let h = minHidden; h < maxHidden; h *= 2) widths.push(h);
  widths.push(maxHidden);
  const ctx = opts.contextSize ?? Math.min(cfg.nCtxTrain, 512);
  if (!(Number.isInteger(ctx) && ctx >= 2))
    throw new PredictorTrainingError(`context size must be an integer >= 2, got ${ctx}`);
  const batch = Math.min(256, ctx);

  const notes: string[] = [];
  const toks = readTokens(opts, tokenizer, trainTokens, heldoutTokens, notes);
  const nTrain = toks.train.length;
  const nVal = Math.max(1, Math.floor(nTrain * 0.1));
  if (nTrain - nVal < 256)
    throw new PredictorTrainingError(
      `only ${nTrain} training tokens: at least ${256 + 29} are needed (256 to train, a tenth to calibrate)`,
    );
  if (toks.heldout.length < 1) throw new PredictorTrainingError("no held-out tokens to measure on");

  const model = await LlamaModel.load(opts.model, {
    threads: opts.threads,
    contextSize: ctx,
    batchSize: batch,
    activationThresholds: opts.activationThresholds,
  });
  let trainer: PredictorTrainer | undefined;
  try {
    const cuts = model.thresholds ?? new Float32Array(nLayer);
    // (all-zero thresholds load as none: a SiLU model with them would fire everywhere)
    if (!relu && !model.thresholds)
      throw new PredictorTrainingError(
        `${opts.model}: its activation thresholds are all 0, so every ${kind} neuron fires on every token: nothing to predict`,
      );
    const act = kind === "drelu" ? "relu" : kind;
    const criterion = model.thresholds
      ? `|${act}(gate)| > threshold${kind === "drelu" ? " and up > 0" : ""}`
      : kind === "drelu"
        ? "gate > 0 and up > 0"
        : "gate > 0";
    const words = maskWords(nFF);
    const bos = tokenizer.addBos && tokenizer.bosId >= 0 ? tokenizer.bosId : -1;
    const threads = model.threads;
    // At least ~128 steps per epoch: small budgets get small batches rather than few updates.
    const trainBatch = opts.batch ?? Math.min(256, Math.max(32, 2 ** Math.floor(Math.log2((nTrain - nVal) / 128))));
    trainer = await PredictorTrainer.create(nEmbd, nFF, maxHidden, threads, trainBatch);
    const mag = new Float32Array(batch * nFF);

    // One predictor per group: a layer, or one expert of a mixture's layer (group l * experts + e,
    // trained on the tokens routed to that expert).
    const experts = Math.max(1, cfg.nExpert);
    const groups = nLayer * experts;
    const groupOf = (o: { layer: number; expert?: number }) => o.layer * experts + (o.expert ?? 0);
    const name = (g: number) =>
      cfg.nExpert > 0 ? `layer ${Math.floor(g / experts)} expert ${g % experts}` : `layer ${g}`;
    const perGroup = nTrain * (nEmbd + words) * 4;
    const group = Math.max(1, Math.min(groups, Math.floor((opts.memoryBytes ?? 2 ** 30) / perGroup)));
    const predictors: TrainedPredictor[] = new Array(groups);
    const reports: Omit<LayerReport, "heldout">[] = new Array(groups);
    let collectMs = 0,
      trainMs = 0;
    for (let g0 = 0; g0 < groups; g0 += group) {
      const g1 = Math.min(groups, g0 + group);
      // 1. collect this set of groups' samples: every token's residual (a mixture: every token
      //    routed to the expert) and which neurons fired
      let tc = performance.now();
      const samples: LayerSamples[] = [];
      for (let g = g0; g < g1; g++)
        samples.push({
          n: 0,
          nIn: nEmbd,
          nOut: nFF,
          words,
          x: new Float32Array(nTrain * nEmbd),
          mask: new Uint32Array(nTrain * words),
        });
      model.setFFNObserver((o) => {
        const g = groupOf(o);
        if (g < g0 || g >= g1) return;
        const s = samples[g - g0];
        for (let i = 0; i < o.n; i++) {
          const t = o.tokens ? o.tokens[i] : i;
          s.x.set(o.residual.subarray(t * nEmbd, (t + 1) * nEmbd), (s.n + i) * nEmbd);
        }
        firingMask(kind, cuts[o.layer], o.gate, o.up, o.n, nFF, s.mask, s.n, words, mag);
        s.n += o.n;
      });
      opts.onProgress?.({ stage: "collect", layer: -1, hidden: 0, done: 0, total: nTrain });
      await runWindows(model, toks.train, ctx, batch, bos, opts.signal, (done) =>
        opts.onProgress?.({ stage: "collect", layer: -1, hidden: 0, done, total: nTrain }),
      );
      model.setFFNObserver(null);
      collectMs += performance.now() - tc;

      // 2. train each group, growing the width: the first 90% of its samples train, the rest calibrate
      tc = performance.now();
      for (let g = g0; g < g1; g++) {
        const s = samples[g - g0];
        const val = Math.max(1, Math.floor(s.n * 0.1));
        if (s.n - val < 32)
          throw new PredictorTrainingError(
            `${name(g)}: only ${s.n} training samples (the expert is rarely routed to): give a longer corpus (--tokens)`,
          );
        const tl = performance.now();
        const tried: WidthTrial[] = [];
        let chosen: TrainedPredictor | undefined;
        let best: TrainedPredictor | undefined;
        for (const h of widths) {
          if (opts.signal?.aborted)
            throw opts.signal.reason instanceof Error
              ? opts.signal.reason
              : new PredictorTrainingError("training aborted");
          const p = trainer.train(s, s.n - val, {
            hidden: h,
            epochs: opts.epochs,
            lr: opts.lr,
            recall: calib,
            seed: (opts.seed ?? 1) * 1000003 + g * 101 + h,
            onStep: (done, total) =>
              opts.onProgress?.({
                stage: "train",
                layer: Math.floor(g / experts),
                ...(cfg.nExpert > 0 ? { expert: g % experts } : {}),
                hidden: h,
                done,
                total,
              }),
          });
          tried.push({ hidden: h, recall: p.validation.recall, precision: p.validation.precision, seconds: p.seconds });
          if (!best || p.validation.precision > best.validation.precision) best = p;
          if (p.validation.precision >= minPrecision) {
            chosen = p;
            break;
          }
          await tick();
        }
        if (!chosen) {
          chosen = best!;
          notes.push(
            `${name(g)}: no width up to ${maxHidden} reached precision ${minPrecision} on the validation tokens; kept width ${chosen.hidden} (precision ${chosen.validation.precision.toFixed(3)})`,
          );
        }
        if (opts.weightType === "f16") {
          for (const w of [chosen.fc1, chosen.fc2]) for (let i = 0; i < w.length; i++) w[i] = f16ToF32(f32ToF16(w[i]));
        }
        predictors[g] = chosen;
        reports[g] = {
          layer: Math.floor(g / experts),
          ...(cfg.nExpert > 0 ? { expert: g % experts, samples: s.n } : {}),
          hidden: chosen.hidden,
          shift: chosen.shift,
          tried,
          validation: chosen.validation,
          seconds: (performance.now() - tl) / 1000,
        };
      }
      trainMs += performance.now() - tc;
    }

    // 3. held-out tokens: the predictors' decisions against the real firing
    const th = performance.now();
    const counters = Array.from({ length: groups }, () => new QualityCounter(nFF));
    const truth = new Uint32Array(batch * words);
    const rowsOf = new Float32Array(trainer.batch * nEmbd);
    model.setFFNObserver((o) => {
      firingMask(kind, cuts[o.layer], o.gate, o.up, o.n, nFF, truth, 0, words, mag);
      const g = groupOf(o);
      const p = predictors[g];
      for (let r0 = 0; r0 < o.n; r0 += trainer!.batch) {
        const rows = Math.min(trainer!.batch, o.n - r0);
        let x = o.residual.subarray(r0 * nEmbd);
        if (o.tokens) {
          // the routed tokens' residual rows, gathered
          for (let i = 0; i < rows; i++) {
            const t = o.tokens[r0 + i];
            rowsOf.set(o.residual.subarray(t * nEmbd, (t + 1) * nEmbd), i * nEmbd);
          }
          x = rowsOf;
        }
        const scores = trainer!.score(p, x, rows);
        counters[g].add(scores, truth, r0, rows, words, p.threshold);
      }
    });
    opts.onProgress?.({ stage: "heldout", layer: -1, hidden: 0, done: 0, total: toks.heldout.length });
    await runWindows(model, toks.heldout, ctx, batch, bos, opts.signal, (done) =>
      opts.onProgress?.({ stage: "heldout", layer: -1, hidden: 0, done, total: toks.heldout.length }),
    );
    model.setFFNObserver(null);
    const heldoutMs = performance.now() - th;

    const layers: LayerReport[] = reports.map((r, l) => ({ ...r, heldout: counters[l].result() }));
    for (const [g, L] of layers.entries()) {
      if (L.heldout.recall < recall)
        notes.push(
          `${name(g)}: held-out recall ${(100 * L.heldout.recall).toFixed(2)}% is below the target ${(100 * recall).toFixed(1)}%`,
        );
    }
    return {
      predictors,
      layers,
      tokens: { train: nTrain - nVal, validation: nVal, heldout: toks.heldout.length },
      criterion,
      recallTarget: recall,
      calibrationRecall: calib,
      minPrecision,
      seconds: {
        collect: collectMs / 1000,
        train: trainMs / 1000,
        heldout: heldoutMs / 1000,
        total: (performance.now() - t0) / 1000,
      },
      notes,
    };
  } finally {
    model.setFFNObserver(null);
    await trainer?.dispose();
    await model.dispose();
  }
}
