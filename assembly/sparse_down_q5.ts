// Q5 down columns (partial mode 3): each block's quants as q5lo / q5hi bytes, in Q8_0's slot order
// (byte k of u32 lane l of half h is slot vector 2k + h) but unsigned and masked in place, so
// vector 2k + h is kept x 256^k for k < 3 and byte 3 is shifted down (two instructions a vector
// where Q8_0's signed bytes take three); the block's constant (Q5_0: -16 d h, Q5_1: m h) goes to
// its correction, summed over the columns in order.

import { f16 } from "./sparse_block_scales";
import { axpyOne, axpySlot, maskSlot } from "./sparse_down_slot";
import { q5hi, q5lo } from "./sparse_q5_bytes";
import { Q5_0_BS, Q5_1_BS } from "./sparse_types";

const Q5_BYTE = memory.data<u32>(
  [0xff, 0xff, 0xff, 0xff, 0xff00, 0xff00, 0xff00, 0xff00, 0xff0000, 0xff0000, 0xff0000, 0xff0000],
  16,
);

// the 4 slot vectors of one half of a block (h: 0 -> 0, 2, 4, 6; 1 -> 1, 3, 5, 7) for four columns
@inline function q5half(
  yh: usize,
  q0: v128,
  q1: v128,
  q2: v128,
  q3: v128,
  S0: v128,
  S1: v128,
  S2: v128,
  S3: v128,
): void {
  for (let k: usize = 0; k < 3; k++) maskSlot(yh, k << 5, Q5_BYTE + (k << 4), q0, q1, q2, q3, S0, S1, S2, S3);
  axpySlot(yh, 96, i32x4.shr_u(q0, 24), i32x4.shr_u(q1, 24), i32x4.shr_u(q2, 24), i32x4.shr_u(q3, 24), S0, S1, S2, S3);
}

// the block constant of a Q5 block at p for a column with multiplier h, d its scale
@inline function q5const(one: bool, p: usize, d: f32, h: f32): f32 {
  return one ? h * f16(p + 2) : <f32>-16 * d * h;
}

@inline function q5axpy4(
  one: bool,
  y: usize,
  corr: usize,
  nb: i32,
  p0: usize,
  h0: f32,
  p1: usize,
  h1: f32,
  p2: usize,
  h2: f32,
  p3: usize,
  h3: f32,
): void {
  const BS: usize = one ? Q5_1_BS : Q5_0_BS;
  const QH: usize = one ? 4 : 2;
  for (let b = 0; b < nb; b++) {
    const d0 = f16(p0),
      d1 = f16(p1),
      d2 = f16(p2),
      d3 = f16(p3);
    const S0 = f32x4.splat(h0 * d0),
      S1 = f32x4.splat(h1 * d1),
      S2 = f32x4.splat(h2 * d2),
      S3 = f32x4.splat(h3 * d3);
    store<f32>(
      corr,
      load<f32>(corr) +
        q5const(one, p0, d0, h0) +
        q5const(one, p1, d1, h1) +
        q5const(one, p2, d2, h2) +
        q5const(one, p3, d3, h3),
    );
    const H0 = v128.load32_splat(p0 + QH),
      H1 = v128.load32_splat(p1 + QH),
      H2 = v128.load32_splat(p2 + QH),
      H3 = v128.load32_splat(p3 + QH);
    const w0 = v128.load(p0 + QH, 4),
      w1 = v128.load(p1 + QH, 4),
      w2 = v128.load(p2 + QH, 4),
      w3 = v128.load(p3 + QH, 4);
    q5half(y, q5lo(w0, H0), q5lo(w1, H1), q5lo(w2, H2), q5lo(w3, H3), S0, S1, S2, S3);
    q5half(y + 16, q5hi(w0, H0), q5hi(w1, H1), q5hi(w2, H2), q5hi(w3, H3), S0, S1, S2, S3);
    y += 128;
    corr += 4;
    p0 += BS;
    p1 += BS;
    p2 += BS;
    p3 += BS;
  }
}

@inline function q5axpy1(one: bool, y: usize, corr: usize, nb: i32, p: usize, h: f32): void {
  const BS: usize = one ? Q5_1_BS : Q5_0_BS;
  const QH: usize = one ? 4 : 2;
  for (let b = 0; b < nb; b++) {
    const d = f16(p);
    const S = f32x4.splat(h * d);
    store<f32>(corr, load<f32>(corr) + q5const(one, p, d, h));
    const H = v128.load32_splat(p + QH);
    const w = v128.load(p + QH, 4);
    const lo = q5lo(w, H),
      hi = q5hi(w, H);
    for (let k: usize = 0; k < 3; k++) {
      const m = v128.load(Q5_BYTE + (k << 4));
      axpyOne(y, k << 5, v128.and(lo, m), S);
      axpyOne(y + 16, k << 5, v128.and(hi, m), S);
    }
    axpyOne(y, 96, i32x4.shr_u(lo, 24), S);
    axpyOne(y + 16, 96, i32x4.shr_u(hi, 24), S);
    y += 128;
    corr += 4;
    p += BS;
  }
}

export { q5axpy4, q5axpy1 };
