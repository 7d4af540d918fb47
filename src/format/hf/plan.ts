/**
 * A conversion plan: what a Hugging Face checkpoint becomes in a GGUF, decided before a byte of
 * tensor data is read. Each output tensor is a list of row ranges of checkpoint tensors (a
 * rename, a fused tensor split into its parts, experts stacked into one tensor), optionally
 * regrouped by llama's rotary permutation, or values computed from the config (rope_freqs).
 *
 * PlanBuilder hands out checkpoint tensors by name, checks each one's shape against what the
 * config implies, and at the end refuses any tensor nobody took: a weight is never dropped.
 */
import { GGMLType } from "../ggml-types.js";
import type { GGUFValueType } from "../gguf.js";
import type { GGUFWritableValue } from "../gguf-writer.js";
import type { SafetensorsCheckpoint, SafetensorsTensor } from "./safetensors.js";
import { READABLE_DTYPES } from "./safetensors.js";
import { HFConvertError, type HFConfig } from "./hf-config.js";

/** Rows [firstRow, firstRow + rows) of a checkpoint tensor seen as rows of its last dimension. */
export interface RowRange {
  source: SafetensorsTensor;
  firstRow: number;
  rows: number;
  /**
   * llama's rotary permutation, undone per head of `ropeHeadRows` rows: HF orders a head's rows
   * as the first halves of the rotated pairs then the second halves; ggml's "normal" RoPE wants
   * each pair adjacent. Output row 2i+j of a head is its source row j*half+i.
   */
  ropeHeadRows?: number;
  /**
   * Columns instead of rows: every `step`-th value of each source row from `first` (HF's fused
   * gate_up interleaves gate and up values). With `transpose`, the source is a stack of matrices
   * stored input-major (transformers' fused experts [E, in, out], applied as x @ W) and each
   * matrix's picked columns become output rows of `in` values. Such a part covers its whole
   * source (firstRow 0); `rows` counts output rows.
   */
  columns?: ColumnPick;
}

export interface ColumnPick {
  first: number;
  step: number;
  transpose: boolean;
}

/**
 * An MXFP4 matrix stack in the published layout (mxfp4-blocks.ts): `blocks` [E, R, n / 32, 16] and
 * `scales` [E, R, n / 32], U8. The output holds, per expert, source rows first, first + step, ...
 * (gpt-oss's gate_up interleaves gate and up rows).
 */
export interface Mxfp4Source {
  blocks: SafetensorsTensor;
  scales: SafetensorsTensor;
  first: number;
  step: number;
}

export interface PlannedTensor {
  /** the GGUF name */
  name: string;
  /** ggml order: dims[0] is the row length */
  dims: number[];
  /** the rows, in order (absent for computed values and MXFP4 sources) */
  parts?: RowRange[];
  /** an MXFP4 source: written as its own MXFP4 bytes, or their exact values when a float type is asked */
  mxfp4?: Mxfp4Source;
  /** computed values (rope_freqs), f32 */
  values?: Float32Array;
  /** added to every value after reading (Gemma's norms store w - 1; ggml wants w) */
  addOne?: boolean;
}

export interface MetadataEntry {
  key: string;
  value: GGUFWritableValue;
  type?: GGUFValueType;
}

export interface ConversionPlan {
  /** GGUF's general.architecture */
  arch: string;
  /**
   * The checkpoint's activation predictors (TurboSparse's `...predictor.fc1.weight`), which a
   * llama.cpp GGUF has no place for: left out of it, read into a store instead.
   */
  predictors: string[];
  metadata: MetadataEntry[];
  tensors: PlannedTensor[];
  /** for the vocabulary: config.json's vocab_size */
  vocabSize: number;
}

/** The checkpoint's own names that llama.cpp's converter also skips: buffers, not weights. */
const NOT_WEIGHTS = /(\.rotary_emb\.inv_freq|\.attention\.masked_bias|\.attention\.bias)$/;
/**
 * Activation predictors merged into a checkpoint (TurboSparse, Bamboo): per layer
 * (`mlp.predictor`) or per expert (`block_sparse_moe.experts.E.predictor`). Groups: the layer,
 * the expert (undefined for a layer's), 1 or 2.
 */
export const HF_PREDICTOR_RE =
  /^model\.layers\.(\d+)\.(?:mlp|block_sparse_moe\.experts\.(\d+))\.predictor\.fc([12])\.weight$/;

export class PlanBuilder {
  readonly tensors: PlannedTensor[] = [];
  readonly metadata: MetadataEntry[] = [];
  private taken = new Set<string>();

  constructor(
    readonly ckpt: SafetensorsCheckpoint,
    readonly cfg: HFConfig,
  ) {}

  has(name: string): boolean {
    return this.ckpt.tensors.has(name);
  }

  meta(key: string, value: GGUFWritableValue, type?: GGUFValueType): void {
    this.metadata.push({ key, value, type });
  }

  /**
   * A checkpoint tensor, which must exist with exactly `shape` (as stored: [rows, row length]
   * for a matrix). Marks it taken.
   */
  take(name: string, shape: readonly number[], dtypes: readonly string[] = READABLE_DTYPES): SafetensorsTensor {
    const t = this.ckpt.tensors.get(name);
    if (!t)
      throw new HFConvertError(
        `${this.ckpt.dir}: tensor "${name}" is missing (the config ${this.cfg.path} implies it, shape [${shape.join(", ")}])`,
      );
    if (t.shape.length !== shape.length || t.shape.some((d, i) => d !== shape[i]))
      throw new HFConvertError(
        `${t.file}: tensor "${name}" has shape [${t.shape.join(", ")}], but ${this.cfg.path} implies [${shape.join(", ")}]`,
      );
    if (!dtypes.includes(t.dtype))
      throw new HFConvertError(
        dtypes === READABLE_DTYPES
          ? `${t.file}: tensor "${name}" is ${t.dtype}; only ${READABLE_DTYPES.join(", ")} checkpoints can be converted`
          : `${t.file}: tensor "${name}" is ${t.dtype}, expected ${dtypes.join(" or ")}`,
      );
    this.taken.add(name);
    return t;
  }

  /** Take `name` whole as the GGUF tensor `out` (a rename). `shape` as stored. */
  copy(out: string, name: string, shape: readonly number[], extra: Partial<PlannedTensor> = {}): void {
    const t = this.take(name, shape);
    this.add(out, shape, [{ source: t, firstRow: 0, rows: rowsOf(shape) }], extra);
  }

  /** Add an output tensor from row ranges; `shape` is the output's, in checkpoint (row-major) order. */
  add(out: string, shape: readonly number[], parts: RowRange[], extra: Partial<PlannedTensor> = {}): void {
    this.tensors.push({ name: out, dims: [...shape].reverse(), parts, ...extra });
  }

  /** An output tensor of MXFP4 rows; `shape` is the output's, in checkpoint order ([E, rows, row length]). */
  addMxfp4(out: string, shape: readonly number[], source: Mxfp4Source): void {
    this.tensors.push({ name: out, dims: [...shape].reverse(), mxfp4: source });
  }

  computed(out: string, values: Float32Array): void {
    this.tensors.push({ name: out, dims: [values.length], values });
  }

  /**
   * Every checkpoint tensor must have been taken: one left over would be a weight dropped. The
   * predictors are set aside by name.
   */
  finish(arch: string): ConversionPlan {
    const untaken = [...this.ckpt.tensors.values()].filter((t) => !this.taken.has(t.name) && !NOT_WEIGHTS.test(t.name));
    const predictors = untaken.filter((t) => HF_PREDICTOR_RE.test(t.name)).map((t) => t.name);
    const left = untaken.filter((t) => !HF_PREDICTOR_RE.test(t.name));
    if (left.length > 0) {
      const t = left[0];
      throw new HFConvertError(
        `${t.file}: tensor "${t.name}" is not used by the ${arch} conversion${left.length > 1 ? ` (nor ${left.length - 1} more)` : ""}; ` +
          "refusing to drop weights",
      );
    }
    return { arch, metadata: this.metadata, tensors: this.tensors, vocabSize: 0, predictors };
  }
}

/** Rows of a tensor of this (row-major) shape, seen as rows of its last dimension. */
export function rowsOf(shape: readonly number[]): number {
  let r = 1;
  for (let i = 0; i < shape.length - 1; i++) r *= shape[i];
  return r;
}

/**
 * The type a tensor is written as when `wanted` is asked for, by llama.cpp's converter's rules:
 * 1-D tensors, norms, biases and a mixture's router stay F32; a row that is not a whole number of
 * the type's blocks falls back to F16.
 */
export function outputTypeFor(name: string, dims: readonly number[], wanted: GGMLType, blockSize: number): GGMLType {
  if (dims.length <= 1 || name.endsWith("_norm.weight")) return GGMLType.F32;
  if (/\.ffn_gate_inp(_shexp)?\.weight$/.test(name) || !name.endsWith(".weight")) return GGMLType.F32;
  if (dims[0] % blockSize !== 0) return GGMLType.F16;
  return wanted;
}
