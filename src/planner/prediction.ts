/**
 * What the cost model predicts: seconds per decode token by where they go, and the counts behind
 * them; perToken turns the sums over a workload's decode steps into per-token figures.
 */
import type { OffloadLayout } from "../model/offload/layout.js";
import type { PlannedKnobs } from "./knobs.js";

/** Seconds per decode token, by where they go. */
export interface Breakdown {
  /** attention matvecs, KV cache reads, norms, rope */
  attention: number;
  /** which neurons fire: resident gate matvec, gates computed from cached bundles and read gate pages, or the predictor */
  gate: number;
  /** waiting for gate pages (non-resident gate rows) */
  gateReads: number;
  /** JS: filing firing neurons as hits and misses, taking slots and submitting the misses' reads */
  scan: number;
  /** up/down (or whole bundles) of the neurons computed, and the layer's fixed sparse cost */
  ffnCompute: number;
  /** waiting for the misses' bundles beyond what overlaps compute */
  ioWait: number;
  /** output matvec */
  output: number;
}

export interface Prediction {
  knobs: PlannedKnobs;
  layout: OffloadLayout;
  tokensPerSecond: number;
  secondsPerToken: number;
  breakdown: Breakdown;
  /** per decode token, over all layers */
  firingPerToken: number;
  hitsPerToken: number;
  hotHitsPerToken: number;
  missesPerToken: number;
  /** bundle (and gate page) bytes read per decode token */
  readBytesPerToken: number;
  hitRate: number;
  /** most read rounds a layer needs in a step (misses / cold slots, expected values): more than 1 means the cold region is smaller than a layer's misses */
  maxRounds: number;
}

export function zeroBreakdown(): Breakdown {
  return { attention: 0, gate: 0, gateReads: 0, scan: 0, ffnCompute: 0, ioWait: 0, output: 0 };
}

/** Adds every part of `b` to `total`. */
export function addBreakdown(total: Breakdown, b: Breakdown): void {
  for (const k of Object.keys(total) as (keyof Breakdown)[]) total[k] += b[k];
}

/** The sum of a breakdown's parts: seconds per token. */
export function breakdownSeconds(b: Breakdown): number {
  return Object.values(b).reduce((a, v) => a + v, 0);
}

/** Counts summed over a workload's decode steps, next to the breakdown's seconds. */
export interface StepSums {
  fired: number;
  hits: number;
  hot: number;
  readBytes: number;
  maxRounds: number;
}

/** A layout that does not fit the budget: nothing runs. */
export function unfitPrediction(knobs: PlannedKnobs, layout: OffloadLayout): Prediction {
  return {
    knobs,
    layout,
    tokensPerSecond: 0,
    secondsPerToken: Infinity,
    breakdown: zeroBreakdown(),
    firingPerToken: 0,
    hitsPerToken: 0,
    hotHitsPerToken: 0,
    missesPerToken: 0,
    readBytesPerToken: 0,
    hitRate: 0,
    maxRounds: Infinity,
  };
}

/** A prediction from totals summed over `steps` decode tokens. */
export function perToken(
  knobs: PlannedKnobs,
  layout: OffloadLayout,
  steps: number,
  total: Breakdown,
  sums: StepSums,
): Prediction {
  for (const k of Object.keys(total) as (keyof Breakdown)[]) total[k] /= steps;
  const secondsPerToken = breakdownSeconds(total);
  return {
    knobs,
    layout,
    tokensPerSecond: 1 / secondsPerToken,
    secondsPerToken,
    breakdown: total,
    firingPerToken: sums.fired / steps,
    hitsPerToken: sums.hits / steps,
    hotHitsPerToken: sums.hot / steps,
    missesPerToken: (sums.fired - sums.hits) / steps,
    readBytesPerToken: sums.readBytes / steps,
    hitRate: sums.fired > 0 ? sums.hits / sums.fired : 1,
    maxRounds: sums.maxRounds,
  };
}
