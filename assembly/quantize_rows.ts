// The converter's quantizers as kernels (src/runtime/quant-kernels.ts calls them; their bytes are
// src/format/quant.ts quantizeRow's, quant_blocks.ts says how): f32 rows into a GGUF's or a
// store's type, and a checkpoint's F16 / BF16 values widened to f32 on the way in.
import { halvesToF32, QUANT_SCRATCH, quantizeValues, setNanScale, typeRowBytes } from "./quant_blocks";
import { T_BF16, T_F16 } from "./sparse_types";

/**
 * n f32 at src (rows of whole blocks, one after another: a block type's rows are its blocks in
 * order) -> n values of `type` at dst, with quant_scratch_bytes() of scratch. 0, or -1 for a type
 * these kernels do not write.
 */
export function quantize_rows(type: i32, src: usize, n: i32, dst: usize, scratch: usize): i32 {
  return quantizeValues(type, src, <usize>n, dst, scratch) ? 0 : -1;
}

/**
 * Values widened at once by quantize_halves: a pass of the quantizer's blocks, whose f32 stay in
 * the L1 cache between the widening and the quantizing.
 */
const HALVES_STEP: usize = 2048;

/**
 * n F16 or BF16 values (`dtype`'s ggml id) at src -> n values of `type` at dst, as widen_rows then
 * quantize_rows give them, HALVES_STEP values at a time: the f32 never go to memory beyond the
 * cache. scratch: quant_scratch_bytes() plus 4 * HALVES_STEP. 0, or -1 for a type or dtype these
 * kernels do not take. Values that are not finite are quantized as quantize_rows does them.
 */
export function quantize_halves(dtype: i32, type: i32, src: usize, n: i32, dst: usize, scratch: usize): i32 {
  const bf = dtype == T_BF16;
  if ((!bf && dtype != T_F16) || typeRowBytes(type, HALVES_STEP) == 0) return -1;
  const count = <usize>n;
  const values = scratch + QUANT_SCRATCH;
  const stepBytes = typeRowBytes(type, HALVES_STEP);
  for (let i: usize = 0, o = dst; i < count; i += HALVES_STEP, o += stepBytes) {
    const m = min(HALVES_STEP, count - i);
    widenHalves(src + (i << 1), m, values, bf);
    quantizeValues(type, values, m, o, scratch);
  }
  return 0;
}

/** n halves at src -> f32 at dst, as halvesToF32 widens them (without its finite check). */
@inline function widenHalves(src: usize, n: usize, dst: usize, bf: bool): void {
  if (!bf) {
    halvesToF32(src, n, dst, false, i32x4.splat(0));
    return;
  }
  let i: usize = 0;
  for (; i + 8 <= n; i += 8) {
    const h = v128.load(src + (i << 1));
    v128.store(dst + (i << 2), i32x4.shl(i32x4.extend_low_i16x8_u(h), 16));
    v128.store(dst + (i << 2), i32x4.shl(i32x4.extend_high_i16x8_u(h), 16), 16);
  }
  for (; i < n; i++) store<u32>(dst + (i << 2), (<u32>load<u16>(src + (i << 1))) << 16);
}

/** The scratch quantize_halves takes. */
export function quant_halves_scratch_bytes(): i32 {
  return <i32>(QUANT_SCRATCH + (HALVES_STEP << 2));
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
