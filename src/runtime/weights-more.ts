/**
 * Weight kernels for the less common types (F16, BF16, Q5_0, Q5_1 and the K-quants Q4_K, Q5_K,
 * Q6_K): registered into the table of weights.ts. See weights.ts for the contract.
 *
 * All of them keep GGUF's row layout in wasm memory (row r of a packed matrix starts at
 * r * packedBytes(1, cols)), so packing is a copy and rows read straight from a model file are
 * already in kernel form.
 *
 * The F16 kernels read halves with a conversion that is exact for every finite value but turns
 * inf and NaN into finite numbers, so packing rejects F16 matrices holding them.
 *
 * Their speed per type: docs/benchmarks.md, "The less common weight types' kernels".
 */
import { GGMLType, typeName, typeTraits } from "../format/ggml-types.js";
import type { ActivationFormat, WeightKernel } from "./weights.js";

function rowBytesOf(type: GGMLType, cols: number): number {
  const t = typeTraits(type)!;
  if (!Number.isInteger(cols) || cols <= 0 || cols % t.blockSize !== 0) {
    throw new Error(`${t.name} matrix: a row of ${cols} values is not a whole number of ${t.blockSize}-value blocks`);
  }
  return (cols / t.blockSize) * t.typeSize;
}

/** Throws if any of the f16 values in `src` is inf or NaN (exponent bits all set). */
function checkFiniteF16(src: Uint8Array, rowStart: number, cols: number): void {
  for (let i = 1; i < src.length; i += 2) {
    if ((src[i] & 0x7c) === 0x7c) {
      const at = (i - 1) / 2;
      throw new Error(
        `F16 matrix has an inf or NaN weight at row ${rowStart + Math.floor(at / cols)}, column ${at % cols}: the model file is damaged`,
      );
    }
  }
}

function copyKernel(type: GGMLType, act: ActivationFormat, name: string, check?: typeof checkFiniteF16): WeightKernel {
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
  };
}

export const MORE_KERNELS: WeightKernel[] = [
  copyKernel(GGMLType.F16, "f32", "f16", checkFiniteF16),
  copyKernel(GGMLType.BF16, "f32", "bf16"),
  copyKernel(GGMLType.Q5_0, "q8_0", "q5_0"),
  copyKernel(GGMLType.Q5_1, "q8_1", "q5_1"),
  copyKernel(GGMLType.Q4_K, "q8_K", "q4_K"),
  copyKernel(GGMLType.Q5_K, "q8_K", "q5_K"),
  copyKernel(GGMLType.Q6_K, "q8_K", "q6_K"),
];
