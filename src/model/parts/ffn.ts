/**
 * The FFN part of a block. The layer loop norms the block's input into xb (the block's FFN norm)
 * and calls `run`, which adds the FFN's output to the residual stream x. A part that reads from
 * flash returns a promise, and the loop awaits it; a part in memory returns nothing, so the
 * in-memory path never makes a promise.
 *
 * The parts: ffn-dense.ts (every neuron, in memory), ffn-moe.ts (a mixture of experts in memory),
 * ffn-offloaded.ts (a neuron store's bundles under a budget), ffn-offloaded-moe.ts (a mixture
 * whose experts are bundles in a store).
 */
import type { ForwardStep } from "../step.js";

export interface FFNPart {
  run(step: ForwardStep): void | Promise<void>;
  /**
   * Called with the block's input in x before its attention runs (xb is attention's to use after
   * this): a part that can start work early does it here, such as a router whose experts' reads
   * overlap the attention.
   */
  beforeAttention?(step: ForwardStep): void;
}
