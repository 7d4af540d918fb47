/**
 * The decoders laid out as llama is (ggml's names: attn_norm, attn_q/k/v/output, ffn_norm,
 * ffn_gate/up/down or a mixture's router and stacked experts): llama, mistral, mixtral, qwen2,
 * qwen3, qwen3moe. What differs between them is a flag each: llama's family stores q and k with
 * HF's rotary layout and needs the permutation to ggml's; qwen2 has q/k/v biases; qwen3 norms q
 * and k per head; the mixtures name their experts differently.
 */
import { GGUFValueType } from "../gguf.js";
import type { HFConfig } from "./hf-config.js";
import { commonMetadata, decoderHParams, type DecoderHParams } from "./hparams.js";
import { PlanBuilder, rowsOf, type ConversionPlan, type RowRange } from "./plan.js";
import { llama3RopeFactors } from "./rope-freqs.js";
import type { SafetensorsCheckpoint } from "./safetensors.js";

export interface LlamaLayoutSpec {
  /** GGUF general.architecture */
  arch: string;
  /** q and k rows are in HF's rotary order (llama, mistral, mixtral) */
  permuteQK: boolean;
  /** q, k and v have biases (qwen2) */
  qkvBias: boolean;
  /** q and k are RMS-normed per head (qwen3, qwen3moe) */
  qkNorm: boolean;
  /** the FFN is a mixture: Mixtral's block_sparse_moe or Qwen's mlp.experts */
  experts?: "mixtral" | "qwen";
  /** RoPE scaling types beyond default and linear */
  ropeTypes?: readonly string[];
  /** extra metadata (after the common keys) */
  extraMetadata?(b: PlanBuilder, h: DecoderHParams): void;
}

/** The token embedding, the final norm and the output matrix (absent when tied to the embedding). */
export function embeddingsAndHead(b: PlanBuilder, h: DecoderHParams, prefix = "model."): void {
  b.copy("token_embd.weight", `${prefix}embed_tokens.weight`, [h.vocab, h.hidden]);
  b.copy("output_norm.weight", `${prefix}norm.weight`, [h.hidden]);
  // A tied head is not in the checkpoint; an untied one must be.
  if (b.has("lm_head.weight") || !b.cfg.bool("tie_word_embeddings", false))
    b.copy("output.weight", "lm_head.weight", [h.vocab, h.hidden]);
}

/** q, k, v and the output projection of layer l, with q/k norms and biases as the spec says. */
export function attentionOf(
  b: PlanBuilder,
  h: DecoderHParams,
  l: number,
  spec: Pick<LlamaLayoutSpec, "permuteQK" | "qkvBias" | "qkNorm">,
  src = `model.layers.${l}.self_attn.`,
): void {
  const o = `blk.${l}.`;
  const qRows = h.nHead * h.headDim,
    kvRows = h.nHeadKV * h.headDim;
  const proj = (out: string, name: string, rows: number, permute: boolean) => {
    const t = b.take(name, [rows, h.hidden]);
    b.add(out, [rows, h.hidden], [{ source: t, firstRow: 0, rows, ...(permute ? { ropeHeadRows: h.headDim } : {}) }]);
  };
  proj(o + "attn_q.weight", src + "q_proj.weight", qRows, spec.permuteQK);
  proj(o + "attn_k.weight", src + "k_proj.weight", kvRows, spec.permuteQK);
  proj(o + "attn_v.weight", src + "v_proj.weight", kvRows, false);
  if (spec.qkvBias) {
    b.copy(o + "attn_q.bias", src + "q_proj.bias", [qRows]);
    b.copy(o + "attn_k.bias", src + "k_proj.bias", [kvRows]);
    b.copy(o + "attn_v.bias", src + "v_proj.bias", [kvRows]);
  }
  b.copy(o + "attn_output.weight", src + "o_proj.weight", [h.hidden, qRows]);
  if (spec.qkNorm) {
    b.copy(o + "attn_q_norm.weight", src + "q_norm.weight", [h.headDim]);
    b.copy(o + "attn_k_norm.weight", src + "k_norm.weight", [h.headDim]);
  }
}

/** A dense gated FFN: gate_proj, up_proj, down_proj. */
export function denseFFN(
  b: PlanBuilder,
  h: DecoderHParams,
  l: number,
  ff: number,
  src = `model.layers.${l}.mlp.`,
): void {
  const o = `blk.${l}.`;
  b.copy(o + "ffn_gate.weight", src + "gate_proj.weight", [ff, h.hidden]);
  b.copy(o + "ffn_up.weight", src + "up_proj.weight", [ff, h.hidden]);
  b.copy(o + "ffn_down.weight", src + "down_proj.weight", [h.hidden, ff]);
}

/**
 * Experts stacked into ffn_{gate,up,down}_exps [E, rows, cols] from per-expert matrices named by
 * `expertName(e, part)`, or from transformers 5's fused experts.gate_up_proj [E, 2 ff, hidden]
 * (gate rows first) and experts.down_proj [E, hidden, ff].
 */
export function stackedExperts(
  b: PlanBuilder,
  h: DecoderHParams,
  l: number,
  nExpert: number,
  ff: number,
  fusedPrefix: string,
  expertName: (e: number, part: "gate" | "up" | "down") => string,
): void {
  const o = `blk.${l}.`;
  if (b.has(fusedPrefix + "gate_up_proj")) {
    const gu = b.take(fusedPrefix + "gate_up_proj", [nExpert, 2 * ff, h.hidden]);
    const half = (first: number): RowRange[] =>
      Array.from({ length: nExpert }, (_, e) => ({ source: gu, firstRow: e * 2 * ff + first, rows: ff }));
    b.add(o + "ffn_gate_exps.weight", [nExpert, ff, h.hidden], half(0));
    b.add(o + "ffn_up_exps.weight", [nExpert, ff, h.hidden], half(ff));
    b.copy(o + "ffn_down_exps.weight", fusedPrefix + "down_proj", [nExpert, h.hidden, ff]);
    return;
  }
  const stack = (out: string, part: "gate" | "up" | "down", shape: [number, number]) => {
    const parts = Array.from({ length: nExpert }, (_, e) => ({
      source: b.take(expertName(e, part), shape),
      firstRow: 0,
      rows: shape[0],
    }));
    b.add(out, [nExpert, ...shape], parts);
  };
  stack(o + "ffn_gate_exps.weight", "gate", [ff, h.hidden]);
  stack(o + "ffn_up_exps.weight", "up", [ff, h.hidden]);
  stack(o + "ffn_down_exps.weight", "down", [h.hidden, ff]);
}

export function llamaLayoutPlan(ckpt: SafetensorsCheckpoint, cfg: HFConfig, spec: LlamaLayoutSpec): ConversionPlan {
  const b = new PlanBuilder(ckpt, cfg);
  const h = decoderHParams(cfg);
  const U32 = GGUFValueType.UINT32;
  // llama.cpp computes SiLU for these whatever the config says: another activation would be
  // another model
  const act = cfg.str("hidden_act", "silu");
  if (act !== "silu") cfg.fail("hidden_act", `= "${act}": ${spec.arch} computes silu`);
  b.meta("general.architecture", spec.arch);
  commonMetadata(b, spec.arch, h, spec.ropeTypes);
  spec.extraMetadata?.(b, h);
  if (h.rope.type === "llama3") b.computed("rope_freqs.weight", llama3RopeFactors(cfg, h.rope, h.headDim));
  embeddingsAndHead(b, h);
  const nExpert = spec.experts ? cfg.int(["num_local_experts", "num_experts"], { max: 1024 }) : 0;
  const expertFF = spec.experts === "qwen" ? cfg.int("moe_intermediate_size", { max: 1 << 22 }) : h.ff;
  if (spec.experts === "qwen") b.meta(`${spec.arch}.expert_feed_forward_length`, expertFF!, U32);
  for (let l = 0; l < h.nLayer; l++) {
    const p = `model.layers.${l}.`;
    const o = `blk.${l}.`;
    b.copy(o + "attn_norm.weight", p + "input_layernorm.weight", [h.hidden]);
    attentionOf(b, h, l, spec);
    b.copy(o + "ffn_norm.weight", p + "post_attention_layernorm.weight", [h.hidden]);
    if (spec.experts === "mixtral") {
      const m = `${p}block_sparse_moe.`;
      const router = b.has(m + "gate.weight") ? m : `${p}mlp.`;
      b.copy(o + "ffn_gate_inp.weight", router + "gate.weight", [nExpert, h.hidden]);
      const w = { gate: "w1", up: "w3", down: "w2" } as const;
      stackedExperts(
        b,
        h,
        l,
        nExpert,
        needFF(cfg, expertFF),
        `${p}mlp.experts.`,
        (e, part) => `${m}experts.${e}.${w[part]}.weight`,
      );
    } else if (spec.experts === "qwen") {
      b.copy(o + "ffn_gate_inp.weight", p + "mlp.gate.weight", [nExpert, h.hidden]);
      stackedExperts(
        b,
        h,
        l,
        nExpert,
        expertFF!,
        `${p}mlp.experts.`,
        (e, part) => `${p}mlp.experts.${e}.${part}_proj.weight`,
      );
    } else {
      denseFFN(b, h, l, needFF(cfg, h.ff));
    }
  }
  const plan = b.finish(spec.arch);
  plan.vocabSize = h.vocab;
  return plan;
}

function needFF(cfg: HFConfig, ff: number | undefined): number {
  return ff ?? cfg.int("intermediate_size");
}

/** llama's extra keys: the vocabulary size and the rotated dimensions. */
function llamaExtras(b: PlanBuilder, h: DecoderHParams): void {
  b.meta("llama.vocab_size", h.vocab, GGUFValueType.UINT32);
  b.meta("llama.rope.dimension_count", h.headDim, GGUFValueType.UINT32);
}

export const LLAMA: LlamaLayoutSpec = {
  arch: "llama",
  permuteQK: true,
  qkvBias: false,
  qkNorm: false,
  ropeTypes: ["llama3"],
  extraMetadata: llamaExtras,
};
export const MIXTRAL: LlamaLayoutSpec = { ...LLAMA, experts: "mixtral", ropeTypes: [] };
export const QWEN2: LlamaLayoutSpec = { arch: "qwen2", permuteQK: false, qkvBias: true, qkNorm: false };
export const QWEN3: LlamaLayoutSpec = { arch: "qwen3", permuteQK: false, qkvBias: false, qkNorm: true };
export const QWEN3MOE: LlamaLayoutSpec = {
  arch: "qwen3moe",
  permuteQK: false,
  qkvBias: false,
  qkNorm: true,
  experts: "qwen",
};
