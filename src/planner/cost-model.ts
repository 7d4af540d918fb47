/**
 * The planner's cost model: seconds per decode token of a neuron store run under a memory budget
 * with given knobs, from the hardware probe, the model's shapes and its neurons' firing rates.
 * It follows what the runtime does (src/model/forward.ts's layer loop, src/model/offload/), step
 * by step, with expected values; docs/planner.md writes the formulas out.
 *
 * Budget: the runtime's own layout function (src/model/offload/layout.ts offloadLayout), fed
 * what loading the store keeps resident (src/model/resident-bytes.ts) and the runtime's measured
 * base: the split predicted is the split the runtime makes.
 *
 * Hits: src/io/hit-model.ts (hot neurons always hit; the cold LRU by Che's approximation).
 *
 * A mixture of experts: the hit model runs per (layer, expert) group on per-token rates; the
 * step models then work per layer on sums over the experts (layer-hits.ts), the per-expert fixed
 * costs (predictor, gate matvec, scan, the sparse kernels' set-up) taken once per routed expert.
 *
 * The step models: gate-mode.ts and predictor-mode.ts (dense mode too: every neuron picked, no predictor); the parts they add up: dense-costs.ts
 * (attention, router, predictors, output) and read-costs.ts (reads, their overlap with compute,
 * rounds), a layer's misses costed as the coalesced reads they become (read-runs.ts).
 */
import { hitProfile, type Firing, type HitProfile } from "../io/hit-model.js";
import { offloadLayout, type LayoutKnobs, type OffloadLayout } from "../model/offload/layout.js";
import { storeLayout } from "../model/store-shards.js";
import { gateMode } from "./gate-mode.js";
import type { Hardware } from "./hardware.js";
import {
  ASSUMED_READ_AHEAD,
  decodeSteps,
  type Knobs,
  type PlannedKnobs,
  type ReadAheadRates,
  type Workload,
} from "./knobs.js";
import { layerHits } from "./layer-hits.js";
import { groupsOf, type ModelShape } from "./model-shape.js";
import { predictorMode } from "./predictor-mode.js";
import { unfitPrediction, type Prediction } from "./prediction.js";
import { layerAdjacency } from "./read-runs.js";

/**
 * The budget's layout with these knobs: the runtime's own (store-shards.ts storeLayout, split among
 * wasm memories where one does not hold it), with the runtime's base as measured. Knobs that do
 * not fit give a layout whose `fits` is false.
 */
export function layoutFor(
  shape: ModelShape,
  hw: Pick<Hardware, "base" | "threads" | "memories">,
  knobs: Knobs,
  budget: number,
): OffloadLayout {
  const fixed = { base: hw.base, ...shape.resident };
  const layoutKnobs: LayoutKnobs = {
    sparsity: knobs.sparsity,
    threads: knobs.threads,
    residentGates: knobs.sparsity === "gate" ? knobs.residentGates : undefined,
    hotFraction: knobs.hotFraction,
  };
  const m = shape.memory;
  if (!m) return offloadLayout(shape.facts, fixed, budget, layoutKnobs);
  const input = { ...m, facts: shape.facts, fixed, budget, knobs: layoutKnobs };
  try {
    const made = storeLayout(input, m.onePlan, Math.max(hw.memories ?? 1, m.onePlan.bytes.length), 2);
    return made.layout;
  } catch {
    // a layer whose share alone is more than one memory holds: these knobs do not run
    return { ...offloadLayout(shape.facts, fixed, budget, layoutKnobs), fits: false };
  }
}

/**
 * Seconds per decode token (and what goes into them) of `shape` on `hw` with `knobs` under
 * `budget`, averaged over the workload's decode steps. `hits`: the hit profile of this layout
 * when the caller has it (the search computes it once per cache split); `readAhead`: predictor
 * mode's read-ahead rates.
 */
export function predict(
  shape: ModelShape,
  firing: Firing,
  hw: Hardware,
  knobs: Knobs,
  workload: Workload,
  budget: number,
  hits?: HitProfile,
  readAhead: ReadAheadRates = ASSUMED_READ_AHEAD,
): Prediction {
  const groups = groupsOf(shape);
  if (firing.layers.length !== groups)
    throw new Error(
      `firing rates for ${firing.layers.length} groups, the model has ${groups}${shape.experts > 0 ? ` (${shape.nLayer} layers x ${shape.experts} experts)` : " layers"}`,
    );
  const layout = layoutFor(shape, hw, knobs, budget);
  const resolved: PlannedKnobs = { ...knobs, hotFraction: layout.hotFraction, residentGates: layout.residentGates };
  if (!layout.fits) return unfitPrediction(resolved, layout);
  const hp = layerHits(
    shape,
    layout,
    hits ?? hitProfile(firing, layout.hotPerGroup, layout.coldSlots, workload.promptTokens, decodeSteps(workload)),
  );
  const adj = layerAdjacency(shape, firing, layout.hotPerGroup, layout.bridgeBytes > 0);
  if (knobs.sparsity !== "gate")
    return predictorMode(shape, firing, hw, resolved, workload, layout, hp, adj, readAhead);
  return gateMode(shape, hw, resolved, workload, layout, hp, adj);
}
