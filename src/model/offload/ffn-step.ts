/**
 * One step of an offloaded FFN: a token (or a prompt's batch) through one store group. What the
 * step is (its group, its threshold) and what it found, read, computed and waited travel with it
 * as an argument to every part the step calls, and nowhere else: no part keeps a step's facts in
 * its own fields for another to read. At its end the step is added to its forward pass's counts
 * (`countStep`), which the model's measuring hook hands to the meter (meter.ts).
 *
 * The OffloadedFFN begins each step and owns its one step value, begun again for every step
 * (the hot path allocates nothing); a part writes into the step it is handed and keeps no
 * reference to it past the call.
 */
import type { LookupCounts } from "../../io/neuron-cache.js";
import type { OffloadCounts, Spent } from "./stats.js";

export interface FFNStep extends LookupCounts, Spent {
  /** the store group: a layer, or one expert of a mixture's layer */
  layer: number;
  /** a neuron fires when its activation passes this (0: any non-zero activation) */
  cut: number;
  /** every stored position below this has been filed (the step's fixed order computes nothing at or above it) */
  filedBelow: number;
  /** tokens the step runs (1, or a prompt batch's), and the neurons it computes for them */
  tokens: number;
  computed: number;
  /** firing neurons filed (NeuronLists.file): bundle in memory, bundle still being read ahead (computed once it lands), bundle to read */
  hits: number;
  landing: number;
  misses: number;
  /** bundles whose reads the step started (its misses, and any read again) */
  reads: number;
}

export function newFFNStep(): FFNStep {
  // every field in the literal: one object shape, its fields in the object itself (the hot path counts into them)
  return {
    layer: 0,
    cut: 0,
    filedBelow: 0,
    tokens: 0,
    computed: 0,
    hits: 0,
    landing: 0,
    misses: 0,
    reads: 0,
    hotHits: 0,
    coldHits: 0,
    aheadUsed: 0,
    aheadExact: 0,
    computeMs: 0,
    ioWaitMs: 0,
    bytesRead: 0,
  };
}

/** `step` begun for `tokens` tokens of group `layer` with activation threshold `cut` (0: none): nothing done yet. */
export function beginFFNStep(step: FFNStep, layer: number, cut: number, tokens: number): FFNStep {
  step.layer = layer;
  step.cut = cut;
  step.filedBelow = 0;
  step.tokens = tokens;
  step.computed = step.hits = step.landing = step.misses = step.reads = 0;
  step.hotHits = step.coldHits = step.aheadUsed = step.aheadExact = 0;
  step.computeMs = step.ioWaitMs = step.bytesRead = 0;
  return step;
}

/**
 * Adds a finished step to its pass's counts, as store group `group` (the step's in the store's
 * numbering); `nFF`: neurons per group. A bundle read ahead and then used is a miss served early,
 * not a hit; the bundles read are the step's misses, and those read again (evicted before their
 * turn, or a read ahead that failed) are misses too.
 */
export function countStep(pass: OffloadCounts, step: FFNStep, group: number, nFF: number): void {
  const g = pass.groups;
  const misses = Math.max(step.misses, step.reads) + step.aheadUsed;
  pass.steps += step.tokens;
  pass.neuronsTotal += step.tokens * nFF;
  pass.neuronsComputed += step.computed;
  pass.hotHits += step.hotHits;
  pass.coldHits += step.coldHits;
  pass.misses += misses;
  pass.readAheadUsed += step.aheadUsed;
  pass.readAheadExactUsed += step.aheadExact;
  pass.bytesRead += step.bytesRead;
  pass.ioWaitMs += step.ioWaitMs;
  pass.computeMs += step.computeMs;
  g.steps[group] += step.tokens;
  g.neuronsComputed[group] += step.computed;
  g.hotHits[group] += step.hotHits;
  g.coldHits[group] += step.coldHits;
  g.misses[group] += misses;
  g.readAheadUsed[group] += step.aheadUsed;
}
