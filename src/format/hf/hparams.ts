/**
 * What every decoder's config.json says, read once: widths, head counts, RoPE parameters, and the
 * GGUF keys llama.cpp's converter writes for them (its TextModel's common parameters).
 */
import { GGUFValueType } from "../gguf.js";
import { HFConvertError, type HFConfig } from "./hf-config.js";
import type { PlanBuilder } from "./plan.js";

export interface DecoderHParams {
  nLayer: number;
  hidden: number;
  nHead: number;
  nHeadKV: number;
  headDim: number;
  /** intermediate_size (absent on some mixtures) */
  ff: number | undefined;
  vocab: number;
  rope: RopeParams;
}

/** RoPE as config.json gives it: `rope_parameters` (transformers 5) or `rope_scaling` plus rope_theta. */
export interface RopeParams {
  /** where the parameters came from, for messages */
  key: string;
  theta: number | undefined;
  type: string;
  get(k: string): unknown;
}

export function ropeParams(cfg: HFConfig): RopeParams {
  const key = cfg.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const p = cfg.object(key) ?? {};
  const theta = typeof p.rope_theta === "number" ? p.rope_theta : cfg.optNum(["rope_theta", "rotary_emb_base"]);
  const type = p.rope_type ?? p.type ?? "default";
  if (typeof type !== "string") cfg.fail(`${key}.rope_type`, `= ${JSON.stringify(type)} is not a string`);
  return { key, theta, type: type.toLowerCase(), get: (k) => p[k] ?? (cfg.has(k) ? cfg.json[k] : undefined) };
}

export function decoderHParams(cfg: HFConfig): DecoderHParams {
  // bounds far past any model, so that a damaged config is refused before it sizes anything
  const nLayer = cfg.int(["num_hidden_layers", "n_layers", "n_layer", "num_layers"], { max: 1 << 12 });
  const hidden = cfg.int(["hidden_size", "n_embd", "dim"], { max: 1 << 20 });
  const nHead = cfg.int(["num_attention_heads", "n_head", "n_heads"], { max: 1 << 16 });
  const nHeadKV = cfg.int(["num_key_value_heads", "n_kv_heads"], { fallback: nHead, max: 1 << 16 });
  if (nHead % nHeadKV !== 0)
    cfg.fail("num_key_value_heads", `= ${nHeadKV} does not divide num_attention_heads ${nHead}`);
  let headDim = cfg.optInt("head_dim", 1 << 12);
  if (headDim === undefined) {
    if (hidden % nHead !== 0) cfg.fail("hidden_size", `= ${hidden} is not a multiple of num_attention_heads ${nHead}`);
    headDim = hidden / nHead;
  }
  if (headDim % 2 !== 0 || headDim === 0)
    cfg.fail("head_dim", `= ${headDim} is not an even head size (RoPE rotates pairs)`);
  return {
    nLayer,
    hidden,
    nHead,
    nHeadKV,
    headDim,
    ff: cfg.optInt(["intermediate_size", "n_inner", "hidden_dim"], 1 << 22),
    vocab: cfg.int("vocab_size", { max: 1 << 24 }),
    rope: ropeParams(cfg),
  };
}

/**
 * The keys llama.cpp's converter writes for every decoder (block count, widths, head counts,
 * context, RoPE base and linear scaling, norm epsilon, experts, head size). RoPE scaling types
 * the engine cannot run are refused here, naming the key; `ropeTypes` lists what the
 * architecture itself handles beyond none and linear (llama3's factors, phi3's longrope).
 */
export function commonMetadata(
  b: PlanBuilder,
  arch: string,
  h: DecoderHParams,
  ropeTypes: readonly string[] = [],
): void {
  const cfg = b.cfg;
  const k = (s: string) => `${arch}.${s}`;
  const U32 = GGUFValueType.UINT32,
    F32 = GGUFValueType.FLOAT32;
  b.meta(k("block_count"), h.nLayer, U32);
  const ctx = cfg.optInt(["max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length"]);
  if (ctx !== undefined) b.meta(k("context_length"), ctx, U32);
  b.meta(k("embedding_length"), h.hidden, U32);
  if (h.ff !== undefined) b.meta(k("feed_forward_length"), h.ff, U32);
  b.meta(k("attention.head_count"), h.nHead, U32);
  b.meta(k("attention.head_count_kv"), h.nHeadKV, U32);
  const r = h.rope;
  if (r.type === "linear") {
    const factor = r.get("factor");
    if (typeof factor !== "number" || !(factor > 0))
      cfg.fail(`${r.key}.factor`, `= ${JSON.stringify(factor)} is not a positive number`);
    b.meta(k("rope.scaling.type"), "linear");
    b.meta(k("rope.scaling.factor"), factor as number, F32);
  } else if (r.type !== "default" && !ropeTypes.includes(r.type)) {
    throw new HFConvertError(
      `${cfg.path}: "${r.key}.rope_type" = "${r.type}" is not supported for ${arch} (supported: default, linear${ropeTypes.map((t) => ", " + t).join("")})`,
    );
  }
  if (r.theta !== undefined) b.meta(k("rope.freq_base"), r.theta, F32);
  const eps = cfg.optNum(["rms_norm_eps", "norm_eps"]);
  if (eps !== undefined) b.meta(k("attention.layer_norm_rms_epsilon"), eps, F32);
  const experts = cfg.optInt(["num_local_experts", "num_experts", "n_routed_experts"]);
  if (experts !== undefined) b.meta(k("expert_count"), experts, U32);
  const used = cfg.optInt(["num_experts_per_tok", "num_experts_per_token", "top_k_experts"]);
  if (used !== undefined) b.meta(k("expert_used_count"), used, U32);
  if (cfg.has("head_dim")) {
    b.meta(k("attention.key_length"), h.headDim, U32);
    b.meta(k("attention.value_length"), h.headDim, U32);
  }
}
