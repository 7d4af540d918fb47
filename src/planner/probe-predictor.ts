/**
 * The probe of predictor mode's predictor: layer 0's predictor as the runtime loads it, its
 * scores (fc1, relu, fc2) over an input row.
 */
import type { NeuronStore } from "../format/store/index.js";
import { readConfig } from "../model/config.js";
import { MatrixRunner } from "../model/matrix-runner.js";
import { Predictor, predictorShapes, type PredictorShape } from "../model/offload/predictor.js";
import { WeightLoader } from "../model/weight-loader.js";
import type { Arena } from "../runtime/arena.js";
import type { ThreadPool } from "../runtime/pool.js";
import { ACTIVATION_FORMATS, activationBytes, type ActivationFormat } from "../runtime/weight-kernels.js";
import { timeCalls } from "./probe-timing.js";

/** Seconds of one layer's predictor scores at the pool's thread count, from the input row x (nEmbd f32). */
export function measurePredictor(
  store: NeuronStore,
  pred: PredictorShape,
  arena: Arena,
  pool: ThreadPool,
  x: number,
  d: number,
): number {
  const nEmbd = store.ffn.nEmbd;
  const nFF = store.layer(0).neurons;
  const cfg = readConfig(store);
  const shapes = predictorShapes(store, cfg);
  const p = Predictor.load(new WeightLoader(store, arena, pool), cfg, shapes, { groups: 1 });
  // a buffer for every quantized format: the predictor's matrices take their build's (the
  // relaxed build's Q8_0 takes q8_i8s); a format left out would be prepared at address 0
  const act = { f32: 0 } as Record<ActivationFormat, number>;
  for (const fmt of ACTIVATION_FORMATS)
    if (fmt !== "f32") act[fmt] = arena.alloc(activationBytes(fmt, Math.max(nEmbd, pred.hidden)) + 64, 64);
  const scores = arena.alloc(nFF * 4, 64);
  const mm = new MatrixRunner(pool, act);
  return timeCalls(() => p.scores(mm, 0, x, nEmbd, scores), d);
}
