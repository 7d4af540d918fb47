// What the kernels over the packed Q8_0 and Q4_0/Q4_1 layouts share (matvec_q8_0.ts and
// matvec_q4.ts describe the layouts; matmul_q8_0.ts, matmul_q4.ts and the relaxed Q4 kernels read
// them too; sparse_row_dots.ts takes its nibble masks): the sizes of a group, the column chunk, the
// constants loaded into registers, and the order a row's 4 lanes are summed in, which every
// kernel over a layout must share for their results to be the same bits. Not re-exported by
// index.ts: nothing here is a kernel.

import { f16BitsHi, f16BitsLo, f16Fields, f16Rebias } from "./half";
import { hsum } from "./lanes";

/** groups of 128 columns per column chunk (4096 columns) */
const CHUNK = 32;
/** a Q8_0 tile group (4 rows x 128 quants, 4 x 4 f32 scales) */
const Q8_GB: usize = 576;
/** a q8_i16 activation group (256 B of i16 quants, 4 f32 scales) */
const Q8_I16_GB: usize = 272;
/** a Q4_0 row-pair group (2 x 64 B of nibbles, 2 x 4 f16 scales) */
const Q4_0_GB: usize = 144;
/** a Q4_1 row-pair group (2 x 64 B of nibbles, 2 x 4 f16 scales, 2 x 4 f16 mins) */
const Q4_1_GB: usize = 160;
/**
 * the relaxed build's Q5_0 / Q5_1 row-pair groups: Q4_0's / Q4_1's (the low 4 bits as nibbles,
 * scales, mins), then 2 x 16 B of fifth bits (matvec_q4_relaxed.ts)
 */
const Q5_0_GB: usize = 176;
const Q5_1_GB: usize = 192;

/**
 * Where a Q4 row-pair group keeps its f16 scales (both rows': the first row's 4, then the
 * second's) and Q4_1's f16 mins (the same way), after the 128 nibble bytes.
 */
const Q4_SCALES: usize = 128;
const Q4_1_MINS: usize = 144;
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

// The Q4 layouts' f16 scales and mins -> f32: half.ts's f16BitsLo / f16BitsHi move a row pair's
// 8 halves (one load) into f32 position, 4 at a time, giving each value times 2^-112 exactly
// (f16 subnormals become f32 subnormals; an infinity or NaN comes out finite, as in every kernel
// that converts halves in SIMD); f16Up's exact multiplication by 2^112 re-biases.
//
// The decode kernels skip the re-bias (q4Halves): a group's scales (and Q4_1's mins) meet the
// activation's d and s only in the products d_w * d_x and m_w * s_x, so they take d_x and s_x
// times 2^112 instead (once per group for all their rows). d_x and s_x are f16 values (at most
// 65504 < 2^16), so times 2^112 they stay finite, and each product is the same real number as with
// converted halves, so it rounds to the same f32: the same bits as the prefill kernels, which
// convert (q4PairScales).
/** The first (r = 0) or second (r = 1) row's 4 halves of a row pair's 8 in v, times 2^-112, as f32x4. */
@inline function q4Halves(v: v128, r: i32): v128 {
  const mask = f16Fields();
  return r == 0 ? f16BitsLo(v, mask) : f16BitsHi(v, mask);
}
/** v times 2^112 (q4Halves re-biased, or an activation's d_x or s_x to meet q4Halves values). */
@inline function f16Up(v: v128): v128 {
  return f32x4.mul(v, f16Rebias());
}
/** Row r's (0, 1) scales of the Q4 row-pair group at wp, or with `mins` Q4_1's mins, as f32x4. */
@inline function q4PairScales(wp: usize, r: i32, mins: bool): v128 {
  return f16Up(q4Halves(v128.load(wp + (mins ? Q4_1_MINS : Q4_SCALES)), r));
}

/** y[r] (and y[r + 1]) = a0 (a1) summed, or added to what is there unless `first`, for rows inside [r0, r1). */
@inline function storePair(y: usize, r: i32, a0: v128, a1: v128, r0: i32, r1: i32, first: bool): void {
  const yr = y + ((<usize>r) << 2);
  if (r >= r0 && r < r1) store<f32>(yr, first ? hsum(a0) : load<f32>(yr) + hsum(a0));
  if (r + 1 >= r0 && r + 1 < r1) store<f32>(yr, first ? hsum(a1) : load<f32>(yr, 4) + hsum(a1), 4);
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
  q4PairScales,
  Q4_SCALES,
  Q4_1_MINS,
  Q8_I16N_GB,
  Q8_I8N_GB,
  Q8_I8S_GB,
  Q4_MASKS,
  q4Halves,
  f16Up,
  put,
  storePair,
};
