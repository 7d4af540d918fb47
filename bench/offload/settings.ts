/**
 * What every part of bench:offload shares: where the CLI and the models are, and the run that both
 * engines get (prompt, context, seed, planted sparsity).
 */
import { join } from "node:path";
import { ROOT_DIR } from "../paths.js";

export const BIN = join(ROOT_DIR, "bin", "powerinfer.cjs");
export const MODELS_DIR = join(ROOT_DIR, "bench", ".models");
export const GiB = 2 ** 30;
export const MiB = 2 ** 20;

/**
 * A limit in GiB as bytes, in whole MiB: the cgroup files take whole bytes (0.45 GiB is not), and
 * ours' --memory-budget, given in MiB, is then the very same limit.
 */
export function limitBytes(gibs: number): number {
  return Math.floor((gibs * GiB) / MiB) * MiB;
}
/** Both engines get this context (the KV cache is part of the limit). */
export const CONTEXT = 256;
/** Reads in flight: bin/powerinfer.cjs starts libuv with 64 threads (the runtime's default depth). */
export const QUEUE_DEPTH = 64;
export const SPARSITY = 0.9;
export const SEED = 1;

// ~40 tokens: long enough for a batched prefill, short enough that a run under a tight limit ends.
export const PROMPT =
  "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker " +
  "who repaired every clock";
