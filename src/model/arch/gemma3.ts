/**
 * gemma3 (Gemma 3's text model): llama's layer layout with four norms to a block (attn_norm, then
 * attn_post_norm on attention's output before the residual; ffn_norm, then ffn_post_norm on the
 * FFN's output), q and k RMS-normed per head before RoPE, a GELU (tanh) gated FFN, embeddings
 * multiplied by sqrt(embedding_length), and the final logits soft-capped where the file sets
 * final_logit_softcapping. Its norm weights already hold Gemma's "+ 1" (the converter adds it).
 *
 * With attention.sliding_window set, five layers in six (sliding_window_pattern) see only that
 * many positions and use rope.freq_base_swa (default 10000) unscaled; every sixth sees all
 * positions with rope.freq_base and the file's RoPE scaling. q.k is scaled by 1/sqrt(head size),
 * except for the 62-layer (27B) model, whose scale llama.cpp takes from embedding_length /
 * head_count instead.
 */
import { GGUFError } from "../../format/gguf.js";
import type { Architecture } from "./architecture.js";
import { kqScaleOf, slidingLayers } from "./attention-layers.js";
import { llamaLayer } from "./llama.js";

export const gemma3: Architecture = {
  name: "gemma3",
  activation: "gelu",
  activationFixed: true,
  ropePairing: "neox",
  qkvBias: false,
  qkNorm: true,
  ropeFactors: "none",
  postNorms: true,
  scaledEmbeddings: true,
  logitSoftcap: true,
  layer(src, l) {
    const w = llamaLayer(src, l);
    const { loader, cfg } = src;
    w.attention.postNorm = loader.vector(`blk.${l}.post_attention_norm.weight`, cfg.nEmbd);
    w.ffnPostNorm = loader.vector(`blk.${l}.post_ffw_norm.weight`, cfg.nEmbd);
    return w;
  },
  attentionLayers(file, key, b) {
    const { window, windowed } = slidingLayers(file, key, b.nLayer, 6);
    const swaBase = file.getNumber(key("rope.freq_base_swa"), 10000);
    if (!(swaBase > 1))
      throw new GGUFError(file.path, `metadata "${key("rope.freq_base_swa")}" = ${swaBase} must be > 1`);
    return {
      windows: windowed.map((w) => (w ? window : 0)),
      ropeBases: windowed.map((w) => (w ? swaBase : b.ropeFreqBase)),
      ropeScales: windowed.map((w) => (w ? 1 : b.ropeFreqScale)),
      kqScale: kqScaleOf(b.nLayer === 62 ? Math.floor(b.nEmbd / b.nHead) : b.headDim),
    };
  },
};
