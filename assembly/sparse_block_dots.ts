// The integer dot of one weight block (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, MXFP4 in GGUF's layout) with one
// block of the q8_sp activation, in i32x4 partial lanes: the step the row dots repeat.

import { Q4_RELAXED_CONSTS } from "./matvec_q4_relaxed";
import { q5hi, q5lo } from "./sparse_q5_bytes";
import { T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0 } from "./sparse_types";

// q4dot in the relaxed-SIMD build, whose mode-1 activation block holds its 32 quants as i8 in
// natural order (prepare_q8_sp). Byte i of the block's quants holds element i (low nibble) and
// i + 16 (high nibble): `w & 0x0f` and `(w >> 4) & 0x0f` are 7-bit bytes that meet x[0..15] and
// x[16..31] in one relaxed dot each (pmaddubsw on x86; a lane is at most 4 * 127 * 15). Folding
// the i16 lanes in pairs with a dot against ones puts elements 4l..4l+3 and 16+4l..16+4l+3 in i32
// lane l, the same sets as q4dot's lanes but without its factor of 256, which this build's
// activation leaves out of its correction and puts into dx instead (d, not d / 256): the block's
// integer dot converts exactly either way and meets a scale 256 times larger, the same product,
// so both builds give the same bits (a shift per block fewer).
@inline function q4dotRelaxed(w: v128, xb: usize, m: v128, ones: v128): v128 {
  const h = i16x8.add(
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xb), v128.and(w, m)),
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xb, 16), v128.and(i16x8.shr_u(w, 4), m)),
  );
  return i32x4.dot_i16x8_s(h, ones);
}

// The integer dot of one Q5 block (at a) with the mode-2 activation block at xb, in i32x4 partial
// lanes: the relaxed build meets its i8 quants with relaxed dots (a lane of i16 at most 4 * 127 *
// 31), the SIMD128 build widens the bytes to meet its i16 quants. Either way the exact integer dot,
// so the two builds' gate dots have the same bits. Q5_0's offset 16 is twice the correction's 8.
@inline function q5dot(one: bool, a: usize, xb: usize): v128 {
  const qh = a + (one ? 4 : 2);
  const H = v128.load32_splat(qh);
  const qs = v128.load(qh, 4);
  const lo = q5lo(qs, H),
    hi = q5hi(qs, H);
  let d: v128;
  if (ASC_FEATURE_RELAXED_SIMD) {
    const h = i16x8.add(
      i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xb), lo),
      i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xb, 16), hi),
    );
    d = i32x4.dot_i16x8_s(h, v128.load(Q4_RELAXED_CONSTS, 16));
  } else d = widenedDot(false, lo, hi, xb);
  return one ? d : i32x4.sub(d, i32x4.shl(v128.load(xb, 64), 1));
}

// The integer dot of a block's 32 values as bytes (lo: elements 0..15, hi: 16..31; signed or
// not) widened to i16, with the natural-order i16 quants of the activation block at xb, in i32x4
// partial lanes.
@inline function widenedDot(signed: bool, lo: v128, hi: v128, xb: usize): v128 {
  const l0 = signed ? i16x8.extend_low_i8x16_s(lo) : i16x8.extend_low_i8x16_u(lo),
    l1 = signed ? i16x8.extend_high_i8x16_s(lo) : i16x8.extend_high_i8x16_u(lo),
    h0 = signed ? i16x8.extend_low_i8x16_s(hi) : i16x8.extend_low_i8x16_u(hi),
    h1 = signed ? i16x8.extend_high_i8x16_s(hi) : i16x8.extend_high_i8x16_u(hi);
  return i32x4.add(
    i32x4.add(i32x4.dot_i16x8_s(l0, v128.load(xb)), i32x4.dot_i16x8_s(l1, v128.load(xb, 16))),
    i32x4.add(i32x4.dot_i16x8_s(h0, v128.load(xb, 32)), i32x4.dot_i16x8_s(h1, v128.load(xb, 48))),
  );
}

// The integer dot of one MXFP4 block (at a: the exponent byte, 16 bytes of nibbles, the low ones
// elements 0..15) with the mode-0 activation block at xb: the codes' values through one swizzle
// of the FP4 table (`table`), in i32x4 partial lanes. Both builds run it (the relaxed byte dot
// wants one operand non-negative, which the values are not).
@inline function mxfp4dot(a: usize, xb: usize, table: v128): v128 {
  const q = v128.load(a, 1);
  const lo = i8x16.swizzle(table, v128.and(q, i8x16.splat(0x0f))),
    hi = i8x16.swizzle(table, i8x16.shr_u(q, 4));
  return widenedDot(true, lo, hi, xb);
}

// 256 x the integer dot of one GGUF Q4 block's 16 quant bytes with the mode-1 activation block.
@inline function q4dot(w: v128, x0: v128, x1: v128, x2: v128, x3: v128, m0: v128, m1: v128, m2: v128): v128 {
  const a = i32x4.add(i32x4.dot_i16x8_s(v128.and(w, m0), x0), i32x4.dot_i16x8_s(v128.and(w, m1), x1));
  const b = i32x4.add(i32x4.dot_i16x8_s(v128.and(w, m2), x2), i32x4.dot_i16x8_s(i16x8.shr_u(w, 12), x3));
  return i32x4.add(a, b);
}

// The integer dot of one GGUF Q8_0 block's quants (at q) with the mode-0 activation block.
@inline function q8dot(q: usize, x0: v128, x1: v128, x2: v128, x3: v128): v128 {
  const a = i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(q), x0), i32x4.dot_i16x8_s(v128.load8x8_s(q, 8), x1));
  const b = i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(q, 16), x2), i32x4.dot_i16x8_s(v128.load8x8_s(q, 24), x3));
  return i32x4.add(a, b);
}

// the integer dot of the block at a with the activation block at xb (Q4: x256, Q4_0 offset taken off)
@inline function blockDot(t: i32, a: usize, xb: usize, m0: v128, m1: v128, m2: v128): v128 {
  if (t == T_Q5_0 || t == T_Q5_1) return q5dot(t == T_Q5_1, a, xb);
  if (t == T_Q8_0) return q8dot(a + 2, v128.load(xb), v128.load(xb, 16), v128.load(xb, 32), v128.load(xb, 48));
  if (ASC_FEATURE_RELAXED_SIMD) {
    if (t == T_Q4_1) return q4dotRelaxed(v128.load(a + 4), xb, m0, m1);
    return i32x4.sub(q4dotRelaxed(v128.load(a + 2), xb, m0, m1), v128.load(xb, 64));
  }
  if (t == T_Q4_1)
    return q4dot(v128.load(a + 4), v128.load(xb), v128.load(xb, 16), v128.load(xb, 32), v128.load(xb, 48), m0, m1, m2);
  return i32x4.sub(
    q4dot(v128.load(a + 2), v128.load(xb), v128.load(xb, 16), v128.load(xb, 32), v128.load(xb, 48), m0, m1, m2),
    v128.load(xb, 64),
  );
}

export { blockDot, mxfp4dot, q8dot };
