// What the kernels over the packed Q8_0 and Q4_0/Q4_1 layouts share (matvec_q8_0.ts and
// matvec_q4.ts describe the layouts; matmul_q8_0.ts, matmul_q4.ts and the relaxed Q4 kernels read
// them too; sparse_ffn.ts takes its nibble masks): the sizes of a group, the column chunk, the
// constants loaded into registers, and the order a row's 4 lanes are summed in, which every
// kernel over a layout must share for their results to be the same bits. Not re-exported by
// index.ts: nothing here is a kernel.

/** groups of 128 columns per column chunk (4096 columns) */
const CHUNK = 32;
/** a Q8_0 tile group (4 rows x 128 quants, 4 x 4 f32 scales) */
const Q8_GB: usize = 576;
/** a q8_i16 activation group (256 B of i16 quants, 4 f32 scales) */
const Q8_I16_GB: usize = 272;
/** a Q4_0 row-pair group (2 x 64 B of nibbles, 2 x 4 f16 scales) */
const Q4_0_GB: usize = 144;
/** a Q4_1 row-pair group (2 x 64 B of nibbles, 2 x 4 f32 scales, 2 x 4 f32 mins) */
const Q4_1_GB: usize = 192;
/**
 * the relaxed build's Q5_0 / Q5_1 row-pair groups: Q4_0's / Q4_1's (the low 4 bits as nibbles,
 * scales, mins), then 2 x 16 B of fifth bits (matvec_q4_relaxed.ts)
 */
const Q5_0_GB: usize = 176;
const Q5_1_GB: usize = 224;

/** A row-pair group's bytes: Q4_0 / Q4_1 (one), or the relaxed build's Q5_0 / Q5_1 (five). */
@inline function q4GroupBytes(one: bool, five: bool): usize {
  return five ? (one ? Q5_1_GB : Q5_0_GB) : one ? Q4_1_GB : Q4_0_GB;
}
/** a q8_i16n activation group: 256 B of quants, d/256, 2048 * sum q, s */
const Q8_I16N_GB: usize = 304;
/** a q8_i8n activation group (the relaxed build's): 128 quants, d, 8 * sum q, s */
const Q8_I8N_GB: usize = 176;
/** a q8_i8s activation group (the relaxed build's, for Q8_0): 128 |q|, 128 sign masks, c, d */
const Q8_I8S_GB: usize = 288;

// The three nibble masks, loaded from memory rather than written as constants: V8 rematerializes
// a v128 constant inside a loop at every use (3 instructions each), but keeps a loaded value in a
// register.
const Q4_MASKS = memory.data<u16>(
  [
    0x000f, 0x000f, 0x000f, 0x000f, 0x000f, 0x000f, 0x000f, 0x000f, 0x00f0, 0x00f0, 0x00f0, 0x00f0, 0x00f0, 0x00f0,
    0x00f0, 0x00f0, 0x0f00, 0x0f00, 0x0f00, 0x0f00, 0x0f00, 0x0f00, 0x0f00, 0x0f00,
  ],
  16,
);

// f16 -> f32 for 4 scales: shift exponent and mantissa into f32 position and multiply by 2^112
// to rebias the exponent (which also gets subnormals right), then put the sign back; constants
// loaded for the same reason as the masks.
const F16_CONST = memory.data<u32>(
  [0x7fff, 0x7fff, 0x7fff, 0x7fff, 0x8000, 0x8000, 0x8000, 0x8000, 0x77800000, 0x77800000, 0x77800000, 0x77800000],
  16,
);

/** 4 f16 values zero-extended into u32 lanes -> f32x4 (exact for every finite half). */
@inline function f16x4(h: v128): v128 {
  const f = f32x4.mul(i32x4.shl(v128.and(h, v128.load(F16_CONST)), 13), v128.load(F16_CONST, 32));
  return v128.or(f, i32x4.shl(v128.and(h, v128.load(F16_CONST, 16)), 16));
}

/** The 4 f16 scales at p as f32x4. */
@inline function f16x4At(p: usize): v128 {
  return f16x4(i32x4.extend_low_i16x8_u(v128.load64_zero(p)));
}

/** A row's 4 lanes summed, in the order every kernel over these layouts uses. */
@inline function hsum(v: v128): f32 {
  return f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3);
}

/** y = v on a row's first chunk, else y += v. */
@inline function put(p: usize, v: f32, first: bool): void {
  store<f32>(p, first ? v : load<f32>(p) + v);
}

export {
  CHUNK,
  Q8_GB,
  Q8_I16_GB,
  Q4_0_GB,
  Q4_1_GB,
  q4GroupBytes,
  Q8_I16N_GB,
  Q8_I8N_GB,
  Q8_I8S_GB,
  Q4_MASKS,
  f16x4,
  f16x4At,
  hsum,
  put,
};
