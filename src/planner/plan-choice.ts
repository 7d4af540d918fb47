/**
 * Choosing among the search's predictions: near-equal candidates count as equal and the one
 * closest to the runtime's defaults wins; and a prediction summed up for the plan file.
 */
import type { PlannedKnobs } from "./knobs.js";
import type { PlanPrediction } from "./plan-file.js";
import type { Prediction } from "./prediction.js";

/**
 * Predictions closer than this to the best are taken as equal: the probe's numbers move by more
 * than that between minutes on a shared machine, and a change of knobs should be worth it.
 */
export const PLAN_TOLERANCE = 0.05;

/** Whether two resolved knob sets run the same way. */
export function sameKnobs(a: PlannedKnobs, b: PlannedKnobs): boolean {
  return (
    a.sparsity === b.sparsity &&
    a.threads === b.threads &&
    a.queueDepth === b.queueDepth &&
    Math.abs(a.hotFraction - b.hotFraction) < 1e-9 &&
    a.residentGates === b.residentGates &&
    a.pipeline === b.pipeline
  );
}

/** Among candidates within PLAN_TOLERANCE of the best, the one closest to the defaults. */
export function pickStable(sorted: Prediction[], defaults: Prediction): Prediction {
  const top = sorted[0].tokensPerSecond;
  const near = sorted.filter((p) => p.tokensPerSecond >= top * (1 - PLAN_TOLERANCE));
  const distance = (p: Prediction) =>
    (p.knobs.threads !== defaults.knobs.threads ? 1 : 0) +
    (p.knobs.residentGates !== defaults.knobs.residentGates ? 4 : 0) +
    (p.knobs.pipeline !== defaults.knobs.pipeline ? 2 : 0) +
    Math.abs(Math.log2(p.knobs.queueDepth / defaults.knobs.queueDepth)) * 0.25 +
    Math.abs(p.knobs.hotFraction - defaults.knobs.hotFraction);
  return near.reduce((a, b) => (distance(b) < distance(a) ? b : a));
}

export function summary(p: Prediction): PlanPrediction {
  return {
    knobs: p.knobs,
    tokensPerSecond: p.tokensPerSecond,
    secondsPerToken: p.secondsPerToken,
    breakdown: p.breakdown,
    hitRate: p.hitRate,
    firingPerToken: p.firingPerToken,
    missesPerToken: p.missesPerToken,
    readBytesPerToken: p.readBytesPerToken,
    cacheBytes: p.layout.cacheBytes,
  };
}
