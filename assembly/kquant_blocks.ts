// What the K-quant kernels (matvec_kquant.ts) share across Q4_K, Q5_K and Q6_K: the block sizes of
// both builds, the unpacking of Q4_K/Q5_K's 6-bit scales and mins, the mins' dot with the
// activation's 16-value sums, the finish of a GGUF-layout Q4_K/Q5_K block and the 256-scaled byte
// dot of Q5_K and Q6_K. Layouts:
//   Q4_K 144 B: d f16 @0, dmin f16 @2, scales[12] @4, qs[128] @16
//   Q5_K 176 B: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48
//   Q6_K 210 B: ql[128] @0, qh[64] @128, scales i8[16] @192, d f16 @208
//   Q8_K 292 B: d f32 @0, qs i8[256] @4, bsums i16[16] @260

import { f16ToF32Finite } from "./half";

const Q4K: usize = 144;
const Q5K: usize = 176;
const Q6K: usize = 210;
const Q8K: usize = 292;
// the relaxed build's activation block ("q8_Ki", prepare_q8k.ts)
const Q8KI: usize = 320;

// scalesMins' constants, loaded rather than written as constants (V8 rebuilds a v128.const at
// every use): +0 and +16 the masks m1, m2, +32 0x30 bytes
const K_SM = memory.data<u8>(
  [
    63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
  ],
  16,
);

/**
 * The 12 scale bytes of a Q4_K/Q5_K block (at p; 16 bytes are read) -> u8 lanes
 * [sc0..sc7, m0..m7]. Sub-blocks 0..3 keep 6 bits in bytes 0..3 (scales) and 4..7 (mins);
 * sub-blocks 4..7 keep 4 low bits in bytes 8..11 and their 2 high bits in the top bits of
 * bytes 0..7.
 */
@inline function scalesMins(p: usize): v128 {
  const v = v128.load(p);
  const z = i64x2.splat(0);
  const low = i8x16.shuffle(v, v, 0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11),
    top = i8x16.shuffle(v, z, 16, 16, 16, 16, 0, 1, 2, 3, 16, 16, 16, 16, 4, 5, 6, 7);
  // 16-bit shifts are safe here: the masks drop every bit that crossed a byte boundary
  const lo = v128.or(v128.and(low, v128.load(K_SM)), v128.and(i16x8.shr_u(low, 4), v128.load(K_SM, 16)));
  return v128.or(lo, v128.and(i16x8.shr_u(top, 2), v128.load(K_SM, 32)));
}

/** sum_j min_j * (bsums[2j] + bsums[2j+1]) of a Q8_K block at xb, as i32 lanes to be added. */
@inline function minsDot(sm: v128, xb: usize): v128 {
  const z = i64x2.splat(0);
  const md0 = i8x16.shuffle(sm, z, 8, 16, 8, 16, 9, 16, 9, 16, 10, 16, 10, 16, 11, 16, 11, 16),
    md1 = i8x16.shuffle(sm, z, 12, 16, 12, 16, 13, 16, 13, 16, 14, 16, 14, 16, 15, 16, 15, 16);
  return i32x4.add(i32x4.dot_i16x8_s(v128.load(xb, 260), md0), i32x4.dot_i16x8_s(v128.load(xb, 276), md1));
}

/** Scale k (0..7, a constant) of the unpacked scales sm, splat into i32 lanes. */
@inline function subScale(sm: v128, k: i32): v128 {
  // extract_lane takes a literal lane
  if (k == 0) return i32x4.splat(i8x16.extract_lane_u(sm, 0));
  if (k == 1) return i32x4.splat(i8x16.extract_lane_u(sm, 1));
  if (k == 2) return i32x4.splat(i8x16.extract_lane_u(sm, 2));
  if (k == 3) return i32x4.splat(i8x16.extract_lane_u(sm, 3));
  if (k == 4) return i32x4.splat(i8x16.extract_lane_u(sm, 4));
  if (k == 5) return i32x4.splat(i8x16.extract_lane_u(sm, 5));
  if (k == 6) return i32x4.splat(i8x16.extract_lane_u(sm, 6));
  return i32x4.splat(i8x16.extract_lane_u(sm, 7));
}

// 0x0f bytes, then 0x30 bytes (Q6_K) and 0x10 bytes (Q5_K), loaded rather than written as
// constants (V8 rebuilds a v128.const at every use)
const K_NIB = memory.data<u8>(
  [
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
    0x10, 0x10, 0x10, 0x10, 0x10,
  ],
  16,
);

/** acc + d_w d_x / 256 * isum - dmin_w d_x * mins: one finished Q4_K/Q5_K block. */
@inline function finishK(acc: v128, wb: usize, xb: usize, isum: v128, mi: v128, scale: f32): v128 {
  const dd = load<u32>(wb);
  const dx = load<f32>(xb);
  return f32x4.add(
    acc,
    f32x4.sub(
      f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(f16ToF32Finite(dd & 0xffff) * dx * scale)),
      f32x4.mul(f32x4.convert_i32x4_s(mi), f32x4.splat(f16ToF32Finite(dd >> 16) * dx)),
    ),
  );
}

/** 256 * dot(16 weight bytes q (values 0..63), 16 activation bytes x): i32x4 to be summed. */
@inline function dotBytes256(q: v128, x: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00ff)), i16x8.shl(x, 8)),
    i32x4.dot_i16x8_s(i16x8.shr_u(q, 8), v128.and(x, i16x8.splat(<i16>0xff00))),
  );
}

export { Q4K, Q5K, Q6K, Q8K, Q8KI, K_NIB, scalesMins, minsDot, subScale, finishK, dotBytes256 };
