/**
 * qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention (QK-norm, key_length, NEOX), and
 * on every layer a mixture of experts in Mixtral's tensor layout, routed as Mixtral is (softmax
 * over all experts, the top expert_used_count, their weights renormalized), each expert
 * expert_feed_forward_length wide; no shared expert.
 */
import type { Architecture } from "./architecture.js";
import { llamaLayer } from "./llama.js";

export const qwen3moe: Architecture = {
  name: "qwen3moe",
  activation: "silu",
  activationFixed: true,
  ropePairing: "neox",
  qkvBias: false,
  qkNorm: true,
  ropeFactors: "none",
  mixture: "expert_feed_forward_length",
  layer: llamaLayer,
};
