/**
 * The shapes a synthetic model can take (SHAPE_SPECS: from a 4-layer toy to Llama-2-13B, and
 * mixtures of experts in Mixtral's layout), its weight types and activations, and its tensor table
 * (synthRecipes): every tensor with its dimensions, type and the standard deviation its values are
 * drawn with.
 */
import { GGMLType, tensorBytes, typeTraits } from "../../format/ggml-types.js";

export type SynthShape =
  | "tiny"
  | "1b"
  | "7b"
  | "mistral-7b"
  | "13b"
  | "mixtral-tiny"
  | "mixtral"
  | "qwen3-tiny"
  | "qwen3-0.6b"
  | "qwen3-8b"
  | "llama3-tiny"
  | "llama3.2-1b"
  | "llama3-8b"
  | "phi3-tiny"
  | "phi3-mini"
  | "gemma3-tiny"
  | "gemma3-4b"
  | "qwen3moe-tiny"
  | "qwen3-30b-a3b"
  | "smallthinker-tiny"
  | "smallthinker-4b"
  | "smallthinker-21b"
  | "gpt-oss-tiny"
  | "gpt-oss-20b";
export type SynthActivation = "silu" | "relu" | "drelu" | "gelu" | "swiglu_oai";
/** mxfp4: a mixture's experts in MXFP4 (as gpt-oss ships them), every other matrix F32 */
export type SynthType = "f32" | "f16" | "q8_0" | "q4_0" | "q4_1" | "q5_0" | "q5_1" | "mxfp4";

export const SYNTH_SHAPES: readonly SynthShape[] = [
  "tiny",
  "1b",
  "7b",
  "mistral-7b",
  "13b",
  "mixtral-tiny",
  "mixtral",
  "qwen3-tiny",
  "qwen3-0.6b",
  "qwen3-8b",
  "llama3-tiny",
  "llama3.2-1b",
  "llama3-8b",
  "phi3-tiny",
  "phi3-mini",
  "gemma3-tiny",
  "gemma3-4b",
  "qwen3moe-tiny",
  "qwen3-30b-a3b",
  "smallthinker-tiny",
  "smallthinker-4b",
  "smallthinker-21b",
  "gpt-oss-tiny",
  "gpt-oss-20b",
];
export const SYNTH_ACTIVATIONS: readonly SynthActivation[] = ["silu", "relu", "drelu", "gelu", "swiglu_oai"];

/** The activation an architecture computes whatever the file says (llama's family takes --act). */
export const FIXED_ACTIVATION: Readonly<Partial<Record<string, SynthActivation>>> = {
  qwen3: "silu",
  qwen3moe: "silu",
  smallthinker: "relu",
  phi3: "silu",
  gemma3: "gelu",
  "gpt-oss": "swiglu_oai",
};
export const SYNTH_TYPES: readonly SynthType[] = ["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "mxfp4"];

/** Llama 3.1's RoPE scaling, as its config.json gives it: the converter turns it into rope_freqs.weight. */
export interface Llama3RopeScaling {
  readonly factor: number;
  readonly lowFreqFactor: number;
  readonly highFreqFactor: number;
  readonly originalContext: number;
}

export interface SynthShapeSpec {
  /** what it imitates */
  readonly like: string;
  /** GGUF's general.architecture (default llama) */
  readonly arch?: "llama" | "qwen3" | "phi3" | "gemma3" | "qwen3moe" | "smallthinker" | "gpt-oss";
  /** YaRN RoPE scaling (rope.scaling.type "yarn"): its factor and the original context (gpt-oss) */
  readonly yarn?: { readonly factor: number; readonly originalContext: number };
  /** smallthinker: its expert_gating_func */
  readonly gating?: "softmax" | "sigmoid";
  /** the attention head size (attention.key_length) where it is not dim / heads */
  readonly headDim?: number;
  /** no output.weight: the logits reuse token_embd (Llama 3.2 1B/3B, Qwen3 0.6B) */
  readonly tiedOutput?: boolean;
  /** Llama 3.1's RoPE scaling, written as rope_freqs.weight */
  readonly llama3Rope?: Llama3RopeScaling;
  /**
   * Phi-3's LongRoPE: long and short factors (rope_factors_long / _short) and the attention factor
   * the converter derives from the context and this original context
   */
  readonly longRopeContext?: number;
  /** gemma3: the sliding window, and the period of its layer pattern (every period-th layer sees everything) */
  readonly slidingWindow?: number;
  readonly slidingPattern?: number;
  /** linear RoPE scaling (rope.scaling.factor): gemma3's global layers */
  readonly ropeScaleLinear?: number;
  /** final_logit_softcapping */
  readonly logitSoftcap?: number;
  /** the embeddings' deviation (default 1): gemma3 multiplies them by sqrt(dim), so its are 1/sqrt(dim) */
  readonly embedStd?: number;
  readonly dim: number;
  readonly layers: number;
  readonly ffn: number;
  readonly heads: number;
  readonly kvHeads: number;
  readonly vocab: number;
  readonly context: number;
  readonly ropeBase: number;
  readonly rmsEps: number;
  /** experts per layer (a mixture in Mixtral's layout, each expert an FFN of `ffn` neurons); 0: dense */
  readonly experts: number;
  /** experts each token is routed to (llama.cpp's expert_used_count); 0 when dense */
  readonly expertsUsed: number;
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
    experts: 0,
    expertsUsed: 0,
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
    experts: 0,
    expertsUsed: 0,
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
    experts: 0,
    expertsUsed: 0,
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
    experts: 0,
    expertsUsed: 0,
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
    experts: 0,
    expertsUsed: 0,
  },
  // A mixture small enough for tests and for checking against llama.cpp in seconds.
  "mixtral-tiny": {
    like: "a toy Mixtral",
    dim: 128,
    layers: 2,
    ffn: 256,
    heads: 4,
    kvHeads: 2,
    vocab: 512,
    context: 512,
    ropeBase: 10000,
    rmsEps: 1e-5,
    experts: 4,
    expertsUsed: 2,
  },
  // Mixtral-8x7B, the shape of the paper's TurboSparse-Mixtral-47B: Mistral-7B's attention, and
  // per layer 8 experts of Mistral's FFN, 2 used per token (about 13B of the 47B per token).
  mixtral: {
    like: "Mixtral-8x7B / TurboSparse-Mixtral-47B",
    dim: 4096,
    layers: 32,
    ffn: 14336,
    heads: 32,
    kvHeads: 8,
    vocab: 32000,
    context: 32768,
    ropeBase: 1000000,
    rmsEps: 1e-5,
    experts: 8,
    expertsUsed: 2,
  },
  // Qwen3 in miniature: qwen3's attention (QK-norm, a head size of key_length that is not dim /
  // heads), small enough to check against llama.cpp in seconds. The toys keep an output matrix:
  // tied to random embeddings, the logits would favour the input token itself, every time.
  "qwen3-tiny": {
    like: "a toy Qwen3",
    arch: "qwen3",
    dim: 128,
    layers: 2,
    ffn: 384,
    heads: 4,
    kvHeads: 2,
    headDim: 64,
    vocab: 512,
    context: 512,
    ropeBase: 1000000,
    rmsEps: 1e-6,
    experts: 0,
    expertsUsed: 0,
  },
  "qwen3-0.6b": {
    like: "Qwen3-0.6B",
    arch: "qwen3",
    dim: 1024,
    layers: 28,
    ffn: 3072,
    heads: 16,
    kvHeads: 8,
    headDim: 128,
    tiedOutput: true,
    vocab: 151936,
    context: 40960,
    ropeBase: 1000000,
    rmsEps: 1e-6,
    experts: 0,
    expertsUsed: 0,
  },
  "qwen3-8b": {
    like: "Qwen3-8B",
    arch: "qwen3",
    dim: 4096,
    layers: 36,
    ffn: 12288,
    heads: 32,
    kvHeads: 8,
    headDim: 128,
    vocab: 151936,
    context: 40960,
    ropeBase: 1000000,
    rmsEps: 1e-6,
    experts: 0,
    expertsUsed: 0,
  },
  // Llama 3.2 in miniature: rope_freqs from Llama 3's scaling with its original context shrunk to
  // 64, so that the factors turn the slower pairs within the few dozen positions a test runs.
  "llama3-tiny": {
    like: "a toy Llama 3.2",
    dim: 256,
    layers: 2,
    ffn: 512,
    heads: 8,
    kvHeads: 2,
    llama3Rope: { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContext: 64 },
    vocab: 512,
    context: 512,
    ropeBase: 500000,
    rmsEps: 1e-5,
    experts: 0,
    expertsUsed: 0,
  },
  "llama3.2-1b": {
    like: "Llama-3.2-1B",
    dim: 2048,
    layers: 16,
    ffn: 8192,
    heads: 32,
    kvHeads: 8,
    tiedOutput: true,
    llama3Rope: { factor: 32, lowFreqFactor: 1, highFreqFactor: 4, originalContext: 8192 },
    vocab: 128256,
    context: 131072,
    ropeBase: 500000,
    rmsEps: 1e-5,
    experts: 0,
    expertsUsed: 0,
  },
  "llama3-8b": {
    like: "Llama-3.1-8B",
    dim: 4096,
    layers: 32,
    ffn: 14336,
    heads: 32,
    kvHeads: 8,
    llama3Rope: { factor: 8, lowFreqFactor: 1, highFreqFactor: 4, originalContext: 8192 },
    vocab: 128256,
    context: 131072,
    ropeBase: 500000,
    rmsEps: 1e-5,
    experts: 0,
    expertsUsed: 0,
  },
  // Phi-3 in miniature: q, k and v fused, gate and up fused, LongRoPE factors for an original
  // context of 32, so that a context past it takes the long factors and the attention factor.
  "phi3-tiny": {
    like: "a toy Phi-3 (128k)",
    arch: "phi3",
    dim: 256,
    layers: 2,
    ffn: 512,
    heads: 8,
    kvHeads: 4,
    longRopeContext: 32,
    vocab: 512,
    context: 512,
    ropeBase: 10000,
    rmsEps: 1e-5,
    experts: 0,
    expertsUsed: 0,
  },
  // Gemma 3 in miniature: windowed layers (a window of 8, every third layer global, as the
  // pattern key allows) with their own RoPE base, linear scaling on the global ones, post-norms,
  // QK-norm, GELU, a head size of 64 over a width of 256, and a logit soft-cap.
  "gemma3-tiny": {
    like: "a toy Gemma 3",
    arch: "gemma3",
    dim: 256,
    layers: 3,
    ffn: 512,
    heads: 4,
    kvHeads: 2,
    headDim: 64,
    slidingWindow: 8,
    slidingPattern: 3,
    ropeScaleLinear: 8,
    logitSoftcap: 8,
    embedStd: 1 / 16,
    vocab: 512,
    context: 512,
    ropeBase: 1000000,
    rmsEps: 1e-6,
    experts: 0,
    expertsUsed: 0,
  },
  "gemma3-4b": {
    like: "Gemma-3-4B",
    arch: "gemma3",
    dim: 2560,
    layers: 34,
    ffn: 10240,
    heads: 8,
    kvHeads: 4,
    headDim: 256,
    slidingWindow: 1024,
    ropeScaleLinear: 8,
    embedStd: 1 / Math.sqrt(2560),
    tiedOutput: true,
    vocab: 262208,
    context: 131072,
    ropeBase: 1000000,
    rmsEps: 1e-6,
    experts: 0,
    expertsUsed: 0,
  },
  // Qwen3-MoE in miniature: qwen3's attention, 8 experts of 128 neurons, 2 routed per token.
  "qwen3moe-tiny": {
    like: "a toy Qwen3-MoE",
    arch: "qwen3moe",
    dim: 128,
    layers: 2,
    ffn: 128,
    heads: 4,
    kvHeads: 2,
    headDim: 64,
    vocab: 512,
    context: 512,
    ropeBase: 1000000,
    rmsEps: 1e-6,
    experts: 8,
    expertsUsed: 2,
  },
  // Qwen3-30B-A3B: 48 layers of 128 experts of 768 neurons, 8 routed per token (about 3B of the
  // 30B per token).
  "qwen3-30b-a3b": {
    like: "Qwen3-30B-A3B",
    arch: "qwen3moe",
    dim: 2048,
    layers: 48,
    ffn: 768,
    heads: 32,
    kvHeads: 4,
    headDim: 128,
    vocab: 151936,
    context: 40960,
    ropeBase: 1000000,
    rmsEps: 1e-6,
    experts: 128,
    expertsUsed: 8,
  },
  // SmallThinker in miniature: the router on the block's input, sigmoid gating, ReGLU experts,
  // and with the sliding-window key set, layers 0 and 4 global and without RoPE.
  "smallthinker-tiny": {
    like: "a toy SmallThinker",
    arch: "smallthinker",
    gating: "sigmoid",
    dim: 128,
    layers: 5,
    ffn: 128,
    heads: 4,
    kvHeads: 2,
    headDim: 32,
    slidingWindow: 4096,
    vocab: 512,
    context: 512,
    ropeBase: 1500000,
    rmsEps: 1e-6,
    experts: 8,
    expertsUsed: 2,
  },
  "smallthinker-4b": {
    like: "SmallThinker-4B-A0.6B (widths)",
    arch: "smallthinker",
    gating: "softmax",
    dim: 1536,
    layers: 32,
    ffn: 768,
    heads: 12,
    kvHeads: 2,
    headDim: 128,
    slidingWindow: 4096,
    vocab: 151936,
    context: 32768,
    ropeBase: 1500000,
    rmsEps: 1e-6,
    experts: 32,
    expertsUsed: 4,
  },
  "smallthinker-21b": {
    like: "SmallThinker-21B-A3B (widths)",
    arch: "smallthinker",
    gating: "sigmoid",
    dim: 2560,
    layers: 52,
    ffn: 768,
    heads: 28,
    kvHeads: 4,
    headDim: 128,
    slidingWindow: 4096,
    vocab: 151936,
    context: 32768,
    ropeBase: 1500000,
    rmsEps: 1e-6,
    experts: 64,
    expertsUsed: 6,
  },
  // gpt-oss in miniature: attention with biases and sinks over a residual narrower than it, windowed
  // layers of 8 positions between global ones, YaRN RoPE, 8 experts with biases, 2 routed per token
  // (top-2 logits, their softmax), the clamped SwiGLU.
  "gpt-oss-tiny": {
    like: "a toy gpt-oss",
    arch: "gpt-oss",
    dim: 128,
    layers: 3,
    ffn: 128,
    heads: 4,
    kvHeads: 2,
    headDim: 64,
    slidingWindow: 8,
    yarn: { factor: 32, originalContext: 4096 },
    vocab: 512,
    context: 131072,
    ropeBase: 150000,
    rmsEps: 1e-5,
    experts: 8,
    expertsUsed: 2,
  },
  // gpt-oss-20b's public config: 24 layers of 32 experts of 2880 neurons, 4 routed per token,
  // 64 query heads and 8 KV heads of 64, windows of 128 on every other layer, YaRN 32x over 4096.
  "gpt-oss-20b": {
    like: "gpt-oss-20b (widths)",
    arch: "gpt-oss",
    dim: 2880,
    layers: 24,
    ffn: 2880,
    heads: 64,
    kvHeads: 8,
    headDim: 64,
    slidingWindow: 128,
    yarn: { factor: 32, originalContext: 4096 },
    vocab: 201088,
    context: 131072,
    ropeBase: 150000,
    rmsEps: 1e-5,
    experts: 32,
    expertsUsed: 4,
  },
  "phi3-mini": {
    like: "Phi-3-mini-4k",
    arch: "phi3",
    dim: 3072,
    layers: 32,
    ffn: 8192,
    heads: 32,
    kvHeads: 32,
    vocab: 32064,
    context: 4096,
    ropeBase: 10000,
    rmsEps: 1e-5,
    experts: 0,
    expertsUsed: 0,
  },
};

export const GGML_TYPE: Record<SynthType, GGMLType> = {
  f32: GGMLType.F32,
  f16: GGMLType.F16,
  q8_0: GGMLType.Q8_0,
  q4_0: GGMLType.Q4_0,
  q4_1: GGMLType.Q4_1,
  q5_0: GGMLType.Q5_0,
  q5_1: GGMLType.Q5_1,
  mxfp4: GGMLType.MXFP4,
};

/** The type of a model's matrices other than a mixture's experts (mxfp4 leaves them F32). */
export function denseType(type: SynthType): GGMLType {
  return type === "mxfp4" ? GGMLType.F32 : GGML_TYPE[type];
}

export type TensorKind =
  | "embed"
  | "norm"
  | "qk_norm"
  | "post_norm"
  | "rope_freqs"
  | "rope_long"
  | "rope_short"
  | "attn_q"
  | "attn_k"
  | "attn_v"
  | "attn_output"
  | "router"
  | "bias"
  | "sinks"
  | "ffn_gate"
  | "ffn_up"
  | "ffn_down"
  | "output";

/** One tensor of the synthetic model, with how its values are drawn. */
export interface TensorRecipe {
  readonly name: string;
  readonly kind: TensorKind;
  /** layer index, or -1 outside the blocks */
  readonly layer: number;
  /**
   * ggml order: [row length, rows], and for a mixture's experts [row length, rows, experts]: expert
   * e's rows follow expert e-1's (llama.cpp's `ffn_*_exps`)
   */
  readonly dims: readonly number[];
  readonly type: GGMLType;
  /** target standard deviation of the values; for norms (of every kind) the spread around 1 */
  readonly std: number;
  readonly bytes: number;
}

/** The tensor table of a synthetic model, in file order. */
export function synthRecipes(spec: SynthShapeSpec, type: SynthType): TensorRecipe[] {
  const t = denseType(type);
  const te = GGML_TYPE[type];
  const { dim, ffn, layers, vocab, heads, kvHeads, experts } = spec;
  const gptOss = spec.arch === "gpt-oss";
  const headDim = headDimOf(spec);
  const qDim = headDim * heads;
  const kvDim = headDim * kvHeads;
  const out: TensorRecipe[] = [];
  const add = (name: string, kind: TensorKind, layer: number, dims: number[], ty: GGMLType, std: number) => {
    out.push({
      name,
      kind,
      layer,
      dims,
      type: ty,
      std,
      bytes: tensorBytes(ty, dims[0] * (dims[1] ?? 1) * (dims[2] ?? 1)),
    });
  };
  const proj = (fanIn: number) => 1 / Math.sqrt(fanIn);
  // Embeddings at unit scale: the first RMSNorm rescales them anyway, and unit scale keeps the
  // residual stream comparable to what each layer adds.
  add("token_embd.weight", "embed", -1, [dim, vocab], t, spec.embedStd ?? 1);
  // computed from the scaling, not drawn (llama3RopeFactors)
  if (spec.llama3Rope) add("rope_freqs.weight", "rope_freqs", -1, [headDim / 2], GGMLType.F32, 0);
  if (spec.longRopeContext) {
    add("rope_factors_long.weight", "rope_long", -1, [headDim / 2], GGMLType.F32, 0);
    add("rope_factors_short.weight", "rope_short", -1, [headDim / 2], GGMLType.F32, 0);
  }
  const phi3 = spec.arch === "phi3";
  for (let l = 0; l < layers; l++) {
    const p = `blk.${l}.`;
    add(p + "attn_norm.weight", "norm", l, [dim], GGMLType.F32, 0.05);
    if (phi3) add(p + "attn_qkv.weight", "attn_q", l, [dim, qDim + 2 * kvDim], t, proj(dim));
    else {
      add(p + "attn_q.weight", "attn_q", l, [dim, qDim], t, proj(dim));
      add(p + "attn_k.weight", "attn_k", l, [dim, kvDim], t, proj(dim));
      add(p + "attn_v.weight", "attn_v", l, [dim, kvDim], t, proj(dim));
    }
    if (gptOss) {
      add(p + "attn_q.bias", "bias", l, [qDim], GGMLType.F32, 0.1);
      add(p + "attn_k.bias", "bias", l, [kvDim], GGMLType.F32, 0.1);
      add(p + "attn_v.bias", "bias", l, [kvDim], GGMLType.F32, 0.1);
    }
    add(p + "attn_output.weight", "attn_output", l, [qDim, dim], t, proj(qDim));
    if (gptOss) {
      add(p + "attn_output.bias", "bias", l, [dim], GGMLType.F32, 0.1);
      // sink logits about as large as q.k's: a head's sink takes a real share of its attention
      add(p + "attn_sinks.weight", "sinks", l, [heads], GGMLType.F32, 1);
    }
    if (spec.arch === "qwen3" || spec.arch === "qwen3moe" || spec.arch === "gemma3") {
      add(p + "attn_q_norm.weight", "qk_norm", l, [headDim], GGMLType.F32, 0.05);
      add(p + "attn_k_norm.weight", "qk_norm", l, [headDim], GGMLType.F32, 0.05);
    }
    if (spec.arch === "gemma3") add(p + "post_attention_norm.weight", "post_norm", l, [dim], GGMLType.F32, 0.05);
    // gpt-oss's FFN input norm goes by the name of a post-attention norm (llama.cpp's)
    add(p + (gptOss ? "post_attention_norm.weight" : "ffn_norm.weight"), "norm", l, [dim], GGMLType.F32, 0.05);
    if (experts > 0) {
      // The router stays F32 as llama.cpp's converters leave it. Logits of deviation about 1
      // over a unit-scale input: routing follows the token, with no expert favoured.
      add(p + "ffn_gate_inp.weight", "router", l, [dim, experts], GGMLType.F32, proj(dim));
      if (gptOss) add(p + "ffn_gate_inp.bias", "bias", l, [experts], GGMLType.F32, 0.5);
      add(p + "ffn_gate_exps.weight", "ffn_gate", l, [dim, ffn, experts], te, proj(dim));
      add(p + "ffn_up_exps.weight", "ffn_up", l, [dim, ffn, experts], te, proj(dim));
      add(p + "ffn_down_exps.weight", "ffn_down", l, [ffn, dim, experts], te, proj(ffn));
      if (gptOss) {
        add(p + "ffn_gate_exps.bias", "bias", l, [ffn, experts], GGMLType.F32, 0.1);
        add(p + "ffn_up_exps.bias", "bias", l, [ffn, experts], GGMLType.F32, 0.1);
        add(p + "ffn_down_exps.bias", "bias", l, [dim, experts], GGMLType.F32, 0.1);
      }
    } else {
      if (phi3)
        add(p + "ffn_up.weight", "ffn_up", l, [dim, 2 * ffn], t, proj(dim)); // gate and up fused
      else {
        add(p + "ffn_gate.weight", "ffn_gate", l, [dim, ffn], t, proj(dim));
        add(p + "ffn_up.weight", "ffn_up", l, [dim, ffn], t, proj(dim));
      }
      add(p + "ffn_down.weight", "ffn_down", l, [ffn, dim], t, proj(ffn));
    }
    if (spec.arch === "gemma3") add(p + "post_ffw_norm.weight", "post_norm", l, [dim], GGMLType.F32, 0.05);
  }
  add("output_norm.weight", "norm", -1, [dim], GGMLType.F32, 0.05);
  // Logits with a standard deviation near 2: a distribution with a few clear favourites rather
  // than a flat one over 32000 tokens.
  if (!spec.tiedOutput) add("output.weight", "output", -1, [dim, vocab], t, 2 / Math.sqrt(dim));
  return out;
}

/** The attention head size of a shape. */
export function headDimOf(spec: SynthShapeSpec): number {
  return spec.headDim ?? spec.dim / spec.heads;
}

export function checkSpec(spec: SynthShapeSpec, type: SynthType): void {
  const fail = (m: string) => {
    throw new RangeError(`synthetic model: ${m}`);
  };
  for (const k of ["dim", "layers", "ffn", "heads", "kvHeads", "vocab", "context"] as const) {
    if (!Number.isInteger(spec[k]) || spec[k] < 1) fail(`${k} must be a positive integer, got ${spec[k]}`);
  }
  if (spec.headDim === undefined && spec.dim % spec.heads !== 0)
    fail(`dim ${spec.dim} is not a multiple of heads ${spec.heads}`);
  if (spec.heads % spec.kvHeads !== 0) fail(`heads ${spec.heads} is not a multiple of kvHeads ${spec.kvHeads}`);
  const hd = headDimOf(spec);
  if (!Number.isInteger(hd) || hd < 2 || hd % 2 !== 0) fail(`head dimension ${hd} must be an even integer for RoPE`);
  if (spec.llama3Rope && spec.longRopeContext) fail("Llama 3 and LongRoPE frequency factors exclude each other");
  const moeArch =
    (spec.arch ?? "llama") === "llama" ||
    spec.arch === "qwen3moe" ||
    spec.arch === "smallthinker" ||
    spec.arch === "gpt-oss";
  if (spec.experts > 0 && !moeArch)
    fail(`a mixture of experts is synthesized in Mixtral's or qwen3moe's layout, not ${spec.arch}'s`);
  if ((spec.arch === "qwen3moe" || spec.arch === "smallthinker" || spec.arch === "gpt-oss") && spec.experts === 0)
    fail(`${spec.arch} is a mixture of experts: experts must be set`);
  if (!Number.isInteger(spec.experts) || spec.experts < 0 || spec.experts === 1)
    fail(`experts must be 0 (dense) or an integer of at least 2, got ${spec.experts}`);
  if (spec.experts === 0 && spec.expertsUsed !== 0)
    fail(`expertsUsed ${spec.expertsUsed} needs a mixture of experts (experts is 0: a dense FFN)`);
  if (
    spec.experts > 0 &&
    (!Number.isInteger(spec.expertsUsed) || spec.expertsUsed < 1 || spec.expertsUsed > spec.experts)
  )
    fail(`expertsUsed must be an integer in [1, experts = ${spec.experts}], got ${spec.expertsUsed}`);
  if (type === "mxfp4" && spec.experts === 0) fail("mxfp4 is a mixture's expert type: this shape has no experts");
  const block = typeTraits(GGML_TYPE[type])!.blockSize;
  if (spec.dim % block !== 0 || spec.ffn % block !== 0)
    fail(`dim ${spec.dim} and ffn ${spec.ffn} must be multiples of the ${type} block size ${block}`);
}
