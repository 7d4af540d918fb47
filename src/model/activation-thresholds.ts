/**
 * Per-layer activation thresholds (CATS-style sparsity for SiLU models): a neuron fires only where
 * |act(gate)| passes its layer's threshold. Given by the caller, else from the model's metadata
 * (written by convert from a calibrated profile).
 */
import type { ModelFile } from "../format/gguf.js";

/** Metadata key of per-layer activation thresholds (an array of f32, one per layer). */
export const THRESHOLDS_KEY = "powerinfer.activation_thresholds";

/** The thresholds in force: `given`, else the file's; null where there are none or all are 0. */
export function activationThresholds(
  file: ModelFile,
  nLayer: number,
  given: ArrayLike<number> | undefined,
): Float32Array | null {
  let values: ArrayLike<number>;
  let where: string;
  if (given !== undefined) {
    values = given;
    where = "activationThresholds";
  } else if (file.has(THRESHOLDS_KEY)) {
    where = `${file.path}: metadata ${THRESHOLDS_KEY}`;
    const arr = file.getArray(THRESHOLDS_KEY);
    if (!arr) throw new Error(`${where}: expected an array of numbers, one per layer`);
    values = arr as unknown as ArrayLike<number>;
  } else return null;
  if (values.length !== nLayer)
    throw new Error(`${where}: ${values.length} thresholds, the model has ${nLayer} layers`);
  const out = new Float32Array(nLayer);
  for (let l = 0; l < nLayer; l++) {
    const v = Number(values[l]);
    if (!(Number.isFinite(v) && v >= 0))
      throw new Error(`${where}: threshold of layer ${l} is ${values[l]}, expected a finite number >= 0`);
    out[l] = v;
  }
  return out.some((v) => v > 0) ? out : null;
}
