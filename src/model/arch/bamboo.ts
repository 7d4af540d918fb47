/** bamboo (PowerInfer's Bamboo-7B): llama's layout with dReLU, relu(gate) * relu(up), whose exact zeros make both halves sparse. */
import type { Architecture } from "./architecture.js";
import { llamaLayer } from "./llama.js";

export const bamboo: Architecture = {
  name: "bamboo",
  activation: "drelu",
  ropePairing: "normal",
  qkvBias: false,
  qkNorm: false,
  ropeFactors: "none",
  layer: llamaLayer,
};
