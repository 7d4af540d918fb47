/**
 * smallthinker (SmallThinker-4B-A0.6B, -21B-A3B: PowerInfer's own mixtures, trained for this
 * engine): a mixture of experts on every layer whose router reads the block's input before
 * attn_norm, so a token's experts are known before attention and their reads can overlap it;
 * softmax or sigmoid gating (expert_gating_func, required), the top expert_used_count
 * renormalized; ReGLU experts (relu(gate) * up: sparse within each expert too), each
 * expert_feed_forward_length wide.
 *
 * With attention.sliding_window set, llama.cpp windows three layers in four (sliding_window_pattern,
 * default 4, the first of each four global) at 4096 positions whatever the key's value, gives
 * the windowed layers rope.freq_base_swa (default rope.freq_base), and runs every fourth layer
 * (l % 4 == 0, the global ones) without RoPE, except in a model of exactly four layers. Without a
 * window every layer has RoPE and sees all.
 */
import type { Architecture } from "./architecture.js";
import { slidingLayers, uniformAttention } from "./attention-layers.js";
import { llamaLayer } from "./llama.js";

/** llama.cpp's window for smallthinker's windowed layers, whatever attention.sliding_window says. */
const WINDOW = 4096;
/** every this-many-th layer has no RoPE (llama.cpp's n_no_rope_layer_step), with a window */
const NO_ROPE_STEP = 4;

export const smallthinker: Architecture = {
  name: "smallthinker",
  activation: "relu",
  activationFixed: true,
  ropePairing: "neox",
  qkvBias: false,
  qkNorm: false,
  ropeFactors: "none",
  mixture: "expert_feed_forward_length",
  routerInput: "block",
  gatingKey: true,
  layer: llamaLayer,
  attentionLayers(file, key, b) {
    const { window, windowed } = slidingLayers(file, key, b.nLayer, 4, true);
    if (window === 0) return uniformAttention(b);
    const swaBase = file.getNumber(key("rope.freq_base_swa"), b.ropeFreqBase);
    return {
      ...uniformAttention(b),
      windows: windowed.map((w) => (w ? WINDOW : 0)),
      // llama.cpp's condition as it stands: a model of exactly NO_ROPE_STEP layers keeps RoPE everywhere
      ropeBases: windowed.map((w, l) =>
        b.nLayer !== NO_ROPE_STEP && l % NO_ROPE_STEP === 0 ? 0 : w ? swaBase : b.ropeFreqBase,
      ),
    };
  },
};
