/**
 * The source model's FFN, found and checked: per layer (or per expert of a mixture's layer) the
 * gate, up and down matrices that become neuron bundles, the embedding width, and every other
 * tensor, which the store keeps as a fixed tensor.
 */
import { GGMLType, typeName, typeTraits } from "../../format/ggml-types.js";
import type { GGUFFile, GGUFTensorInfo, ModelFile } from "../../format/gguf.js";
import { STORE_FFN_TYPES } from "../../format/store/index.js";
import { ARCHITECTURES } from "../../model/arch/index.js";
import { ConvertError } from "./convert-error.js";

/** One matrix of the source: a 2-D tensor, or one expert's slice of a mixture's 3-D tensor. */
export interface MatrixView {
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
export interface FFNTensors {
  gate: MatrixView;
  up: MatrixView;
  down: MatrixView;
  /** PWRI: `down` is ffn_down_t, already one row per neuron */
  transposed: boolean;
  neurons: number;
  layer: number;
  /** the expert (a mixture of experts), or -1 */
  expert: number;
  /**
   * the expert's gate and up biases (gpt-oss: a row of blk.N.ffn_{gate,up}_exps.bias each), which
   * its bundles carry; null where the architecture has none
   */
  biases: { gate: BiasView; up: BiasView } | null;
}

/** One expert's row of a bias tensor: `neurons` values at byte `base` of tensor t. */
export interface BiasView {
  t: GGUFTensorInfo;
  base: number;
  bytes: number;
}

const FFN_RE = /^blk\.(\d+)\.ffn_(gate|up|down|down_t)\.weight$/;
const EXPERT_RE = /^blk\.(\d+)\.ffn_(gate|up|down)(_exps|\.(\d+))\.weight$/;
/** the experts' gate and up biases, which bundles carry (the down bias, per expert, stays fixed) */
const BIAS_RE = /^blk\.\d+\.ffn_(gate|up)_exps\.bias$/;

function whole(t: GGUFTensorInfo): MatrixView {
  return { t, base: 0, rows: t.dims[1], rowBytes: t.bytes / t.dims[1], bytes: t.bytes, name: t.name };
}

/** The two halves of a fused gate-and-up matrix (rows [0, n) the gate, [n, 2n) up). */
function halves(t: GGUFTensorInfo): [MatrixView, MatrixView] {
  const rows = t.dims[1] / 2;
  const rowBytes = t.bytes / t.dims[1];
  const half = (base: number, part: string) => ({
    t,
    base,
    rows,
    rowBytes,
    bytes: rows * rowBytes,
    name: `${t.name}[${part}]`,
  });
  return [half(0, "gate half"), half(rows * rowBytes, "up half")];
}

/** What the converter takes from a source model. */
export interface SourceFFN {
  /** the bundle groups: per layer, or per (layer, expert) in that order */
  layers: FFNTensors[];
  nEmbd: number;
  /** every tensor that is not the FFN's, in source order */
  fixed: GGUFTensorInfo[];
  /** experts per layer (0: a dense FFN) */
  experts: number;
}

/** The FFN of `file`, dense or a mixture of experts (its metadata's expert_count says which). */
export function findFFN(file: ModelFile): SourceFFN {
  const experts = file.has(`${file.architecture}.expert_count`)
    ? file.getNumber(`${file.architecture}.expert_count`)
    : 0;
  if (experts > 0) return findExperts(file, experts, ARCHITECTURES.get(file.architecture)?.expertBiases ?? false);
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
    // gate and up fused in one ffn_up of twice the width, gate first (phi3): its two halves
    const fusedUp =
      !e.gate && e.up && (e.down ?? e.down_t) && e.up.dims[1] === 2 * (e.down ? e.down.dims[0] : e.down_t!.dims[1]);
    const miss = (["gate", "up"] as const).filter((k) => !e[k] && !(k === "gate" && fusedUp));
    if (miss.length || (!e.down && !e.down_t))
      throw new ConvertError(
        `${file.path}: layer ${l} lacks ${[...miss.map((k) => `ffn_${k}`), ...(!e.down && !e.down_t ? ["ffn_down"] : [])].join(", ")}`,
      );
    if (e.down && e.down_t) throw new ConvertError(`${file.path}: layer ${l} has both ffn_down and ffn_down_t`);
    const down = (e.down ?? e.down_t)!;
    const [gateView, upView] = fusedUp ? halves(e.up!) : [whole(e.gate!), whole(e.up!)];
    const gate = fusedUp ? { ...e.up!, dims: [e.up!.dims[0], e.up!.dims[1] / 2] } : e.gate!,
      up = gate === e.gate ? e.up! : gate;
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
      gate: gateView,
      up: upView,
      down: whole(down),
      transposed: !!e.down_t,
      neurons: n,
      layer: l,
      expert: -1,
      biases: null,
    });
  }
  return { layers, nEmbd, fixed, experts: 0 };
}

function checkReadable(file: ModelFile, t: GGUFTensorInfo): void {
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
 * routers (ffn_gate_inp) stay fixed tensors. `biased` (gpt-oss): each expert's gate and up biases
 * go into its bundles, one value per neuron; the down biases (one row per expert) stay fixed.
 */
function findExperts(file: ModelFile, experts: number, biased: boolean): SourceFFN {
  const fixed: GGUFTensorInfo[] = [];
  const byLayer = new Map<number, Map<string, GGUFTensorInfo>>();
  const biasTensors = new Map<string, GGUFTensorInfo>();
  for (const t of file.tensors.values()) {
    const m = EXPERT_RE.exec(t.name);
    if (biased && BIAS_RE.test(t.name)) {
      biasTensors.set(t.name, t);
      continue;
    }
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
    const bias = (kind: "gate" | "up", e: number): BiasView => {
      const name = `blk.${l}.ffn_${kind}_exps.bias`;
      const t = biasTensors.get(name);
      if (!t)
        throw new ConvertError(
          `${file.path}: tensor "${name}" is missing: ${file.architecture}'s experts need it, [${nFF}, ${experts}] (one row per expert)`,
        );
      if (t.dims.length !== 2 || t.dims[0] !== nFF || t.dims[1] !== experts)
        throw new ConvertError(
          `${file.path}: ${name} is [${t.dims.join(", ")}], expected [${nFF}, ${experts}] (one row per expert)`,
        );
      if (![GGMLType.F32, GGMLType.F16, GGMLType.BF16].includes(t.type))
        throw new ConvertError(`${file.path}: ${name} is ${typeName(t.type)}, expected F32 (or F16, BF16)`);
      const bytes = t.bytes / experts;
      return { t, base: e * bytes, bytes };
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
        biases: biased ? { gate: bias("gate", e), up: bias("up", e) } : null,
      });
    }
  }
  return { layers, nEmbd, fixed, experts };
}

/** Read rows `indices` (original row numbers) of a matrix into dst, one read per consecutive run. */
export function readRows(file: GGUFFile, m: MatrixView, indices: Int32Array, dst: Uint8Array): void {
  const rb = m.rowBytes;
  for (let i = 0; i < indices.length;) {
    let j = i + 1;
    while (j < indices.length && indices[j] === indices[j - 1] + 1) j++;
    file.readTensor(m.t, dst.subarray(i * rb, j * rb), m.base + indices[i] * rb, (j - i) * rb);
    i = j;
  }
}
