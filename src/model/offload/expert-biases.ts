/**
 * Experts with biases (gpt-oss) from a neuron store: each neuron's gate and up biases travel in
 * its bundle (the store's ffn.parts.biases: format/store/ffn-types.ts), and the sparse kernels add
 * them to the gate and up dots; the down biases, one row per expert, stay in memory
 * (parts/ffn-offloaded-moe.ts). Such experts run dense, every neuron of a routed expert, in gate
 * or dense mode alike (offloaded-ffn.ts): their activation (swiglu_oai) has no zeros to skip, and
 * the gates a gate source computes lack their bias, so they cannot decide what fires.
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
 * refused (the kernels would compute another model); so are, for biased bundles, what would pick
 * neurons without their biases: the predictor, activation thresholds (`thresholds`, per layer).
 */
export function checkExpertBiases(
  store: BiasedStore,
  cfg: ModelConfig,
  sparsity: SparsityMode,
  thresholds: Float32Array | null,
): void {
  const biased = store.ffn.parts.biases !== undefined;
  if (cfg.expertBiases && !biased)
    throw new Error(
      `${store.path}: ${cfg.architecture}'s experts have gate and up biases, and this store's bundles carry none (its manifest has no ffn.parts.biases): convert the model again`,
    );
  if (!cfg.expertBiases && biased)
    throw new Error(
      `${store.path}: the store's bundles carry gate and up biases (ffn.parts.biases), which ${cfg.architecture} does not have`,
    );
  if (!biased) return;
  if (sparsity === "predictor")
    throw new Error(
      `${store.path}: ${cfg.architecture}'s experts run dense from a store (every neuron of a routed expert: ${cfg.activation} has no zeros, and a neuron's gate bias is in its bundle): --sparsity predictor is not supported, use gate or dense`,
    );
  if (thresholds?.some((t) => t !== 0))
    throw new Error(
      `${store.path}: activation thresholds are not supported for ${cfg.architecture}'s experts from a store (a neuron's gate bias is in its bundle, not in the gate a threshold would be held against)`,
    );
}
