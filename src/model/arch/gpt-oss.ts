/**
 * gpt-oss (OpenAI's gpt-oss-20b and -120b; llama.cpp's LLM_ARCH_OPENAI_MOE, GGUF name "gpt-oss"):
 *
 *   blk.N.attn_norm, attn_q / attn_k / attn_v (with biases where the file has them), attn_output
 *   and its bias, attn_sinks (one logit per head that joins the softmax's denominator);
 *   blk.N.post_attention_norm (despite its name the FFN's input norm, as llama.cpp reads it), then
 *   a mixture of experts on every layer: the router ffn_gate_inp with a bias, the top
 *   expert_used_count experts by their logits and a softmax over just those, each expert's gate,
 *   up and down (3-D ffn_*_exps, MXFP4 as the model ships) with biases, and the clamped SwiGLU
 *   (swiglu_oai: the gate capped at 7, times sigmoid(1.702 gate), times the up clamped to +-7,
 *   plus 1), expert_feed_forward_length wide.
 *
 * Attention: NEOX RoPE, q.k scaled by 1/sqrt(head size); attention.sliding_window (required)
 * windows the layers llama.cpp windows, l % period < period - 1 for sliding_window_pattern
 * (default 2: even layers windowed, odd ones global), with rope.freq_base_swa on the windowed
 * ones where the file sets it. The file's RoPE scaling (YaRN for gpt-oss) applies on every layer.
 *
 * From a neuron store the experts run dense (every neuron of a routed expert; swiglu_oai has no
 * zeros), their bundles carrying each neuron's gate and up biases (offload/expert-biases.ts).
 */
import { GGUFError } from "../../format/gguf.js";
import type { Architecture, LayerSource } from "./architecture.js";
import { slidingLayers, uniformAttention } from "./attention-layers.js";
import { checkVector, expertBiasName, loadMoeLayer, routerBiasName, routerName } from "./experts.js";
import { llamaLayer } from "./llama.js";
import type { FFNWeights, LayerWeights } from "../parts/block.js";

/**
 * From a neuron store: the router and its bias, and each expert's down bias, in memory; each
 * neuron's gate and up biases are in its bundle (the store's ffn.parts.biases), added by the
 * sparse kernels.
 */
function offloadedExperts(src: LayerSource, l: number): FFNWeights {
  const { loader, file, cfg } = src;
  const { nEmbd, nExpert } = cfg;
  checkVector(file, routerBiasName(l), [nExpert], "(expert_count)");
  checkVector(file, expertBiasName(l, "down"), [nEmbd, nExpert], "(one row per expert)");
  return {
    kind: "offloaded-moe",
    router: loader.matrix(routerName(l), nEmbd, nExpert),
    routerBias: loader.vector(routerBiasName(l), nExpert),
    downBias: Array.from({ length: nExpert }, (_, e) =>
      loader.expertVector(expertBiasName(l, "down"), e, nEmbd, nExpert),
    ),
  };
}

function gptOssLayer(src: LayerSource, l: number): LayerWeights {
  const { loader, file, cfg } = src;
  const p = `blk.${l}.`;
  // llamaLayer reads the FFN's input norm as ffn_norm; gpt-oss names it post_attention_norm
  return llamaLayer(src, l, {
    attentionExtras: () => ({
      bo: loader.vector(p + "attn_output.bias", cfg.nEmbd),
      sinks: loader.vector(p + "attn_sinks.weight", cfg.nHead),
    }),
    ffnNorm: `${p}${gptOss.ffnNormName}.weight`,
    ffn: () => (src.store ? offloadedExperts(src, l) : { kind: "moe", moe: loadMoeLayer(loader, file, cfg, l) }),
  });
}

export const gptOss: Architecture = {
  name: "gpt-oss",
  activation: "swiglu_oai",
  activationFixed: true,
  ropePairing: "neox",
  qkvBias: true,
  qkNorm: false,
  ropeFactors: "none",
  mixture: "expert_feed_forward_length",
  expertGating: "softmax_weight",
  attnOutputBias: true,
  attnSinks: true,
  expertBiases: true,
  ffnNormName: "post_attention_norm",
  layer: gptOssLayer,
  attentionLayers(file, key, b) {
    if (!file.has(key("attention.sliding_window")))
      throw new GGUFError(file.path, `metadata "${key("attention.sliding_window")}" is missing (gpt-oss requires it)`);
    const { window, windowed } = slidingLayers(file, key, b.nLayer, 2);
    const swaBase = file.getNumber(key("rope.freq_base_swa"), b.ropeFreqBase);
    if (!(swaBase > 1))
      throw new GGUFError(file.path, `metadata "${key("rope.freq_base_swa")}" = ${swaBase} must be > 1`);
    return {
      ...uniformAttention(b),
      windows: windowed.map((w) => (w ? window : 0)),
      ropeBases: windowed.map((w) => (w ? swaBase : b.ropeFreqBase)),
    };
  },
};
