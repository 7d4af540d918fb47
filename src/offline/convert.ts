/**
 * GGUF (or PowerInfer "PWRI" GGUF) -> `.pi` neuron store (docs/store-format.md).
 *
 * Streams: the fixed tensors are copied in 16 MiB pieces, and the FFN is built one layer at a
 * time. Per layer, Down is transposed in column bands (each band's slice of every row is read,
 * dequantized, and every column of the band requantized into the FFN type), then bundles are
 * assembled in groups of a few MiB from rows read on demand. So the converter holds one layer's
 * transposed Down plus a few buffers, never the model.
 *
 * Down cannot be copied: a GGUF stores it as nEmbd rows of nFF values, quantized in blocks along
 * a row, and a bundle needs column i (nEmbd values) contiguous, so the column is requantized with
 * blocks along it. The max and rms error of that (and of any type change of Gate/Up, e.g. from
 * K-quants, which have no quantizer here) are measured against the source values and recorded in
 * the manifest. A PWRI file's `ffn_down_t` is already transposed and is copied bit for bit when
 * its type is the store's.
 */
import { closeSync, openSync, readFileSync, readSync, statSync } from "node:fs";
import { basename, resolve } from "node:path";
import { GGMLType, typeFromName, typeName, typeTraits } from "../format/ggml-types.js";
import { GGUFFile, GGUFValueType, type GGUFTensorInfo } from "../format/gguf.js";
import { checkFiniteOnRead } from "../format/finite-check.js";
import { dequantizeRow, quantizeRow } from "../format/quant.js";
import {
  base64Of,
  bundleBytesFor,
  encodeMetadataValue,
  nearestStoreType,
  STORE_FFN_TYPES,
  StoreWriter,
  type EncodedMetadata,
  type StoreConversion,
  type StoreLayerManifest,
  type StoreManifest,
} from "../format/store/index.js";
import { PREDICTOR_TENSOR_RE, THRESHOLDS_KEY } from "../model/model.js";
import { checkPredictorExperts, predictorNames } from "../model/offload/predictor.js";
import { checkFingerprint, modelFingerprint, profileThresholds, ProfileError } from "./profile.js";
import { PREDICTOR_MODEL_KEY, SPARSE_THRESHOLD_KEY } from "./predictor-files.js";

export class ConvertError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "ConvertError";
  }
}

/**
 * `--type`: the FFN type of the store (the sparse kernels read every one); "keep" keeps the
 * source's when a store can hold it, else takes the nearest (nearestStoreType: Q4_K -> Q4_1,
 * Q5_K -> Q5_1, Q2_K/Q3_K -> Q4_0, Q6_K -> Q8_0).
 */
export const CONVERT_TYPES = ["keep", "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"] as const;
export type ConvertType = (typeof CONVERT_TYPES)[number];

/**
 * An activation profile: per layer, how often each neuron fired (any non-negative scale: counts
 * or fractions). `tokens` (optional) is how many tokens were profiled. Neurons are stored
 * hot-first: by descending frequency, ties by index. A profile from `powerinfer profile`
 * (src/offline/profile.ts, ProfileFile) also names its model (`model`: a fingerprint, checked
 * against the model being converted) and may carry per-layer activation thresholds, which the
 * store keeps in its metadata (THRESHOLDS_KEY).
 */
export interface ActivationProfile {
  /** per group; `routed` (a mixture of experts): the share of profiled tokens routed to the expert, `frequency` then among those */
  layers: { frequency: ArrayLike<number>; threshold?: number; routed?: number }[];
  tokens?: number;
  model?: unknown;
}

export interface ConvertProgress {
  stage: "fixed" | "ffn";
  /** FFN layer being converted (-1 while copying fixed tensors) */
  layer: number;
  layers: number;
  /** source bytes processed so far / in all */
  bytesDone: number;
  bytesTotal: number;
}

export interface ConvertOptions {
  input: string;
  output: string;
  type?: ConvertType;
  /** a profile, or the path of a JSON file holding one */
  profile?: string | ActivationProfile;
  signal?: AbortSignal;
  onProgress?: (p: ConvertProgress) => void;
  /** fsync before the final rename (default true) */
  fsync?: boolean;
  /**
   * A GGUF holding the model's activation predictors (`blk.N.fc1/fc2`): a predictors-only file
   * (what `synth --gate-rank` writes beside its model) or a PowerInfer GGUF of the same model.
   * They replace any the input has.
   */
  predictors?: string;
}

export interface ConvertResult {
  output: string;
  bytes: number;
  seconds: number;
  ffnType: GGMLType;
  nEmbd: number;
  /** transformer layers */
  layers: number;
  /** experts per layer (0: a dense FFN) */
  experts: number;
  /** FFN neurons over all layers */
  neurons: number;
  bundleBytes: number;
  /** share of the FFN region that is padding (bundles are rounded up to 4 KiB) */
  paddingFraction: number;
  fixedTensors: number;
  conversion: StoreManifest["ffn"]["conversion"];
  ordered: boolean;
  /** predictors taken from `predictors`: one per layer, or per (layer, expert) */
  predictorGroups: number;
}

// ---------------------------------------------------------------------------------------------
// Metadata with its GGUF types (GGUFFile keeps values only)

/**
 * Walk a GGUF header's key/value section and return each key's type path: [type] for scalars,
 * [ARRAY, itemType, ...] for arrays (nested arrays take their first element's item type).
 * The file was already validated by GGUFFile.open, so this only needs to skip correctly.
 */
function scanMetadataTypes(path: string): Map<string, number[]> {
  const fd = openSync(path, "r");
  try {
    const size = statSync(path).size;
    let buf = Buffer.alloc(0),
      bufAt = 0,
      pos = 0;
    const need = (n: number): number => {
      if (pos - bufAt >= 0 && pos + n <= bufAt + buf.length) return pos - bufAt;
      const len = Math.min(Math.max(n, 1 << 20), size - pos);
      if (len < n)
        throw new ConvertError(`${path}: header ends early while re-reading metadata types (at byte offset ${pos})`);
      buf = Buffer.alloc(len);
      let got = 0;
      while (got < len) {
        const r = readSync(fd, buf, got, len - got, pos + got);
        if (r === 0) throw new ConvertError(`${path}: unexpected end of file at byte offset ${pos + got}`);
        got += r;
      }
      bufAt = pos;
      return 0;
    };
    const u32 = () => {
      const o = need(4);
      pos += 4;
      return buf.readUInt32LE(o);
    };
    const u64 = () => {
      const o = need(8);
      pos += 8;
      return Number(buf.readBigUInt64LE(o));
    };
    const str = () => {
      const n = u64();
      const o = need(n);
      pos += n;
      return buf.toString("utf8", o, o + n);
    };
    const FIXED: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
    const skip = (type: number): number[] => {
      if (type === GGUFValueType.STRING) {
        const n = u64(); // (not `pos += u64()`: that would add to the value of pos before the read)
        pos += n;
        return [type];
      }
      if (type !== GGUFValueType.ARRAY) {
        pos += FIXED[type];
        return [type];
      }
      const item = u32();
      const n = u64();
      if (item === GGUFValueType.STRING || item === GGUFValueType.ARRAY) {
        let inner: number[] = [];
        for (let i = 0; i < n; i++) {
          const t = skip(item);
          if (i === 0) inner = t.slice(1);
        }
        return [type, item, ...inner];
      }
      pos += n * FIXED[item];
      return [type, item];
    };
    pos = 8; // magic + version
    u64(); // tensor count
    const nKV = u64();
    const out = new Map<string, number[]>();
    for (let i = 0; i < nKV; i++) {
      const key = str();
      out.set(key, skip(u32()));
    }
    return out;
  } finally {
    closeSync(fd);
  }
}

function encodeMetadata(file: GGUFFile): EncodedMetadata[] {
  const types = scanMetadataTypes(file.paths[0]);
  const out: EncodedMetadata[] = [];
  for (const [key, value] of file.metadata) {
    // split.* describe how the source was cut into files; a store is one file
    if (key.startsWith("split.")) continue;
    const t = types.get(key);
    if (!t) throw new ConvertError(`${file.path}: metadata key "${key}" was not found when re-reading the header`);
    out.push([key, t[0], encodeMetadataValue(t[0], t.slice(1), value)]);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Errors of a conversion

class ErrorStats {
  maxAbs = 0;
  sumSq = 0;
  count = 0;
  maxValue = 0;
  add(src: Float32Array, got: Float32Array, n: number): void {
    let m = this.maxAbs,
      s = 0,
      v = this.maxValue;
    for (let i = 0; i < n; i++) {
      const d = Math.abs(got[i] - src[i]);
      if (d > m) m = d;
      s += d * d;
      const a = Math.abs(src[i]);
      if (a > v) v = a;
    }
    this.maxAbs = m;
    this.sumSq += s;
    this.count += n;
    this.maxValue = v;
  }
  merge(o: ErrorStats): void {
    this.maxAbs = Math.max(this.maxAbs, o.maxAbs);
    this.sumSq += o.sumSq;
    this.count += o.count;
    this.maxValue = Math.max(this.maxValue, o.maxValue);
  }
  report(from: GGMLType): StoreConversion {
    return {
      from,
      fromName: typeName(from),
      maxAbsError: this.maxAbs,
      rmsError: this.count ? Math.sqrt(this.sumSq / this.count) : 0,
      maxAbsValue: this.maxValue,
    };
  }
}

// ---------------------------------------------------------------------------------------------
// Model structure

/** One matrix of the source: a 2-D tensor, or one expert's slice of a mixture's 3-D tensor. */
interface MatrixView {
  t: GGUFTensorInfo;
  /** byte offset of the matrix inside the tensor */
  base: number;
  rows: number;
  rowBytes: number;
  bytes: number;
  /** for messages: the tensor, and the expert when a slice */
  name: string;
}

/** The FFN of one layer, or of one expert of a mixture's layer: a group of neuron bundles. */
interface FFNTensors {
  gate: MatrixView;
  up: MatrixView;
  down: MatrixView;
  /** PWRI: `down` is ffn_down_t, already one row per neuron */
  transposed: boolean;
  neurons: number;
  layer: number;
  /** the expert (a mixture of experts), or -1 */
  expert: number;
}

const FFN_RE = /^blk\.(\d+)\.ffn_(gate|up|down|down_t)\.weight$/;
const EXPERT_RE = /^blk\.(\d+)\.ffn_(gate|up|down)(_exps|\.(\d+))\.weight$/;

function whole(t: GGUFTensorInfo): MatrixView {
  return { t, base: 0, rows: t.dims[1], rowBytes: t.bytes / t.dims[1], bytes: t.bytes, name: t.name };
}

function findFFN(file: GGUFFile): { layers: FFNTensors[]; nEmbd: number; fixed: GGUFTensorInfo[]; experts: number } {
  const experts = file.has(`${file.architecture}.expert_count`)
    ? file.getNumber(`${file.architecture}.expert_count`)
    : 0;
  if (experts > 0) return findExperts(file, experts);
  const byLayer = new Map<number, Partial<Record<"gate" | "up" | "down" | "down_t", GGUFTensorInfo>>>();
  const fixed: GGUFTensorInfo[] = [];
  for (const t of file.tensors.values()) {
    if (/_exps\.|ffn_gate_inp/.test(t.name))
      throw new ConvertError(
        `${file.path}: "${t.name}" is a mixture of experts' tensor, but the metadata has no expert_count`,
      );
    const m = FFN_RE.exec(t.name);
    if (!m) {
      fixed.push(t);
      continue;
    }
    const l = Number(m[1]);
    const e = byLayer.get(l) ?? {};
    e[m[2] as "gate"] = t;
    byLayer.set(l, e);
  }
  if (byLayer.size === 0)
    throw new ConvertError(
      `${file.path}: no FFN tensors (blk.N.ffn_gate/up/down.weight) found: nothing to put into neuron bundles`,
    );
  const layers: FFNTensors[] = [];
  let nEmbd = 0;
  for (let l = 0; l < byLayer.size; l++) {
    const e = byLayer.get(l);
    if (!e)
      throw new ConvertError(
        `${file.path}: FFN tensors of layer ${l} are missing (layers ${[...byLayer.keys()].sort((a, b) => a - b).join(", ")} have them)`,
      );
    const miss = (["gate", "up"] as const).filter((k) => !e[k]);
    if (miss.length || (!e.down && !e.down_t))
      throw new ConvertError(
        `${file.path}: layer ${l} lacks ${[...miss.map((k) => `ffn_${k}`), ...(!e.down && !e.down_t ? ["ffn_down"] : [])].join(", ")}`,
      );
    if (e.down && e.down_t) throw new ConvertError(`${file.path}: layer ${l} has both ffn_down and ffn_down_t`);
    const gate = e.gate!,
      up = e.up!,
      down = (e.down ?? e.down_t)!;
    const [d, n] = gate.dims;
    const shape = (t: GGUFTensorInfo, want: number[]) => {
      if (t.dims.length !== 2 || t.dims[0] !== want[0] || t.dims[1] !== want[1]) {
        throw new ConvertError(
          `${file.path}: ${t.name} is [${t.dims.join(", ")}], expected [${want.join(", ")}] (from ${gate.name} [${gate.dims.join(", ")}])`,
        );
      }
    };
    if (gate.dims.length !== 2) throw new ConvertError(`${file.path}: ${gate.name} is not a matrix`);
    shape(up, [d, n]);
    shape(down, e.down_t ? [d, n] : [n, d]);
    if (nEmbd && d !== nEmbd)
      throw new ConvertError(`${file.path}: layer ${l} has embedding width ${d}, layer 0 has ${nEmbd}`);
    nEmbd = d;
    for (const t of [gate, up, down]) checkReadable(file, t);
    layers.push({
      gate: whole(gate),
      up: whole(up),
      down: whole(down),
      transposed: !!e.down_t,
      neurons: n,
      layer: l,
      expert: -1,
    });
  }
  return { layers, nEmbd, fixed, experts: 0 };
}

function checkReadable(file: GGUFFile, t: GGUFTensorInfo): void {
  const tr = typeTraits(t.type);
  if (!tr || (!STORE_FFN_TYPES.includes(t.type) && ![GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K].includes(t.type))) {
    throw new ConvertError(
      `${file.path}: ${t.name} is ${typeName(t.type)}, which this converter cannot read (no dequantizer)`,
    );
  }
}

/**
 * A mixture of experts' groups, layer by layer and expert by expert: each expert's gate, up and
 * down from the layer's 3-D tensors (one matrix per expert) or from its own 2-D tensors. The
 * routers (ffn_gate_inp) stay fixed tensors.
 */
function findExperts(
  file: GGUFFile,
  experts: number,
): { layers: FFNTensors[]; nEmbd: number; fixed: GGUFTensorInfo[]; experts: number } {
  const fixed: GGUFTensorInfo[] = [];
  const byLayer = new Map<number, Map<string, GGUFTensorInfo>>();
  for (const t of file.tensors.values()) {
    const m = EXPERT_RE.exec(t.name);
    if (!m) {
      if (FFN_RE.test(t.name))
        throw new ConvertError(
          `${file.path}: "${t.name}" is a dense FFN tensor in a mixture of experts (expert_count ${experts})`,
        );
      fixed.push(t);
      continue;
    }
    const l = Number(m[1]);
    const map = byLayer.get(l) ?? new Map<string, GGUFTensorInfo>();
    map.set(m[4] === undefined ? `${m[2]}` : `${m[2]}.${m[4]}`, t);
    byLayer.set(l, map);
  }
  const nLayer = byLayer.size;
  const gate0 = byLayer.get(0)?.get("gate") ?? byLayer.get(0)?.get("gate.0");
  if (!gate0)
    throw new ConvertError(
      `${file.path}: no expert tensors for layer 0 (blk.0.ffn_gate_exps.weight or blk.0.ffn_gate.0.weight)`,
    );
  const [nEmbd, nFF] = gate0.dims;
  const layers: FFNTensors[] = [];
  for (let l = 0; l < nLayer; l++) {
    const map = byLayer.get(l);
    if (!map) throw new ConvertError(`${file.path}: the expert tensors of layer ${l} are missing`);
    const view = (kind: "gate" | "up" | "down", e: number): MatrixView => {
      const [cols, rows] = kind === "down" ? [nFF, nEmbd] : [nEmbd, nFF];
      const merged = map.get(kind);
      if (merged) {
        const want = [cols, rows, experts];
        if (merged.dims.length !== 3 || merged.dims.some((d, i) => d !== want[i]))
          throw new ConvertError(
            `${file.path}: ${merged.name} is [${merged.dims.join(", ")}], expected [${want.join(", ")}] (expert_count ${experts})`,
          );
        checkReadable(file, merged);
        const bytes = merged.bytes / experts;
        return { t: merged, base: e * bytes, rows, rowBytes: bytes / rows, bytes, name: `${merged.name} expert ${e}` };
      }
      const single = map.get(`${kind}.${e}`);
      if (!single)
        throw new ConvertError(`${file.path}: layer ${l} has no ffn_${kind} for expert ${e} (expert_count ${experts})`);
      if (single.dims.length !== 2 || single.dims[0] !== cols || single.dims[1] !== rows)
        throw new ConvertError(
          `${file.path}: ${single.name} is [${single.dims.join(", ")}], expected [${cols}, ${rows}]`,
        );
      checkReadable(file, single);
      return whole(single);
    };
    for (let e = 0; e < experts; e++) {
      layers.push({
        gate: view("gate", e),
        up: view("up", e),
        down: view("down", e),
        transposed: false,
        neurons: nFF,
        layer: l,
        expert: e,
      });
    }
  }
  return { layers, nEmbd, fixed, experts };
}

function loadProfile(
  p: string | ActivationProfile,
  layers: FFNTensors[],
  model: GGUFFile,
): { profile: ActivationProfile; file: string | null; thresholds: Float32Array | null } {
  let profile: ActivationProfile;
  let file: string | null = null;
  if (typeof p === "string") {
    file = p;
    try {
      profile = JSON.parse(readFileSync(p, "utf8"));
    } catch (e) {
      throw new ConvertError(`profile ${p}: ${(e as Error).message}`);
    }
  } else profile = p;
  const where = file ?? "profile";
  if (!profile || !Array.isArray(profile.layers))
    throw new ConvertError(`${where}: expected a JSON object { "layers": [ { "frequency": [...] }, ... ] }`);
  // A profile that names its model (powerinfer profile writes one) must name this one: the same
  // shape alone would let another model's frequencies and thresholds through. Checked first, as
  // "from another model" says more than a count that does not match.
  const fromProfile = <T>(f: () => T): T => {
    try {
      return f();
    } catch (e) {
      throw e instanceof ProfileError ? new ConvertError(e.message) : e;
    }
  };
  if (profile.model !== undefined)
    fromProfile(() => checkFingerprint(profile.model, modelFingerprint(model), where, model.path));
  if (profile.layers.length !== layers.length)
    throw new ConvertError(`${where}: has ${profile.layers.length} layers, the model ${layers.length}`);
  profile.layers.forEach((L, l) => {
    const f = L?.frequency;
    if (!f || typeof f.length !== "number") throw new ConvertError(`${where}: layers[${l}].frequency is missing`);
    if (f.length !== layers[l].neurons)
      throw new ConvertError(
        `${where}: layers[${l}].frequency has ${f.length} entries, layer ${l} has ${layers[l].neurons} neurons`,
      );
    for (let i = 0; i < f.length; i++) {
      if (typeof f[i] !== "number" || !Number.isFinite(f[i]) || f[i] < 0)
        throw new ConvertError(`${where}: layers[${l}].frequency[${i}] = ${f[i]} is not a finite non-negative number`);
    }
  });
  if (profile.tokens !== undefined && !(Number.isFinite(profile.tokens) && profile.tokens >= 0))
    throw new ConvertError(`${where}: tokens = ${profile.tokens} is not a count`);
  profile.layers.forEach((L, l) => {
    const t = L.threshold;
    if (t !== undefined && !(typeof t === "number" && Number.isFinite(t) && t >= 0))
      throw new ConvertError(`${where}: layers[${l}].threshold = ${JSON.stringify(t)} is not a finite number >= 0`);
  });
  // a mixture's profile has one entry per (layer, expert), each with its layer's threshold
  const all = fromProfile(() => profileThresholds(profile, where));
  const experts = layers[0]?.expert >= 0 ? layers.filter((L) => L.layer === 0).length : 1;
  const thresholds = all && experts > 1 ? all.filter((_, g) => g % experts === 0) : all;
  return { profile, file, thresholds };
}

/**
 * The source's metadata, plus the profile's calibrated thresholds under THRESHOLDS_KEY (replacing
 * any the source had), so a run of the store applies them with no extra flag.
 */
function withThresholds(metadata: EncodedMetadata[], thresholds: Float32Array | null | undefined): EncodedMetadata[] {
  if (!thresholds) return metadata;
  const entry: EncodedMetadata = [
    THRESHOLDS_KEY,
    GGUFValueType.ARRAY,
    encodeMetadataValue(GGUFValueType.ARRAY, [GGUFValueType.FLOAT32], thresholds),
  ];
  return [...metadata.filter((e) => e[0] !== THRESHOLDS_KEY), entry];
}

function withSparseThreshold(metadata: EncodedMetadata[], threshold: number | undefined): EncodedMetadata[] {
  if (threshold === undefined) return metadata;
  const entry: EncodedMetadata = [
    SPARSE_THRESHOLD_KEY,
    GGUFValueType.FLOAT32,
    encodeMetadataValue(GGUFValueType.FLOAT32, [], threshold),
  ];
  return [...metadata.filter((e) => e[0] !== SPARSE_THRESHOLD_KEY), entry];
}

/**
 * The predictors of `path` for the model `model` (at `modelPath`): every layer's fc1 [nEmbd,
 * hidden] and fc2 [hidden, nFF], F32 or F16, made for this very model (the fingerprint a
 * predictors-only file records, or the fingerprint of a whole PowerInfer GGUF).
 */
/** checkPredictorExperts of `file` for `model` of `groups` (layers x experts), as a ConvertError. */
function predictorsFit(file: GGUFFile, model: GGUFFile, groups: number, experts: number): void {
  try {
    checkPredictorExperts(file, { nLayer: groups / Math.max(1, experts), nExpert: experts }, model.architecture);
  } catch (e) {
    throw new ConvertError((e as Error).message);
  }
}

function openPredictors(
  path: string,
  model: GGUFFile,
  modelPath: string,
  groups: number,
  nEmbd: number,
  nFF: number,
  experts: number,
): { file: GGUFFile; tensors: GGUFTensorInfo[]; threshold: number } {
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
    return { file, tensors, threshold };
  } catch (e) {
    file.close();
    throw e;
  }
}

/**
 * A profile entry's frequencies per token: for an expert of a mixture, its firing share among the
 * tokens routed to it times the share of tokens routed to it (what the neuron cache sees).
 */
function perToken(L: ActivationProfile["layers"][number]): Float32Array {
  const routed = routedShare(L);
  return Float32Array.from(L.frequency, (f) => f * routed);
}

/** A profile entry's share of tokens routed to it (1: a dense layer, or a profile that does not say). */
function routedShare(L: ActivationProfile["layers"][number]): number {
  return typeof L.routed === "number" && L.routed >= 0 && L.routed <= 1 ? L.routed : 1;
}

/** Stored position -> neuron: descending frequency, ties by index (a stable hot-first order). */
export function hotFirstOrder(frequency: ArrayLike<number>): Int32Array {
  const idx = Array.from({ length: frequency.length }, (_, i) => i);
  idx.sort((a, b) => frequency[b] - frequency[a] || a - b);
  return Int32Array.from(idx);
}

// ---------------------------------------------------------------------------------------------
// Row helpers

/** Read rows `indices` (original row numbers) of a matrix into dst, one read per consecutive run. */
function readRows(file: GGUFFile, m: MatrixView, indices: Int32Array, dst: Uint8Array): void {
  const rb = m.rowBytes;
  for (let i = 0; i < indices.length;) {
    let j = i + 1;
    while (j < indices.length && indices[j] === indices[j - 1] + 1) j++;
    file.readTensor(m.t, dst.subarray(i * rb, j * rb), m.base + indices[i] * rb, (j - i) * rb);
    i = j;
  }
}

class RowConverter {
  private a: Float32Array;
  private b: Float32Array;
  constructor(readonly n: number) {
    this.a = new Float32Array(n);
    this.b = new Float32Array(n);
  }
  /** Convert one row of tensor `name` between types, measuring the error against the source values. */
  convert(name: string, from: GGMLType, src: Uint8Array, to: GGMLType, dst: Uint8Array, stats: ErrorStats): void {
    dequantizeRow(from, src, this.n, this.a);
    this.quantize(name, this.a, to, dst, stats);
  }
  /**
   * Quantize f32 values of tensor `name` and measure what the stored row decodes to against them.
   * A finite value the type cannot hold (F16 above 65504, or a block scale that overflows f16)
   * is refused: the kernels would read the infinity as a finite number.
   */
  quantize(name: string, values: Float32Array, to: GGMLType, dst: Uint8Array, stats: ErrorStats): void {
    quantizeRow(to, values, dst);
    dequantizeRow(to, dst, this.n, this.b);
    for (let i = 0; i < this.n; i++)
      if (!Number.isFinite(this.b[i])) {
        const wider = ["bf16", "f32", "q8_0"].filter((t) => t !== typeName(to).toLowerCase());
        throw new ConvertError(
          `${name}: the value ${values[i]} does not fit in ${typeName(to)} (it becomes ${this.b[i]}): convert with one of --type ${wider.join(", ")}`,
        );
      }
    stats.add(values, this.b, this.n);
  }
}

const tick = () => new Promise<void>((r) => setImmediate(r));

// ---------------------------------------------------------------------------------------------

export async function convertToStore(opts: ConvertOptions): Promise<ConvertResult> {
  const t0 = performance.now();
  const input = resolve(opts.input),
    output = resolve(opts.output);
  if (input === output) throw new ConvertError(`the output ${output} would overwrite the input`);
  // NaN/Inf in the source is refused as it is read: a store holds only what was checked.
  const file = checkFiniteOnRead(GGUFFile.open(input));
  const closers: (() => void)[] = [];
  let writer: StoreWriter | undefined;
  try {
    const { layers, nEmbd, fixed: own, experts } = findFFN(file);
    if (opts.predictors === undefined) predictorsFit(file, file, layers.length, experts);
    const preds =
      opts.predictors !== undefined
        ? openPredictors(resolve(opts.predictors), file, input, layers.length, nEmbd, layers[0].neurons, experts)
        : undefined;
    if (preds) closers.push(() => preds.file.close());
    // each fixed tensor with the file it comes from; predictors from the predictor file win
    const fixed = [
      ...own.filter((t) => !(preds && PREDICTOR_TENSOR_RE.test(t.name))).map((t) => ({ t, src: file })),
      ...(preds?.tensors ?? []).map((t) => ({ t, src: preds!.file })),
    ];
    const want = opts.type ?? "keep";
    if (!CONVERT_TYPES.includes(want))
      throw new ConvertError(`--type must be one of ${CONVERT_TYPES.join(", ")}, got "${want}"`);
    const srcType = layers[0].gate.t.type;
    const ffnType = want === "keep" ? nearestStoreType(srcType) : typeFromName(want)!;
    const tr = typeTraits(ffnType)!;
    if (nEmbd % tr.blockSize !== 0)
      throw new ConvertError(
        `embedding width ${nEmbd} is not a multiple of the ${tr.name} block size ${tr.blockSize}: choose another --type`,
      );
    const rowBytes = (nEmbd / tr.blockSize) * tr.typeSize;
    const bundleBytes = bundleBytesFor(rowBytes);
    const prof = opts.profile !== undefined ? loadProfile(opts.profile, layers, file) : undefined;

    const bytesTotal =
      fixed.reduce((a, f) => a + f.t.bytes, 0) +
      layers.reduce((a, L) => a + L.gate.bytes + L.up.bytes + L.down.bytes, 0);
    let bytesDone = 0;
    const progress = (stage: ConvertProgress["stage"], layer: number) =>
      opts.onProgress?.({ stage, layer, layers: layers.length, bytesDone, bytesTotal });
    const check = () => {
      if (opts.signal?.aborted)
        throw opts.signal.reason instanceof Error ? opts.signal.reason : new ConvertError("conversion aborted");
    };

    writer = await StoreWriter.create(output, { fsync: opts.fsync });
    progress("fixed", -1);

    // fixed tensors, in source order, each on a page boundary
    const fixedManifest: StoreManifest["fixed"] = [];
    const piece = new Uint8Array(16 << 20);
    for (const { t, src } of fixed) {
      check();
      await writer.pad();
      fixedManifest.push({ name: t.name, type: t.type, dims: t.dims, offset: writer.position, bytes: t.bytes });
      for (let o = 0; o < t.bytes; o += piece.length) {
        const n = Math.min(piece.length, t.bytes - o);
        src.readTensor(t, piece, o, n);
        await writer.write(piece.subarray(0, n));
        bytesDone += n;
        progress("fixed", -1);
        await tick();
      }
    }
    await writer.pad();

    // FFN, layer by layer
    const rc = new RowConverter(nEmbd);
    const total = { gate: new ErrorStats(), up: new ErrorStats(), down: new ErrorStats() };
    const changed = { gate: null as GGMLType | null, up: null as GGMLType | null, down: null as GGMLType | null };
    const layerManifest: StoreLayerManifest[] = [];
    for (let l = 0; l < layers.length; l++) {
      const L = layers[l];
      const n = L.neurons;
      const stats = { gate: new ErrorStats(), up: new ErrorStats(), down: new ErrorStats() };
      const order = prof
        ? hotFirstOrder(prof.profile.layers[l].frequency)
        : Int32Array.from({ length: n }, (_, i) => i);

      // Down as one row per neuron, in the store's type
      let downT: Uint8Array | undefined;
      if (!L.transposed) {
        downT = new Uint8Array(n * rowBytes);
        await transposeDown(file, L.down, n, nEmbd, ffnType, rowBytes, downT, rc, stats.down, check, (b) => {
          bytesDone += b;
          progress("ffn", l);
        });
        changed.down = L.down.t.type;
      }

      const offset = writer.position;
      const group = Math.max(1, Math.floor((4 << 20) / bundleBytes));
      const out = new Uint8Array(group * bundleBytes);
      const srcRb = { gate: L.gate.rowBytes, up: L.up.rowBytes, down: L.down.rowBytes };
      const scratch = {
        gate: new Uint8Array(group * srcRb.gate),
        up: new Uint8Array(group * srcRb.up),
        down: new Uint8Array(L.transposed ? group * srcRb.down : 0),
      };
      // The layer's gate rows as stored, collected for their contiguous copy after the bundles.
      const gateRows = new Uint8Array(n * rowBytes);
      for (let p0 = 0; p0 < n; p0 += group) {
        check();
        const g = Math.min(group, n - p0);
        const idx = order.subarray(p0, p0 + g);
        out.fill(0);
        for (const kind of ["gate", "up", "down"] as const) {
          if (kind === "down" && !L.transposed) {
            for (let k = 0; k < g; k++)
              out.set(downT!.subarray(idx[k] * rowBytes, (idx[k] + 1) * rowBytes), k * bundleBytes + 2 * rowBytes);
            continue;
          }
          const m = L[kind];
          const type = m.t.type;
          const at = kind === "gate" ? 0 : kind === "up" ? rowBytes : 2 * rowBytes;
          readRows(file, m, idx, scratch[kind]);
          const rb = srcRb[kind];
          for (let k = 0; k < g; k++) {
            const src = scratch[kind].subarray(k * rb, (k + 1) * rb);
            const dst = out.subarray(k * bundleBytes + at, k * bundleBytes + at + rowBytes);
            if (type === ffnType) dst.set(src);
            else rc.convert(m.t.name, type, src, ffnType, dst, stats[kind]);
          }
          if (type !== ffnType) changed[kind] = type;
          bytesDone += g * rb;
        }
        for (let k = 0; k < g; k++)
          gateRows.set(out.subarray(k * bundleBytes, k * bundleBytes + rowBytes), (p0 + k) * rowBytes);
        await writer.write(out.subarray(0, g * bundleBytes));
        progress("ffn", l);
        await tick();
      }
      await writer.pad();
      const gateRowsOffset = writer.position;
      await writer.write(gateRows);
      await writer.pad();
      const conv = (kind: "gate" | "up" | "down", m: MatrixView): StoreConversion | null =>
        m.t.type === ffnType && (kind !== "down" || L.transposed) ? null : stats[kind].report(m.t.type);
      layerManifest.push({
        ...(L.expert >= 0 ? { layer: L.layer, expert: L.expert } : {}),
        offset,
        neurons: n,
        order: base64Of(order),
        frequency: prof ? base64Of(perToken(prof.profile.layers[l])) : null,
        gate: conv("gate", L.gate),
        up: conv("up", L.up),
        down: conv("down", L.down),
        gateRows: gateRowsOffset,
      });
      for (const k of ["gate", "up", "down"] as const) total[k].merge(stats[k]);
    }

    const conversion = {
      gate: changed.gate === null ? null : total.gate.report(changed.gate),
      up: changed.up === null ? null : total.up.report(changed.up),
      down: changed.down === null ? null : total.down.report(changed.down),
    };
    const neurons = layers.reduce((a, L) => a + L.neurons, 0);
    const { bytes } = await writer.finish({
      source: { file: basename(input), bytes: file.fileSize, magic: file.magic },
      metadata: withSparseThreshold(withThresholds(encodeMetadata(file), prof?.thresholds), preds?.threshold),
      fixed: fixedManifest,
      ffn: {
        type: ffnType,
        typeName: typeName(ffnType),
        layout: "gguf",
        nEmbd,
        rowBytes,
        bundleBytes,
        parts: { gate: 0, up: rowBytes, down: 2 * rowBytes },
        conversion,
        ...(experts > 0 ? { experts } : {}),
        layers: layerManifest,
      },
      profile: prof
        ? {
            file: prof.file ? basename(prof.file) : null,
            tokens: prof.profile.tokens ?? null,
            ...(experts > 0 ? { routed: prof.profile.layers.map(routedShare) } : {}),
          }
        : null,
    });
    writer = undefined;
    progress("ffn", layers.length - 1);
    return {
      output,
      bytes,
      seconds: (performance.now() - t0) / 1000,
      ffnType,
      nEmbd,
      layers: layers.length / Math.max(1, experts),
      experts,
      neurons,
      bundleBytes,
      paddingFraction: 1 - (3 * rowBytes) / bundleBytes,
      fixedTensors: fixed.length,
      conversion,
      ordered: !!prof,
      predictorGroups: preds ? layers.length : 0,
    };
  } catch (e) {
    await writer?.abort();
    throw e;
  } finally {
    for (const close of closers) close();
    file.close();
  }
}

/**
 * Down ([n] columns x [nEmbd] rows, blocks along a row) -> one row per neuron (column) in
 * `type`. Works in bands of columns: each band's slice of every source row is read and
 * dequantized into an nEmbd x band f32 tile, then each column of the tile is quantized.
 */
async function transposeDown(
  file: GGUFFile,
  m: MatrixView,
  n: number,
  nEmbd: number,
  type: GGMLType,
  rowBytes: number,
  out: Uint8Array,
  rc: RowConverter,
  stats: ErrorStats,
  check: () => void,
  onBytes: (b: number) => void,
): Promise<void> {
  const t = m.t;
  const src = typeTraits(t.type)!;
  const srcRb = m.rowBytes;
  // at most ~32 MiB of f32 tile, a whole number of source blocks wide
  const maxBand = Math.max(src.blockSize, Math.floor((8 << 20) / nEmbd / src.blockSize) * src.blockSize);
  const band = Math.min(n, maxBand);
  const tile = new Float32Array(nEmbd * band);
  const slice = new Uint8Array((band / src.blockSize) * src.typeSize);
  // columns are gathered 16 at a time, so each row of the tile is read 16 floats at once
  // (a column-at-a-time gather strides through the whole tile and was the converter's hot spot)
  const G = 16;
  const cols = new Float32Array(G * nEmbd);
  for (let c0 = 0; c0 < n; c0 += band) {
    check();
    const w = Math.min(band, n - c0);
    const sb = (w / src.blockSize) * src.typeSize;
    const at = (c0 / src.blockSize) * src.typeSize;
    for (let r = 0; r < nEmbd; r++) {
      file.readTensor(t, slice, m.base + r * srcRb + at, sb);
      dequantizeRow(t.type, slice.subarray(0, sb), w, tile, r * w);
    }
    for (let j0 = 0; j0 < w; j0 += G) {
      const g = Math.min(G, w - j0);
      for (let r = 0; r < nEmbd; r++) {
        const at = r * w + j0;
        for (let k = 0; k < g; k++) cols[k * nEmbd + r] = tile[at + k];
      }
      for (let k = 0; k < g; k++) {
        const c = c0 + j0 + k;
        rc.quantize(
          t.name,
          cols.subarray(k * nEmbd, (k + 1) * nEmbd),
          type,
          out.subarray(c * rowBytes, (c + 1) * rowBytes),
          stats,
        );
      }
    }
    onBytes(sb * nEmbd);
    await tick();
  }
}
