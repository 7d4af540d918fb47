/**
 * phi3 (Phi-3, Phi-3.5, Phi-4 mini): llama's block with q, k and v fused in one attn_qkv, gate
 * and up fused in one ffn_up (gate first), RoPE over a head's two halves (neox), and LongRoPE's
 * frequency factors (rope_factors_long / _short) with their attention factor where the file
 * has them. Its attention.sliding_window is read by llama.cpp and then disabled; it is not
 * read here either.
 */
import type { Architecture } from "./architecture.js";
import { llamaLayer } from "./llama.js";

export const phi3: Architecture = {
  name: "phi3",
  activation: "silu",
  activationFixed: true,
  ropePairing: "neox",
  qkvBias: false,
  qkNorm: false,
  ropeFactors: "longrope",
  layer: llamaLayer,
};
