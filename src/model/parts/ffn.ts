/**
 * The FFN part of a block. The layer loop norms the block's input into xb (the block's FFN norm)
 * and calls `run`, which adds the FFN's output to `out`: the residual stream x, or where the
 * block norms the output before it joins the stream (gemma3), a zeroed buffer. A part that reads from
 * flash returns a promise, and the loop awaits it; a part in memory returns nothing, so the
 * in-memory path never makes a promise.
 *
 * The parts: ffn-dense.ts (every neuron, in memory), ffn-moe.ts (a mixture of experts in memory),
 * ffn-offloaded.ts (a neuron store's bundles under a budget), ffn-offloaded-moe.ts (a mixture
 * whose experts are bundles in a store).
 */
import type { ForwardStep } from "../step.js";

export interface FFNPart {
  /** out += FFN(xb) for the step's n rows (out: n rows of nEmbd f32, x or the block's post-norm buffer) */
  run(step: ForwardStep, out: number): void | Promise<void>;
  /**
   * Called with the block's input in x before its attention runs (xb is attention's to use after
   * this): a part that can start work early does it here, such as a router whose experts' reads
   * overlap the attention.
   */
  beforeAttention?(step: ForwardStep): void;
}
