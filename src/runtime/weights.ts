/**
 * How each weight type lives in wasm memory and which kernels compute with it.
 *
 * A matrix of `rows` x `cols` (ggml: dims [cols, rows]) is packed once at load from its GGUF
 * bytes into a layout its kernels like (which may differ from GGUF's: e.g. scales split from
 * quants). Every matvec takes the activation already prepared in the format the type wants
 * (f32, or quantized to Q8 blocks as llama.cpp does), so one prepared vector serves every matrix
 * that reads it (Q, K and V; Gate and Up).
 *
 * Kernel signatures (all arguments i32; pointers are byte offsets into the shared memory):
 *   matvec(w, xAct, y, rows, cols, r0, r1)        y[r] = W[r,:] . x            for r in [r0, r1)
 *   matmul(w, xAct, y, rows, cols, ntok, r0, r1)  y[t*rows + r] = W[r,:] . x_t for all t < ntok
 *   prepare_<act>(x, dst, cols, ntok)             ntok rows of f32 -> ntok prepared rows
 */
import { GGMLType, typeName } from "../format/ggml-types.js";
import { MORE_KERNELS } from "./weights-more.js";

export type ActivationFormat = "f32" | "q8_0" | "q8_1" | "q8_K";

export interface WeightKernel {
  readonly type: GGMLType;
  readonly act: ActivationFormat;
  /** bytes the packed matrix takes in wasm memory */
  packedBytes(rows: number, cols: number): number;
  /** pack GGUF-layout rows [rowStart, rowStart + nrows) of the matrix (src holds just those rows) into dst (the whole packed matrix) */
  pack(src: Uint8Array, dst: Uint8Array, rowStart: number, nrows: number, rows: number, cols: number): void;
  /** export names of the kernels */
  readonly matvec: string;
  readonly matmul: string;
}

/** Bytes one prepared activation row of `cols` values takes. */
export function activationBytes(fmt: ActivationFormat, cols: number): number {
  switch (fmt) {
    case "f32": return cols * 4;
    case "q8_0": return (cols / 32) * 34;
    case "q8_1": return (cols / 32) * 36;
    case "q8_K": return (cols / 256) * 292;
  }
}

/** Export name of the kernel that prepares activations in `fmt` (none for f32). */
export function prepareKernel(fmt: ActivationFormat): string | undefined {
  return fmt === "f32" ? undefined : `prepare_${fmt}`;
}

const F32: WeightKernel = {
  type: GGMLType.F32,
  act: "f32",
  packedBytes: (rows, cols) => rows * cols * 4,
  pack: (src, dst, rowStart, nrows, _rows, cols) => dst.set(src.subarray(0, nrows * cols * 4), rowStart * cols * 4),
  matvec: "matvec_f32",
  matmul: "matmul_f32",
};

const KERNELS = new Map<GGMLType, WeightKernel>();
for (const k of [F32, ...MORE_KERNELS]) KERNELS.set(k.type, k);

export function weightKernel(type: GGMLType): WeightKernel {
  const k = KERNELS.get(type);
  if (!k) throw new Error(`no kernel for weight type ${typeName(type)}`);
  return k;
}

export function hasWeightKernel(type: GGMLType): boolean {
  return KERNELS.has(type);
}
