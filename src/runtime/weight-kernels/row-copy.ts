/**
 * Weight types that keep GGUF's row layout in wasm memory (F16, BF16: half.ts; Q5_0, Q5_1: q5.ts;
 * Q4_K and Q6_K (SIMD128 build), Q5_K: kquant.ts): row r of a packed matrix starts at r * packedBytes(1, cols), so
 * packing is a copy and rows read straight from a model file are already in kernel form.
 *
 * Their speed per type: docs/benchmarks-log.md, "The less common weight types' kernels".
 */
import { GGMLType, traitsBytes, typeName, typeTraits } from "../../format/ggml-types.js";
import type { ActivationFormat, WeightKernel } from "../weight-kernels.js";

function rowBytesOf(type: GGMLType, cols: number): number {
  const t = typeTraits(type)!;
  if (!Number.isInteger(cols) || cols <= 0 || cols % t.blockSize !== 0) {
    throw new Error(`${t.name} matrix: a row of ${cols} values is not a whole number of ${t.blockSize}-value blocks`);
  }
  return traitsBytes(t, cols);
}

/**
 * The kernel of a type kept in GGUF's rows: its kernels are `matvec_<name>` and `matmul_<name>`;
 * `check` (if any) vets each packed part (it throws on values the kernels cannot take).
 */
export function copyKernel(
  type: GGMLType,
  act: ActivationFormat,
  name: string,
  check?: (src: Uint8Array, rowStart: number, cols: number) => void,
): WeightKernel {
  return {
    type,
    act,
    packedBytes: (rows, cols) => rows * rowBytesOf(type, cols),
    pack(src, dst, rowStart, nrows, rows, cols) {
      const rb = rowBytesOf(type, cols);
      if (rowStart < 0 || nrows < 0 || rowStart + nrows > rows) {
        throw new Error(
          `${typeName(type)} pack: rows ${rowStart}..${rowStart + nrows} are outside the matrix's ${rows}`,
        );
      }
      if (src.length < nrows * rb)
        throw new Error(`${typeName(type)} pack: ${nrows} rows of ${cols} need ${nrows * rb} bytes, got ${src.length}`);
      if (dst.length < rows * rb)
        throw new Error(`${typeName(type)} pack: destination holds ${dst.length} bytes, the matrix needs ${rows * rb}`);
      const part = src.subarray(0, nrows * rb);
      check?.(part, rowStart, cols);
      dst.set(part, rowStart * rb);
    },
    matvec: `matvec_${name}`,
    matmul: `matmul_${name}`,
    // one row at a time: any range split is free of waste
    rowAlign: 1,
    tailOffset: (_rows, cols, from) => from * rowBytesOf(type, cols),
  };
}
