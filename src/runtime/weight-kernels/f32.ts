/** F32 weights: row-major f32, as in GGUF (assembly/matvec_f32.ts, assembly/matmul_f32.ts). */
import { GGMLType } from "../../format/ggml-types.js";
import type { WeightKernel } from "../weight-kernels.js";

export const F32: WeightKernel = {
  type: GGMLType.F32,
  act: "f32",
  packedBytes: (rows, cols) => rows * cols * 4,
  pack: (src, dst, rowStart, nrows, rows, cols) => {
    if (rowStart + nrows > rows)
      throw new Error(`F32: rows [${rowStart}, ${rowStart + nrows}) are outside a matrix of ${rows} rows`);
    dst.set(src.subarray(0, nrows * cols * 4), rowStart * cols * 4);
  },
  matvec: "matvec_f32",
  matmul: "matmul_f32",
  rowAlign: 4, // matmul_f32 computes rows in fours
  tailOffset: (_rows, cols, from) => from * cols * 4,
};
