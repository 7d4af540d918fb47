/**
 * llama (and every file that says "llama": Llama 1/2, TinyLlama, PowerInfer's ReLU llamas, and
 * with expert_count set, Mixtral). The layer layout here is also mistral's, qwen2's and bamboo's.
 *
 *   blk.N.attn_norm, attn_q, attn_k, attn_v (+ .bias where the architecture has them), attn_output
 *   blk.N.ffn_norm, then the FFN: ffn_gate, ffn_up, ffn_down (PowerInfer's files: ffn_down_t, the
 *   transpose), or a mixture's router and experts (experts.ts), or for a neuron store nothing but
 *   a mixture's router (the neurons stay in the store).
 */
import type { FFNWeights, LayerWeights } from "../parts/block.js";
import type { Architecture, LayerSource } from "./architecture.js";
import { loadMoeLayer, routerName } from "./experts.js";

export function llamaLayer(src: LayerSource, l: number): LayerWeights {
  const { loader, cfg } = src;
  const { nEmbd, nHead, nHeadKV, headDim } = cfg;
  const qDim = nHead * headDim;
  const kvDim = nHeadKV * headDim;
  const p = `blk.${l}.`;
  const bias = (name: string, n: number) => (cfg.qkvBias ? loader.vector(p + name, n) : 0);
  return {
    attnNorm: loader.vector(p + "attn_norm.weight", nEmbd),
    attention: {
      wq: loader.matrix(p + "attn_q.weight", nEmbd, qDim),
      wk: loader.matrix(p + "attn_k.weight", nEmbd, kvDim),
      wv: loader.matrix(p + "attn_v.weight", nEmbd, kvDim),
      wo: loader.matrix(p + "attn_output.weight", qDim, nEmbd),
      bq: bias("attn_q.bias", qDim),
      bk: bias("attn_k.bias", kvDim),
      bv: bias("attn_v.bias", kvDim),
      qNorm: cfg.qkNorm ? loader.vector(p + "attn_q_norm.weight", headDim) : 0,
      kNorm: cfg.qkNorm ? loader.vector(p + "attn_k_norm.weight", headDim) : 0,
    },
    ffnNorm: loader.vector(p + "ffn_norm.weight", nEmbd),
    ffn: llamaFFN(src, l),
  };
}

/** The gated FFN of llama's layout: dense, a mixture of experts, or (a store) what stays in memory of it. */
export function llamaFFN(src: LayerSource, l: number): FFNWeights {
  const { loader, file, cfg } = src;
  const { nEmbd, nFF, nExpert } = cfg;
  const p = `blk.${l}.`;
  if (src.store)
    return nExpert > 0
      ? { kind: "offloaded-moe", router: loader.matrix(routerName(l), nEmbd, nExpert) }
      : { kind: "offloaded" };
  if (nExpert > 0) return { kind: "moe", moe: loadMoeLayer(loader, file, cfg, l) };
  return {
    kind: "dense",
    gate: loader.matrix(p + "ffn_gate.weight", nEmbd, nFF),
    up: loader.matrix(p + "ffn_up.weight", nEmbd, nFF),
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
  ropeFactors: true,
  layer: llamaLayer,
};
