/**
 * Writing trained predictors where the engine (and PowerInfer) read them:
 *
 * - a PowerInfer GGUF ("PWRI" magic): every tensor and metadata key of the dense input, plus per
 *   layer `blk.N.fc1.weight` (GGUF dims [nEmbd, hidden]: hidden rows of nEmbd) and
 *   `blk.N.fc2.weight` (dims [hidden, nFF]), the shapes PowerInfer's converter writes from its
 *   torch predictors (fc1 [hidden, nEmbd], fc2 [nFF, hidden] row-major), in F32 or F16, and
 *   `powerinfer.sparse_threshold` (f32) = the score threshold the weights are made for (0: each
 *   layer's calibration is folded into its fc2, see src/predictor-training/predictor-train.ts);
 * - a predictors-only GGUF: the predictor tensors, the threshold, and the fingerprint of the model
 *   they belong to (`powerinfer.predictors.model`), for `convert --predictors` (the synthesizer
 *   writes one beside a predictable model; llama.cpp could not load the model with them inside);
 * - an existing neuron store (.pi): a new store is written next to it and renamed over it, so an
 *   error or interruption leaves the input as it was: everything between the header and the
 *   manifest copied byte for byte (checked against its checksums on the way), so every offset
 *   the manifest holds stays valid; then the predictors as fixed tensors; then the manifest with
 *   the predictors in place of any old ones and the threshold key set. The reader finds fixed
 *   tensors by the manifest's offsets, so predictors after the FFN region are as good as before.
 */
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { GGMLType } from "../format/ggml-types.js";
import { GGUFFile, GGUFValueType } from "../format/gguf.js";
import { GGUFWriter, type GGUFWritableValue } from "../format/gguf-writer.js";
import { f32ToF16 } from "../format/half.js";
import { NeuronStore, StoreWriter, STORE_PAGE, type StoreFixedManifest } from "../format/store/index.js";
import { readConfig } from "../model/config.js";
import { PREDICTOR_TENSOR_RE } from "../model/model.js";
import { PREDICTOR_EXPERTS_KEY, predictorGroups, predictorNames } from "../model/offload/predictor.js";
import { modelFingerprint, type ModelFingerprint } from "./profile.js";
import type { PredictorWeights } from "../predictor-training/predictor-train.js";

export type { PredictorWeights };

export const SPARSE_THRESHOLD_KEY = "powerinfer.sparse_threshold";
/** Metadata of a predictors-only file: the fingerprint (JSON) of the model they were made for. */
export const PREDICTOR_MODEL_KEY = "powerinfer.predictors.model";
/** ... and how they were made (free text). */
export const PREDICTOR_ORIGIN_KEY = "powerinfer.predictors.origin";
export type PredictorType = "f32" | "f16";

export class PredictorOutputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PredictorOutputError";
  }
}

/** A predictor tensor's bytes in `type`. */
export function predictorBytes(values: Float32Array, type: PredictorType): Uint8Array {
  if (type === "f32")
    return new Uint8Array(values.buffer.slice(values.byteOffset, values.byteOffset + values.byteLength));
  const out = new Uint16Array(values.length);
  for (let i = 0; i < values.length; i++) out[i] = f32ToF16(values[i]);
  return new Uint8Array(out.buffer);
}

/** The tensors group g's predictor becomes (a layer's, or an expert's: see predictorNames): [name, GGUF dims, values]. */
export function predictorTensors(g: number, p: PredictorWeights, experts = 0): [string, number[], Float32Array][] {
  const names = predictorNames(g, experts);
  return [
    [names.fc1, [p.nIn, p.hidden], p.fc1],
    [names.fc2, [p.hidden, p.nOut], p.fc2],
  ];
}

function checkPredictors(
  predictors: PredictorWeights[],
  nLayer: number,
  nEmbd: number,
  nFF: number,
  where: string,
  experts = 0,
): void {
  if (predictors.length !== nLayer)
    throw new PredictorOutputError(
      `${where}: ${predictors.length} predictors for a model of ${nLayer} layers${experts > 0 ? ` x experts (${nLayer / experts} x ${experts})` : ""}`,
    );
  predictors.forEach((p, l) => {
    if (!p) throw new PredictorOutputError(`${where}: no predictor for ${experts > 0 ? "group" : "layer"} ${l}`);
    if (p.nIn !== nEmbd || p.nOut !== nFF)
      throw new PredictorOutputError(
        `${where}: the predictor of layer ${l} maps ${p.nIn} -> ${p.nOut}, the model ${nEmbd} -> ${nFF}`,
      );
    if (p.fc1.length !== p.hidden * p.nIn || p.fc2.length !== p.nOut * p.hidden)
      throw new PredictorOutputError(`${where}: the predictor of layer ${l} has weights of the wrong size`);
    if (p.threshold !== predictors[0].threshold)
      throw new PredictorOutputError(
        `${where}: predictors are made for different thresholds (${predictors[0].threshold}, ${p.threshold}); one global threshold is stored`,
      );
  });
}

// ---------------------------------------------------------------------------------------------
// GGUF metadata types (GGUFFile keeps the values only; a faithful copy needs each key's type)

interface KeyType {
  type: GGUFValueType;
  /** for arrays */
  item?: GGUFValueType;
}

const SCALAR_BYTES: Partial<Record<number, number>> = {
  0: 1,
  1: 1,
  2: 2,
  3: 2,
  4: 4,
  5: 4,
  6: 4,
  7: 1,
  10: 8,
  11: 8,
  12: 8,
};

/** Each metadata key's GGUF type, read from the header of `path` (already validated by GGUFFile.open). */
export function metadataTypes(path: string): Map<string, KeyType> {
  const fd = openSync(path, "r");
  try {
    const size = statSync(path).size;
    let buf = Buffer.alloc(0);
    let at = 0;
    let pos = 0;
    const view = (n: number): number => {
      if (pos >= at && pos + n <= at + buf.length) return pos - at;
      const len = Math.min(size - pos, Math.max(n, 1 << 20));
      if (len < n) throw new PredictorOutputError(`${path}: the header ends early (at byte offset ${pos})`);
      buf = Buffer.alloc(len);
      let got = 0;
      while (got < len) {
        const r = readSync(fd, buf, got, len - got, pos + got);
        if (r === 0) throw new PredictorOutputError(`${path}: unexpected end of file at byte offset ${pos + got}`);
        got += r;
      }
      at = pos;
      return 0;
    };
    const u32 = () => {
      const o = view(4);
      pos += 4;
      return buf.readUInt32LE(o);
    };
    const u64 = () => {
      const o = view(8);
      pos += 8;
      return Number(buf.readBigUInt64LE(o));
    };
    const skipValue = (type: number): void => {
      if (type === GGUFValueType.STRING) {
        const n = u64();
        pos += n;
      } else if (type === GGUFValueType.ARRAY) {
        const item = u32();
        const n = u64();
        if (item === GGUFValueType.STRING || item === GGUFValueType.ARRAY) for (let i = 0; i < n; i++) skipValue(item);
        else pos += n * SCALAR_BYTES[item]!;
      } else pos += SCALAR_BYTES[type]!;
    };
    pos = 8; // magic, version
    u64(); // tensor count
    const count = u64();
    const out = new Map<string, KeyType>();
    for (let i = 0; i < count; i++) {
      const n = u64();
      const o = view(n);
      const key = buf.toString("utf8", o, o + n);
      pos += n;
      const type = u32();
      if (type === GGUFValueType.ARRAY) {
        const save = pos;
        const item = u32();
        pos = save;
        out.set(key, { type, item });
      } else out.set(key, { type });
      skipValue(type);
    }
    return out;
  } finally {
    closeSync(fd);
  }
}

// ---------------------------------------------------------------------------------------------
// PWRI GGUF

export interface PredictorGGUFOptions {
  /** the dense GGUF the predictors were trained for */
  input: string;
  output: string;
  predictors: PredictorWeights[];
  type?: PredictorType;
  fsync?: boolean;
}

/** Write `input` plus the predictors as a PowerInfer GGUF. Returns the file size. */
export async function writePredictorGGUF(opts: PredictorGGUFOptions): Promise<number> {
  const input = resolve(opts.input),
    output = resolve(opts.output);
  if (input === output) throw new PredictorOutputError(`the output ${output} would overwrite the input`);
  const type = opts.type ?? "f32";
  const file = GGUFFile.open(input);
  let writer: GGUFWriter | undefined;
  try {
    const cfg = readConfig(file);
    const { nEmbd, nFF, nExpert } = cfg;
    checkPredictors(opts.predictors, predictorGroups(cfg), nEmbd, nFF, output, nExpert);
    const types = metadataTypes(file.paths[0]);
    const alignment = file.has("general.alignment") ? file.getNumber("general.alignment") : 32;
    writer = new GGUFWriter(output, { magic: "PWRI", alignment, fsync: opts.fsync });
    for (const [key, value] of file.metadata) {
      if (key.startsWith("split.") || key === "general.alignment" || key === SPARSE_THRESHOLD_KEY) continue;
      const t = types.get(key);
      if (!t)
        throw new PredictorOutputError(`${input}: metadata key "${key}" was not found when re-reading the header`);
      if (t.type === GGUFValueType.ARRAY && t.item === GGUFValueType.ARRAY)
        throw new PredictorOutputError(
          `${input}: metadata "${key}" is an array of arrays, which the GGUF writer cannot copy`,
        );
      writer.setMetadata(key, value as GGUFWritableValue, t.type === GGUFValueType.ARRAY ? t.item : t.type);
    }
    writer.setMetadata(SPARSE_THRESHOLD_KEY, opts.predictors[0].threshold, GGUFValueType.FLOAT32);
    const copied = [...file.tensors.values()].filter((t) => !PREDICTOR_TENSOR_RE.test(t.name));
    for (const t of copied) writer.addTensor(t.name, t.dims, t.type);
    const ggmlType = type === "f32" ? GGMLType.F32 : GGMLType.F16;
    opts.predictors.forEach((p, g) => {
      for (const [name, dims, values] of predictorTensors(g, p, nExpert))
        writer!.addTensor(name, dims, ggmlType, predictorBytes(values, type));
    });
    const piece = new Uint8Array(8 << 20);
    for (const t of copied) {
      const sink = await writer.tensorSink(t.name);
      for (let o = 0; o < t.bytes; o += piece.length) {
        const n = Math.min(piece.length, t.bytes - o);
        const chunk = piece.subarray(0, n);
        file.readTensor(t, chunk, o, n);
        // the sink may still be writing the previous chunk: give it its own copy
        await sink.write(chunk.slice());
      }
    }
    await writer.finish();
    const bytes = writer.totalBytes;
    writer = undefined;
    return bytes;
  } catch (e) {
    await writer?.abort();
    throw e;
  } finally {
    file.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Neuron store

export interface PredictorStoreOptions {
  /** the store to add the predictors to (replaced atomically) */
  store: string;
  /** the dense GGUF the predictors were trained on: the store must come from the same model */
  model: string;
  predictors: PredictorWeights[];
  type?: PredictorType;
  /** write here instead of replacing the store (default: the store itself) */
  output?: string;
  fsync?: boolean;
}

/**
 * Throws unless the store was converted from the GGUF model at `modelPath` (same shape and norm
 * weights: the fingerprint profiles use), since predictors trained on one model do not fit another.
 */
export function checkStoreModel(store: NeuronStore, modelPath: string): void {
  const gguf = GGUFFile.open(modelPath);
  try {
    const a = modelFingerprint(store),
      b = modelFingerprint(gguf);
    if (JSON.stringify(a) === JSON.stringify(b)) return;
    const show = (f: typeof a) =>
      `${f.architecture} ${f.nLayer} layers ${f.nEmbd} -> ${f.nFF}, norms ${f.hash.slice(0, 19)}`;
    throw new PredictorOutputError(
      `${store.path} was not converted from ${modelPath} (store: ${show(a)}; model: ${show(b)}): predictors trained on one model do not fit another`,
    );
  } finally {
    gguf.close();
  }
}

/** Add (or replace) the predictors of a store. Returns the new file's size. */
/** The pages of the predictor tensors a store holds now, as `unused` entries once they are replaced. */
function replacedRegions(fixed: StoreFixedManifest[]): { offset: number; bytes: number; what: string }[] {
  return fixed
    .filter((t) => PREDICTOR_TENSOR_RE.test(t.name))
    .map((t) => ({
      offset: t.offset,
      bytes: Math.ceil(t.bytes / STORE_PAGE) * STORE_PAGE,
      what: `replaced predictor ${t.name}`,
    }));
}

export async function addPredictorsToStore(opts: PredictorStoreOptions): Promise<number> {
  const storePath = resolve(opts.store);
  const output = resolve(opts.output ?? opts.store);
  const type = opts.type ?? "f32";
  const store = NeuronStore.open(storePath);
  let writer: StoreWriter | undefined;
  try {
    checkStoreModel(store, opts.model);
    const m = store.manifest;
    const nFF = store.ffn.layers[0]?.neurons ?? 0;
    checkPredictors(opts.predictors, store.ffn.layers.length, store.ffn.nEmbd, nFF, storePath, store.ffn.experts);

    writer = await StoreWriter.create(output, { fsync: opts.fsync });
    // Everything after the header is copied as it is (each piece checked against its chunk
    // checksums first), so every offset the manifest holds stays valid whatever it describes;
    // the predictors go after it, before the new manifest.
    const { start, end } = store.checksummed;
    const fd = openSync(storePath, "r");
    try {
      const piece = new Uint8Array(8 << 20);
      for (let o = start; o < end; o += piece.length) {
        const view = piece.subarray(0, Math.min(piece.length, end - o));
        let got = 0;
        while (got < view.length) {
          const r = readSync(fd, view, got, view.length - got, o + got);
          if (r === 0)
            throw new PredictorOutputError(`${storePath}: file ended at byte offset ${o + got} while copying`);
          got += r;
        }
        store.verifyRange(o, view, 0, view.length);
        await writer.write(view);
      }
    } finally {
      closeSync(fd);
    }
    // old predictors (if any) stay in the copy as unreferenced bytes, declared unused
    const fixed: StoreFixedManifest[] = m.fixed.filter((t) => !PREDICTOR_TENSOR_RE.test(t.name));
    const unused = [...(m.unused ?? []), ...replacedRegions(m.fixed)];
    const ggmlType = type === "f32" ? GGMLType.F32 : GGMLType.F16;
    for (let l = 0; l < opts.predictors.length; l++) {
      for (const [name, dims, values] of predictorTensors(l, opts.predictors[l], store.ffn.experts)) {
        const bytes = predictorBytes(values, type);
        await writer.pad();
        fixed.push({ name, type: ggmlType, dims, offset: writer.position, bytes: bytes.length });
        await writer.write(bytes);
      }
    }
    const metadata = m.metadata.filter(([key]) => key !== SPARSE_THRESHOLD_KEY);
    metadata.push([SPARSE_THRESHOLD_KEY, GGUFValueType.FLOAT32, opts.predictors[0].threshold]);
    const { format: _f, version: _v, checksums: _c, ...body } = m;
    const { bytes } = await writer.finish({ ...body, metadata, fixed, unused });
    writer = undefined;
    return bytes;
  } catch (e) {
    await writer?.abort();
    throw e;
  } finally {
    store.close();
  }
}

// ---------------------------------------------------------------------------------------------
// Predictors-only file

export interface PredictorFileOptions {
  output: string;
  predictors: PredictorWeights[];
  /** the model they belong to (checked when a store is made with them) */
  model: ModelFingerprint;
  /** how they were made, for people reading the file */
  origin: string;
  /** experts per layer of a mixture (default 0: one predictor per layer) */
  experts?: number;
  type?: PredictorType;
  fsync?: boolean;
}

/** Write predictors alone, with the fingerprint of their model. Returns the file size. */
export async function writePredictorFile(opts: PredictorFileOptions): Promise<number> {
  const type = opts.type ?? "f16";
  const { nLayer, nEmbd, nFF } = opts.model;
  const experts = opts.experts ?? 0;
  checkPredictors(opts.predictors, nLayer * Math.max(1, experts), nEmbd, nFF, opts.output, experts);
  const writer = new GGUFWriter(resolve(opts.output), { fsync: opts.fsync });
  try {
    writer.setMetadata("general.type", "powerinfer-predictors");
    writer.setMetadata(PREDICTOR_MODEL_KEY, JSON.stringify(opts.model));
    writer.setMetadata(PREDICTOR_ORIGIN_KEY, opts.origin);
    writer.setMetadata(SPARSE_THRESHOLD_KEY, opts.predictors[0].threshold, GGUFValueType.FLOAT32);
    const ggmlType = type === "f32" ? GGMLType.F32 : GGMLType.F16;
    if (experts > 0) writer.setMetadata(PREDICTOR_EXPERTS_KEY, experts, GGUFValueType.UINT32);
    opts.predictors.forEach((p, g) => {
      for (const [name, dims, values] of predictorTensors(g, p, experts))
        writer.addTensor(name, dims, ggmlType, predictorBytes(values, type));
    });
    await writer.finish();
    return writer.totalBytes;
  } catch (e) {
    await writer.abort();
    throw e;
  }
}
