/**
 * SmallThinker (SmallThinkerForCausalLM, PowerInfer's): llama's attention, a mixture of ReLU
 * experts per layer under block_sparse_moe (primary_router, experts.N.{gate,up,down}), its
 * router's gating softmax or sigmoid, and sliding-window layers where sliding_window_layout says.
 */
import { GGUFValueType } from "../gguf.js";
import type { HFConfig } from "./hf-config.js";
import { commonMetadata, decoderHParams } from "./hparams.js";
import { attentionOf, embeddingsAndHead, stackedExperts } from "./arch-llama.js";
import { PlanBuilder, type ConversionPlan } from "./plan.js";
import type { SafetensorsCheckpoint } from "./safetensors.js";

export function smallthinkerPlan(ckpt: SafetensorsCheckpoint, cfg: HFConfig): ConversionPlan {
  const b = new PlanBuilder(ckpt, cfg);
  const h = decoderHParams(cfg);
  const U32 = GGUFValueType.UINT32;
  const nExpert = cfg.int("moe_num_primary_experts", { max: 1024 });
  const used = cfg.int("moe_num_active_primary_experts");
  const ff = cfg.int("moe_ffn_hidden_size");
  b.meta("general.architecture", "smallthinker");
  commonMetadata(b, "smallthinker", h);
  b.meta("smallthinker.expert_count", nExpert, U32);
  b.meta("smallthinker.expert_used_count", used, U32);
  b.meta("smallthinker.expert_feed_forward_length", ff, U32);
  b.meta("smallthinker.feed_forward_length", ff, U32);
  b.meta("smallthinker.expert_gating_func", cfg.bool("moe_primary_router_apply_softmax", false) ? 1 : 2, U32);
  const layout = cfg.json.sliding_window_layout;
  if (layout !== undefined && layout !== null) {
    if (!Array.isArray(layout) || layout.some((x) => x !== 0 && x !== 1))
      cfg.fail("sliding_window_layout", "is not a list of 0 and 1");
    const window = cfg.optInt("sliding_window_size");
    if ((layout as number[]).some((x) => x !== 0) && window)
      b.meta("smallthinker.attention.sliding_window", window, U32);
  }
  embeddingsAndHead(b, h);
  for (let l = 0; l < h.nLayer; l++) {
    const p = `model.layers.${l}.`,
      o = `blk.${l}.`;
    b.copy(o + "attn_norm.weight", p + "input_layernorm.weight", [h.hidden]);
    attentionOf(b, h, l, { permuteQK: false, qkvBias: false, qkNorm: false });
    b.copy(o + "ffn_norm.weight", p + "post_attention_layernorm.weight", [h.hidden]);
    b.copy(o + "ffn_gate_inp.weight", p + "block_sparse_moe.primary_router.weight", [nExpert, h.hidden]);
    const m = `${p}block_sparse_moe.experts.`;
    stackedExperts(b, h, l, nExpert, ff, m, (e, part) => `${m}${e}.${part}.weight`);
  }
  const plan = b.finish("smallthinker");
  plan.vocabSize = h.vocab;
  return plan;
}
