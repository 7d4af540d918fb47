// The converter's quantizers as kernels (src/runtime/quant-kernels.ts calls them; their bytes are
// src/format/quant.ts quantizeRow's, quant_blocks.ts says how): f32 rows into a GGUF's or a
// store's type, and a checkpoint's F16 / BF16 values widened to f32 on the way in.
import { halvesToF32, QUANT_SCRATCH, quantizeValues, setNanScale } from "./quant_blocks";
import { T_BF16, T_F16 } from "./sparse_types";

/**
 * n f32 at src (rows of whole blocks, one after another: a block type's rows are its blocks in
 * order) -> n values of `type` at dst, with quant_scratch_bytes() of scratch. 0, or -1 for a type
 * these kernels do not write.
 */
export function quantize_rows(type: i32, src: usize, n: i32, dst: usize, scratch: usize): i32 {
  return quantizeValues(type, src, <usize>n, dst, scratch) ? 0 : -1;
}

/** The f16 bits a Q8_0 block's scale takes where one of its values is NaN (the reference's choice). */
export function quant_nan_scale(h: i32): void {
  setNanScale(<u32>h);
}

/** The scratch quantize_rows and quantize_measure take. */
export function quant_scratch_bytes(): i32 {
  return <i32>QUANT_SCRATCH;
}

/**
 * n F16 or BF16 values (`dtype` F16 or BF16's ggml id) at src -> f32 at dst, each exactly
 * (quant_blocks.ts halvesToF32: the values src/format/hf/safetensors.ts widenToF32 gives).
 * Returns the index of the first value that is not finite, or -1.
 */
export function widen_rows(dtype: i32, src: usize, n: i32, dst: usize): i32 {
  const bf = dtype == T_BF16;
  if (!bf && dtype != T_F16) return -2;
  const count = <usize>n;
  if (i32x4.all_true(halvesToF32(src, count, dst, bf, i32x4.splat(-1)))) return -1;
  for (let j: usize = 0; j < count; j++) {
    const v = load<f32>(dst + (j << 2));
    if (!(abs(v) < Infinity)) return <i32>j;
  }
  return -1;
}
