/**
 * Synthetic llama-architecture models of random weights, for everything that needs size:
 * benchmarks, memory-budget runs, I/O planning. Any shape from a 4-layer toy to Llama-2-13B, in
 * F32, F16, Q8_0, Q4_0 or Q4_1, deterministic per seed, streamed to disk chunk by chunk (a 7B
 * Q4_0 file is 3.8 GB and is never held in memory).
 *
 * Quantized tensors are generated as blocks directly rather than quantized from floats: the
 * quants are raw random bits (uniform over every level) and each block's f16 scale is picked
 * so the tensor's values have the standard deviation a sensible initialisation would give
 * (1/sqrt(fan_in) for projections, so activations keep unit scale through the layers and the
 * logits are neither flat nor collapsed). That keeps the generator at memory speed.
 *
 * Every tensor draws from its own random stream, seeded from (seed, tensor name), and is
 * produced in whole rows: a row of ffn_gate / ffn_up is one FFN neuron (ffn_down holds a neuron
 * per column).
 *
 * With `sparsity` (ReLU and dReLU models only) the weights are built so that a chosen share of
 * FFN neurons outputs exactly zero, with per-neuron firing frequencies following a power law;
 * see "Planted activation sparsity" below for the construction. Nothing in the file says which
 * neuron fires: the zeros come out of the arithmetic of the weights.
 */
import { GGMLType, typeTraits } from "../format/ggml-types.js";
import { GGUFWriter, GGUFValueType } from "../format/gguf-writer.js";
import { f16Table, f16ToF32, f32ToF16 } from "../format/half.js";
import { dequantizeRow, quantizeRow } from "../format/quant.js";
import { buildSynthVocab } from "./synth-vocab.js";
import { writePredictorFile } from "./predictor-files.js";
import type { PredictorWeights } from "../predictor-training/predictor-train.js";
import { fingerprintOfPath } from "./profile.js";
import { fillRandom, plannedFiring, SPARSITY_ALPHA_DEFAULT, SynthStream } from "../model/firing.js";

// The firing law planted sparsity follows lives with the model (the planner reads it too).
export {
  FIRING_CAP,
  FIRING_FLOOR,
  plannedFiring,
  powerLawFrequencies,
  SPARSITY_ALPHA_DEFAULT,
  SynthStream,
} from "../model/firing.js";

export type SynthShape = "tiny" | "1b" | "7b" | "mistral-7b" | "13b";
export type SynthActivation = "silu" | "relu" | "drelu";
export type SynthType = "f32" | "f16" | "q8_0" | "q4_0" | "q4_1";

export const SYNTH_SHAPES: readonly SynthShape[] = ["tiny", "1b", "7b", "mistral-7b", "13b"];
export const SYNTH_ACTIVATIONS: readonly SynthActivation[] = ["silu", "relu", "drelu"];
export const SYNTH_TYPES: readonly SynthType[] = ["f32", "f16", "q8_0", "q4_0", "q4_1"];

export interface SynthShapeSpec {
  /** what it imitates */
  readonly like: string;
  readonly dim: number;
  readonly layers: number;
  readonly ffn: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly vocab: number;
  readonly context: number;
  readonly ropeBase: number;
  readonly rmsEps: number;
}

export const SHAPE_SPECS: Readonly<Record<SynthShape, SynthShapeSpec>> = {
  tiny: {
    like: "a toy llama",
    dim: 256,
    layers: 4,
    ffn: 768,
    heads: 8,
    kvHeads: 4,
    vocab: 512,
    context: 512,
    ropeBase: 10000,
    rmsEps: 1e-5,
  },
  "1b": {
    like: "TinyLlama-1.1B",
    dim: 2048,
    layers: 22,
    ffn: 5632,
    heads: 32,
    kvHeads: 4,
    vocab: 32000,
    context: 2048,
    ropeBase: 10000,
    rmsEps: 1e-5,
  },
  "7b": {
    like: "Llama-2-7B",
    dim: 4096,
    layers: 32,
    ffn: 11008,
    heads: 32,
    kvHeads: 32,
    vocab: 32000,
    context: 4096,
    ropeBase: 10000,
    rmsEps: 1e-5,
  },
  // The shape of the paper's TurboSparse-Mistral-7B: grouped-query attention keeps the part that
  // stays in memory at 0.62x Llama-2-7B's (8 KV heads), so a 7B fits a 1.5 GiB budget.
  "mistral-7b": {
    like: "Mistral-7B",
    dim: 4096,
    layers: 32,
    ffn: 14336,
    heads: 32,
    kvHeads: 8,
    vocab: 32000,
    context: 32768,
    ropeBase: 10000,
    rmsEps: 1e-5,
  },
  "13b": {
    like: "Llama-2-13B",
    dim: 5120,
    layers: 40,
    ffn: 13824,
    heads: 40,
    kvHeads: 40,
    vocab: 32000,
    context: 4096,
    ropeBase: 10000,
    rmsEps: 1e-5,
  },
};

const GGML_TYPE: Record<SynthType, GGMLType> = {
  f32: GGMLType.F32,
  f16: GGMLType.F16,
  q8_0: GGMLType.Q8_0,
  q4_0: GGMLType.Q4_0,
  q4_1: GGMLType.Q4_1,
};

/** llama.cpp's `llama_ftype` ("mostly" the given type; norms stay F32). */
const FILE_TYPE: Record<SynthType, number> = { f32: 0, f16: 1, q4_0: 2, q4_1: 3, q8_0: 7 };

export type TensorKind =
  "embed" | "norm" | "attn_q" | "attn_k" | "attn_v" | "attn_output" | "ffn_gate" | "ffn_up" | "ffn_down" | "output";

/** One tensor of the synthetic model, with how its values are drawn. */
export interface TensorRecipe {
  readonly name: string;
  readonly kind: TensorKind;
  /** layer index, or -1 outside the blocks */
  readonly layer: number;
  /** ggml order: [row length, rows] */
  readonly dims: readonly number[];
  readonly type: GGMLType;
  /** target standard deviation of the values; for norms the spread around 1 */
  readonly std: number;
  readonly bytes: number;
}

export interface SynthProgress {
  /** tensor data bytes written so far, and in all */
  readonly bytesWritten: number;
  readonly totalBytes: number;
  readonly tensor: string;
  readonly tensorIndex: number;
  readonly tensorCount: number;
}

export interface SynthOptions {
  shape: SynthShape;
  act: SynthActivation;
  type: SynthType;
  seed: number;
  out: string;
  onProgress?: (p: SynthProgress) => void;
  signal?: AbortSignal;
  /** override the shape's spec (tests use smaller vocabularies) */
  overrides?: Partial<SynthShapeSpec>;
  /** fsync before the final rename (default true) */
  fsync?: boolean;
  /**
   * Planted activation sparsity (relu and drelu only): the mean share of FFN neurons whose
   * output is exactly zero, per layer, in [SPARSITY_MIN, SPARSITY_MAX]. Omitted: plain random
   * weights (a ReLU model then rests about half its neurons, with no hot ones).
   */
  sparsity?: number;
  /** exponent of the firing-frequency power law (default SPARSITY_ALPHA_DEFAULT); needs `sparsity` */
  alpha?: number;
  /**
   * Predictable firing (relu with `sparsity` only): each layer's gate rows are drawn from a
   * subspace of this many dimensions (plus the quantization's own noise), as the gate inputs of
   * trained ReLU models live near a low-dimensional subspace; a small predictor can then tell
   * which neurons fire, and the generator hands one back (`SynthResult.predictors`).
   */
  gateRank?: number;
  /** with gateRank: write the planted predictors here (a predictors-only GGUF for `convert --predictors`) */
  predictorsOut?: string;
}

export interface SynthResult {
  path: string;
  /** file size */
  bytes: number;
  tensors: number;
  seconds: number;
  /**
   * With planted sparsity: the share of zero FFN outputs per layer that the generator's own model
   * of the residual stream predicts (the real rate is measured by running the model).
   */
  predictedSparsity?: number[];
  /**
   * With `gateRank`: the predictor the construction implies for each layer (see "Predictable
   * firing"): PowerInfer's fc2 . relu(fc1 . x) on the raw residual, active above 0.
   */
  predictors?: PlantedPredictor[];
}

/** A predictor the construction implies (see "Predictable firing"). */
export interface PlantedPredictor extends PredictorWeights {
  /** mean over neurons: the deviation of the gate's quantization noise over that of its whole pre-activation */
  noiseShare: number;
}

/** The tensor table of a synthetic model, in file order. */
export function synthRecipes(spec: SynthShapeSpec, type: SynthType): TensorRecipe[] {
  const t = GGML_TYPE[type];
  const { dim, ffn, layers, vocab, heads, kvHeads } = spec;
  const headDim = dim / heads;
  const kvDim = headDim * kvHeads;
  const out: TensorRecipe[] = [];
  const add = (name: string, kind: TensorKind, layer: number, dims: number[], ty: GGMLType, std: number) => {
    const tr = typeTraits(ty)!;
    out.push({
      name,
      kind,
      layer,
      dims,
      type: ty,
      std,
      bytes: ((dims[0] * (dims[1] ?? 1)) / tr.blockSize) * tr.typeSize,
    });
  };
  const proj = (fanIn: number) => 1 / Math.sqrt(fanIn);
  // Embeddings at unit scale: the first RMSNorm rescales them anyway, and unit scale keeps the
  // residual stream comparable to what each layer adds.
  add("token_embd.weight", "embed", -1, [dim, vocab], t, 1);
  for (let l = 0; l < layers; l++) {
    const p = `blk.${l}.`;
    add(p + "attn_norm.weight", "norm", l, [dim], GGMLType.F32, 0.05);
    add(p + "attn_q.weight", "attn_q", l, [dim, dim], t, proj(dim));
    add(p + "attn_k.weight", "attn_k", l, [dim, kvDim], t, proj(dim));
    add(p + "attn_v.weight", "attn_v", l, [dim, kvDim], t, proj(dim));
    add(p + "attn_output.weight", "attn_output", l, [dim, dim], t, proj(dim));
    add(p + "ffn_norm.weight", "norm", l, [dim], GGMLType.F32, 0.05);
    add(p + "ffn_gate.weight", "ffn_gate", l, [dim, ffn], t, proj(dim));
    add(p + "ffn_up.weight", "ffn_up", l, [dim, ffn], t, proj(dim));
    add(p + "ffn_down.weight", "ffn_down", l, [ffn, dim], t, proj(ffn));
  }
  add("output_norm.weight", "norm", -1, [dim], GGMLType.F32, 0.05);
  // Logits with a standard deviation near 2: a distribution with a few clear favourites rather
  // than a flat one over 32000 tokens.
  add("output.weight", "output", -1, [dim, vocab], t, 2 / Math.sqrt(dim));
  return out;
}

function checkSpec(spec: SynthShapeSpec, type: SynthType): void {
  const fail = (m: string) => {
    throw new RangeError(`synthetic model: ${m}`);
  };
  for (const k of ["dim", "layers", "ffn", "heads", "kvHeads", "vocab", "context"] as const) {
    if (!Number.isInteger(spec[k]) || spec[k] < 1) fail(`${k} must be a positive integer, got ${spec[k]}`);
  }
  if (spec.dim % spec.heads !== 0) fail(`dim ${spec.dim} is not a multiple of heads ${spec.heads}`);
  if (spec.heads % spec.kvHeads !== 0) fail(`heads ${spec.heads} is not a multiple of kvHeads ${spec.kvHeads}`);
  if ((spec.dim / spec.heads) % 2 !== 0) fail(`head dimension ${spec.dim / spec.heads} must be even for RoPE`);
  const block = typeTraits(GGML_TYPE[type])!.blockSize;
  if (spec.dim % block !== 0 || spec.ffn % block !== 0)
    fail(`dim ${spec.dim} and ffn ${spec.ffn} must be multiples of the ${type} block size ${block}`);
}

// ---------------------------------------------------------------------------------------------
// Value tables: 16 random bits -> the f16 bits of a scale or a value. A table per (type, std)
// turns the per-block work into one lookup.

/** root mean square of the integer levels each block type stores, relative to its scale */
const LEVEL_RMS: Partial<Record<GGMLType, number>> = {
  [GGMLType.Q4_0]: Math.sqrt(21.5), // (q - 8), q uniform in 0..15
  [GGMLType.Q4_1]: Math.sqrt(21.25), // (q - 7.5): m = -7.5 d centres the levels
  [GGMLType.Q8_0]: Math.sqrt(5461.5), // q uniform in -128..127
};

const tableCache = new Map<string, Uint16Array>();
/** Sparse models pick a scale per layer; a bound keeps a long-lived process from hoarding tables. */
function cacheTable(key: string, t: Uint16Array): void {
  if (tableCache.size >= 32) tableCache.clear();
  tableCache.set(key, t);
}

/**
 * Block scales: |d| = std / LEVEL_RMS times a factor spread uniformly over [0.75, 1.25] (blocks
 * differ, as in real files). Q4_0 scales also get a random sign, because its levels have mean
 * -0.5: with a fixed sign every row would share a bias along the input's mean, while a random
 * sign per block leaves it zero on average (llama.cpp's Q4_0 writes negative scales too).
 */
function scaleTable(type: GGMLType, std: number): Uint16Array {
  const key = `d${type}:${std}`;
  let t = tableCache.get(key);
  if (t) return t;
  t = new Uint16Array(65536);
  const base = std / LEVEL_RMS[type]!;
  const signed = type === GGMLType.Q4_0;
  for (let r = 0; r < 65536; r++) {
    const factor = 0.75 + 0.5 * ((r >>> 1) / 32768);
    const sign = signed && (r & 1) === 1 ? -1 : 1;
    t[r] = f32ToF16(sign * base * factor);
  }
  cacheTable(key, t);
  return t;
}

/** Q4_1 mins matching scaleTable(Q4_1): m = -7.5 d, computed from the stored (rounded) d. */
function minTable(std: number): Uint16Array {
  const key = `m:${std}`;
  let t = tableCache.get(key);
  if (t) return t;
  const d = scaleTable(GGMLType.Q4_1, std);
  t = new Uint16Array(65536);
  for (let r = 0; r < 65536; r++) t[r] = f32ToF16(-7.5 * f16ToF32(d[r]));
  cacheTable(key, t);
  return t;
}

/** F16 values uniform on (-a, a) with a = std * sqrt(3) (so their standard deviation is std). */
function f16ValueTable(std: number, centre: number): Uint16Array {
  const key = `v:${std}:${centre}`;
  let t = tableCache.get(key);
  if (t) return t;
  t = new Uint16Array(65536);
  const a = std * Math.sqrt(3);
  for (let r = 0; r < 65536; r++) t[r] = f32ToF16(centre + (((r + 0.5) / 65536) * 2 - 1) * a);
  cacheTable(key, t);
  return t;
}

// ---------------------------------------------------------------------------------------------
// Row fillers

/**
 * Writes `rows` whole rows of a tensor into `dst` (which has room for them, rounded up to 4
 * bytes), drawing from the tensor's stream. `words` views the same memory as `dst`.
 */
export type RowFiller = (dst: Uint8Array, words: Uint32Array, rows: number) => void;

/** The generator for one tensor of a plain random model (a sparse model post-processes its rows: SparsityPlanter). */
export function rowFiller(recipe: TensorRecipe, stream: SynthStream): RowFiller {
  const rowLen = recipe.dims[0];
  const tr = typeTraits(recipe.type)!;
  const rowBytes = (rowLen / tr.blockSize) * tr.typeSize;
  const centre = recipe.kind === "norm" ? 1 : 0;
  switch (recipe.type) {
    case GGMLType.F32: {
      // uniform on (centre - a, centre + a) from 24 random bits
      const a = recipe.std * Math.sqrt(3);
      const step = (2 * a) / 16777216;
      return (dst, words, rows) => {
        const n = rows * rowLen;
        fillRandom(stream, words, n);
        const f = new Float32Array(dst.buffer, dst.byteOffset, n);
        for (let i = 0; i < n; i++) f[i] = centre - a + ((words[i] >>> 8) + 0.5) * step;
      };
    }
    case GGMLType.F16: {
      const table = f16ValueTable(recipe.std, centre);
      return (dst, words, rows) => {
        const n = rows * rowLen;
        fillRandom(stream, words, (n + 1) >>> 1);
        const h = new Uint16Array(dst.buffer, dst.byteOffset, n);
        for (let i = 0; i < n; i++) h[i] = table[h[i]];
      };
    }
    case GGMLType.Q4_0:
    case GGMLType.Q8_0:
    case GGMLType.Q4_1: {
      // Random bits everywhere: they are the quants. Then each block's first 16 bits become
      // its scale (and, for Q4_1, the next 16 its matching min).
      const dt = scaleTable(recipe.type, recipe.std);
      const mt = recipe.type === GGMLType.Q4_1 ? minTable(recipe.std) : undefined;
      const bs = tr.typeSize;
      return (dst, words, rows) => {
        const bytes = rows * rowBytes;
        fillRandom(stream, words, (bytes + 3) >>> 2);
        if (mt) {
          for (let o = 0; o < bytes; o += bs) {
            const r = dst[o] | (dst[o + 1] << 8);
            const d = dt[r];
            const m = mt[r];
            dst[o] = d & 0xff;
            dst[o + 1] = d >>> 8;
            dst[o + 2] = m & 0xff;
            dst[o + 3] = m >>> 8;
          }
        } else {
          for (let o = 0; o < bytes; o += bs) {
            const d = dt[dst[o] | (dst[o + 1] << 8)];
            dst[o] = d & 0xff;
            dst[o + 1] = d >>> 8;
          }
        }
      };
    }
    default:
      throw new RangeError(`synthetic model: no generator for type ${tr.name}`);
  }
}

// ---------------------------------------------------------------------------------------------

const CHUNK_BYTES = 4 << 20;

function validate(o: SynthOptions): SynthShapeSpec {
  if (!SYNTH_SHAPES.includes(o.shape))
    throw new RangeError(
      `synthetic model: unknown shape ${JSON.stringify(o.shape)} (expected ${SYNTH_SHAPES.join(", ")})`,
    );
  if (!SYNTH_ACTIVATIONS.includes(o.act))
    throw new RangeError(
      `synthetic model: unknown activation ${JSON.stringify(o.act)} (expected ${SYNTH_ACTIVATIONS.join(", ")})`,
    );
  if (!SYNTH_TYPES.includes(o.type))
    throw new RangeError(
      `synthetic model: unknown type ${JSON.stringify(o.type)} (expected ${SYNTH_TYPES.join(", ")})`,
    );
  if (!Number.isSafeInteger(o.seed) || o.seed < 0)
    throw new RangeError(`synthetic model: seed must be a non-negative integer, got ${o.seed}`);
  if (typeof o.out !== "string" || o.out === "") throw new RangeError("synthetic model: no output path");
  if (o.sparsity !== undefined) {
    if (o.act === "silu")
      throw new RangeError(
        "synthetic model: planted sparsity needs a ReLU-family activation (relu or drelu); silu never outputs exact zeros",
      );
    if (typeof o.sparsity !== "number" || !(o.sparsity >= SPARSITY_MIN && o.sparsity <= SPARSITY_MAX)) {
      throw new RangeError(
        `synthetic model: sparsity must be a number in [${SPARSITY_MIN}, ${SPARSITY_MAX}], got ${o.sparsity}`,
      );
    }
  }
  if (o.alpha !== undefined) {
    if (o.sparsity === undefined)
      throw new RangeError(
        "synthetic model: alpha shapes the firing frequencies of planted sparsity; give a sparsity too",
      );
    if (typeof o.alpha !== "number" || !(o.alpha >= ALPHA_MIN && o.alpha <= ALPHA_MAX)) {
      throw new RangeError(`synthetic model: alpha must be a number in [${ALPHA_MIN}, ${ALPHA_MAX}], got ${o.alpha}`);
    }
  }
  if (o.predictorsOut !== undefined && o.gateRank === undefined)
    throw new RangeError(
      "synthetic model: predictorsOut needs gateRank (only a predictable model has predictors to write)",
    );
  if (o.gateRank !== undefined) {
    if (o.sparsity === undefined || o.act !== "relu")
      throw new RangeError(
        "synthetic model: gateRank makes planted ReLU sparsity predictable; it needs act relu and a sparsity",
      );
    if (!Number.isInteger(o.gateRank) || o.gateRank < 1 || o.gateRank > GATE_RANK_MAX)
      throw new RangeError(`synthetic model: gateRank must be an integer in [1, ${GATE_RANK_MAX}], got ${o.gateRank}`);
  }
  const spec = { ...SHAPE_SPECS[o.shape], ...(o.overrides ?? {}) };
  checkSpec(spec, o.type);
  if (o.gateRank !== undefined && o.gateRank >= spec.dim - RESERVED)
    throw new RangeError(
      `synthetic model: gateRank ${o.gateRank} must be below the residual width ${spec.dim - RESERVED}`,
    );
  return spec;
}

/** Set a synthetic model's metadata on a writer. */
function writeMetadata(w: GGUFWriter, o: SynthOptions, spec: SynthShapeSpec): void {
  const U32 = GGUFValueType.UINT32;
  const F32 = GGUFValueType.FLOAT32;
  w.setMetadata("general.architecture", "llama");
  const planted = o.sparsity !== undefined ? `-sparsity${o.sparsity}` : "";
  w.setMetadata(
    "general.name",
    `synthetic-${o.shape}-${o.act}${planted}-${o.type}-seed${o.seed} (random weights shaped like ${spec.like}; not a trained model)`,
  );
  w.setMetadata("general.file_type", FILE_TYPE[o.type], U32);
  if (o.type !== "f32" && o.type !== "f16") w.setMetadata("general.quantization_version", 2, U32);
  w.setMetadata("llama.context_length", spec.context, U32);
  w.setMetadata("llama.embedding_length", spec.dim, U32);
  w.setMetadata("llama.block_count", spec.layers, U32);
  w.setMetadata("llama.feed_forward_length", spec.ffn, U32);
  w.setMetadata("llama.rope.dimension_count", spec.dim / spec.heads, U32);
  w.setMetadata("llama.attention.head_count", spec.heads, U32);
  w.setMetadata("llama.attention.head_count_kv", spec.kvHeads, U32);
  w.setMetadata("llama.attention.layer_norm_rms_epsilon", spec.rmsEps, F32);
  w.setMetadata("llama.rope.freq_base", spec.ropeBase, F32);
  w.setMetadata("llama.vocab_size", spec.vocab, U32);
  w.setMetadata("llama.feed_forward_activation", o.act);
  // Provenance, so tools can tell a synthetic file from a real one and rebuild it.
  w.setMetadata("synth.shape", o.shape);
  w.setMetadata("synth.seed", BigInt(o.seed), GGUFValueType.UINT64);
  // For display and for rebuilding the file only: the engine must find the zeros by computing.
  if (o.sparsity !== undefined) {
    w.setMetadata("synth.sparsity", o.sparsity, F32);
    w.setMetadata("synth.alpha", o.alpha ?? SPARSITY_ALPHA_DEFAULT, F32);
    if (o.gateRank !== undefined) w.setMetadata("synth.gate_rank", o.gateRank, U32);
  }
  const vocab = buildSynthVocab(spec.vocab);
  w.setMetadata("tokenizer.ggml.model", "llama");
  w.setMetadata("tokenizer.ggml.tokens", vocab.tokens, GGUFValueType.STRING);
  w.setMetadata("tokenizer.ggml.scores", vocab.scores);
  w.setMetadata("tokenizer.ggml.token_type", vocab.types);
  w.setMetadata("tokenizer.ggml.bos_token_id", vocab.bosId, U32);
  w.setMetadata("tokenizer.ggml.eos_token_id", vocab.eosId, U32);
  w.setMetadata("tokenizer.ggml.unknown_token_id", vocab.unkId, U32);
  w.setMetadata("tokenizer.ggml.add_bos_token", true);
  w.setMetadata("tokenizer.ggml.add_eos_token", false);
}

/** Size in bytes of the file synthesize() would write (header included). */
export function synthFileSize(o: Omit<SynthOptions, "out"> & { out?: string }): number {
  const spec = validate({ ...o, out: o.out ?? "size-only" });
  const w = new GGUFWriter(o.out ?? "size-only");
  writeMetadata(w, { ...o, out: "" }, spec);
  for (const r of synthRecipes(spec, o.type)) w.addTensor(r.name, r.dims, r.type);
  return w.totalBytes;
}

/** Write a synthetic model. Resolves when the file is complete and in place. */
export async function synthesize(o: SynthOptions): Promise<SynthResult> {
  const start = performance.now();
  const spec = validate(o);
  o.signal?.throwIfAborted();
  const recipes = synthRecipes(spec, o.type);
  const w = new GGUFWriter(o.out, { fsync: o.fsync ?? true });
  writeMetadata(w, o, spec);
  for (const r of recipes) w.addTensor(r.name, r.dims, r.type);
  const totalBytes = w.dataBytes;
  const planter =
    o.sparsity !== undefined
      ? new SparsityPlanter(spec, o.type, o.act, o.seed, o.sparsity, o.alpha ?? SPARSITY_ALPHA_DEFAULT, o.gateRank ?? 0)
      : undefined;

  // Two buffers: one is filled while the other is on its way to disk.
  const bufs = [new ArrayBuffer(CHUNK_BYTES + 8), new ArrayBuffer(CHUNK_BYTES + 8)];
  const onAbort = () => void w.abort();
  o.signal?.addEventListener("abort", onAbort, { once: true });
  // the write in flight while the next chunk is filled; an abort makes it reject, and that
  // rejection must be observed (else an interrupted synth crashes instead of cleaning up)
  let pending: Promise<void> | undefined;
  try {
    for (let ti = 0; ti < recipes.length; ti++) {
      const r = recipes[ti];
      const rows = r.dims[1] ?? 1;
      const rowBytes = r.bytes / rows;
      // Whole rows per chunk (a row is a neuron), at least one.
      const rowsPerChunk = Math.max(1, Math.floor(CHUNK_BYTES / rowBytes));
      const stream = new SynthStream(o.seed, r.name);
      const fill = planter ? planter.filler(r, stream) : rowFiller(r, stream);
      const sink = await w.tensorSink(r.name);
      pending = undefined;
      for (let row = 0, k = 0; row < rows; row += rowsPerChunk, k++) {
        o.signal?.throwIfAborted();
        const n = Math.min(rowsPerChunk, rows - row);
        const bytes = n * rowBytes;
        let buf = bufs[k & 1];
        if (buf.byteLength < bytes + 8) buf = bufs[k & 1] = new ArrayBuffer(bytes + 8); // a single huge row
        const dst = new Uint8Array(buf, 0, bytes);
        fill(dst, new Uint32Array(buf, 0, (bytes + 3) >>> 2), n);
        if (pending) await pending;
        pending = sink.write(dst);
        o.onProgress?.({
          bytesWritten: w.dataBytesWritten,
          totalBytes,
          tensor: r.name,
          tensorIndex: ti,
          tensorCount: recipes.length,
        });
      }
      if (pending) await pending;
    }
    o.signal?.throwIfAborted();
    await w.finish();
  } catch (err) {
    await pending?.catch(() => undefined);
    await w.abort();
    throw err;
  } finally {
    o.signal?.removeEventListener("abort", onAbort);
  }
  const result: SynthResult = {
    path: o.out,
    bytes: w.totalBytes,
    tensors: recipes.length,
    seconds: (performance.now() - start) / 1000,
  };
  if (planter) result.predictedSparsity = planter.predicted.slice();
  if (planter && o.gateRank) {
    result.predictors = planter.predictors;
    if (o.predictorsOut) {
      const share = planter.predictors.reduce((a, p) => a + p.noiseShare, 0) / planter.predictors.length;
      await writePredictorFile({
        output: o.predictorsOut,
        predictors: planter.predictors,
        model: fingerprintOfPath(o.out),
        fsync: o.fsync,
        origin: `planted by powerinfer synth (gate rank ${o.gateRank}, margin ${PREDICTOR_MARGIN} noise deviations; quantization noise ${(100 * share).toFixed(1)}% of the pre-activation's deviation); not trained`,
      });
    }
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// Planted activation sparsity
//
// The construction. Residual dimension 0 carries a large constant C: every token embedding has
// C there and zeros in dimensions 1..31 (the rest of its quant block), and rows 0..31 of every
// attn_output and ffn_down are zero, so no layer changes them. Column 0 of every matrix that reads the normalized residual (attn_q/k/v, output, and
// ffn_up under relu) is zero, so the constant reaches only ffn_gate (and ffn_up under drelu).
// RMSNorm multiplies the whole residual by one positive number per token, which cannot change
// a sign: neuron i fires exactly when  W[i,0] w0 C + sum_{j>0} W[i,j] w_j x_j > 0,  x being the
// raw residual and w the ffn_norm weights. The sum is a random projection of the residual, close
// to Gaussian across tokens with mean mu_i and deviation sigma_i, so W[i,0] = (sigma_i z_i -
// mu_i) / (w0 C) with z_i = PhiInverse(p_i) makes the neuron fire with probability p_i. Under
// dReLU the up row gets the same kind of bias, and the two events (nearly independent: the rows
// are independent random vectors) each have probability sqrt(p_i).
//
// sigma_i and mu_i come from the generated row itself (after quantization: the bias is written
// into the row's first block with a scale chosen so that it is exact) and from a running model
// of the residual stream: its per-dimension variance v_j and, under dReLU (whose outputs are
// never negative), its mean m_j. Both are known in closed form because the generator chooses
// the scales: each FFN adds variance G/L per dimension (ffn_down's scale is set from the
// Gaussian moments of the planned activations), attention adds a quarter of that at position 0
// and, averaging over ever more positions, next to nothing later. The dReLU mean is pushed
// through the actual generated ffn_down rows; in attn_v and output, element 0 cancels it (so
// attention carries no constant and the logits have no fixed favourites). So the residual's
// variance grows from 1 to 1 + G over the depth whatever the shape, which keeps 40 layers finite.
//
// Frequencies: the power law of src/model/firing.ts (plannedFiring), ranks dealt to neurons by a
// seeded shuffle per layer.
//
// Predictable firing (gateRank r). Plain random gate rows make the firing set a function of
// the whole residual: a predictor would need the gate itself. In trained ReLU models the gate's
// input lives near a low-dimensional subspace, which is why PowerInfer's small predictors work.
// Here the equivalent is built into the gate: row i (elements 32..) is a_i . B, B a random
// r x dim basis per layer and a_i random coefficients, then quantized as any tensor (element 0
// still takes the planted bias, so the frequencies hold). The pre-activation is then
// bias_i + a_i . B x + e_i . x, where e_i is the quantization's noise, and the predictor
// fc1 = [B; -B; e0] (times the norm weights), fc2 row i = [a_i, -a_i, bias_i + delta_i]
// computes the first two terms exactly (relu(u) - relu(-u) = u; e0 reads the constant C). Its
// misses are the neurons whose noise term outweighs the margin delta_i = PREDICTOR_MARGIN times
// the noise's deviation: a fraction of a percent of the firing ones; its false alarms cost
// only the read of a bundle whose gate then computes to zero.

export const SPARSITY_MIN = 0.1;
export const SPARSITY_MAX = 0.99;
export const ALPHA_MIN = 0;
export const ALPHA_MAX = 4;
export const GATE_RANK_MAX = 1024;
/** The planted predictor's margin, in deviations of a neuron's quantization noise. */
export const PREDICTOR_MARGIN = 2;

/**
 * Residual dimension 0 is the constant; 1..RESERVED-1, the rest of its quant block, stay zero, so
 * the block holds C alone: exact in the token embeddings of every type, and exact again when the
 * engine quantizes the normalized residual to 8 bits per block (a neighbour of C would otherwise
 * get C's coarse step).
 */
const RESERVED = 32;
/** Residual variance added by all the FFNs together (the embeddings bring 1). */
const GROWTH = 2;
/** Attention's variance at position 0, relative to an FFN's. */
const ATTN_SHARE = 0.25;
/** C^2 relative to the embedding's summed variance: enough to make the biases ordinary-sized weights. */
const KAPPA = 2;

// Normal distribution.

/** Complementary error function, accurate to ~1e-11 relative in the range used here. */
function erfc(x: number): number {
  if (x < 0) return 2 - erfc(-x);
  if (x < 3) {
    // erf(x) = 2/sqrt(pi) e^(-x^2) sum_n 2^n x^(2n+1) / (1*3*...*(2n+1)): positive terms only
    let term = x;
    let sum = x;
    for (let n = 1; n < 300 && term > 1e-17 * sum; n++) {
      term *= (2 * x * x) / (2 * n + 1);
      sum += term;
    }
    return 1 - (2 / Math.sqrt(Math.PI)) * Math.exp(-x * x) * sum;
  }
  // continued fraction e^(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...)))), from the tail
  let f = x;
  for (let k = 80; k >= 1; k--) f = x + k / 2 / f;
  return Math.exp(-x * x) / Math.sqrt(Math.PI) / f;
}

export function normCdf(z: number): number {
  return 0.5 * erfc(-z / Math.SQRT2);
}

export function normPdf(z: number): number {
  return Math.exp(-0.5 * z * z) / Math.sqrt(2 * Math.PI);
}

/** PhiInverse(p): Newton steps inside a shrinking bracket. */
export function normQuantile(p: number): number {
  if (!(p > 0 && p < 1)) throw new RangeError(`normal quantile: p must be in (0, 1), got ${p}`);
  let lo = -40;
  let hi = 40;
  let z = 0;
  for (let it = 0; it < 200; it++) {
    const f = normCdf(z) - p;
    if (f > 0) hi = z;
    else lo = z;
    let nz = z - f / normPdf(z);
    if (!(nz > lo && nz < hi)) nz = (lo + hi) / 2;
    if (Math.abs(nz - z) < 1e-12) return nz;
    z = nz;
  }
  return z;
}

/** E[relu(X)] / s and E[relu(X)^2] / s^2 for X ~ N(z s, s^2). */
function reluMoments(z: number): [number, number] {
  const P = normCdf(z);
  const q = normPdf(z);
  return [z * P + q, (z * z + 1) * P + z * q];
}

// Row arithmetic on generated blocks.

const F16 = f16Table;

/**
 * out[0] = sum omega_j W_j^2 and out[1] = sum nu_j W_j over elements [from, rowLen) of the row
 * at b[off..] (from: a multiple of the block size).
 */
function rowMoments(
  type: GGMLType,
  b: Uint8Array,
  off: number,
  rowLen: number,
  from: number,
  omega: Float64Array,
  nu: Float64Array,
  out: Float64Array,
): void {
  let s2 = 0;
  let s1 = 0;
  switch (type) {
    case GGMLType.F32: {
      const f = new Float32Array(b.buffer, b.byteOffset + off, rowLen);
      for (let j = from; j < rowLen; j++) {
        const x = f[j];
        s2 += omega[j] * x * x;
        s1 += nu[j] * x;
      }
      break;
    }
    case GGMLType.F16: {
      const h = new Uint16Array(b.buffer, b.byteOffset + off, rowLen);
      for (let j = from; j < rowLen; j++) {
        const x = F16[h[j]];
        s2 += omega[j] * x * x;
        s1 += nu[j] * x;
      }
      break;
    }
    case GGMLType.Q8_0: {
      for (let e = from, o = off + (from >> 5) * 34; e < rowLen; e += 32, o += 34) {
        const d = F16[b[o] | (b[o + 1] << 8)];
        let a2 = 0;
        let a1 = 0;
        for (let j = 0; j < 32; j++) {
          const q = (b[o + 2 + j] << 24) >> 24;
          a2 += omega[e + j] * q * q;
          a1 += nu[e + j] * q;
        }
        s2 += a2 * d * d;
        s1 += a1 * d;
      }
      break;
    }
    case GGMLType.Q4_0: {
      for (let e = from, o = off + (from >> 5) * 18; e < rowLen; e += 32, o += 18) {
        const d = F16[b[o] | (b[o + 1] << 8)];
        let a2 = 0;
        let a1 = 0;
        for (let j = 0; j < 16; j++) {
          const byte = b[o + 2 + j];
          const lo = (byte & 15) - 8;
          const hi = (byte >>> 4) - 8;
          a2 += omega[e + j] * lo * lo + omega[e + j + 16] * hi * hi;
          a1 += nu[e + j] * lo + nu[e + j + 16] * hi;
        }
        s2 += a2 * d * d;
        s1 += a1 * d;
      }
      break;
    }
    case GGMLType.Q4_1: {
      // (n d + m)^2 = n^2 d^2 + 2 n d m + m^2, summed per block
      for (let e = from, o = off + (from >> 5) * 20; e < rowLen; e += 32, o += 20) {
        const d = F16[b[o] | (b[o + 1] << 8)];
        const m = F16[b[o + 2] | (b[o + 3] << 8)];
        let wnn = 0,
          wn = 0,
          w = 0,
          vn = 0,
          v = 0;
        for (let j = 0; j < 16; j++) {
          const byte = b[o + 4 + j];
          const lo = byte & 15;
          const hi = byte >>> 4;
          const w0 = omega[e + j];
          const w1 = omega[e + j + 16];
          wnn += w0 * lo * lo + w1 * hi * hi;
          wn += w0 * lo + w1 * hi;
          w += w0 + w1;
          vn += nu[e + j] * lo + nu[e + j + 16] * hi;
          v += nu[e + j] + nu[e + j + 16];
        }
        s2 += wnn * d * d + 2 * wn * d * m + w * m * m;
        s1 += vn * d + v * m;
      }
      break;
    }
    default:
      throw new RangeError(`synthetic model: no sparse planting for type ${typeTraits(type)?.name ?? type}`);
  }
  out[0] = s2;
  out[1] = s1;
}

/**
 * Quantized rows whose element 0 needs a chosen value get their first block rewritten as
 * value_j = L_j d with d > 0 and integer levels L_j: element 0 takes level L0, the other 31 keep
 * the random levels already drawn (the level that would unbalance them, -8 or -128, is mapped
 * to 0, so they are symmetric). Q4_1 stores m = -8 d, which f16 holds exactly.
 */
interface BlockLevels {
  /** the block's drawn scale, as a size for the new one */
  dNom: number;
  levels: Int32Array;
  /** largest |L0| for a positive / negative value */
  maxPos: number;
  maxNeg: number;
}

function readBlock0(type: GGMLType, b: Uint8Array, o: number, out: BlockLevels): void {
  const L = out.levels;
  switch (type) {
    case GGMLType.Q8_0:
      out.dNom = Math.abs(F16[b[o] | (b[o + 1] << 8)]);
      for (let j = 1; j < 32; j++) {
        const q = (b[o + 2 + j] << 24) >> 24;
        L[j] = q === -128 ? 0 : q;
      }
      out.maxPos = 127;
      out.maxNeg = 127;
      break;
    case GGMLType.Q4_0:
    case GGMLType.Q4_1: {
      const qs = o + (type === GGMLType.Q4_0 ? 2 : 4);
      out.dNom = Math.abs(F16[b[o] | (b[o + 1] << 8)]);
      for (let j = 1; j < 32; j++) {
        const n = j < 16 ? b[qs + j] & 15 : b[qs + j - 16] >>> 4;
        L[j] = n === 0 ? 0 : n - 8;
      }
      out.maxPos = 7;
      out.maxNeg = 8;
      break;
    }
    default:
      throw new RangeError(`synthetic model: no sparse planting for type ${typeTraits(type)?.name ?? type}`);
  }
  L[0] = 0;
}

/** Write levels (L[0] included) with scale d >= 0; returns the stored (f16-rounded) scale. */
function writeBlock0(type: GGMLType, b: Uint8Array, o: number, d: number, L: Int32Array): number {
  const dh = f32ToF16(d);
  b[o] = dh & 0xff;
  b[o + 1] = dh >>> 8;
  switch (type) {
    case GGMLType.Q8_0:
      for (let j = 0; j < 32; j++) b[o + 2 + j] = L[j] & 0xff;
      break;
    case GGMLType.Q4_0:
    case GGMLType.Q4_1: {
      let qs = o + 2;
      if (type === GGMLType.Q4_1) {
        const mh = f32ToF16(-8 * F16[dh]);
        b[o + 2] = mh & 0xff;
        b[o + 3] = mh >>> 8;
        qs = o + 4;
      }
      for (let j = 0; j < 16; j++) b[qs + j] = (L[j] + 8) | ((L[j + 16] + 8) << 4);
      break;
    }
  }
  return F16[dh];
}

/**
 * Level L0 and scale d > 0 for a rewritten block 0 such that the row's dot product with the raw
 * residual has mean/deviation z:  L0 d wc + muR + d M0 = z sqrt(R + d^2 Q0),  where R, muR are
 * the variance and mean contributed by blocks 1.., and d^2 Q0, d M0 those of the block's other
 * 31 values (which scale with d). For each level this is a quadratic in d; of all levels' roots
 * the one with d nearest the drawn scale wins, so the block stays an ordinary block wherever
 * possible. The other 31 levels may also be negated (s = -1: as random as before, and a large
 * residual mean can then help the bias instead of fighting it) or, when nothing else works,
 * zeroed (s = 0: then a root always exists). Returns [L0, d, s].
 */
function solveBlock0(
  z: number,
  R: number,
  muR: number,
  Q0: number,
  M0: number,
  wc: number,
  bl: BlockLevels,
): [level: number, d: number, s: number] {
  // nothing to offset: the level-0 element with the drawn scale is exact
  if (z === 0 && muR === 0) return M0 === 0 ? [0, bl.dNom, 1] : [0, bl.dNom, 0];
  let bestL = 0;
  let bestD = 0;
  let bestS = 1;
  let bestCost = Infinity;
  for (const s of [1, -1, 0]) {
    if (s === 0 && bestCost < Infinity) break;
    const q0 = s === 0 ? 0 : Q0;
    const m0 = s * M0;
    const consider = (L: number, d: number) => {
      if (!(d > 0) || !Number.isFinite(d)) return;
      const lhs = (L * wc + m0) * d + muR;
      // roots of the squared equation must have the sign of z
      if (z === 0 ? Math.abs(lhs) > 1e-9 * Math.abs(muR) : lhs * z <= 0) return;
      const cost = Math.abs(Math.log(d / bl.dNom));
      if (cost < bestCost) {
        bestCost = cost;
        bestL = L;
        bestD = d;
        bestS = s;
      }
    };
    for (let L = -bl.maxNeg; L <= bl.maxPos; L++) {
      if (L === 0 && (z !== 0 || s === 0)) continue;
      const A = L * wc + m0;
      if (z === 0) {
        consider(L, -muR / A);
        continue;
      }
      // (A d + muR)^2 = z^2 (R + d^2 q0)
      const a = A * A - z * z * q0;
      const b = 2 * A * muR;
      const c = muR * muR - z * z * R;
      if (Math.abs(a) < 1e-12 * A * A) {
        consider(L, -c / b);
        continue;
      }
      const disc = b * b - 4 * a * c;
      if (disc < 0) continue;
      const sq = Math.sqrt(disc);
      const qq = -0.5 * (b + (b >= 0 ? sq : -sq)); // the numerically stable pair of roots
      consider(L, qq / a);
      if (qq !== 0) consider(L, c / qq);
    }
  }
  if (bestCost === Infinity)
    throw new Error(
      `synthetic model: no block scale puts the planted bias into a row (z ${z}, wc ${wc}); this is a bug in the generator`,
    );
  return [bestL, bestD, bestS];
}

/**
 * Follows the tensors in file order (embeddings, then per layer norms, attention, FFN, then the
 * output), rewriting each generated row as the construction needs and keeping the running model
 * of the residual stream that the next tensors' biases and scales are computed from.
 */
class SparsityPlanter {
  readonly predicted: number[] = [];
  private readonly d: number;
  private readonly ffn: number;
  private readonly type: GGMLType;
  private readonly quantized: boolean;
  /** E[(value / std)^2] of generated weights: block scales vary by a uniform factor in [0.75, 1.25] */
  private readonly ef2: number;
  private readonly drelu: boolean;
  private readonly C: number;
  private readonly dF: number;
  private readonly dA: number;
  /** residual variance per dimension, and (dReLU) mean; index 0 (the constant) unused */
  private readonly v: Float64Array;
  private readonly m: Float64Array;
  private attnNorm = new Float32Array(0);
  private ffnNorm = new Float32Array(0);
  private outNorm = new Float32Array(0);
  private kNorm = 1;
  private readonly omega: Float64Array;
  private readonly nu: Float64Array;
  private readonly zeroW: Float64Array;
  // per neuron of the current layer
  private zGate = new Float64Array(0);
  private zUp = new Float64Array(0);
  private readonly sg: Float64Array;
  private readonly zg: Float64Array;
  private readonly su: Float64Array;
  private readonly zu: Float64Array;
  private readonly eh: Float64Array;
  // means in flight (dReLU)
  private readonly addMean: Float64Array;
  private pending: "none" | "attn" | "ffn" = "none";
  private readonly mom = new Float64Array(2);
  private readonly bl: BlockLevels = { dNom: 0, levels: new Int32Array(32), maxPos: 0, maxNeg: 0 };

  constructor(
    private readonly spec: SynthShapeSpec,
    synthType: SynthType,
    act: SynthActivation,
    private readonly seed: number,
    private readonly sparsity: number,
    private readonly alpha: number,
    private readonly rank = 0,
  ) {
    const d = (this.d = spec.dim);
    this.ffn = spec.ffn;
    this.type = GGML_TYPE[synthType];
    this.quantized = synthType !== "f32" && synthType !== "f16";
    this.ef2 = this.quantized ? 1 + 1 / 48 : 1;
    this.drelu = act === "drelu";
    if (d <= RESERVED) throw new RangeError(`synthetic model: planted sparsity needs dim > ${RESERVED}, got ${d}`);
    this.dF = GROWTH / spec.layers;
    this.dA = ATTN_SHARE * this.dF;
    this.v = new Float64Array(d);
    for (let j = RESERVED; j < d; j++) this.v[j] = this.ef2; // token embeddings: std 1
    this.m = new Float64Array(d);
    this.C = this.constantValue(Math.sqrt(KAPPA * (d - RESERVED)));
    this.omega = new Float64Array(d);
    this.nu = new Float64Array(d);
    this.zeroW = new Float64Array(Math.max(d, spec.ffn));
    const f = spec.ffn;
    this.sg = new Float64Array(f);
    this.zg = new Float64Array(f);
    this.su = new Float64Array(f);
    this.zu = new Float64Array(f);
    this.eh = new Float64Array(f);
    this.addMean = new Float64Array(d);
    if (rank > 0) {
      this.rowF = new Float32Array(d);
      this.rowQ = new Float32Array(d);
      this.coefWords = new Uint32Array(rank);
    }
  }

  // Predictable firing (rank > 0): the layer's basis, and the predictor being filled in.
  readonly predictors: PlantedPredictor[] = [];
  private basis = new Float32Array(0);
  private rowF = new Float32Array(0);
  private rowQ = new Float32Array(0);
  private coefWords = new Uint32Array(0);
  private current: PlantedPredictor | undefined;

  /** A layer's gate basis (rank x dim) and its predictor's fc1 (zero where the residual is). */
  private startPredictor(layer: number, std: number): void {
    const { d, rank } = this;
    const words = new Uint32Array(rank * d);
    fillRandom(new SynthStream(this.seed, `blk.${layer}.ffn_gate.basis`), words, words.length);
    // uniform values with deviation std / sqrt(rank): a row a . B, a of unit deviation, then
    // has the deviation an ordinary row has
    const a = (std / Math.sqrt(rank)) * Math.sqrt(3);
    const B = (this.basis = new Float32Array(rank * d));
    // (the reserved columns meet zeros in the residual; they are drawn anyway so that block 0
    // has an ordinary scale for the bias to be planted into)
    for (let i = 0; i < rank * d; i++) B[i] = unitUniform(words[i]) * a;
    const w = this.ffnNorm;
    if (!(w[0] > 0))
      throw new Error(
        `synthetic model: ffn_norm weight 0 of layer ${layer} is ${w[0]}; the planted predictor needs it positive (this is a bug in the generator)`,
      );
    const hidden = 2 * rank + 1;
    const fc1 = new Float32Array(hidden * d);
    for (let k = 0; k < rank; k++) {
      for (let j = RESERVED; j < d; j++) {
        const v = B[k * d + j] * w[j];
        fc1[k * d + j] = v;
        fc1[(rank + k) * d + j] = -v;
      }
    }
    fc1[2 * rank * d] = w[0]; // reads the constant: relu(w0 C) = w0 C
    this.current = {
      hidden,
      nIn: d,
      nOut: this.ffn,
      fc1,
      fc2: new Float32Array(this.ffn * hidden),
      threshold: 0,
      noiseShare: 0,
    };
    this.predictors.push(this.current);
  }

  /** Gate row i of a predictable layer: a_i . B in the file's type, a_i recorded in fc2. */
  private lowRankRow(b: Uint8Array, off: number, rowBytes: number, i: number, stream: SynthStream): void {
    const { d, rank, rowF, basis: B } = this;
    const p = this.current!;
    const h = p.hidden;
    fillRandom(stream, this.coefWords, rank);
    rowF.fill(0);
    for (let k = 0; k < rank; k++) {
      const ak = unitUniform(this.coefWords[k]) * Math.sqrt(3);
      p.fc2[i * h + k] = ak;
      p.fc2[i * h + rank + k] = -ak;
      const o = k * d;
      for (let j = 0; j < d; j++) rowF[j] += ak * B[o + j];
    }
    quantizeRow(this.type, rowF, b.subarray(off, off + rowBytes));
  }

  /**
   * After row i's bias is planted: the predictor's constant term, the bias plus the margin over
   * the row's quantization noise (what the predictor cannot see). sigma: the deviation of the
   * rest of the pre-activation (raw residual units).
   */
  private finishPredictorRow(b: Uint8Array, off: number, rowBytes: number, i: number, sigma: number): void {
    const { d, rank, rowF, rowQ, omega } = this;
    const p = this.current!;
    dequantizeRow(this.type, b.subarray(off, off + rowBytes), d, rowQ);
    let noise = 0;
    for (let j = RESERVED; j < d; j++) {
      const e = rowQ[j] - rowF[j];
      noise += e * e * omega[j];
    }
    noise = Math.sqrt(noise);
    const wc = this.ffnNorm[0] * this.C;
    p.fc2[i * p.hidden + 2 * rank] = rowQ[0] + (PREDICTOR_MARGIN * noise) / wc;
    if (sigma > 0) p.noiseShare += noise / sigma / this.ffn;
  }

  /** The constant as the file will hold it (what dequantization gives back). */
  private constantValue(c: number): number {
    switch (this.type) {
      case GGMLType.F32:
        return Math.fround(c);
      case GGMLType.F16:
        return F16[f32ToF16(c)];
      case GGMLType.Q8_0:
        return 127 * F16[f32ToF16(c / 127)];
      default:
        return 7 * F16[f32ToF16(c / 7)]; // Q4_0, Q4_1: level 7
    }
  }

  /** 1 / RMS of the residual: the factor RMSNorm applies, the same for nearly every token. */
  private normFactor(): number {
    let s = this.C * this.C;
    for (let j = 1; j < this.d; j++) s += this.v[j] + this.m[j] * this.m[j];
    return 1 / Math.sqrt(s / this.d + this.spec.rmsEps);
  }

  /** sum_j w_j^2 v_j over the varying dimensions */
  private weightedVar(w: Float32Array): number {
    let s = 0;
    for (let j = 1; j < this.d; j++) s += w[j] * w[j] * this.v[j];
    return s;
  }

  private finishAttention(): void {
    // V's mean is cancelled (see filler), so attention moves no mean. Its variance is not
    // counted: past the first few positions it averages many values and adds almost none, so
    // only those first positions fire a little more often than planned.
    this.pending = "none";
  }

  private finishFfn(): void {
    for (let j = RESERVED; j < this.d; j++) this.v[j] += this.dF;
    if (this.drelu) for (let j = 1; j < this.d; j++) this.m[j] += this.addMean[j];
    this.pending = "none";
  }

  /** Set up for a tensor; returns the standard deviation its values get. */
  private begin(r: TensorRecipe): number {
    const d = this.d;
    switch (r.kind) {
      case "norm":
        // a norm follows the block whose effect on the residual is now complete
        if (this.pending === "ffn") this.finishFfn();
        else if (this.pending === "attn") this.finishAttention();
        return r.std;
      case "attn_output": {
        // variance of one value of V at position 0, where attention returns it unchanged
        const k = this.normFactor();
        const varV = (this.ef2 / d) * k * k * this.weightedVar(this.attnNorm); // attn_v's std is 1/sqrt(dim)
        this.pending = "attn";
        return Math.sqrt(this.dA / (this.ef2 * d * varV));
      }
      case "ffn_gate": {
        this.kNorm = this.normFactor();
        const w = this.ffnNorm;
        for (let j = 1; j < d; j++) {
          this.omega[j] = w[j] * w[j] * this.v[j];
          this.nu[j] = w[j] * this.m[j];
        }
        if (this.rank > 0) this.startPredictor(r.layer, r.std);
        const p = plannedFiring(this.seed, r.layer, this.ffn, this.sparsity, this.alpha);
        this.zGate = new Float64Array(this.ffn);
        this.zUp = new Float64Array(this.ffn);
        for (let i = 0; i < this.ffn; i++) {
          // dReLU: gate and up each fire with probability sqrt(p)
          const pg = this.drelu ? Math.sqrt(p[i]) : p[i];
          this.zGate[i] = quantileCached(pg);
          this.zUp[i] = this.drelu ? this.zGate[i] : 0;
        }
        return r.std;
      }
      case "ffn_down": {
        // Gaussian moments of each neuron's output, in the units RMSNorm leaves
        const k2 = this.kNorm * this.kNorm;
        let sumVar = 0;
        let zeros = 0;
        for (let i = 0; i < this.ffn; i++) {
          const [g1, g2] = reluMoments(this.zg[i]);
          const sg = this.sg[i];
          const su = this.su[i];
          let e1: number, e2: number;
          if (this.drelu) {
            const [u1, u2] = reluMoments(this.zu[i]);
            e1 = k2 * sg * su * g1 * u1;
            e2 = k2 * k2 * sg * sg * su * su * g2 * u2;
            zeros += 1 - normCdf(this.zg[i]) * normCdf(this.zu[i]);
          } else {
            // up has no bias here: zu holds its mean over its deviation
            const mu = this.zu[i] * su;
            e1 = k2 * sg * g1 * mu;
            e2 = k2 * k2 * sg * sg * g2 * (su * su + mu * mu);
            zeros += 1 - normCdf(this.zg[i]);
          }
          this.eh[i] = e1;
          sumVar += e2 - e1 * e1;
        }
        this.predicted.push(zeros / this.ffn);
        this.addMean.fill(0);
        this.pending = "ffn";
        return Math.sqrt(this.dF / (this.ef2 * sumVar));
      }
      case "output": {
        if (this.pending === "ffn") this.finishFfn();
        const k = this.normFactor();
        return 2 / Math.sqrt(this.ef2 * k * k * this.weightedVar(this.outNorm));
      }
      default:
        return r.std;
    }
  }

  /** The row generator for a tensor of the sparse model. */
  filler(r: TensorRecipe, stream: SynthStream): RowFiller {
    const std = this.begin(r);
    // a predictable gate draws each row from the layer's basis instead (in `each`, below)
    const lowRank = r.kind === "ffn_gate" && this.rank > 0;
    const base: RowFiller = lowRank ? () => {} : rowFiller(std === r.std ? r : { ...r, std }, stream);
    const rowLen = r.dims[0];
    const tr = typeTraits(r.type)!;
    const rowBytes = (rowLen / tr.blockSize) * tr.typeSize;
    let row = 0;
    let each: (b: Uint8Array, off: number, row: number) => void;
    const wcF = this.ffnNorm.length ? this.ffnNorm[0] * this.C : 1;
    switch (r.kind) {
      case "norm": {
        const which = r.name.endsWith("attn_norm.weight")
          ? "attnNorm"
          : r.name.endsWith("ffn_norm.weight")
            ? "ffnNorm"
            : "outNorm";
        each = (b, off) => {
          this[which] = new Float32Array(rowLen);
          this[which].set(new Float32Array(b.buffer, b.byteOffset + off, rowLen));
        };
        break;
      }
      case "embed":
        each = (b, off) => this.writeEmbedding(b, off);
        break;
      case "attn_q":
      case "attn_k":
        each = (b, off) => this.plantElement0(b, off, rowLen, null, this.zeroW, this.zeroW, 1);
        break;
      case "attn_v":
      case "output": {
        // Under dReLU the residual has a mean (outputs are never negative); element 0 then
        // cancels its share in V (attention passes no constant on) and in the logits (no fixed
        // favourite tokens). Under ReLU the mean is zero and element 0 is zero.
        const norm = r.kind === "attn_v" ? this.attnNorm : this.outNorm;
        const nu = new Float64Array(rowLen);
        for (let j = 1; j < rowLen; j++) nu[j] = norm[j] * this.m[j];
        const wc = norm[0] * this.C;
        each = (b, off) => this.plantElement0(b, off, rowLen, this.drelu ? 0 : null, this.zeroW, nu, wc);
        break;
      }
      case "attn_output":
        each = (b, off, j) => {
          if (j < RESERVED) b.fill(0, off, off + rowBytes); // nothing may move the constant or fill its block
        };
        break;
      case "ffn_down":
        each = (b, off, j) => {
          if (j < RESERVED) b.fill(0, off, off + rowBytes);
          else if (this.drelu) {
            rowMoments(this.type, b, off, rowLen, 0, this.zeroW, this.eh, this.mom);
            this.addMean[j] = this.mom[1];
          }
        };
        break;
      case "ffn_gate":
        each = (b, off, i) => {
          if (lowRank) this.lowRankRow(b, off, rowBytes, i, stream);
          const [sigma, z] = this.plantElement0(b, off, rowLen, this.zGate[i], this.omega, this.nu, wcF);
          this.sg[i] = sigma;
          this.zg[i] = z;
          if (lowRank) this.finishPredictorRow(b, off, rowBytes, i, sigma);
        };
        break;
      case "ffn_up":
        each = (b, off, i) => {
          const [sigma, z] = this.plantElement0(
            b,
            off,
            rowLen,
            this.drelu ? this.zUp[i] : null,
            this.omega,
            this.nu,
            wcF,
          );
          this.su[i] = sigma;
          this.zu[i] = z;
        };
        break;
      default:
        throw new RangeError(`synthetic model: no sparse recipe for ${r.name}`);
    }
    return (dst, words, rows) => {
      base(dst, words, rows);
      for (let k = 0; k < rows; k++, row++) each(dst, k * rowBytes, row);
    };
  }

  /** Token embedding row: the constant in dimension 0, zeros in the rest of its block. */
  private writeEmbedding(b: Uint8Array, off: number): void {
    switch (this.type) {
      case GGMLType.F32:
        new Float32Array(b.buffer, b.byteOffset + off, RESERVED).fill(0)[0] = this.C;
        return;
      case GGMLType.F16:
        new Uint16Array(b.buffer, b.byteOffset + off, RESERVED).fill(0)[0] = f32ToF16(this.C);
        return;
      default: {
        const L = this.bl.levels;
        L.fill(0);
        L[0] = this.type === GGMLType.Q8_0 ? 127 : 7;
        writeBlock0(this.type, b, off, this.C / L[0], L);
      }
    }
  }

  /**
   * Set element 0 of a row that reads the normalized residual: to 0 (z null), or to the bias that
   * makes the row's dot product positive with probability Phi(z) (z = 0 with a mean: the bias
   * that cancels the mean). wc: what element 0 is multiplied by, in raw residual units (the
   * norm weight of dimension 0 times C). Returns the deviation of the rest of the dot product
   * (raw residual units) and the bias-plus-mean over it (the z reached; for z null, the mean's
   * share).
   */
  private plantElement0(
    b: Uint8Array,
    off: number,
    rowLen: number,
    z: number | null,
    omega: Float64Array,
    nu: Float64Array,
    wc: number,
  ): [number, number] {
    const mom = this.mom;
    if (!this.quantized) {
      rowMoments(this.type, b, off, rowLen, 1, omega, nu, mom);
      const sigma = Math.sqrt(mom[0]);
      const mu = mom[1];
      const target = z === null ? 0 : (z * sigma - mu) / wc;
      let value: number;
      if (this.type === GGMLType.F32) {
        value = Math.fround(target);
        new Float32Array(b.buffer, b.byteOffset + off, 1)[0] = value;
      } else {
        const h = f32ToF16(target);
        new Uint16Array(b.buffer, b.byteOffset + off, 1)[0] = h;
        value = F16[h];
      }
      return [sigma, sigma > 0 ? (value * wc + mu) / sigma : 0];
    }
    // blocks 1.. as drawn; block 0 rewritten around the bias
    rowMoments(this.type, b, off, rowLen, 32, omega, nu, mom);
    const R = mom[0];
    const muR = mom[1];
    const bl = this.bl;
    readBlock0(this.type, b, off, bl);
    const L = bl.levels;
    let Q0 = 0;
    let M0 = 0;
    for (let j = 1; j < 32; j++) {
      Q0 += omega[j] * L[j] * L[j];
      M0 += nu[j] * L[j];
    }
    const [L0, d, sgn] = z === null ? [0, bl.dNom, 1] : solveBlock0(z, R, muR, Q0, M0, wc, bl);
    if (sgn !== 1) {
      for (let j = 1; j < 32; j++) L[j] *= sgn;
      Q0 *= sgn * sgn;
      M0 *= sgn;
    }
    L[0] = L0;
    const ds = writeBlock0(this.type, b, off, d, L);
    const sigma = Math.sqrt(R + ds * ds * Q0);
    const mu = muR + ds * M0;
    return [sigma, sigma > 0 ? (L0 * ds * wc + mu) / sigma : 0];
  }
}

/** 32 random bits -> uniform on (-1, 1). */
function unitUniform(word: number): number {
  return ((word >>> 8) + 0.5) / 8388608 - 1;
}

const quantileCache = new Map<number, number>();
function quantileCached(p: number): number {
  let z = quantileCache.get(p);
  if (z === undefined) {
    if (quantileCache.size > 1 << 16) quantileCache.clear();
    quantileCache.set(p, (z = normQuantile(p)));
  }
  return z;
}
