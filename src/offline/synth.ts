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
 * per column). Activation sparsity is not planted yet; when it is, the per-neuron firing
 * frequency goes into the rows of ffn_gate (and up, for dReLU) through `rowFiller` below, without
 * disturbing the stream of any other tensor.
 */
import { GGMLType, typeTraits } from "../format/ggml-types.js";
import { GGUFWriter, GGUFValueType } from "../format/gguf-writer.js";
import { f16ToF32, f32ToF16 } from "../format/half.js";
import { buildSynthVocab } from "./synth-vocab.js";

export type SynthShape = "tiny" | "1b" | "7b" | "13b";
export type SynthActivation = "silu" | "relu" | "drelu";
export type SynthType = "f32" | "f16" | "q8_0" | "q4_0" | "q4_1";

export const SYNTH_SHAPES: readonly SynthShape[] = ["tiny", "1b", "7b", "13b"];
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
  tiny: { like: "a toy llama", dim: 256, layers: 4, ffn: 768, heads: 8, kvHeads: 4, vocab: 512, context: 512, ropeBase: 10000, rmsEps: 1e-5 },
  "1b": { like: "TinyLlama-1.1B", dim: 2048, layers: 22, ffn: 5632, heads: 32, kvHeads: 4, vocab: 32000, context: 2048, ropeBase: 10000, rmsEps: 1e-5 },
  "7b": { like: "Llama-2-7B", dim: 4096, layers: 32, ffn: 11008, heads: 32, kvHeads: 32, vocab: 32000, context: 4096, ropeBase: 10000, rmsEps: 1e-5 },
  "13b": { like: "Llama-2-13B", dim: 5120, layers: 40, ffn: 13824, heads: 40, kvHeads: 40, vocab: 32000, context: 4096, ropeBase: 10000, rmsEps: 1e-5 },
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

export type TensorKind = "embed" | "norm" | "attn_q" | "attn_k" | "attn_v" | "attn_output" | "ffn_gate" | "ffn_up" | "ffn_down" | "output";

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
}

export interface SynthResult {
  path: string;
  /** file size */
  bytes: number;
  tensors: number;
  seconds: number;
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
    out.push({ name, kind, layer, dims, type: ty, std, bytes: ((dims[0] * (dims[1] ?? 1)) / tr.blockSize) * tr.typeSize });
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
  if (spec.dim % block !== 0 || spec.ffn % block !== 0) fail(`dim ${spec.dim} and ffn ${spec.ffn} must be multiples of the ${type} block size ${block}`);
}

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
function fillRandom(st: SynthStream, words: Uint32Array, n: number): void {
  let s0 = st.s[0], s1 = st.s[1], s2 = st.s[2], s3 = st.s[3];
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
  st.s[0] = s0; st.s[1] = s1; st.s[2] = s2; st.s[3] = s3;
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
  tableCache.set(key, t);
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
  tableCache.set(key, t);
  return t;
}

/** F16 values uniform on (-a, a) with a = std * sqrt(3) (so their standard deviation is std). */
function f16ValueTable(std: number, centre: number): Uint16Array {
  const key = `v:${std}:${centre}`;
  let t = tableCache.get(key);
  if (t) return t;
  t = new Uint16Array(65536);
  const a = std * Math.sqrt(3);
  for (let r = 0; r < 65536; r++) t[r] = f32ToF16(centre + ((r + 0.5) / 65536 * 2 - 1) * a);
  tableCache.set(key, t);
  return t;
}

// ---------------------------------------------------------------------------------------------
// Row fillers

/**
 * Writes `rows` whole rows of a tensor into `dst` (which has room for them, rounded up to 4
 * bytes), drawing from the tensor's stream. `words` views the same memory as `dst`.
 */
export type RowFiller = (dst: Uint8Array, words: Uint32Array, rows: number) => void;

/** The generator for one tensor. Planting per-neuron firing rates will specialise ffn_gate here. */
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
  if (!SYNTH_SHAPES.includes(o.shape)) throw new RangeError(`synthetic model: unknown shape ${JSON.stringify(o.shape)} (expected ${SYNTH_SHAPES.join(", ")})`);
  if (!SYNTH_ACTIVATIONS.includes(o.act)) throw new RangeError(`synthetic model: unknown activation ${JSON.stringify(o.act)} (expected ${SYNTH_ACTIVATIONS.join(", ")})`);
  if (!SYNTH_TYPES.includes(o.type)) throw new RangeError(`synthetic model: unknown type ${JSON.stringify(o.type)} (expected ${SYNTH_TYPES.join(", ")})`);
  if (!Number.isSafeInteger(o.seed) || o.seed < 0) throw new RangeError(`synthetic model: seed must be a non-negative integer, got ${o.seed}`);
  if (typeof o.out !== "string" || o.out === "") throw new RangeError("synthetic model: no output path");
  const spec = { ...SHAPE_SPECS[o.shape], ...(o.overrides ?? {}) };
  checkSpec(spec, o.type);
  return spec;
}

/** Set a synthetic model's metadata on a writer. */
function writeMetadata(w: GGUFWriter, o: SynthOptions, spec: SynthShapeSpec): void {
  const U32 = GGUFValueType.UINT32;
  const F32 = GGUFValueType.FLOAT32;
  w.setMetadata("general.architecture", "llama");
  w.setMetadata("general.name", `synthetic-${o.shape}-${o.act}-${o.type}-seed${o.seed} (random weights shaped like ${spec.like}; not a trained model)`);
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

  // Two buffers: one is filled while the other is on its way to disk.
  const bufs = [new ArrayBuffer(CHUNK_BYTES + 8), new ArrayBuffer(CHUNK_BYTES + 8)];
  const onAbort = () => void w.abort();
  o.signal?.addEventListener("abort", onAbort, { once: true });
  try {
    for (let ti = 0; ti < recipes.length; ti++) {
      const r = recipes[ti];
      const rows = r.dims[1] ?? 1;
      const rowBytes = r.bytes / rows;
      // Whole rows per chunk (a row is a neuron), at least one.
      const rowsPerChunk = Math.max(1, Math.floor(CHUNK_BYTES / rowBytes));
      const fill = rowFiller(r, new SynthStream(o.seed, r.name));
      const sink = await w.tensorSink(r.name);
      let pending: Promise<void> | undefined;
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
        o.onProgress?.({ bytesWritten: w.dataBytesWritten, totalBytes, tensor: r.name, tensorIndex: ti, tensorCount: recipes.length });
      }
      if (pending) await pending;
    }
    o.signal?.throwIfAborted();
    await w.finish();
  } catch (err) {
    await w.abort();
    throw err;
  } finally {
    o.signal?.removeEventListener("abort", onAbort);
  }
  return { path: o.out, bytes: w.totalBytes, tensors: recipes.length, seconds: (performance.now() - start) / 1000 };
}
