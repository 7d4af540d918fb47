/**
 * What the planner chooses (the knobs), what it assumes of the run (the workload), and predictor
 * mode's read-ahead rates: the inputs of a prediction besides the model and the machine.
 */
import type { SparsityMode } from "../model/offload/layout.js";

export interface Knobs {
  sparsity: SparsityMode;
  threads: number;
  queueDepth: number;
  /** share of the cache pinned hot; undefined: what the runtime picks from the store's profile */
  hotFraction?: number;
  /** gate mode: keep the gate rows in memory (false: read them from flash); undefined: when they fit */
  residentGates?: boolean;
  pipeline: boolean;
}

/** Knobs as a layout resolved them: the hot share the runtime picks, whether gate rows stay resident. */
export type PlannedKnobs = Knobs & { hotFraction: number; residentGates: boolean };

export interface Workload {
  /** KV cache positions (the budget counts all of them) */
  contextSize: number;
  /** prompt tokens before decoding (their prefill warms the cold cache) */
  promptTokens: number;
  /** decode tokens the prediction averages over */
  decodeTokens: number;
}

/** Predictor mode's read-ahead, as measured (the calibration run) or assumed. */
export interface ReadAheadRates {
  /** share of a layer's misses read ahead during the layer before */
  coverage: number;
  /** share of the bundles read ahead that the layer's own predictor then picks */
  used: number;
}

/**
 * Read-ahead when nothing measured it: on the Mistral-7B-shape synthetic with planted
 * predictors it read 78% of a layer's misses ahead, 97% of what it read then used
 * (docs/benchmarks-log.md).
 */
export const ASSUMED_READ_AHEAD: ReadAheadRates = { coverage: 0.78, used: 0.97 };

/**
 * Dense mode's read-ahead: the next layer's picks are its bundles not in memory, known exactly,
 * so all of them are read and used (the runtime caps them at half the cold region, as the step
 * model's rounds do).
 */
export const EXACT_READ_AHEAD: ReadAheadRates = { coverage: 1, used: 1 };

/** Decode steps a prediction averages over: the workload's, at least one. */
export function decodeSteps(workload: Workload): number {
  return Math.max(1, Math.floor(workload.decodeTokens));
}
