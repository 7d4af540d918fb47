// Down columns: y (a partial slot, in the slot order of sparse_layout.ts) += h * column, four
// columns at once (axpy4) or one (axpy1), by weight type: F32, F16 and BF16 in natural order, Q8_0
// (partial mode 1) sign-extending byte k of u32 lane l of half h into slot vector 2k + h, Q4 with
// sparse_down_q4.ts's pieces; Q5 is sparse_down_q5.ts's. The bundle loops queue columns
// (sparse_bundles.ts pushDown) so that four go through each block together.

import { bf16Hi, bf16Lo, f16BitsHi, f16BitsLo, f16Fields, f16Rebias } from "./half";
import { f16 } from "./sparse_block_scales";
import { groupScales, nibSlot } from "./sparse_down_q4";
import { q5axpy1, q5axpy4 } from "./sparse_down_q5";
import { axpyOne, axpySlot, madd } from "./sparse_down_slot";
import { NIB, scratchOf } from "./sparse_layout";
import { Q4_0_BS, Q4_1_BS, Q8_0_BS, T_BF16, T_F16, T_F32, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0 } from "./sparse_types";

// F16 / BF16 columns as f32 in natural order (half.ts's bit moves: the F16 lanes come out times
// 2^-112, which halfW puts back)
@inline function halfLo(bf: bool, w: v128, mask: v128): v128 {
  return bf ? bf16Lo(w) : f16BitsLo(w, mask);
}
@inline function halfHi(bf: bool, w: v128, mask: v128): v128 {
  return bf ? bf16Hi(w) : f16BitsHi(w, mask);
}
// halfLo/halfHi's F16 lanes times 2^112: the weights' values (for the down columns, whose
// multiplier h is not shared: moving 2^112 onto it could overflow)
@inline function halfW(bf: bool, v: v128, bias: v128): v128 {
  return bf ? v : f32x4.mul(v, bias);
}

@inline function axpy4(
  t: i32,
  y: usize,
  corr: usize,
  n: i32,
  p0: usize,
  h0: f32,
  p1: usize,
  h1: f32,
  p2: usize,
  h2: f32,
  p3: usize,
  h3: f32,
): void {
  if (t == T_F16 || t == T_BF16) {
    // 8 elements of each of the 4 columns per step, natural order (partial mode 0)
    const bf = t == T_BF16;
    const mask = f16Fields(),
      bias = f16Rebias();
    const H0 = f32x4.splat(h0),
      H1 = f32x4.splat(h1),
      H2 = f32x4.splat(h2),
      H3 = f32x4.splat(h3);
    const end = y + ((<usize>n) << 2);
    for (; y < end; y += 32) {
      const w0 = v128.load(p0),
        w1 = v128.load(p1),
        w2 = v128.load(p2),
        w3 = v128.load(p3);
      let lo = v128.load(y),
        hi = v128.load(y, 16);
      lo = madd(lo, halfW(bf, halfLo(bf, w0, mask), bias), H0);
      hi = madd(hi, halfW(bf, halfHi(bf, w0, mask), bias), H0);
      lo = madd(lo, halfW(bf, halfLo(bf, w1, mask), bias), H1);
      hi = madd(hi, halfW(bf, halfHi(bf, w1, mask), bias), H1);
      lo = madd(lo, halfW(bf, halfLo(bf, w2, mask), bias), H2);
      hi = madd(hi, halfW(bf, halfHi(bf, w2, mask), bias), H2);
      lo = madd(lo, halfW(bf, halfLo(bf, w3, mask), bias), H3);
      hi = madd(hi, halfW(bf, halfHi(bf, w3, mask), bias), H3);
      v128.store(y, lo);
      v128.store(y, hi, 16);
      p0 += 16;
      p1 += 16;
      p2 += 16;
      p3 += 16;
    }
    return;
  }
  if (t == T_F32) {
    const H0 = f32x4.splat(h0),
      H1 = f32x4.splat(h1),
      H2 = f32x4.splat(h2),
      H3 = f32x4.splat(h3);
    const end = y + ((<usize>n) << 2);
    for (; y < end; y += 16) {
      let acc = v128.load(y);
      acc = madd(acc, v128.load(p0), H0);
      acc = madd(acc, v128.load(p1), H1);
      acc = madd(acc, v128.load(p2), H2);
      acc = madd(acc, v128.load(p3), H3);
      v128.store(y, acc);
      p0 += 16;
      p1 += 16;
      p2 += 16;
      p3 += 16;
    }
    return;
  }
  const nb = n >> 5;
  if (t == T_Q8_0) {
    for (let b = 0; b < nb; b++) {
      const S0 = f32x4.splat(h0 * f16(p0)),
        S1 = f32x4.splat(h1 * f16(p1));
      const S2 = f32x4.splat(h2 * f16(p2)),
        S3 = f32x4.splat(h3 * f16(p3));
      for (let hh: usize = 0; hh < 32; hh += 16) {
        const q0 = v128.load(p0 + 2 + hh),
          q1 = v128.load(p1 + 2 + hh),
          q2 = v128.load(p2 + 2 + hh),
          q3 = v128.load(p3 + 2 + hh);
        const yh = y + (hh & 16); // half 0 -> vectors 0, 2, 4, 6; half 1 -> 1, 3, 5, 7 (16 bytes apart)
        // byte k of each lane: shl (24 - 8k) then arithmetic shr 24
        axpySlot(
          yh,
          0,
          i32x4.shr_s(i32x4.shl(q0, 24), 24),
          i32x4.shr_s(i32x4.shl(q1, 24), 24),
          i32x4.shr_s(i32x4.shl(q2, 24), 24),
          i32x4.shr_s(i32x4.shl(q3, 24), 24),
          S0,
          S1,
          S2,
          S3,
        );
        axpySlot(
          yh,
          32,
          i32x4.shr_s(i32x4.shl(q0, 16), 24),
          i32x4.shr_s(i32x4.shl(q1, 16), 24),
          i32x4.shr_s(i32x4.shl(q2, 16), 24),
          i32x4.shr_s(i32x4.shl(q3, 16), 24),
          S0,
          S1,
          S2,
          S3,
        );
        axpySlot(
          yh,
          64,
          i32x4.shr_s(i32x4.shl(q0, 8), 24),
          i32x4.shr_s(i32x4.shl(q1, 8), 24),
          i32x4.shr_s(i32x4.shl(q2, 8), 24),
          i32x4.shr_s(i32x4.shl(q3, 8), 24),
          S0,
          S1,
          S2,
          S3,
        );
        axpySlot(
          yh,
          96,
          i32x4.shr_s(q0, 24),
          i32x4.shr_s(q1, 24),
          i32x4.shr_s(q2, 24),
          i32x4.shr_s(q3, 24),
          S0,
          S1,
          S2,
          S3,
        );
      }
      y += 128;
      p0 += Q8_0_BS;
      p1 += Q8_0_BS;
      p2 += Q8_0_BS;
      p3 += Q8_0_BS;
    }
    return;
  }
  if (t == T_Q5_0 || t == T_Q5_1) {
    q5axpy4(t == T_Q5_1, y, corr, nb, p0, h0, p1, h1, p2, h2, p3, h3);
    return;
  }
  const one = t == T_Q4_1;
  const BS = one ? Q4_1_BS : Q4_0_BS;
  const QO: usize = one ? 4 : 2;
  const sc = scratchOf(corr, n);
  const H0 = f32x4.splat(h0),
    H1 = f32x4.splat(h1),
    H2 = f32x4.splat(h2),
    H3 = f32x4.splat(h3);
  for (let b = 0; b < nb; b++) {
    const jj = b & 3;
    if (jj == 0) {
      groupScales(one, sc, corr, min(4, nb - b), 4, p0, H0, p1, H1, p2, H2, p3, H3);
      corr += 16;
    }
    const o = sc + ((<usize>jj) << 2);
    const S0 = v128.load32_splat(o),
      S1 = v128.load32_splat(o, 16),
      S2 = v128.load32_splat(o, 32),
      S3 = v128.load32_splat(o, 48);
    const q0 = v128.load(p0 + QO),
      q1 = v128.load(p1 + QO),
      q2 = v128.load(p2 + QO),
      q3 = v128.load(p3 + QO);
    nibSlot(y, 0, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 1, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 2, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 3, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 4, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 5, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 6, q0, q1, q2, q3, S0, S1, S2, S3);
    axpySlot(
      y,
      112,
      i32x4.shr_u(q0, 28),
      i32x4.shr_u(q1, 28),
      i32x4.shr_u(q2, 28),
      i32x4.shr_u(q3, 28),
      S0,
      S1,
      S2,
      S3,
    );
    y += 128;
    p0 += BS;
    p1 += BS;
    p2 += BS;
    p3 += BS;
  }
}

@inline function axpy1(t: i32, y: usize, corr: usize, n: i32, p: usize, h: f32): void {
  if (t == T_F16 || t == T_BF16) {
    const bf = t == T_BF16;
    const mask = f16Fields(),
      bias = f16Rebias();
    const H = f32x4.splat(h);
    const end = y + ((<usize>n) << 2);
    for (; y < end; y += 32) {
      const w = v128.load(p);
      v128.store(y, madd(v128.load(y), halfW(bf, halfLo(bf, w, mask), bias), H));
      v128.store(y, madd(v128.load(y, 16), halfW(bf, halfHi(bf, w, mask), bias), H), 16);
      p += 16;
    }
    return;
  }
  if (t == T_F32) {
    const H = f32x4.splat(h);
    const end = y + ((<usize>n) << 2);
    for (; y < end; y += 16) {
      v128.store(y, madd(v128.load(y), v128.load(p), H));
      p += 16;
    }
    return;
  }
  const nb = n >> 5;
  if (t == T_Q8_0) {
    for (let b = 0; b < nb; b++) {
      const S = f32x4.splat(h * f16(p));
      for (let hh: usize = 0; hh < 32; hh += 16) {
        const q = v128.load(p + 2 + hh);
        const yh = y + (hh & 16);
        axpyOne(yh, 0, i32x4.shr_s(i32x4.shl(q, 24), 24), S);
        axpyOne(yh, 32, i32x4.shr_s(i32x4.shl(q, 16), 24), S);
        axpyOne(yh, 64, i32x4.shr_s(i32x4.shl(q, 8), 24), S);
        axpyOne(yh, 96, i32x4.shr_s(q, 24), S);
      }
      y += 128;
      p += Q8_0_BS;
    }
    return;
  }
  if (t == T_Q5_0 || t == T_Q5_1) {
    q5axpy1(t == T_Q5_1, y, corr, nb, p, h);
    return;
  }
  const one = t == T_Q4_1;
  const BS = one ? Q4_1_BS : Q4_0_BS;
  const QO: usize = one ? 4 : 2;
  const sc = scratchOf(corr, n);
  const H = f32x4.splat(h);
  for (let b = 0; b < nb; b++) {
    const jj = b & 3;
    if (jj == 0) {
      groupScales(one, sc, corr, min(4, nb - b), 1, p, H, 0, H, 0, H, 0, H);
      corr += 16;
    }
    const S = v128.load32_splat(sc + ((<usize>jj) << 2));
    const q = v128.load(p + QO);
    axpyOne(y, 0, v128.and(q, v128.load(NIB)), S);
    axpyOne(y, 16, v128.and(q, v128.load(NIB, 16)), S);
    axpyOne(y, 32, v128.and(q, v128.load(NIB, 32)), S);
    axpyOne(y, 48, v128.and(q, v128.load(NIB, 48)), S);
    axpyOne(y, 64, v128.and(q, v128.load(NIB, 64)), S);
    axpyOne(y, 80, v128.and(q, v128.load(NIB, 80)), S);
    axpyOne(y, 96, v128.and(q, v128.load(NIB, 96)), S);
    axpyOne(y, 112, i32x4.shr_u(q, 28), S);
    y += 128;
    p += BS;
  }
}

export { axpy4, axpy1 };
