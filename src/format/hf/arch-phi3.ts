/**
 * Phi-3 (Phi3ForCausalLM): q, k and v stay fused in attn_qkv and gate and up in ffn_up (gate
 * first), as llama.cpp's converter keeps them; LongRoPE's factors become rope_factors_long /
 * _short with their attention factor. Its metadata is phi3's own set (llama.cpp's converter does
 * not write the common keys for it).
 */
import { GGUFValueType } from "../gguf.js";
import type { HFConfig } from "./hf-config.js";
import { decoderHParams } from "./hparams.js";
import { embeddingsAndHead } from "./arch-llama.js";
import { PlanBuilder, type ConversionPlan } from "./plan.js";
import type { SafetensorsCheckpoint } from "./safetensors.js";

export function phi3Plan(ckpt: SafetensorsCheckpoint, cfg: HFConfig): ConversionPlan {
  const b = new PlanBuilder(ckpt, cfg);
  const h = decoderHParams(cfg);
  const ff = cfg.int("intermediate_size");
  const U32 = GGUFValueType.UINT32,
    F32 = GGUFValueType.FLOAT32;
  const r = h.rope;
  const ctx = cfg.int(["n_positions", "max_position_embeddings"]);
  const origCtx = r.get("original_max_position_embeddings");
  if (typeof origCtx !== "number" || !Number.isInteger(origCtx) || origCtx < 1)
    cfg.fail(
      "original_max_position_embeddings",
      `= ${JSON.stringify(origCtx)}: phi3 needs the original context length`,
    );
  const rot = r.get("partial_rotary_factor") ?? 1;
  if (typeof rot !== "number" || !(rot > 0 && rot <= 1))
    cfg.fail("partial_rotary_factor", `= ${JSON.stringify(rot)} is not in (0, 1]`);
  const ropeDims = Math.floor(Math.floor(rot * h.hidden) / h.nHead);
  b.meta("general.architecture", "phi3");
  b.meta("phi3.context_length", ctx, U32);
  b.meta("phi3.rope.scaling.original_context_length", origCtx as number, U32);
  b.meta("phi3.embedding_length", h.hidden, U32);
  b.meta("phi3.feed_forward_length", ff, U32);
  b.meta("phi3.block_count", h.nLayer, U32);
  b.meta("phi3.attention.head_count", h.nHead, U32);
  b.meta("phi3.attention.head_count_kv", h.nHeadKV, U32);
  b.meta("phi3.attention.layer_norm_rms_epsilon", cfg.num("rms_norm_eps"), F32);
  b.meta("phi3.rope.dimension_count", ropeDims, U32);
  if (r.theta === undefined) cfg.fail("rope_theta", "is required for phi3");
  b.meta("phi3.rope.freq_base", r.theta, F32);
  b.meta("phi3.attention.sliding_window", cfg.optInt("sliding_window") ?? 0, U32);

  const long = r.get("long_factor");
  if (long !== undefined && long !== null && !(Array.isArray(long) && long.length === 0)) {
    const short = r.get("short_factor");
    if (r.type !== "longrope" && r.type !== "su")
      cfg.fail(`${r.key}.rope_type`, `= "${r.type}" is not supported for phi3 (longrope)`);
    const scale = ctx / (origCtx as number);
    const attnFactor = scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(origCtx as number)) : 1;
    b.meta("phi3.rope.scaling.attn_factor", attnFactor, F32);
    const factors = (v: unknown, k: string) => {
      if (!Array.isArray(v) || v.length !== ropeDims / 2 || v.some((x) => typeof x !== "number"))
        cfg.fail(`${r.key}.${k}`, `should be ${ropeDims / 2} numbers`);
      return Float32Array.from(v as number[]);
    };
    b.computed("rope_factors_long.weight", factors(long, "long_factor"));
    b.computed("rope_factors_short.weight", factors(short, "short_factor"));
  } else if (r.type !== "default") {
    cfg.fail(`${r.key}.rope_type`, `= "${r.type}" without long_factor is not supported for phi3`);
  }

  embeddingsAndHead(b, h);
  const qkvRows = (h.nHead + 2 * h.nHeadKV) * h.headDim;
  for (let l = 0; l < h.nLayer; l++) {
    const p = `model.layers.${l}.`,
      o = `blk.${l}.`;
    b.copy(o + "attn_norm.weight", p + "input_layernorm.weight", [h.hidden]);
    b.copy(o + "attn_qkv.weight", p + "self_attn.qkv_proj.weight", [qkvRows, h.hidden]);
    b.copy(o + "attn_output.weight", p + "self_attn.o_proj.weight", [h.hidden, h.nHead * h.headDim]);
    b.copy(o + "ffn_norm.weight", p + "post_attention_layernorm.weight", [h.hidden]);
    b.copy(o + "ffn_up.weight", p + "mlp.gate_up_proj.weight", [2 * ff, h.hidden]);
    b.copy(o + "ffn_down.weight", p + "mlp.down_proj.weight", [h.hidden, ff]);
  }
  const plan = b.finish("phi3");
  plan.vocabSize = h.vocab;
  return plan;
}
