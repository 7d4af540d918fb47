/**
 * qwen3moe (Qwen3-30B-A3B, Qwen3-235B-A22B): qwen3's attention (QK-norm, key_length, NEOX), and
 * on every layer a mixture of experts in Mixtral's tensor layout, routed as Mixtral is (softmax
 * over all experts, the top expert_used_count, their weights renormalized), each expert
 * expert_feed_forward_length wide; no shared expert.
 */
import type { Architecture } from "./architecture.js";
import { qwen3 } from "./qwen3.js";

export const qwen3moe: Architecture = { ...qwen3, name: "qwen3moe", mixture: "expert_feed_forward_length" };
