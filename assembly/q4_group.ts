import { f16Up, q4Halves, Q4_1_MINS, Q4_SCALES } from "./packed_layout";

// The f32 update a Q4_0 / Q4_1 row's accumulator gets after each 128-column group, in one place:
// the SIMD128 decode kernel (matvec_q4.ts), the relaxed one (matvec_q4_relaxed.ts) and the prefill
// GEMM (matmul_q4.ts) all call it, so their results stay the same bits (the tests compare them
// bit for bit).
//
// s holds the group's 4 block dots (times 256 for the SIMD128 activations, whose d_x is stored
// divided by 256: the product is exact either way), dw the 4 weight scales, dx the 4 activation
// scales. Q4_0 subtracts the activation's offset correction (8 * sum q_x per block, in the same
// units as s) before scaling; Q4_1 adds m_w * s_x (its mins times the activation's block sums).
// (The decode kernels pass d_w, m_w times 2^-112 and d_x, s_x times 2^112: the same products,
// so the same bits; packed_layout.ts says why.)

/** Q4_0: a + f32(s - corr) * (dw * dx). */
@inline function q4_0Group(a: v128, s: v128, corr: v128, dw: v128, dx: v128): v128 {
  return f32x4.add(a, f32x4.mul(f32x4.convert_i32x4_s(i32x4.sub(s, corr)), f32x4.mul(dw, dx)));
}

/** Q4_1: a + (f32(s) * (dw * dx) + mw * sx). */
@inline function q4_1Group(a: v128, s: v128, dw: v128, dx: v128, mw: v128, sx: v128): v128 {
  return f32x4.add(a, f32x4.add(f32x4.mul(f32x4.convert_i32x4_s(s), f32x4.mul(dw, dx)), f32x4.mul(mw, sx)));
}

/**
 * What every row of a group meets from the activation group whose d_x is at xs (its Q4_0
 * correction at xs + 16, s_x at xs + 32, in both builds' formats), loaded once per group: d_x
 * times 2^112 (q4ActD), and for Q4_1 s_x times 2^112, else the correction (Q5_0: twice Q4_0's,
 * its offset being 16) (q4ActC).
 */
@inline function q4ActD(xs: usize): v128 {
  return f16Up(v128.load(xs));
}
@inline function q4ActC(xs: usize, one: bool, five: bool): v128 {
  if (one) return f16Up(v128.load(xs, 32));
  return five ? i32x4.shl(v128.load(xs, 16), 1) : v128.load(xs, 16);
}

/**
 * a + the group update of row k (0, 1) of the packed Q4 row-pair group at wp (packed_layout.ts)
 * from its block sums s and the activation's dxu, c (q4ActD, q4ActC): the f16 scales (and mins)
 * unbiased against d_x (and s_x) times 2^112, the pair's 8 scales in one load, its first row's in
 * the low halves.
 */
@inline function q4RowGroup(a: v128, s: v128, wp: usize, k: i32, dxu: v128, c: v128, one: bool): v128 {
  const d = q4Halves(v128.load(wp + Q4_SCALES), k);
  if (one) return q4_1Group(a, s, d, dxu, q4Halves(v128.load(wp + Q4_1_MINS), k), c);
  return q4_0Group(a, s, c, d, dxu);
}

export { q4_0Group, q4_1Group, q4ActC, q4ActD, q4RowGroup };
