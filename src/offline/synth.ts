/**
 * Synthetic llama-architecture models of random weights, for everything that needs size:
 * benchmarks, memory-budget runs, I/O planning. Any shape from a 4-layer toy to Llama-2-13B, in
 * F32, F16, Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1, deterministic per seed, streamed to disk chunk by chunk (a 7B
 * Q4_0 file is 3.8 GB and is never held in memory).
 *
 * Quantized tensors are generated as blocks directly rather than quantized from floats: the
 * quants are raw random bits (uniform over every level) and each block's f16 scale is picked
 * so the tensor's values have the standard deviation a sensible initialisation would give
 * (1/sqrt(fan_in) for projections, so activations keep unit scale through the layers and the
 * logits are neither flat nor collapsed). That keeps the generator at memory speed.
 *
 * Every tensor draws from its own random stream, seeded from (seed, tensor name), and is
 * produced in whole rows: a row of ffn_gate / ffn_up is one FFN neuron (ffn_down holds a neuron
 * per column).
 *
 * With `sparsity` (ReLU and dReLU models only) the weights are built so that a chosen share of
 * FFN neurons outputs exactly zero, with per-neuron firing frequencies following a power law;
 * see synth/planted-sparsity.ts for the construction. Nothing in the file says which neuron
 * fires: the zeros come out of the arithmetic of the weights.
 *
 * This file gathers what callers use; the parts live in synth/: shapes.ts (shapes, types, the
 * tensor table), random-rows.ts (random weights per tensor), planted-sparsity.ts (planted ReLU
 * sparsity) with row-moments.ts and first-block.ts (the arithmetic on a row's blocks) and
 * planted-predictor.ts (predictable gates and the predictors they imply), normal.ts (the normal
 * distribution it needs), writer.ts (options, metadata, streaming the file: synthesize,
 * synthFileSize). The firing law itself is src/model/firing.ts.
 */
export {
  SYNTH_ACTIVATIONS,
  SYNTH_SHAPES,
  SYNTH_TYPES,
  SHAPE_SPECS,
  FIXED_ACTIVATION,
  synthRecipes,
  type SynthActivation,
  type SynthShape,
  type SynthShapeSpec,
  type SynthType,
  type TensorKind,
  type TensorRecipe,
} from "./synth/shapes.js";
export { rowFiller, type RowFiller } from "./synth/random-rows.js";
export {
  ALPHA_MAX,
  ALPHA_MIN,
  GATE_RANK_MAX,
  PREDICTOR_MARGIN,
  SPARSITY_MAX,
  SPARSITY_MIN,
  type PlantedPredictor,
} from "./synth/planted-sparsity.js";
export { normCdf, normPdf, normQuantile } from "./synth/normal.js";
export { synthesize, synthFileSize, type SynthOptions, type SynthProgress, type SynthResult } from "./synth/writer.js";
// The firing law planted sparsity follows lives with the model (the planner reads it too).
export {
  FIRING_CAP,
  FIRING_FLOOR,
  plannedFiring,
  powerLawFrequencies,
  SPARSITY_ALPHA_DEFAULT,
  SynthStream,
} from "../model/firing.js";
