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
