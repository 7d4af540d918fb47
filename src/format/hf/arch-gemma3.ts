/**
 * Gemma 3's text model (Gemma3ForCausalLM, or the language half of Gemma3ForConditionalGeneration
 * whose vision tensors are then refused as unused): llama's layout with four norms a block, each
 * stored by HF as w - 1 and written as w (Gemma's RMSNorm multiplies by 1 + w), the embedding
 * cut to the tokenizer's real tokens as llama.cpp's converter cuts it, and sliding-window
 * attention on five layers in six.
 */
import { GGUFValueType } from "../gguf.js";
import type { HFConfig } from "./hf-config.js";
import { commonMetadata, decoderHParams } from "./hparams.js";
import { attentionOf, denseFFN } from "./arch-llama.js";
import { PlanBuilder, type ConversionPlan } from "./plan.js";
import type { SafetensorsCheckpoint } from "./safetensors.js";

/** The period of Gemma 3's attention: every sixth layer sees every position. */
const PERIOD = 6;

export function gemma3Plan(ckpt: SafetensorsCheckpoint, cfg: HFConfig, realVocab: number): ConversionPlan {
  const b = new PlanBuilder(ckpt, cfg);
  const h = decoderHParams(cfg);
  const ff = cfg.int("intermediate_size");
  const U32 = GGUFValueType.UINT32,
    F32 = GGUFValueType.FLOAT32;
  const act = cfg.str("hidden_activation", cfg.str("hidden_act", "gelu_pytorch_tanh"));
  if (act !== "gelu_pytorch_tanh") cfg.fail("hidden_activation", `= "${act}": gemma3 computes gelu_pytorch_tanh`);
  // q.k is scaled by 1/sqrt(query_pre_attn_scalar); llama.cpp (and the engine) take the head size,
  // or for the 62-layer 27B model embedding_length / head_count: any other value is another model
  const qScalar = cfg.optNum("query_pre_attn_scalar");
  const impliedScalar = h.nLayer === 62 ? h.hidden / h.nHead : h.headDim;
  if (qScalar !== undefined && qScalar !== impliedScalar)
    cfg.fail("query_pre_attn_scalar", `= ${qScalar}, but llama.cpp's gemma3 scales q.k by 1/sqrt(${impliedScalar})`);
  if (cfg.has("attn_logit_softcapping")) cfg.fail("attn_logit_softcapping", "is set, which Gemma 3 does not have");
  // transformers 5 nests the two RoPEs under rope_parameters.{full,sliding}_attention
  const rp = cfg.object("rope_parameters");
  const full = (rp?.full_attention ?? undefined) as Record<string, unknown> | undefined;
  const sliding = (rp?.sliding_attention ?? undefined) as Record<string, unknown> | undefined;
  const effective = full
    ? { ...h, rope: { ...h.rope, type: String(full.rope_type ?? "default"), get: (k: string) => full[k] } }
    : h;
  b.meta("general.architecture", "gemma3");
  commonMetadata(b, "gemma3", effective);
  b.meta("gemma3.context_length", cfg.int("max_position_embeddings", { fallback: 131072 }), U32);
  b.meta("gemma3.attention.layer_norm_rms_epsilon", cfg.num("rms_norm_eps", 1e-6), F32);
  b.meta("gemma3.attention.key_length", h.headDim, U32);
  b.meta("gemma3.attention.value_length", h.headDim, U32);
  const theta = full?.rope_theta ?? h.rope.theta ?? 1_000_000;
  b.meta("gemma3.rope.freq_base", theta as number, F32);
  const swaTheta = sliding?.rope_theta ?? cfg.optNum(["rope_local_base_freq", "local_rope_theta"]);
  if (swaTheta !== undefined) b.meta("gemma3.rope.freq_base_swa", swaTheta as number, F32);
  const cap = cfg.optNum("final_logit_softcapping");
  if (cap) b.meta("gemma3.final_logit_softcapping", cap, F32);
  const pattern = cfg.optInt(["sliding_window_pattern", "_sliding_window_pattern"], 1 << 12);
  const period = layerPeriod(cfg, h.nLayer, pattern ?? PERIOD);
  if (pattern !== 1) {
    b.meta("gemma3.attention.sliding_window", cfg.int("sliding_window"), U32);
    // llama.cpp (and the engine) take a period of 6 unless the file says: llama.cpp's converter
    // never says, so a checkpoint of another period would run as another model there
    if (period !== PERIOD) b.meta("gemma3.attention.sliding_window_pattern", period, U32);
  }

  // Gemma's token embedding has rows past the tokenizer's last token; llama.cpp's converter drops them.
  const embd = b.take("model.embed_tokens.weight", [h.vocab, h.hidden]);
  const rows = Math.min(realVocab, h.vocab);
  b.add("token_embd.weight", [rows, h.hidden], [{ source: embd, firstRow: 0, rows }]);
  const norm = (out: string, name: string, n: number) => b.copy(out, name, [n], { addOne: true });
  norm("output_norm.weight", "model.norm.weight", h.hidden);
  if (b.has("lm_head.weight")) cfg.fail("tie_word_embeddings", "is false, but gemma3 ties its output to the embedding");
  for (let l = 0; l < h.nLayer; l++) {
    const p = `model.layers.${l}.`,
      o = `blk.${l}.`;
    norm(o + "attn_norm.weight", p + "input_layernorm.weight", h.hidden);
    attentionOf(b, h, l, { permuteQK: false, qkvBias: false, qkNorm: false });
    norm(o + "attn_q_norm.weight", p + "self_attn.q_norm.weight", h.headDim);
    norm(o + "attn_k_norm.weight", p + "self_attn.k_norm.weight", h.headDim);
    norm(o + "post_attention_norm.weight", p + "post_attention_layernorm.weight", h.hidden);
    norm(o + "ffn_norm.weight", p + "pre_feedforward_layernorm.weight", h.hidden);
    norm(o + "post_ffw_norm.weight", p + "post_feedforward_layernorm.weight", h.hidden);
    denseFFN(b, h, l, ff);
  }
  const plan = b.finish("gemma3");
  plan.vocabSize = rows;
  return plan;
}

/**
 * The attention period: every `period`-th layer (the last of each run) sees every position, the
 * rest a window. transformers 5 lists each layer's kind in layer_types, which must follow one
 * such period (the engine and llama.cpp run no other layout); without it, `fallback`.
 */
function layerPeriod(cfg: HFConfig, nLayer: number, fallback: number): number {
  const types = cfg.json.layer_types;
  if (types === undefined || types === null) return fallback;
  if (
    !Array.isArray(types) ||
    types.length !== nLayer ||
    types.some((t) => t !== "sliding_attention" && t !== "full_attention")
  )
    cfg.fail("layer_types", `should give each of the ${nLayer} layers "sliding_attention" or "full_attention"`);
  const firstFull = types.indexOf("full_attention");
  const period = firstFull < 0 ? fallback : firstFull + 1;
  types.forEach((t, l) => {
    const want = l % period < period - 1 ? "sliding_attention" : "full_attention";
    if (t !== want)
      cfg.fail(
        "layer_types",
        `[${l}] = ${JSON.stringify(t)}: not a pattern of one full layer every ${period}, which is all the engine and llama.cpp run`,
      );
  });
  return period;
}
