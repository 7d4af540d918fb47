/**
 * Hyper-parameters of a llama-family model, read from GGUF metadata, with each architecture's
 * conventions (activation, RoPE pairing, biases) made explicit.
 */
import { ACTIVATION_NAMES, activationByName, type Activation } from "../format/activations.js";
import { GGUFError, YARN_TRUNCATE_KEY, type ModelFile } from "../format/gguf.js";
import { ARCHITECTURES } from "./arch/index.js";
import { uniformAttention } from "./arch/attention-layers.js";
import type { RopeYarn } from "./rope.js";

export type { Activation } from "../format/activations.js";
export type RopePairing = "normal" | "neox";
export type ExpertGating = "softmax" | "sigmoid" | "softmax_weight";

export interface ModelConfig {
  readonly architecture: string;
  readonly nEmbd: number;
  readonly nLayer: number;
  readonly nHead: number;
  readonly nHeadKV: number;
  readonly headDim: number;
  readonly nFF: number;
  readonly nVocab: number;
  readonly nCtxTrain: number;
  readonly nRot: number;
  readonly normEps: number;
  readonly ropeFreqBase: number;
  /** multiplies positions (linear RoPE scaling: 1 / factor) */
  readonly ropeFreqScale: number;
  /** multiplies RoPE's cos and sin (rope.scaling.attn_factor: LongRoPE's attention factor), 1 by default */
  readonly ropeAttnFactor: number;
  /** the context the model was trained at before its RoPE was scaled (rope.scaling.original_context_length) */
  readonly ropeOrigContext: number;
  /** YaRN's parameters where rope.scaling.type is "yarn" (ropeFreqScale is then 1 / its factor), else null */
  readonly ropeYarn: RopeYarn | null;
  readonly ropePairing: RopePairing;
  readonly activation: Activation;
  /** whether Q/K/V projections carry biases (qwen2) */
  readonly qkvBias: boolean;
  /** a per-head RMSNorm of q and k after their projections, before RoPE (qwen3: attn_q_norm, attn_k_norm) */
  readonly qkNorm: boolean;
  /** PowerInfer sparse file ("PWRI"): predictors present, Down stored transposed */
  readonly powerinfer: boolean;
  /** mixture of experts (Mixtral layout): experts per layer (0: a dense FFN), and how many each token is routed to */
  readonly nExpert: number;
  readonly nExpertUsed: number;
  /**
   * a mixture's gating: softmax over every expert's logit, or each one's sigmoid (then top-k,
   * renormalized), or (gpt-oss) the top-k logits and a softmax over just those
   */
  readonly expertGating: ExpertGating;
  /** attention's output projection has a bias; each head has a sink logit (gpt-oss) */
  readonly attnOutputBias: boolean;
  readonly attnSinks: boolean;
  /** the router's logits and every expert's gate, up and down have biases (gpt-oss) */
  readonly expertBiases: boolean;
  /** what a mixture's router reads: the FFN's normed input, or the block's input before attention */
  readonly routerInput: "ffn" | "block";
  readonly sparseThreshold: number;
  /** per layer: the sliding window (0: the layer sees every earlier position) */
  readonly windows: readonly number[];
  /** per layer: the RoPE base (0: the layer has no RoPE) and its position scale */
  readonly ropeBases: readonly number[];
  readonly ropeScales: readonly number[];
  /** the scale of q.k in attention (1/sqrt(headDim) unless the architecture says otherwise) */
  readonly kqScale: number;
  /** attention's and the FFN's outputs are RMS-normed before they join the residual stream */
  readonly postNorms: boolean;
  /** the embeddings are multiplied by this (1, or gemma3's sqrt(embedding_length)) */
  readonly embedScale: number;
  /** the logits are soft-capped at this: cap * tanh(logit / cap) (0: not) */
  readonly logitSoftcap: number;
}

export const SUPPORTED_ARCHITECTURES = [...ARCHITECTURES.keys()];

/** A mixture of experts' counts from `<arch>.expert_count` / `.expert_used_count`, checked (0 and 0 for a dense FFN). */
function experts(file: ModelFile, key: (k: string) => string): { nExpert: number; nExpertUsed: number } {
  if (!file.has(key("expert_count"))) {
    if (file.has(key("expert_used_count")))
      throw new GGUFError(
        file.path,
        `metadata "${key("expert_used_count")}" is set but "${key("expert_count")}" is not`,
      );
    return { nExpert: 0, nExpertUsed: 0 };
  }
  const nExpert = file.getNumber(key("expert_count"));
  if (!Number.isInteger(nExpert) || nExpert < 0 || nExpert > 1024)
    throw new GGUFError(file.path, `metadata "${key("expert_count")}" = ${nExpert} is not an expert count (0..1024)`);
  if (nExpert === 0) return { nExpert: 0, nExpertUsed: 0 };
  const nExpertUsed = file.getNumber(key("expert_used_count"), 2);
  if (!Number.isInteger(nExpertUsed) || nExpertUsed < 1 || nExpertUsed > nExpert) {
    throw new GGUFError(
      file.path,
      `metadata "${key("expert_used_count")}" = ${nExpertUsed} does not fit "${key("expert_count")}" = ${nExpert} (expected 1..${nExpert})`,
    );
  }
  return { nExpert, nExpertUsed };
}

/**
 * YaRN as llama.cpp runs it: extrapolation factor 1, beta fast 32 and slow 1. llama.cpp reads
 * none of rope.scaling.yarn_* for the architectures here, so a file that sets one to another
 * value would run differently from what it asks: refused, naming the key.
 */
function yarnOf(file: ModelFile, key: (k: string) => string, origContext: number): RopeYarn {
  const fixed = { yarn_ext_factor: 1, yarn_beta_fast: 32, yarn_beta_slow: 1 };
  for (const [k, v] of Object.entries(fixed)) {
    const name = key(`rope.scaling.${k}`);
    if (file.has(name) && file.getNumber(name) !== v)
      throw new GGUFError(
        file.path,
        `metadata "${name}" = ${file.getNumber(name)}: llama.cpp ignores it and computes YaRN with ${v}; refused rather than run as another model`,
      );
  }
  for (const k of ["rope.scaling.yarn_log_multiplier", "rope.scaling.yarn_attn_factor"])
    if (file.has(key(k)))
      throw new GGUFError(file.path, `metadata "${key(k)}" is set: this YaRN variant is not supported`);
  return {
    extFactor: fixed.yarn_ext_factor,
    betaFast: fixed.yarn_beta_fast,
    betaSlow: fixed.yarn_beta_slow,
    origContext,
    // llama.cpp ignores this key and always rounds: it runs such a file slightly differently
    truncate: file.getBool(key(YARN_TRUNCATE_KEY), true),
  };
}

export function readConfig(file: ModelFile): ModelConfig {
  const arch = file.architecture;
  const traits = ARCHITECTURES.get(arch);
  if (!traits) {
    throw new GGUFError(
      file.path,
      `unsupported architecture "${arch}" (supported: ${SUPPORTED_ARCHITECTURES.join(", ")})`,
    );
  }
  const key = (k: string) => `${arch}.${k}`;
  const positive = (k: string, fallback?: number, max = 1 << 24): number => {
    const v = file.getNumber(key(k), fallback);
    if (!Number.isInteger(v) || v <= 0 || v > max)
      throw new GGUFError(file.path, `metadata "${key(k)}" = ${v} is not a sane positive integer`);
    return v;
  };
  const nEmbd = positive("embedding_length", undefined, 1 << 17);
  const nLayer = positive("block_count", undefined, 1024);
  const nHead = positive("attention.head_count", undefined, 4096);
  const nHeadKV = positive("attention.head_count_kv", nHead, 4096);
  const moe = experts(file, key);
  let expertGating: ExpertGating = traits.expertGating ?? "softmax";
  if (traits.gatingKey) {
    const g = file.getNumber(key("expert_gating_func"), 0);
    if (g !== 1 && g !== 2)
      throw new GGUFError(
        file.path,
        `metadata "${key("expert_gating_func")}" = ${g}: ${arch} needs 1 (softmax) or 2 (sigmoid)`,
      );
    expertGating = g === 1 ? "softmax" : "sigmoid";
  }
  if (traits.mixture && moe.nExpert === 0)
    throw new GGUFError(file.path, `${arch} is a mixture of experts, but metadata "${key("expert_count")}" is not set`);
  // An expert's width: feed_forward_length in Mixtral's layout; where the architecture says,
  // expert_feed_forward_length (qwen3moe's feed_forward_length is a dense width no layer has),
  // falling back as llama.cpp does to feed_forward_length / expert_used_count.
  const nFF =
    traits.mixture === "expert_feed_forward_length"
      ? file.has(key("expert_feed_forward_length"))
        ? positive("expert_feed_forward_length", undefined, 1 << 20)
        : Math.floor(positive("feed_forward_length", undefined, 1 << 20) / moe.nExpertUsed)
      : positive("feed_forward_length", undefined, 1 << 20);
  if (nHead % nHeadKV !== 0)
    throw new GGUFError(file.path, `head_count ${nHead} is not a multiple of head_count_kv ${nHeadKV}`);
  // The head size: key_length where the file says (qwen3's 128 need not be embedding_length /
  // head_count), else embedding_length / head_count. Keys and values share one head size here.
  let headDim: number;
  if (file.has(key("attention.key_length"))) {
    headDim = positive("attention.key_length", undefined, 1 << 12);
  } else {
    if (nEmbd % nHead !== 0)
      throw new GGUFError(file.path, `embedding_length ${nEmbd} is not a multiple of head_count ${nHead}`);
    headDim = nEmbd / nHead;
  }
  if (headDim % 2 !== 0) throw new GGUFError(file.path, `the head size ${headDim} is odd (RoPE rotates pairs)`);
  const valueLength = file.has(key("attention.value_length")) ? positive("attention.value_length") : headDim;
  if (valueLength !== headDim)
    throw new GGUFError(
      file.path,
      `metadata "${key("attention.value_length")}" = ${valueLength} differs from the key head size ${headDim}; heads of two sizes are not supported`,
    );
  const nRot = positive("rope.dimension_count", headDim, headDim);
  if (nRot % 2 !== 0) throw new GGUFError(file.path, `rope.dimension_count ${nRot} is odd`);

  const tokens = file.getArray("tokenizer.ggml.tokens");
  const embd = file.tensor("token_embd.weight");
  const nVocab = file.has(key("vocab_size")) ? positive("vocab_size") : (tokens?.length ?? embd.dims[1]);
  if (embd.dims[0] !== nEmbd || embd.dims[1] !== nVocab) {
    throw new GGUFError(file.path, `token_embd.weight is [${embd.dims.join(", ")}], expected [${nEmbd}, ${nVocab}]`);
  }

  let activation = traits.activation;
  if (file.has(key("feed_forward_activation"))) {
    const name = file.getString(key("feed_forward_activation")).toLowerCase();
    const a = activationByName(name);
    if (!a)
      throw new GGUFError(
        file.path,
        `metadata "${key("feed_forward_activation")}" = "${name}" is not a known activation (${ACTIVATION_NAMES.join(", ")})`,
      );
    if (traits.activationFixed && a !== traits.activation)
      throw new GGUFError(
        file.path,
        `metadata "${key("feed_forward_activation")}" = "${name}", but ${arch} computes ${traits.activation} (as llama.cpp does, whatever the key says): refused rather than run as another model`,
      );
    activation = a;
  }

  let ropeFreqScale = 1;
  const scalingType = file.has(key("rope.scaling.type")) ? file.getString(key("rope.scaling.type")) : "none";
  if (scalingType === "linear" || scalingType === "yarn") {
    const factor = file.getNumber(key("rope.scaling.factor"), 1);
    if (!(factor > 0)) throw new GGUFError(file.path, `rope.scaling.factor = ${factor} must be positive`);
    ropeFreqScale = Math.fround(1 / factor);
  } else if (scalingType !== "none") {
    throw new GGUFError(file.path, `rope scaling "${scalingType}" is not supported yet (only linear and yarn)`);
  }

  const ropeAttnFactor = file.getNumber(key("rope.scaling.attn_factor"), 1);
  if (!(ropeAttnFactor > 0 && ropeAttnFactor < 100))
    throw new GGUFError(
      file.path,
      `metadata "${key("rope.scaling.attn_factor")}" = ${ropeAttnFactor} is not a sane factor`,
    );
  const nCtxTrain = positive("context_length", 2048, 1 << 24);

  const normEps = file.getNumber(key("attention.layer_norm_rms_epsilon"), 1e-5);
  const ropeFreqBase = file.getNumber(key("rope.freq_base"), 10000);
  if (!(normEps > 0 && normEps < 1))
    throw new GGUFError(file.path, `layer_norm_rms_epsilon = ${normEps} is not in (0, 1)`);
  if (!(ropeFreqBase > 1)) throw new GGUFError(file.path, `rope.freq_base = ${ropeFreqBase} must be > 1`);

  const ropeOrigContext = positive("rope.scaling.original_context_length", nCtxTrain, 1 << 24);
  const attentionBase = { nLayer, nEmbd, nHead, headDim, ropeFreqBase, ropeFreqScale };
  const attention = traits.attentionLayers
    ? traits.attentionLayers(file, key, attentionBase)
    : uniformAttention(attentionBase);
  let logitSoftcap = 0;
  if (traits.logitSoftcap && file.has(key("final_logit_softcapping"))) {
    logitSoftcap = file.getNumber(key("final_logit_softcapping"));
    if (!(logitSoftcap >= 0 && Number.isFinite(logitSoftcap)))
      throw new GGUFError(file.path, `metadata "${key("final_logit_softcapping")}" = ${logitSoftcap} is not a cap`);
  }

  return {
    architecture: arch,
    nEmbd,
    nLayer,
    nHead,
    nHeadKV,
    headDim,
    nFF,
    nVocab,
    nCtxTrain,
    nRot,
    normEps,
    ropeFreqBase,
    ropeFreqScale,
    ropeAttnFactor,
    ropeOrigContext,
    ropeYarn: scalingType === "yarn" ? yarnOf(file, key, ropeOrigContext) : null,
    ropePairing: traits.ropePairing,
    activation,
    qkvBias: traits.qkvBias && file.tensors.has("blk.0.attn_q.bias"),
    qkNorm: traits.qkNorm,
    powerinfer: file.magic === "PWRI",
    ...moe,
    expertGating,
    routerInput: traits.routerInput ?? "ffn",
    attnOutputBias: traits.attnOutputBias ?? false,
    attnSinks: traits.attnSinks ?? false,
    expertBiases: traits.expertBiases ?? false,
    sparseThreshold: file.has("powerinfer.sparse_threshold") ? file.getNumber("powerinfer.sparse_threshold") : 0,
    ...attention,
    postNorms: traits.postNorms ?? false,
    embedScale: traits.scaledEmbeddings ? Math.fround(Math.sqrt(nEmbd)) : 1,
    logitSoftcap,
  };
}
