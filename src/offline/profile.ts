/**
 * Activation profiling: run a dense model over a text corpus and count, per layer and FFN neuron,
 * how often the neuron fires (and how often neurons i and i+1 fire together). `convert` stores
 * neurons hot-first by these frequencies; the planner sizes the hot set from them.
 *
 * "Fires" means that the neuron's gate factor a(g) is non-zero after the cut the runtime applies:
 * |a(g)| > t_l, with a = relu for the ReLU family (t = 0: the gate is positive) and a = silu/gelu
 * for SiLU/GELU models. A SiLU neuron without a threshold "fires" whenever a(g) != 0, which is
 * almost always; such models need thresholds (`targetSparsity`), calibrated here on the corpus in
 * the manner of CATS/TEAL: per layer, t_l is the S-quantile of |a(g)| over every (token, neuron)
 * pair, so that a share S of activations is cut. The runtime applies the same rule
 * (|act(gate)| <= t counts as zero: `THRESHOLDS_KEY` metadata or `activationThresholds`).
 *
 * The profile file is JSON (see ProfileFile) and names the model it was made from by a
 * fingerprint (shape plus a hash of the norm weights), so a profile of another model is refused.
 */
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { gateActivation } from "../format/activations.js";
import { GGUFFile, type ModelFile } from "../format/gguf.js";
import { NeuronStore } from "../format/store/index.js";
import { readConfig, type Activation, type ModelConfig } from "../model/config.js";
import { isNeuronStore, LlamaModel } from "../model/model.js";
import { Tokenizer } from "../tokenizer/index.js";
import { corpusTokens, readCorpus } from "./corpus.js";
import type { ActivationProfile } from "./convert/hot-first.js";
import { errorText } from "../format/printable.js";

export class ProfileError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ProfileError";
  }
}

export const PROFILE_FORMAT = "powerinfer-ts activation profile";
export const PROFILE_VERSION = 1;

// ---------------------------------------------------------------------------------------------
// Model fingerprint

/** What identifies the model a profile belongs to. */
export interface ModelFingerprint {
  architecture: string;
  nLayer: number;
  nEmbd: number;
  nFF: number;
  nVocab: number;
  activation: Activation;
  /**
   * "sha256:<hex>" of the norm weights (every `*_norm.weight`, by name: name, type and bytes).
   * Norm vectors stay F32 in every GGUF quantization and are copied bit for bit into a store, so
   * a model's F32 and quantized files and its stores share a fingerprint (a profile is valid for
   * all of them), while another model of the same shape does not.
   */
  hash: string;
}

/** The fingerprint of an open model file (GGUF or neuron store). */
export function modelFingerprint(file: ModelFile, cfg: ModelConfig = readConfig(file)): ModelFingerprint {
  const h = createHash("sha256");
  const norms = [...file.tensors.keys()].filter((n) => /_norm\.weight$/.test(n)).sort();
  // A llama-family model always has norms; hash the start of the embedding table otherwise.
  const names = norms.length > 0 ? norms : ["token_embd.weight"];
  for (const name of names) {
    const t = file.tensor(name);
    const len = Math.min(t.bytes, 1 << 16);
    const buf = new Uint8Array(len);
    file.readTensor(t, buf, 0, len);
    h.update(`${name}\0${t.type}\0${t.bytes}\0`);
    h.update(buf);
  }
  return {
    architecture: cfg.architecture,
    nLayer: cfg.nLayer,
    nEmbd: cfg.nEmbd,
    nFF: cfg.nFF,
    nVocab: cfg.nVocab,
    activation: cfg.activation,
    hash: `sha256:${h.digest("hex")}`,
  };
}

/** Open a GGUF file or a neuron store just to read its fingerprint. */
export function fingerprintOfPath(path: string): ModelFingerprint {
  const file: ModelFile = isNeuronStore(path) ? NeuronStore.open(path) : GGUFFile.open(path);
  try {
    return modelFingerprint(file);
  } finally {
    file.close();
  }
}

/**
 * Throw a ProfileError unless `recorded` (a profile's `model` field) describes `actual`.
 * `where` names the profile, `modelPath` the model, in the message.
 */
export function checkFingerprint(recorded: unknown, actual: ModelFingerprint, where: string, modelPath: string): void {
  if (typeof recorded !== "object" || recorded === null)
    throw new ProfileError(`${where}: "model" should be the fingerprint object of the profiled model`);
  const r = recorded as Partial<ModelFingerprint> & { file?: string };
  const from = r.file ? ` (profiled on ${r.file})` : "";
  for (const k of ["architecture", "nLayer", "nEmbd", "nFF", "nVocab", "activation"] as const) {
    if (r[k] !== actual[k]) {
      throw new ProfileError(
        `${where} is from another model${from}: its ${k} is ${JSON.stringify(r[k])}, ${modelPath} has ${JSON.stringify(actual[k])}`,
      );
    }
  }
  if (r.hash !== actual.hash) {
    throw new ProfileError(
      `${where} is from another model${from}: same shape, but the weights differ (fingerprint ${String(r.hash).slice(0, 19)}..., ${modelPath} has ${actual.hash.slice(0, 19)}...)`,
    );
  }
}

// ---------------------------------------------------------------------------------------------
// The profile file

export interface ProfileLayer {
  /** a mixture of experts: the layer and expert of this group, and the share of profiled tokens routed to the expert */
  layer?: number;
  expert?: number;
  routed?: number;
  /** per neuron: share of profiled tokens (a mixture: of the tokens routed to the expert) on which it fired (0..1) */
  frequency: number[];
  /** per neuron i < nFF-1: share of tokens on which neurons i and i+1 both fired */
  coactivation?: number[];
  /** calibrated cut on |act(gate)| (absent: none) */
  threshold?: number;
  /** share of (token, neuron) pairs that did not fire */
  sparsity?: number;
}

/** The JSON a profile is saved as; a superset of convert's ActivationProfile. */
export interface ProfileFile extends ActivationProfile {
  format: typeof PROFILE_FORMAT;
  version: number;
  model: ModelFingerprint & { file: string };
  corpus: { file: string; bytes: number };
  /** tokens profiled (each context window starts with BOS when the model uses one) */
  tokens: number;
  contextSize: number;
  /** the firing rule in words, e.g. "|silu(gate)| > threshold" */
  criterion: string;
  /** the share S the thresholds were calibrated to, or null */
  targetSparsity: number | null;
  /** a mixture of experts: experts per layer; `layers` then holds one entry per (layer, expert), layer by layer */
  experts?: number;
  layers: ProfileLayer[];
}

/**
 * Read and check a profile file's structure (not which model it is for: checkFingerprint).
 * Profiles written by hand as `{ "layers": [ { "frequency": [...] } ] }` are accepted too.
 */
export function readProfile(path: string): ProfileFile {
  let raw: string;
  try {
    raw = readFileSync(path, "utf8");
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    throw new ProfileError(code === "ENOENT" ? `profile ${path} does not exist` : `profile ${path}: ${errorText(e)}`);
  }
  let p: ProfileFile;
  try {
    p = JSON.parse(raw);
  } catch (e) {
    throw new ProfileError(`profile ${path} is not JSON: ${errorText(e)}`);
  }
  if (typeof p !== "object" || p === null || !Array.isArray(p.layers)) {
    throw new ProfileError(
      `profile ${path}: expected a JSON object { "layers": [ { "frequency": [...] }, ... ] } (from powerinfer profile)`,
    );
  }
  p.layers.forEach((L, l) => {
    if (typeof L !== "object" || L === null || !Array.isArray(L.frequency))
      throw new ProfileError(`profile ${path}: layers[${l}].frequency is missing`);
    if (
      L.threshold !== undefined &&
      !(typeof L.threshold === "number" && Number.isFinite(L.threshold) && L.threshold >= 0)
    ) {
      throw new ProfileError(
        `profile ${path}: layers[${l}].threshold = ${JSON.stringify(L.threshold)} is not a finite number >= 0`,
      );
    }
  });
  return p;
}

/** The per-layer thresholds of a profile, or null when it has none. All layers or none. */
export function profileThresholds(
  p: ActivationProfile & { layers: { threshold?: number }[] },
  where: string,
): Float32Array | null {
  const have = p.layers.filter((L) => L.threshold !== undefined).length;
  if (have === 0) return null;
  if (have !== p.layers.length)
    throw new ProfileError(`${where}: ${have} of ${p.layers.length} layers have a threshold: all or none should`);
  return Float32Array.from(p.layers, (L) => L.threshold!);
}

/**
 * The calibrated thresholds of profile `profilePath`, checked against the model at `modelPath`
 * (GGUF or store): for `--thresholds`. Refuses a profile from another model or without thresholds.
 */
export function thresholdsForModel(profilePath: string, modelPath: string): Float32Array {
  const p = readProfile(profilePath);
  const where = `profile ${profilePath}`;
  const fp = fingerprintOfPath(modelPath);
  if (p.model !== undefined) checkFingerprint(p.model, fp, where, modelPath);
  if (p.layers.length !== fp.nLayer)
    throw new ProfileError(`${where} has ${p.layers.length} layers, ${modelPath} has ${fp.nLayer}`);
  const t = profileThresholds(p, where);
  if (!t) {
    throw new ProfileError(
      `${where} has no activation thresholds: make one with powerinfer profile -m MODEL --corpus FILE --target-sparsity 0.5 -o ${basename(profilePath)}`,
    );
  }
  return t;
}

// ---------------------------------------------------------------------------------------------
// Counting

/**
 * |a(g)| for `count` gate values into out: the magnitude the runtime's cut compares with a
 * threshold (silu / gelu; relu for the ReLU family, whose cut is "gate > 0").
 */
export function gateMagnitudes(kind: Activation, gate: Float32Array, count: number, out: Float32Array): void {
  for (let i = 0; i < count; i++) out[i] = Math.abs(gateActivation(kind, gate[i]));
}

/** Per neuron: tokens on which it fired; per adjacent pair: tokens on which both did. */
export class FiringCounts {
  readonly fired: Float64Array;
  readonly pairs: Float64Array;
  tokens = 0;
  constructor(readonly nFF: number) {
    this.fired = new Float64Array(nFF);
    this.pairs = new Float64Array(Math.max(0, nFF - 1));
  }
  /** Count n rows of nFF magnitudes: a neuron fires when its magnitude is above `threshold`. */
  add(mag: Float32Array, n: number, threshold: number): void {
    const nFF = this.nFF,
      fired = this.fired,
      pairs = this.pairs;
    for (let r = 0; r < n; r++) {
      const base = r * nFF;
      let prev = mag[base] > threshold;
      if (prev) fired[0]++;
      for (let i = 1; i < nFF; i++) {
        const cur = mag[base + i] > threshold;
        if (cur) {
          fired[i]++;
          if (prev) pairs[i - 1]++;
        }
        prev = cur;
      }
    }
    this.tokens += n;
  }
  /** share of (token, neuron) pairs that did not fire */
  get sparsity(): number {
    let s = 0;
    for (let i = 0; i < this.nFF; i++) s += this.fired[i];
    return this.tokens > 0 ? 1 - s / (this.tokens * this.nFF) : 0;
  }
}

/**
 * A histogram of non-negative f32 magnitudes with one bin per value of the top 16 bits of the
 * float (sign, 8 exponent bits, 7 mantissa bits): 128 bins per octave, so any quantile is found
 * to within 1/128 of an octave (< 0.55% of its value), then placed inside its bin by linear
 * interpolation. Why a histogram rather than a sample: it sees every activation (deterministic,
 * no sampling error in the share that is cut), costs one shift and one increment per value, and
 * its memory (32768 counts per layer) does not grow with the corpus.
 */
export class MagnitudeHistogram {
  readonly bins = new Float64Array(1 << 15);
  total = 0;
  /** values: f32 magnitudes (>= 0); bits: the same memory viewed as u32 */
  add(bits: Uint32Array, count: number): void {
    const bins = this.bins;
    for (let i = 0; i < count; i++) bins[bits[i] >>> 16]++;
    this.total += count;
  }
  /** The value t with a share `q` of the values at or below it (an f32). */
  quantile(q: number): number {
    if (this.total === 0) throw new ProfileError("no activations were observed to calibrate a threshold from");
    const want = q * this.total;
    let below = 0;
    const f = new Float32Array(1),
      u = new Uint32Array(f.buffer);
    for (let b = 0; b < this.bins.length; b++) {
      const c = this.bins[b];
      if (c > 0 && below + c >= want) {
        u[0] = b << 16;
        const lo = f[0];
        u[0] = (b + 1) << 16;
        const hi = Number.isFinite(f[0]) ? f[0] : lo;
        return Math.fround(lo + ((hi - lo) * (want - below)) / c);
      }
      below += c;
    }
    return Math.fround(Infinity);
  }
}

// ---------------------------------------------------------------------------------------------
// Profiling a model

export interface ProfileProgress {
  stage: "calibrate" | "count";
  /** tokens run so far in this stage / in all */
  done: number;
  total: number;
}

export interface ProfileOptions {
  /** a dense GGUF model (a neuron store cannot be observed: profile the GGUF it came from) */
  model: string;
  /** a UTF-8 text file */
  corpus: string;
  /** profile at most this many tokens of the corpus (default: all of it) */
  tokens?: number;
  /** context window in tokens (default: the model's training context, at most 512) */
  contextSize?: number;
  /** tokens per forward pass (default: min(256, context)) */
  batchSize?: number;
  threads?: number;
  /** calibrate per-layer thresholds so that this share of activations is cut (SiLU/GELU models) */
  targetSparsity?: number;
  signal?: AbortSignal;
  onProgress?: (p: ProfileProgress) => void;
}

export interface ProfileResult {
  profile: ProfileFile;
  seconds: number;
  /** tokens run through the model (each pass) */
  tokens: number;
  /** something the user should know about the result (e.g. SiLU without thresholds) */
  notes: string[];
}

const tick = () => new Promise<void>((r) => setImmediate(r));

/** Frequencies are kept to 7 decimals: exact for up to 10M tokens, and a readable file. */
const round7 = (x: number) => Math.round(x * 1e7) / 1e7;

export async function profileModel(opts: ProfileOptions): Promise<ProfileResult> {
  const t0 = performance.now();
  if (isNeuronStore(opts.model)) {
    throw new ProfileError(
      `${opts.model} is a neuron store: profiling observes the dense FFN, so give the GGUF model it was converted from`,
    );
  }
  const S = opts.targetSparsity;
  if (S !== undefined && !(S > 0 && S < 1))
    throw new ProfileError(`target sparsity must be between 0 and 1 (exclusive), got ${S}`);
  if (opts.tokens !== undefined && !(Number.isInteger(opts.tokens) && opts.tokens >= 2))
    throw new ProfileError(`tokens must be an integer >= 2, got ${opts.tokens}`);

  // Shape, tokenizer and fingerprint first, so bad input fails before the model loads.
  const file = GGUFFile.open(opts.model);
  let cfg: ModelConfig, tokenizer: Tokenizer, fingerprint: ModelFingerprint;
  try {
    cfg = readConfig(file);
    tokenizer = Tokenizer.fromGGUF(file);
    fingerprint = modelFingerprint(file, cfg);
  } finally {
    file.close();
  }
  const relu = cfg.activation === "relu" || cfg.activation === "drelu";
  if (S !== undefined && relu) {
    throw new ProfileError(
      `${opts.model} uses ${cfg.activation}: its FFN activations are already exactly zero where the gate is not positive, so there is nothing to calibrate; ` +
        `drop --target-sparsity (thresholds are for SiLU/GELU models)`,
    );
  }
  const ctx = opts.contextSize ?? Math.min(cfg.nCtxTrain, 512);
  if (!(Number.isInteger(ctx) && ctx >= 2)) throw new ProfileError(`context size must be an integer >= 2, got ${ctx}`);
  const batch = Math.min(opts.batchSize ?? 256, ctx);
  if (!(Number.isInteger(batch) && batch >= 1))
    throw new ProfileError(`batch size must be a positive integer, got ${opts.batchSize}`);

  const text = readCorpus(opts.corpus);
  const tokens = corpusTokens(tokenizer, text, { maxTokens: opts.tokens });
  if (tokens.length < 2)
    throw new ProfileError(`corpus ${opts.corpus} gives only ${tokens.length} token(s): too little to profile`);
  const notes: string[] = [];
  if (opts.tokens !== undefined && tokens.length < opts.tokens)
    notes.push(`the corpus has only ${tokens.length} tokens (asked for ${opts.tokens}): profiled all of them`);

  const model = await LlamaModel.load(opts.model, { threads: opts.threads, contextSize: ctx, batchSize: batch });
  try {
    const { nLayer, nFF } = cfg;
    // a mixture of experts is counted per (layer, expert) group: group l * experts + e
    const experts = Math.max(1, cfg.nExpert);
    const groupOf = (o: { layer: number; expert?: number }) => o.layer * experts + (o.expert ?? 0);
    const magBuf = new ArrayBuffer(batch * nFF * 4);
    const mag = new Float32Array(magBuf);
    const bits = new Uint32Array(magBuf);
    const window = new Int32Array(ctx);
    const bos = tokenizer.addBos && tokenizer.bosId >= 0 ? tokenizer.bosId : -1;

    /** Run every token through the model in context windows (each starting with BOS, as perplexity's chunks). */
    const pass = async (stage: ProfileProgress["stage"]) => {
      opts.onProgress?.({ stage, done: 0, total: tokens.length });
      for (let start = 0; start < tokens.length; start += ctx) {
        const len = Math.min(ctx, tokens.length - start);
        window.set(tokens.subarray(start, start + len));
        if (bos >= 0) window[0] = bos;
        for (let j = 0; j < len; j += batch) {
          if (opts.signal?.aborted)
            throw opts.signal.reason instanceof Error ? opts.signal.reason : new ProfileError("profiling aborted");
          const n = Math.min(batch, len - j);
          model.forward(window.subarray(j, j + n), n, j);
          opts.onProgress?.({ stage, done: start + j + n, total: tokens.length });
          await tick();
        }
      }
    };

    let thresholds: Float32Array | null = null;
    if (S !== undefined) {
      // Calibrate on the dense model: nothing cut upstream (as CATS/TEAL calibrate).
      const hist = Array.from({ length: nLayer }, () => new MagnitudeHistogram());
      model.thresholds = null;
      model.setFFNObserver((o) => {
        const count = o.n * nFF;
        gateMagnitudes(cfg.activation, o.gate, count, mag);
        hist[o.layer].add(bits, count);
      });
      await pass("calibrate");
      thresholds = Float32Array.from(hist, (h) => h.quantile(S));
    } else if (model.thresholds) {
      thresholds = model.thresholds;
      notes.push(`${opts.model} carries activation thresholds (metadata): counted with them`);
    }
    if (!thresholds && !relu) {
      notes.push(
        `${cfg.activation} activations are almost never exactly zero, so without thresholds every neuron "fires" on nearly every token ` +
          `and these frequencies cannot tell hot from cold: use --target-sparsity (e.g. 0.5)`,
      );
    }

    // Count with the thresholds in force, as the runtime will run the model.
    model.thresholds = thresholds;
    const counts = Array.from({ length: nLayer * experts }, () => new FiringCounts(nFF));
    const cut = thresholds ?? new Float32Array(nLayer);
    model.setFFNObserver((o) => {
      const count = o.n * nFF;
      gateMagnitudes(cfg.activation, o.gate, count, mag);
      counts[groupOf(o)].add(mag, o.n, cut[o.layer]);
    });
    await pass("count");
    model.setFFNObserver(null);

    const act = cfg.activation === "drelu" ? "relu" : cfg.activation;
    const profile: ProfileFile = {
      format: PROFILE_FORMAT,
      version: PROFILE_VERSION,
      model: { file: basename(opts.model), ...fingerprint },
      corpus: { file: basename(opts.corpus), bytes: Buffer.byteLength(text) },
      tokens: tokens.length,
      contextSize: ctx,
      criterion: thresholds ? `|${act}(gate)| > threshold` : relu ? "gate > 0" : `|${act}(gate)| > 0`,
      targetSparsity: S ?? null,
      ...(cfg.nExpert > 0 ? { experts: cfg.nExpert } : {}),
      layers: counts.map((c, g) => ({
        ...(cfg.nExpert > 0
          ? { layer: Math.floor(g / experts), expert: g % experts, routed: round7(c.tokens / tokens.length) }
          : {}),
        frequency: Array.from(c.fired, (v) => round7(c.tokens > 0 ? v / c.tokens : 0)),
        coactivation: Array.from(c.pairs, (v) => round7(c.tokens > 0 ? v / c.tokens : 0)),
        ...(thresholds ? { threshold: thresholds[Math.floor(g / experts)] } : {}),
        sparsity: round7(c.sparsity),
      })),
    };
    return { profile, seconds: (performance.now() - t0) / 1000, tokens: tokens.length, notes };
  } finally {
    await model.dispose();
  }
}

/**
 * A short per-layer digest of a profile: measured sparsity, active neurons per token, and how
 * concentrated the firing is (share of all firings that the hottest 10% of neurons account for).
 */
export function summarizeProfile(p: ProfileFile): {
  layer: number;
  threshold: number | null;
  sparsity: number;
  activePerToken: number;
  hot10: number;
  adjacent: number;
}[] {
  return p.layers.map((L, l) => {
    const f = Float64Array.from(L.frequency).sort().reverse();
    const total = f.reduce((a, b) => a + b, 0);
    const top = Math.max(1, Math.round(f.length / 10));
    let hot = 0;
    for (let i = 0; i < top; i++) hot += f[i];
    // adjacent: P(i+1 fires | i fires), over all pairs
    let both = 0,
      first = 0;
    const co = L.coactivation ?? [];
    for (let i = 0; i < co.length; i++) {
      both += co[i];
      first += L.frequency[i];
    }
    return {
      layer: l,
      threshold: L.threshold ?? null,
      sparsity: 1 - total / f.length,
      activePerToken: total,
      hot10: total > 0 ? hot / total : 0,
      adjacent: first > 0 ? both / first : 0,
    };
  });
}
