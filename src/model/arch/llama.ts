/**
 * llama (and every file that says "llama": Llama 1/2, TinyLlama, PowerInfer's ReLU llamas, and
 * with expert_count set, Mixtral). The layer layout here is also mistral's, qwen2's and bamboo's.
 *
 *   blk.N.attn_norm, attn_q, attn_k, attn_v (+ .bias where the architecture has them), attn_output
 *   blk.N.ffn_norm, then the FFN: ffn_gate, ffn_up, ffn_down (PowerInfer's files: ffn_down_t, the
 *   transpose), or a mixture's router and experts (experts.ts), or for a neuron store nothing but
 *   a mixture's router (the neurons stay in the store).
 */
import type { AttentionWeights } from "../parts/attention.js";
import type { FFNWeights, LayerWeights } from "../parts/block.js";
import type { Architecture, LayerSource } from "./architecture.js";
import { loadMoeLayer, routerName } from "./experts.js";

/**
 * Where an architecture's layer differs from llama's: attention's extra weights (loaded right
 * after its output matrix), the FFN's input norm under another name, another FFN.
 */
export interface LlamaLayerVariant {
  attentionExtras?: () => Partial<AttentionWeights>;
  ffnNorm?: string;
  ffn?: () => FFNWeights;
}

export function llamaLayer(src: LayerSource, l: number, variant: LlamaLayerVariant = {}): LayerWeights {
  const { loader, cfg } = src;
  const { nEmbd, headDim } = cfg;
  const p = `blk.${l}.`;
  return {
    attnNorm: loader.vector(p + "attn_norm.weight", nEmbd),
    attention: {
      ...qkvOf(src, l),
      wo: loader.matrix(p + "attn_output.weight", cfg.nHead * headDim, nEmbd),
      ...variant.attentionExtras?.(),
      qNorm: cfg.qkNorm ? loader.vector(p + "attn_q_norm.weight", headDim) : 0,
      kNorm: cfg.qkNorm ? loader.vector(p + "attn_k_norm.weight", headDim) : 0,
    },
    ffnNorm: loader.vector(variant.ffnNorm ?? p + "ffn_norm.weight", nEmbd),
    ffn: variant.ffn ? variant.ffn() : llamaFFN(src, l),
  };
}

/**
 * q, k and v: three matrices, or the rows of one fused attn_qkv (phi3's, and any llama-layout
 * file that fuses them, as llama.cpp accepts), with their biases where the architecture has them.
 */
function qkvOf(src: LayerSource, l: number): Pick<AttentionWeights, "wq" | "wk" | "wv" | "bq" | "bk" | "bv"> {
  const { loader, file, cfg } = src;
  const qDim = cfg.nHead * cfg.headDim;
  const kvDim = cfg.nHeadKV * cfg.headDim;
  const p = `blk.${l}.`;
  if (file.tensors.has(p + "attn_qkv.weight")) {
    const all = qDim + 2 * kvDim;
    const name = p + "attn_qkv.weight";
    const bias = (from: number, n: number) => (cfg.qkvBias ? loader.vectorPart(p + "attn_qkv.bias", all, from, n) : 0);
    return {
      wq: loader.matrixRows(name, cfg.nEmbd, all, 0, qDim),
      wk: loader.matrixRows(name, cfg.nEmbd, all, qDim, kvDim),
      wv: loader.matrixRows(name, cfg.nEmbd, all, qDim + kvDim, kvDim),
      bq: bias(0, qDim),
      bk: bias(qDim, kvDim),
      bv: bias(qDim + kvDim, kvDim),
    };
  }
  const bias = (name: string, n: number) => (cfg.qkvBias ? loader.vector(p + name, n) : 0);
  return {
    wq: loader.matrix(p + "attn_q.weight", cfg.nEmbd, qDim),
    wk: loader.matrix(p + "attn_k.weight", cfg.nEmbd, kvDim),
    wv: loader.matrix(p + "attn_v.weight", cfg.nEmbd, kvDim),
    bq: bias("attn_q.bias", qDim),
    bk: bias("attn_k.bias", kvDim),
    bv: bias("attn_v.bias", kvDim),
  };
}

/**
 * The gated FFN of llama's layout: dense (gate and up as two matrices, or as the two halves of
 * one ffn_up, gate first, as phi3 stores them), a mixture of experts, or (a store) what stays in
 * memory of it.
 */
export function llamaFFN(src: LayerSource, l: number): FFNWeights {
  const { loader, file, cfg } = src;
  const { nEmbd, nFF, nExpert } = cfg;
  const p = `blk.${l}.`;
  if (src.store)
    return nExpert > 0
      ? { kind: "offloaded-moe", router: loader.matrix(routerName(l), nEmbd, nExpert) }
      : { kind: "offloaded" };
  if (nExpert > 0) return { kind: "moe", moe: loadMoeLayer(loader, file, cfg, l) };
  const fused = !file.tensors.has(p + "ffn_gate.weight") && file.tensors.has(p + "ffn_up.weight");
  return {
    kind: "dense",
    gate: fused
      ? loader.matrixRows(p + "ffn_up.weight", nEmbd, 2 * nFF, 0, nFF)
      : loader.matrix(p + "ffn_gate.weight", nEmbd, nFF),
    up: fused
      ? loader.matrixRows(p + "ffn_up.weight", nEmbd, 2 * nFF, nFF, nFF)
      : loader.matrix(p + "ffn_up.weight", nEmbd, nFF),
    down: file.tensors.has(p + "ffn_down_t.weight")
      ? loader.transposedMatrix(p + "ffn_down_t.weight", nFF, nEmbd)
      : loader.matrix(p + "ffn_down.weight", nFF, nEmbd),
  };
}

export const llama: Architecture = {
  name: "llama",
  activation: "silu",
  ropePairing: "normal",
  qkvBias: false,
  qkNorm: false,
  ropeFactors: "llama3",
  layer: llamaLayer,
};
