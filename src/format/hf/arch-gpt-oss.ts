/**
 * gpt-oss (GptOssForCausalLM): attention with q/k/v/o biases and a sink logit per head, YaRN
 * RoPE, layers alternately windowed, and a mixture on every layer with a biased router and
 * biased experts.
 *
 * The experts come in two layouts. Plain tensors (F32, F16 or BF16, as transformers saves a
 * dequantized model) are fused input-major: gate_up_proj [E, hidden, 2 ff] with gate and up
 * interleaved along the last axis, down_proj [E, ff, hidden]; ggml wants each expert's matrix
 * transposed and gate and up apart (plan.ts's ColumnPick does both). The published checkpoints
 * (config quantization_config.quant_method "mxfp4") keep them as MXFP4 `*_blocks` and `*_scales`
 * (mxfp4-blocks.ts), already output-major: gate and up are the even and odd rows of
 * gate_up_proj_blocks, taken as they are (hf-to-gguf.ts writes them as MXFP4 or their exact values).
 */
import { GGUFValueType, YARN_TRUNCATE_KEY } from "../gguf.js";
import { HFConvertError, type HFConfig } from "./hf-config.js";
import { commonMetadata, decoderHParams, type DecoderHParams } from "./hparams.js";
import { attentionOf, embeddingsAndHead } from "./arch-llama.js";
import { PlanBuilder, type ConversionPlan } from "./plan.js";
import type { SafetensorsCheckpoint } from "./safetensors.js";
import { HF_MXFP4_CODE_BYTES, MXFP4_BLOCK_VALUES } from "./mxfp4-blocks.js";

const ARCH = "gpt-oss";
/** gate_up's parts: gate at the even positions, up at the odd ones */
const GATE_UP = [
  ["gate", 0],
  ["up", 1],
] as const;
/** what llama.cpp (and the engine) computes: swiglu_oai's clamp */
const SWIGLU_LIMIT = 7;
/** the YaRN parameters written to the GGUF or matching what the engine computes; any other is refused */
const YARN_KEYS = [
  "rope_type",
  "type",
  "rope_theta",
  "factor",
  "original_max_position_embeddings",
  "beta_fast",
  "beta_slow",
  "truncate",
];

export function gptOssPlan(ckpt: SafetensorsCheckpoint, cfg: HFConfig): ConversionPlan {
  const mxfp4 = declaresMxfp4(cfg);
  if (!mxfp4) {
    const u8 = [...ckpt.tensors.values()].find((t) => t.dtype === "U8");
    if (u8)
      throw new HFConvertError(
        `${u8.file}: tensor "${u8.name}" is U8, but ${cfg.path} declares no MXFP4 weights (quantization_config.quant_method "mxfp4"): its bytes have no meaning here`,
      );
  }
  const b = new PlanBuilder(ckpt, cfg);
  const h = decoderHParams(cfg);
  const U32 = GGUFValueType.UINT32;
  const limit = cfg.optNum("swiglu_limit");
  if (limit !== undefined && limit !== SWIGLU_LIMIT)
    cfg.fail("swiglu_limit", `= ${limit}: gpt-oss in llama.cpp and here clamps at ${SWIGLU_LIMIT}`);
  const nExpert = cfg.int("num_local_experts", { max: 1024 });
  const ff = cfg.int("intermediate_size", { max: 1 << 22 });
  const window = cfg.int("sliding_window", { max: 1 << 24 });
  checkLayerTypes(cfg, h.nLayer);
  b.meta("general.architecture", ARCH);
  commonMetadata(b, ARCH, h, h.rope.type === "yarn" ? ["yarn"] : []);
  if (h.rope.type === "yarn") yarnMetadata(b, h);
  b.meta(`${ARCH}.attention.sliding_window`, window, U32);
  b.meta(`${ARCH}.expert_feed_forward_length`, ff, U32);
  embeddingsAndHead(b, h);
  for (let l = 0; l < h.nLayer; l++) {
    const p = `model.layers.${l}.`,
      o = `blk.${l}.`;
    b.copy(o + "attn_norm.weight", p + "input_layernorm.weight", [h.hidden]);
    const qkvBias = b.has(p + "self_attn.q_proj.bias");
    attentionOf(b, h, l, { permuteQK: false, qkvBias, qkNorm: false });
    if (qkvBias) b.copy(o + "attn_output.bias", p + "self_attn.o_proj.bias", [h.hidden]);
    b.copy(o + "attn_sinks.weight", p + "self_attn.sinks", [h.nHead]);
    b.copy(o + "post_attention_norm.weight", p + "post_attention_layernorm.weight", [h.hidden]);
    b.copy(o + "ffn_gate_inp.weight", p + "mlp.router.weight", [nExpert, h.hidden]);
    b.copy(o + "ffn_gate_inp.bias", p + "mlp.router.bias", [nExpert]);
    const m = `${p}mlp.experts.`;
    const gateUpBias = b.take(m + "gate_up_proj_bias", [nExpert, 2 * ff]);
    for (const [part, first] of GATE_UP)
      b.add(
        `${o}ffn_${part}_exps.bias`,
        [nExpert, ff],
        [{ source: gateUpBias, firstRow: 0, rows: nExpert, columns: { first, step: 2, transpose: false } }],
      );
    if (mxfp4 && (b.has(m + "gate_up_proj_blocks") || b.has(m + "gate_up_proj_scales")))
      mxfp4Experts(b, o, m, nExpert, ff, h.hidden);
    else plainExperts(b, o, m, nExpert, ff, h.hidden);
    b.copy(`${o}ffn_down_exps.bias`, m + "down_proj_bias", [nExpert, h.hidden]);
  }
  const plan = b.finish(ARCH);
  plan.vocabSize = h.vocab;
  return plan;
}

function plainExperts(b: PlanBuilder, o: string, m: string, nExpert: number, ff: number, hidden: number): void {
  const gateUp = b.take(m + "gate_up_proj", [nExpert, hidden, 2 * ff]);
  for (const [part, first] of GATE_UP)
    b.add(
      `${o}ffn_${part}_exps.weight`,
      [nExpert, ff, hidden],
      [{ source: gateUp, firstRow: 0, rows: nExpert * ff, columns: { first, step: 2, transpose: true } }],
    );
  const down = b.take(m + "down_proj", [nExpert, ff, hidden]);
  b.add(
    `${o}ffn_down_exps.weight`,
    [nExpert, hidden, ff],
    [{ source: down, firstRow: 0, rows: nExpert * hidden, columns: { first: 0, step: 1, transpose: true } }],
  );
}

/** The published MXFP4 experts: each matrix's blocks and scales, rows of whole 32-value blocks. */
function mxfp4Experts(b: PlanBuilder, o: string, m: string, nExpert: number, ff: number, hidden: number): void {
  const pair = (name: string, rows: number, rowLen: number) => {
    if (rowLen % MXFP4_BLOCK_VALUES !== 0)
      b.cfg.fail(
        name.endsWith("down_proj") ? "intermediate_size" : "hidden_size",
        `= ${rowLen} is not a multiple of ${MXFP4_BLOCK_VALUES}, so "${name}_blocks" cannot hold whole MXFP4 blocks`,
      );
    const nb = rowLen / MXFP4_BLOCK_VALUES;
    return {
      blocks: b.take(`${name}_blocks`, [nExpert, rows, nb, HF_MXFP4_CODE_BYTES], ["U8"]),
      scales: b.take(`${name}_scales`, [nExpert, rows, nb], ["U8"]),
    };
  };
  const gateUp = pair(m + "gate_up_proj", 2 * ff, hidden);
  for (const [part, first] of GATE_UP)
    b.addMxfp4(`${o}ffn_${part}_exps.weight`, [nExpert, ff, hidden], { ...gateUp, first, step: 2 });
  b.addMxfp4(`${o}ffn_down_exps.weight`, [nExpert, hidden, ff], {
    ...pair(m + "down_proj", hidden, ff),
    first: 0,
    step: 1,
  });
}

/** Whether config.json says the checkpoint holds MXFP4 weights (as gpt-oss's published configs do). */
function declaresMxfp4(cfg: HFConfig): boolean {
  const q = cfg.object("quantization_config");
  if (q === undefined) return false;
  if (q.quant_method !== "mxfp4")
    cfg.fail(
      "quantization_config.quant_method",
      `= ${JSON.stringify(q.quant_method)}: gpt-oss checkpoints are read plain (F32, F16, BF16) or with MXFP4 experts ("mxfp4")`,
    );
  return true;
}

/** llama.cpp's YaRN keys; parameters the GGUF cannot say are refused, naming them. */
function yarnMetadata(b: PlanBuilder, h: DecoderHParams): void {
  const r = h.rope;
  const F32 = GGUFValueType.FLOAT32;
  const p = b.cfg.object(r.key) ?? {};
  for (const k of Object.keys(p))
    if (!YARN_KEYS.includes(k)) b.cfg.fail(`${r.key}.${k}`, "is a YaRN parameter the GGUF has no key for");
  const num = (k: string) => {
    const v = r.get(k);
    if (typeof v !== "number" || !(v > 0))
      b.cfg.fail(`${r.key}.${k}`, `= ${JSON.stringify(v)} is not a positive number`);
    return v;
  };
  b.meta(`${ARCH}.rope.scaling.type`, "yarn");
  b.meta(`${ARCH}.rope.scaling.factor`, num("factor"), F32);
  b.meta(`${ARCH}.rope.scaling.original_context_length`, num("original_max_position_embeddings"), GGUFValueType.UINT32);
  b.meta(`${ARCH}.rope.scaling.yarn_beta_fast`, num("beta_fast"), F32);
  b.meta(`${ARCH}.rope.scaling.yarn_beta_slow`, num("beta_slow"), F32);
  // transformers rounds the ramp's ends to whole pairs unless told not to; llama.cpp's converter
  // drops the flag (llama.cpp always rounds), which moves gpt-oss's logits by ~0.2% here
  const truncate = p.truncate ?? true;
  if (typeof truncate !== "boolean")
    b.cfg.fail(`${r.key}.truncate`, `= ${JSON.stringify(truncate)} is not true or false`);
  if (!truncate) b.meta(`${ARCH}.${YARN_TRUNCATE_KEY}`, false, GGUFValueType.BOOL);
}

/**
 * llama.cpp windows gpt-oss's even layers and not its odd ones (its converter writes no pattern);
 * a checkpoint whose layer_types say otherwise would run differently, so it is refused.
 */
function checkLayerTypes(cfg: HFConfig, nLayer: number): void {
  const types = cfg.json.layer_types;
  if (types === undefined || types === null) return;
  if (!Array.isArray(types) || types.length !== nLayer)
    cfg.fail("layer_types", `is not a list of ${nLayer} layer types`);
  (types as unknown[]).forEach((t, l) => {
    const want = l % 2 === 0 ? "sliding_attention" : "full_attention";
    if (t !== want)
      cfg.fail("layer_types", `[${l}] = ${JSON.stringify(t)}: gpt-oss windows even layers only (${want} here)`);
  });
}
