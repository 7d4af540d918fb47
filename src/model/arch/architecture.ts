/**
 * What an architecture is to the engine: the conventions its GGUF metadata leaves unsaid, and
 * where each layer's weights are among its tensors (GGUF names -> a block's weights). Adding an
 * architecture is a file in this folder listed in index.ts, plus any part or kernel it is missing
 * (parts/).
 */
import type { ModelFile } from "../../format/gguf.js";
import type { Activation, ModelConfig, RopePairing } from "../config.js";
import type { RopeFactorsKind } from "../rope.js";
import type { LayerWeights } from "../parts/block.js";
import type { WeightLoader } from "../weight-loader.js";

export interface ArchTraits {
  /** the FFN's activation when `<arch>.feed_forward_activation` does not say */
  activation: Activation;
  /**
   * the activation is the architecture's, whatever the file says: llama.cpp computes it and
   * ignores feed_forward_activation, so a file whose key names another is refused rather than run
   * as a model llama.cpp would compute differently (PowerInfer's ReLU conventions are llama's,
   * mistral's, qwen2's and bamboo's)
   */
  activationFixed?: boolean;
  ropePairing: RopePairing;
  /** whether q, k and v carry biases (when the file has them) */
  qkvBias: boolean;
  /** whether q and k are RMS-normed per head before RoPE (the file must have attn_q_norm and attn_k_norm) */
  qkNorm: boolean;
  /**
   * the RoPE frequency factors the architecture applies where the file has them: "llama3"
   * (rope_freqs.weight), "longrope" (phi3's rope_factors_long / _short, by the context size),
   * "none" (a file that has them is refused)
   */
  ropeFactors: RopeFactorsKind;
  /**
   * whether the block norms attention's and the FFN's outputs before adding them to the residual
   * stream (gemma3: attn_post_norm, ffn_post_norm)
   */
  postNorms?: boolean;
  /**
   * every layer's FFN is a mixture of experts (expert_count is required), each expert as wide as
   * the key named (qwen3moe: expert_feed_forward_length)
   */
  mixture?: "feed_forward_length" | "expert_feed_forward_length";
  /**
   * a mixture's router: "block" reads the block's input before attn_norm, so the experts are
   * known (and their reads can start) before attention (smallthinker); default "ffn", the FFN's
   * normed input. `gatingKey`: the gating function comes from `<arch>.expert_gating_func`
   * (1 softmax, 2 sigmoid), which must then be set; else softmax.
   */
  routerInput?: "ffn" | "block";
  gatingKey?: boolean;
  /**
   * "softmax_weight" (gpt-oss): the top expert_used_count experts by their raw logits, their
   * weights a softmax over just those logits (instead of a softmax over every expert first)
   */
  expertGating?: "softmax_weight";
  /**
   * gpt-oss's extras, each required by the architecture: a bias on attention's output
   * (attn_output.bias), one sink logit per head (attn_sinks.weight), a bias on the router's logits
   * and on each expert's gate, up and down (ffn_gate_inp.bias, ffn_{gate,up,down}_exps.bias)
   */
  attnOutputBias?: boolean;
  attnSinks?: boolean;
  expertBiases?: boolean;
  /** the FFN's input norm's tensor name within a block where it is not ffn_norm (gpt-oss: post_attention_norm) */
  ffnNormName?: string;
  /** the embeddings are multiplied by sqrt(embedding_length) (gemma3) */
  scaledEmbeddings?: boolean;
  /** the final logits are soft-capped when `<arch>.final_logit_softcapping` is set (gemma3) */
  logitSoftcap?: boolean;
  /**
   * Each layer's attention where not every layer is alike: its sliding window (0: every earlier
   * position), its RoPE base (0: no RoPE) and position scale, and the scale of q.k. Read from
   * the file's metadata; absent, every layer attends to all positions with the model's RoPE and
   * 1/sqrt(head size).
   */
  attentionLayers?(file: ModelFile, key: (k: string) => string, base: AttentionBase): AttentionLayers;
}

/** What the model's metadata says of attention before an architecture's own layout of it. */
export interface AttentionBase {
  nLayer: number;
  nEmbd: number;
  nHead: number;
  headDim: number;
  ropeFreqBase: number;
  ropeFreqScale: number;
}

/** Per layer: window (0: none), RoPE base (0: none) and position scale; and the scale of q.k. */
export interface AttentionLayers {
  windows: number[];
  ropeBases: number[];
  ropeScales: number[];
  kqScale: number;
}

/** What loading one layer's weights needs. */
export interface LayerSource {
  loader: WeightLoader;
  file: ModelFile;
  cfg: ModelConfig;
  /** the file is a neuron store: the FFN's neurons stay in it, read under the budget */
  store: boolean;
}

export interface Architecture extends ArchTraits {
  /** GGUF's general.architecture */
  name: string;
  /** layer l's weights, loaded into memory in the order given (the layout the planner predicts) */
  layer(src: LayerSource, l: number): LayerWeights;
}
