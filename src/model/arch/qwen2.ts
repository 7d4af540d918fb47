/** qwen2: llama's layout with biases on q, k and v, and RoPE over the two halves of a head (neox). */
import type { Architecture } from "./architecture.js";
import { llamaLayer } from "./llama.js";

export const qwen2: Architecture = {
  name: "qwen2",
  activation: "silu",
  ropePairing: "neox",
  qkvBias: true,
  qkNorm: false,
  ropeFactors: "none",
  layer: llamaLayer,
};
