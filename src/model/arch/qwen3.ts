/**
 * qwen3: llama's layer layout, q and k RMS-normed per head before RoPE (attn_q_norm, attn_k_norm),
 * RoPE over the two halves of a head (neox), no biases, and a head size from
 * attention.key_length that need not be embedding_length / head_count.
 */
import type { Architecture } from "./architecture.js";
import { llamaLayer } from "./llama.js";

export const qwen3: Architecture = {
  name: "qwen3",
  activation: "silu",
  activationFixed: true,
  ropePairing: "neox",
  qkvBias: false,
  qkNorm: true,
  ropeFactors: "none",
  layer: llamaLayer,
};
