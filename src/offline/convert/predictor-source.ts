/**
 * The activation predictors a store takes from a separate file (`convert --predictors`): a GGUF
 * checked to be for this very model, or safetensors in PowerInfer's names
 * (predictor-safetensors.ts); either way of the shapes its layers (or experts) need.
 */
import { GGMLType, typeName } from "../../format/ggml-types.js";
import { GGUFFile, type GGUFTensorInfo, type ModelFile } from "../../format/gguf.js";
import { checkFiniteOnRead } from "../../format/finite-check.js";
import { checkPredictorExperts, predictorNames } from "../../model/offload/predictor.js";
import { checkFingerprint, modelFingerprint, ProfileError } from "../profile.js";
import { PREDICTOR_MODEL_KEY, SPARSE_THRESHOLD_KEY } from "../predictor-files.js";
import { ConvertError } from "./convert-error.js";
import { isSafetensorsPredictors, openSafetensorsPredictors } from "./predictor-safetensors.js";

/** checkPredictorExperts of `file` for `model` of `groups` (layers x experts), as a ConvertError. */
export function predictorsFit(file: ModelFile, model: ModelFile, groups: number, experts: number): void {
  try {
    checkPredictorExperts(file, { nLayer: groups / Math.max(1, experts), nExpert: experts }, model.architecture);
  } catch (e) {
    throw new ConvertError((e as Error).message);
  }
}

/** A predictor tensor as the store writes it: its GGUF name, type, dims and size. */
export type PredictorTensor = Pick<GGUFTensorInfo, "name" | "type" | "dims" | "bytes">;

/** Open predictors: fc1/fc2 tensors, group by group, and the sparse threshold (0 when none is recorded). */
export interface PredictorSource {
  tensors: PredictorTensor[];
  threshold: number;
  /** bytes [start, start + length) of a tensor, as the store holds it, into dst */
  read(t: PredictorTensor, dst: Uint8Array, start: number, length: number): void;
  close(): void;
}

/**
 * The predictors of `path` for the model `model` (at `modelPath`): every layer's fc1 [nEmbd,
 * hidden] and fc2 [hidden, nFF], F32 or F16. A GGUF must be made for this very model (the
 * fingerprint a predictors-only file records, or the fingerprint of a whole PowerInfer GGUF);
 * safetensors (a .safetensors file or a directory) record no model and are checked by shape.
 */
export function openPredictors(
  path: string,
  model: ModelFile,
  modelPath: string,
  groups: number,
  nEmbd: number,
  nFF: number,
  experts: number,
): PredictorSource {
  if (isSafetensorsPredictors(path)) return openSafetensorsPredictors(path, groups, nEmbd, nFF, experts);
  const file = checkFiniteOnRead(GGUFFile.open(path));
  try {
    // whose predictors: the fingerprint a predictors-only file records, or that of a whole model
    let recorded: unknown;
    if (file.has(PREDICTOR_MODEL_KEY)) {
      try {
        recorded = JSON.parse(file.getString(PREDICTOR_MODEL_KEY));
      } catch {
        throw new ConvertError(`${path}: metadata ${PREDICTOR_MODEL_KEY} is not JSON`);
      }
    } else if (file.tensors.has("blk.0.attn_norm.weight")) {
      recorded = modelFingerprint(file);
    } else {
      throw new ConvertError(
        `${path}: does not say which model its predictors are for (no ${PREDICTOR_MODEL_KEY}, and no weights to fingerprint)`,
      );
    }
    try {
      checkFingerprint(recorded, modelFingerprint(model), path, modelPath);
    } catch (e) {
      throw e instanceof ProfileError
        ? new ConvertError(e.message.replace("is from another model", "holds predictors of another model"))
        : e;
    }
    predictorsFit(file, model, groups, experts);
    const tensors: GGUFTensorInfo[] = [];
    for (let g = 0; g < groups; g++) {
      const names = predictorNames(g, experts);
      const fc1 = file.tensors.get(names.fc1);
      const fc2 = file.tensors.get(names.fc2);
      if (!fc1 || !fc2)
        throw new ConvertError(
          `${path}: no predictor for ${experts > 0 ? `layer ${Math.floor(g / experts)}, expert ${g % experts}` : `layer ${g}`} (${names.fc1} and ${names.fc2})`,
        );
      for (const t of [fc1, fc2]) {
        if (t.type !== GGMLType.F32 && t.type !== GGMLType.F16)
          throw new ConvertError(`${path}: ${t.name} is ${typeName(t.type)}; predictors must be F32 or F16`);
      }
      const hidden = fc1.dims[1];
      if (fc1.dims.length !== 2 || fc1.dims[0] !== nEmbd || !(hidden >= 1 && hidden <= nFF))
        throw new ConvertError(
          `${path}: ${fc1.name} has dims [${fc1.dims.join(", ")}], expected [${nEmbd}, hidden <= ${nFF}]`,
        );
      if (fc2.dims.length !== 2 || fc2.dims[0] !== hidden || fc2.dims[1] !== nFF)
        throw new ConvertError(`${path}: ${fc2.name} has dims [${fc2.dims.join(", ")}], expected [${hidden}, ${nFF}]`);
      tensors.push(fc1, fc2);
    }
    const threshold = file.has(SPARSE_THRESHOLD_KEY) ? file.getNumber(SPARSE_THRESHOLD_KEY) : 0;
    if (!Number.isFinite(threshold)) throw new ConvertError(`${path}: ${SPARSE_THRESHOLD_KEY} is ${threshold}`);
    return {
      tensors,
      threshold,
      read: (t, dst, start, length) => file.readTensor(t as GGUFTensorInfo, dst, start, length),
      close: () => file.close(),
    };
  } catch (e) {
    file.close();
    throw e;
  }
}
