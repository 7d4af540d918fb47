/**
 * Activation predictors published as safetensors, for a store (`convert --predictors`, and
 * `convert DIR -o x.pi` when the checkpoint carries them). The names PowerInfer's models use:
 *
 * - merged into a checkpoint (TurboSparse, Bamboo): `model.layers.L.mlp.predictor.fc1.weight`
 *   and `.fc2.weight` per layer; `model.layers.L.block_sparse_moe.experts.E.predictor.fc1.weight`
 *   and `.fc2.weight` per expert (TurboSparse-Mixtral). A file, a directory of files, or a
 *   Hugging Face directory (with its model.safetensors.index.json) holding them, with or without
 *   the model's own tensors (those are not read);
 * - one file per layer, as PowerInfer's converter reads its predictors (`model_L.pt`, the state
 *   dict of a bias-free ReLU MLP): `model_L.safetensors` (or `L.safetensors`) holding `fc1.weight`
 *   and `fc2.weight`.
 *
 * torch's nn.Linear stores fc1 as [hidden, nEmbd] and fc2 as [nFF, hidden], row-major: the bytes
 * of the GGUF predictors `blk.L.fc1.weight` (dims [nEmbd, hidden]) and `blk.L.fc2.weight` ([hidden,
 * nFF]), so a tensor is copied as it is (F32, F16) or widened (BF16, to F32: the predictor kernels
 * take F32 and F16). Nothing in these files says which model they were trained for: they are
 * checked against the model's shape (layers, experts, nEmbd, nFF) only.
 */
import { existsSync, readdirSync, statSync } from "node:fs";
import { basename, join } from "node:path";
import { findNonFinite } from "../../format/finite-check.js";
import { GGMLType } from "../../format/ggml-types.js";
import {
  INDEX_FILE,
  SafetensorsCheckpoint,
  SafetensorsFile,
  widenToF32,
  type SafetensorsTensor,
} from "../../format/hf/safetensors.js";
import { HF_PREDICTOR_RE } from "../../format/hf/plan.js";
import { predictorNames } from "../../model/offload/predictor.js";
import { ConvertError } from "./convert-error.js";
import type { PredictorSource, PredictorTensor } from "./predictor-source.js";

/** PowerInfer's per-layer file. */
const LAYER_FILE_RE = /^(?:model_)?(\d+)\.safetensors$/;

/** Whether `path` names predictors in safetensors (a file or a directory) rather than a GGUF. */
export function isSafetensorsPredictors(path: string): boolean {
  return path.endsWith(".safetensors") || (existsSync(path) && statSync(path).isDirectory());
}

interface Found {
  t: SafetensorsTensor;
  file: SafetensorsFile;
}

/** Every predictor tensor of `path`, by (layer, expert, fc); the files to close. */
function collect(path: string): {
  found: Map<string, Found>;
  files: SafetensorsFile[];
  checkpoint?: SafetensorsCheckpoint;
} {
  const found = new Map<string, Found>();
  const files: SafetensorsFile[] = [];
  const put = (key: string, t: SafetensorsTensor, file: SafetensorsFile) => {
    const before = found.get(key);
    if (before)
      throw new ConvertError(
        `predictor tensor "${t.name}" of ${t.file} is also in ${before.t.file} ("${before.t.name}")`,
      );
    found.set(key, { t, file });
  };
  const scan = (file: SafetensorsFile, tensors: Iterable<SafetensorsTensor>) => {
    for (const t of tensors) {
      const m = HF_PREDICTOR_RE.exec(t.name);
      if (m) put(`${m[1]}.${m[2] ?? ""}.${m[3]}`, t, file);
    }
  };
  const isDir = statSync(path).isDirectory();
  if (isDir && existsSync(join(path, INDEX_FILE))) {
    // a Hugging Face checkpoint: its index says which shard holds what
    const checkpoint = SafetensorsCheckpoint.open(path);
    try {
      for (const t of checkpoint.tensors.values()) {
        const m = HF_PREDICTOR_RE.exec(t.name);
        if (m) put(`${m[1]}.${m[2] ?? ""}.${m[3]}`, t, checkpoint.fileOf(t));
      }
    } catch (e) {
      checkpoint.close();
      throw e;
    }
    return { found, files, checkpoint };
  }
  const paths = isDir
    ? readdirSync(path)
        .filter((n) => n.endsWith(".safetensors"))
        .sort()
        .map((n) => join(path, n))
    : [path];
  if (paths.length === 0) throw new ConvertError(`${path}: no .safetensors file in this directory`);
  try {
    for (const p of paths) {
      const file = SafetensorsFile.open(p);
      files.push(file);
      const layer = LAYER_FILE_RE.exec(basename(p));
      if (layer && (file.tensors.has("fc1.weight") || file.tensors.has("fc2.weight"))) {
        // PowerInfer's per-layer file: the layer is in the file's name
        for (const fc of ["1", "2"]) {
          const t = file.tensors.get(`fc${fc}.weight`);
          if (t) put(`${Number(layer[1])}..${fc}`, t, file);
        }
      } else scan(file, file.tensors.values());
    }
  } catch (e) {
    for (const f of files) f.close();
    throw e;
  }
  return { found, files };
}

/** How a group's tensor is named where it was expected, for errors. */
function expectedName(layer: number, expert: number, fc: 1 | 2): string {
  return expert >= 0
    ? `"model.layers.${layer}.block_sparse_moe.experts.${expert}.predictor.fc${fc}.weight" is missing`
    : `"model.layers.${layer}.mlp.predictor.fc${fc}.weight" is missing (or fc${fc}.weight in model_${layer}.safetensors)`;
}

/**
 * The predictors in the safetensors at `path` for a model of `groups` predictor groups (layers,
 * or layers x `experts`), nEmbd wide with nFF neurons per group, as the store's fixed tensors
 * `blk.L.fc1.weight`/`blk.L.fc2.weight` (`blk.L.fc1.E.weight`... for a mixture). The sparse
 * threshold is 0: PowerInfer's predictors fire on a positive score.
 */
export function openSafetensorsPredictors(
  path: string,
  groups: number,
  nEmbd: number,
  nFF: number,
  experts: number,
): PredictorSource {
  const { found, files, checkpoint } = collect(path);
  const close = () => {
    for (const f of files) f.close();
    checkpoint?.close();
  };
  try {
    if (found.size === 0)
      throw new ConvertError(
        `${path}: no predictor tensors (model.layers.L.mlp.predictor.fc1.weight and .fc2.weight, ` +
          `model.layers.L.block_sparse_moe.experts.E.predictor.fc1.weight..., or fc1.weight and fc2.weight in model_L.safetensors)`,
      );
    const nLayer = groups / Math.max(1, experts);
    // a predictor the model has no place for: another model's, or a mixture's for a dense one
    for (const [key, { t }] of found) {
      const [l, e] = key.split(".");
      if (Number(l) >= nLayer)
        throw new ConvertError(`${t.file}: tensor "${t.name}" is for layer ${l}, but the model has ${nLayer} layers`);
      if (experts > 0 && e === "")
        throw new ConvertError(
          `${t.file}: tensor "${t.name}" is a whole layer's predictor, but the model is a mixture of ${experts} experts: it needs one per expert`,
        );
      if (experts === 0 && e !== "")
        throw new ConvertError(`${t.file}: tensor "${t.name}" is an expert's predictor, but the model has no experts`);
      if (experts > 0 && Number(e) >= experts)
        throw new ConvertError(
          `${t.file}: tensor "${t.name}" is for expert ${e}, but the model has ${experts} per layer`,
        );
    }
    const tensors: PredictorTensor[] = [];
    const sources = new Map<string, Found>();
    for (let g = 0; g < groups; g++) {
      const layer = experts > 0 ? Math.floor(g / experts) : g;
      const expert = experts > 0 ? g % experts : -1;
      const key = (fc: number) => `${layer}.${expert >= 0 ? expert : ""}.${fc}`;
      const fc1 = found.get(key(1));
      const fc2 = found.get(key(2));
      if (!fc1 || !fc2)
        throw new ConvertError(
          `${path}: no predictor for ${expert >= 0 ? `layer ${layer}, expert ${expert}` : `layer ${layer}`}: ` +
            expectedName(layer, expert, fc1 ? 2 : 1),
        );
      for (const { t } of [fc1, fc2])
        if (t.dtype !== "F32" && t.dtype !== "F16" && t.dtype !== "BF16")
          throw new ConvertError(`${t.file}: tensor "${t.name}" is ${t.dtype}; predictors must be F32, F16 or BF16`);
      const s1 = fc1.t.shape,
        s2 = fc2.t.shape;
      const hidden = s1[0];
      if (s1.length !== 2 || s1[1] !== nEmbd || !(hidden >= 1 && hidden <= nFF))
        throw new ConvertError(
          `${fc1.t.file}: tensor "${fc1.t.name}" has shape [${s1.join(", ")}], expected [hidden <= ${nFF}, ${nEmbd}] (fc1: hidden x nEmbd)`,
        );
      if (s2.length !== 2 || s2[0] !== nFF || s2[1] !== hidden)
        throw new ConvertError(
          `${fc2.t.file}: tensor "${fc2.t.name}" has shape [${s2.join(", ")}], expected [${nFF}, ${hidden}] (fc2: nFF x hidden, hidden from fc1)`,
        );
      const names = predictorNames(g, experts);
      for (const [name, f] of [
        [names.fc1, fc1],
        [names.fc2, fc2],
      ] as const) {
        const type = f.t.dtype === "F16" ? GGMLType.F16 : GGMLType.F32;
        tensors.push({
          name,
          type,
          dims: [...f.t.shape].reverse(),
          bytes: f.t.elements * (type === GGMLType.F16 ? 2 : 4),
        });
        sources.set(name, f);
      }
    }
    const read = (t: PredictorTensor, dst: Uint8Array, start: number, length: number) => {
      const { t: st, file } = sources.get(t.name)!;
      const out = dst.subarray(0, length);
      if (st.dtype !== "BF16") file.readBytes(st, start, out);
      else {
        // BF16 widened: output bytes [start, start + length) are source bytes of half the offsets
        if (start % 4 !== 0 || length % 4 !== 0)
          throw new ConvertError(
            `${st.file}: tensor "${st.name}": read at ${start} of ${length} bytes is not whole values`,
          );
        const raw = new Uint8Array(length / 2);
        file.readBytes(st, start / 2, raw);
        const values = new Float32Array(length / 4);
        widenToF32("BF16", raw, values);
        out.set(new Uint8Array(values.buffer));
      }
      // as a GGUF's predictors are (checkFiniteOnRead): a store holds only finite weights
      const bad = findNonFinite(t.type, out, start);
      if (bad)
        throw new ConvertError(
          `${st.file}: tensor "${st.name}" holds ${bad.value} at element ${bad.element}; predictors must be finite`,
        );
    };
    return { tensors, threshold: 0, read, close };
  } catch (e) {
    close();
    throw e;
  }
}
