/**
 * Experts with biases (gpt-oss) from a neuron store: each neuron's gate and up biases travel in
 * its bundle (the store's ffn.parts.biases: format/store/ffn-types.ts), and the sparse kernels add
 * them to the gate and up dots; the down biases, one row per expert, stay in memory
 * (parts/ffn-offloaded-moe.ts). Such experts run dense, every neuron of a routed expert: their
 * activation (swiglu_oai) has no zeros to skip, and a gate source that decided which neurons fire
 * would see the gate dot without its bias.
 */
import type { ModelConfig } from "../config.js";
import type { SparsityMode } from "./layout.js";

/** What the check reads of a store. */
export interface BiasedStore {
  readonly path: string;
  readonly ffn: { readonly parts: { readonly biases?: number } };
}

/**
 * A store whose bundles carry biases the architecture does not have, or lack biases it has, is
 * refused (the kernels would compute another model); biased experts run in "dense" mode only.
 */
export function checkExpertBiases(store: BiasedStore, cfg: ModelConfig, sparsity: SparsityMode): void {
  const biased = store.ffn.parts.biases !== undefined;
  if (cfg.expertBiases && !biased)
    throw new Error(
      `${store.path}: ${cfg.architecture}'s experts have gate and up biases, and this store's bundles carry none (its manifest has no ffn.parts.biases): convert the model again`,
    );
  if (!cfg.expertBiases && biased)
    throw new Error(
      `${store.path}: the store's bundles carry gate and up biases (ffn.parts.biases), which ${cfg.architecture} does not have`,
    );
  if (biased && sparsity !== "dense")
    throw new Error(
      `${store.path}: ${cfg.architecture}'s experts run from a store with --sparsity dense only (every neuron of a routed expert: ${cfg.activation} has no zeros, and a neuron's gate bias is in its bundle), not ${sparsity}`,
    );
}
