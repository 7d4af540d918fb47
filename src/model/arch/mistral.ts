/** mistral: llama's layout and conventions under its own name. */
import type { Architecture } from "./architecture.js";
import { llamaLayer } from "./llama.js";

export const mistral: Architecture = {
  name: "mistral",
  activation: "silu",
  ropePairing: "normal",
  qkvBias: false,
  qkNorm: false,
  ropeFactors: "none",
  layer: llamaLayer,
};
