/**
 * One step of an offloaded FFN: a token (or a prompt's batch) through one store group. What the
 * step is (its group, its threshold) and what it found (its hits, misses and reads) travel with
 * it as an argument to every part the step calls, and nowhere else: no part keeps a step's facts
 * in its own fields for another to read.
 *
 * The OffloadedFFN begins each step and owns its one step value, begun again for every step
 * (the hot path allocates nothing); a part writes into the step it is handed and keeps no
 * reference to it past the call.
 */
export interface FFNStep {
  /** the store group: a layer, or one expert of a mixture's layer */
  layer: number;
  /** a neuron fires when its activation passes this (0: any non-zero activation) */
  cut: number;
  /** firing neurons filed (NeuronLists.file): bundle in memory, bundle still being read ahead (computed once it lands), bundle to read */
  hits: number;
  landing: number;
  misses: number;
  /** bundles whose reads the step started (its misses, and any read again) */
  reads: number;
}

export function newFFNStep(): FFNStep {
  return { layer: 0, cut: 0, hits: 0, landing: 0, misses: 0, reads: 0 };
}

/** `step` begun for group `layer` with activation threshold `cut` (0: none): nothing found yet. */
export function beginFFNStep(step: FFNStep, layer: number, cut: number): FFNStep {
  step.layer = layer;
  step.cut = cut;
  step.hits = step.landing = step.misses = step.reads = 0;
  return step;
}
