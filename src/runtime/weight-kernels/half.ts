/**
 * F16 and BF16 weights (assembly/matvec_half.ts), in GGUF's rows (row-copy.ts), multiplied with
 * f32 activations (each 8 values' even ones first: "f32_eo").
 *
 * The F16 kernels read halves with a conversion that is exact for every finite value but turns
 * inf and NaN into finite numbers, so packing rejects F16 matrices holding them.
 */
import { GGMLType } from "../../format/ggml-types.js";
import { copyKernel } from "./row-copy.js";

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

export const F16 = copyKernel(GGMLType.F16, "f32_eo", "f16", checkFiniteF16);
export const BF16 = copyKernel(GGMLType.BF16, "f32_eo", "bf16");
