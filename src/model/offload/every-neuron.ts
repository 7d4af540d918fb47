/**
 * Dense mode: every neuron of a group runs, so nothing is computed or read to pick them. Each
 * bundle is computed whole (its gate from its own gate row, in the sparse kernels), which is what
 * a model whose activation has no exact zeros needs (SiLU, GELU, gpt-oss's SwiGLU: every neuron
 * of a routed expert fires). Gate rows kept in memory or streamed would only repeat what the
 * bundles already carry: a resident copy takes memory that would cache bundles, and a streamed
 * one reads every gate row a second time.
 */
import type { BatchGateSource, GateSource } from "./gate-source.js";
import type { FFNStep } from "./ffn-step.js";
import type { NeuronLists } from "./neuron-lists.js";

export class EveryNeuron implements GateSource, BatchGateSource {
  pick(step: FFNStep, lists: NeuronLists): void {
    for (let k = 0; k < lists.nFF; k++) lists.file(step, k, 1);
  }

  /** A prompt batch needs no gates: in dense mode every neuron fires for every token (NeuronLists.fires). */
  batchGates(): void {}
}
