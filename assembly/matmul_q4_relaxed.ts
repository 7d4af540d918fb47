// The relaxed-SIMD build's prefill GEMM for packed Q4_0 / Q4_1 weights (layout: matvec_q4.ts)
// times ntok activation rows prepared as "q8_i8n" (compiled only with relaxed SIMD on: matmul_q4.ts
// runs these tiles in its loops). y[t*rows + r] = W[r,:] . x_t.
//
// The decode kernel (matvec_q4_relaxed.ts) unpacks each 16-byte weight vector into two 7-bit
// byte vectors (an and, a shift and an and) and meets them with one pmaddubsw-like relaxed dot
// each. Here the unpacked vectors of the row pair serve 3 tokens: a tile keeps 6 i16x8 group
// sums, the pair's 4 unpacked vectors, the mask and one token's 2 activation vectors live, 13 of
// the 15 xmm registers V8 allocates on x64. Per 192 multiply-adds that is 8 ops on weights and
// 30 on the tokens' side, against 54 when the tokens go one by one.
//
// Per (row, token) the integer sums and the float order are the decode kernel's (i16 lanes over
// a 128-column group, folded into block lanes by a dot with ones, then the f32 group update of
// q4_group.ts, lanes summed at the end of a chunk, chunks added into y), so every token's result
// is bit for bit what matvec_q4_0/_1 gives for it alone in either build.

import { dotLoHi, Q4_RELAXED_CONSTS, q5Hi, q5Lo } from "./matvec_q4_relaxed";
import { hsum } from "./lanes";
import { put, q4GroupBytes, q4PairScales, Q8_I8N_GB } from "./packed_layout";
import { q4_0Group, q4_1Group } from "./q4_group";
import { pin2 } from "./schedule_pin";

// h + the relaxed dots of one token's activation vectors (xl, xh) with a row's unpacked vectors:
// i16 lanes, or for Q5 (five) the step folded into i32 block lanes at once (matvec_q4_relaxed.ts)
@inline function rdot(h: v128, xl: v128, xh: v128, lo: v128, hi: v128, ones: v128, five: bool): v128 {
  const d = dotLoHi(lo, hi, xl, xh);
  return five ? i32x4.add(h, i32x4.dot_i16x8_s(d, ones)) : i16x8.add(h, d);
}

// Step j's unpacked low / high vectors of the row whose nibbles are at w and fifth bits (Q5) at f.
@inline function unpackLo(w: v128, f: usize, j: i32, m: v128, m10: v128, five: bool): v128 {
  return five ? q5Lo(w, v128.load(f), j, m, m10) : v128.and(w, m);
}
@inline function unpackHi(w: v128, f: usize, j: i32, m: v128, m10: v128, five: bool): v128 {
  return five ? q5Hi(w, v128.load(f), j, m, m10) : v128.and(i16x8.shr_u(w, 4), m);
}

// One group's f32 update of a (row, token) accumulator from its i16 sums h (Q5: i32 block sums).
@inline function acc(a: v128, h: v128, ones: v128, dw: v128, mw: v128, xg: usize, one: bool, five: bool): v128 {
  const s = five ? h : i32x4.dot_i16x8_s(h, ones);
  const dx = v128.load(xg, 128);
  if (one) return q4_1Group(a, s, dw, dx, mw, v128.load(xg, 160));
  // Q5_0's offset is 16 where Q4_0's is 8
  return q4_0Group(a, s, five ? i32x4.shl(v128.load(xg, 144), 1) : v128.load(xg, 144), dw, dx);
}

// The row pair whose groups start at wp (rows r, r + 1), over gc groups of one chunk, times nt
// (1..3, a constant) tokens whose chunk activations start at xp, astride bytes apart. Results go
// to y + t * ys (y: row r's output), added to what is there unless `first`; a row outside the
// range (in0 / in1 false) is computed but not stored.
@inline function pairTokensRelaxed(
  wp: usize,
  xp: usize,
  astride: usize,
  y: usize,
  ys: usize,
  gc: i32,
  first: bool,
  nt: i32,
  one: bool,
  five: bool,
  in0: bool,
  in1: bool,
): void {
  const GB = q4GroupBytes(one, five);
  // Q5: each row's fifth bits at +FO (row r) and +FO + 16 (row r + 1)
  const FO = q4GroupBytes(one, false);
  let a00 = f32x4.splat(0),
    a01 = f32x4.splat(0),
    a02 = f32x4.splat(0),
    a10 = f32x4.splat(0),
    a11 = f32x4.splat(0),
    a12 = f32x4.splat(0);
  let x0 = xp,
    x1 = xp + astride,
    x2 = xp + astride * 2;
  for (let g = 0; g < gc; g++) {
    let h00 = i16x8.splat(0),
      h01 = i16x8.splat(0),
      h02 = i16x8.splat(0),
      h10 = i16x8.splat(0),
      h11 = i16x8.splat(0),
      h12 = i16x8.splat(0);
    const m = v128.load(Q4_RELAXED_CONSTS),
      ones = v128.load(Q4_RELAXED_CONSTS, 16),
      m10 = v128.load(Q4_RELAXED_CONSTS, 32);
    // weight vector j of each row meets activation bytes 32j..32j+31 of each token; unrolled
    // (as fast as the rolled loop for Q4, and Q5's shifts need j constant), each token pinned
    {
      const w0 = v128.load(wp),
        w1 = v128.load(wp, 64);
      const l0 = unpackLo(w0, wp + FO, 0, m, m10, five),
        k0 = unpackHi(w0, wp + FO, 0, m, m10, five),
        l1 = unpackLo(w1, wp + FO + 16, 0, m, m10, five),
        k1 = unpackHi(w1, wp + FO + 16, 0, m, m10, five);
      let xl = v128.load(x0),
        xh = v128.load(x0, 16);
      h00 = rdot(h00, xl, xh, l0, k0, ones, five);
      h10 = rdot(h10, xl, xh, l1, k1, ones, five);
      pin2(h00, h10);
      if (nt > 1) {
        xl = v128.load(x1);
        xh = v128.load(x1, 16);
        h01 = rdot(h01, xl, xh, l0, k0, ones, five);
        h11 = rdot(h11, xl, xh, l1, k1, ones, five);
        pin2(h01, h11);
      }
      if (nt > 2) {
        xl = v128.load(x2);
        xh = v128.load(x2, 16);
        h02 = rdot(h02, xl, xh, l0, k0, ones, five);
        h12 = rdot(h12, xl, xh, l1, k1, ones, five);
        pin2(h02, h12);
      }
    }
    {
      const w0 = v128.load(wp, 16),
        w1 = v128.load(wp, 80);
      const l0 = unpackLo(w0, wp + FO, 1, m, m10, five),
        k0 = unpackHi(w0, wp + FO, 1, m, m10, five),
        l1 = unpackLo(w1, wp + FO + 16, 1, m, m10, five),
        k1 = unpackHi(w1, wp + FO + 16, 1, m, m10, five);
      let xl = v128.load(x0, 32),
        xh = v128.load(x0, 48);
      h00 = rdot(h00, xl, xh, l0, k0, ones, five);
      h10 = rdot(h10, xl, xh, l1, k1, ones, five);
      pin2(h00, h10);
      if (nt > 1) {
        xl = v128.load(x1, 32);
        xh = v128.load(x1, 48);
        h01 = rdot(h01, xl, xh, l0, k0, ones, five);
        h11 = rdot(h11, xl, xh, l1, k1, ones, five);
        pin2(h01, h11);
      }
      if (nt > 2) {
        xl = v128.load(x2, 32);
        xh = v128.load(x2, 48);
        h02 = rdot(h02, xl, xh, l0, k0, ones, five);
        h12 = rdot(h12, xl, xh, l1, k1, ones, five);
        pin2(h02, h12);
      }
    }
    {
      const w0 = v128.load(wp, 32),
        w1 = v128.load(wp, 96);
      const l0 = unpackLo(w0, wp + FO, 2, m, m10, five),
        k0 = unpackHi(w0, wp + FO, 2, m, m10, five),
        l1 = unpackLo(w1, wp + FO + 16, 2, m, m10, five),
        k1 = unpackHi(w1, wp + FO + 16, 2, m, m10, five);
      let xl = v128.load(x0, 64),
        xh = v128.load(x0, 80);
      h00 = rdot(h00, xl, xh, l0, k0, ones, five);
      h10 = rdot(h10, xl, xh, l1, k1, ones, five);
      pin2(h00, h10);
      if (nt > 1) {
        xl = v128.load(x1, 64);
        xh = v128.load(x1, 80);
        h01 = rdot(h01, xl, xh, l0, k0, ones, five);
        h11 = rdot(h11, xl, xh, l1, k1, ones, five);
        pin2(h01, h11);
      }
      if (nt > 2) {
        xl = v128.load(x2, 64);
        xh = v128.load(x2, 80);
        h02 = rdot(h02, xl, xh, l0, k0, ones, five);
        h12 = rdot(h12, xl, xh, l1, k1, ones, five);
        pin2(h02, h12);
      }
    }
    {
      const w0 = v128.load(wp, 48),
        w1 = v128.load(wp, 112);
      const l0 = unpackLo(w0, wp + FO, 3, m, m10, five),
        k0 = unpackHi(w0, wp + FO, 3, m, m10, five),
        l1 = unpackLo(w1, wp + FO + 16, 3, m, m10, five),
        k1 = unpackHi(w1, wp + FO + 16, 3, m, m10, five);
      let xl = v128.load(x0, 96),
        xh = v128.load(x0, 112);
      h00 = rdot(h00, xl, xh, l0, k0, ones, five);
      h10 = rdot(h10, xl, xh, l1, k1, ones, five);
      pin2(h00, h10);
      if (nt > 1) {
        xl = v128.load(x1, 96);
        xh = v128.load(x1, 112);
        h01 = rdot(h01, xl, xh, l0, k0, ones, five);
        h11 = rdot(h11, xl, xh, l1, k1, ones, five);
        pin2(h01, h11);
      }
      if (nt > 2) {
        xl = v128.load(x2, 96);
        xh = v128.load(x2, 112);
        h02 = rdot(h02, xl, xh, l0, k0, ones, five);
        h12 = rdot(h12, xl, xh, l1, k1, ones, five);
        pin2(h02, h12);
      }
    }
    const dw0 = q4PairScales(wp, 0, false),
      dw1 = q4PairScales(wp, 1, false);
    const mw0 = one ? q4PairScales(wp, 0, true) : dw0, // Q4_0 has no mins (acc reads none)
      mw1 = one ? q4PairScales(wp, 1, true) : dw1;
    a00 = acc(a00, h00, ones, dw0, mw0, x0, one, five);
    a10 = acc(a10, h10, ones, dw1, mw1, x0, one, five);
    if (nt > 1) {
      a01 = acc(a01, h01, ones, dw0, mw0, x1, one, five);
      a11 = acc(a11, h11, ones, dw1, mw1, x1, one, five);
    }
    if (nt > 2) {
      a02 = acc(a02, h02, ones, dw0, mw0, x2, one, five);
      a12 = acc(a12, h12, ones, dw1, mw1, x2, one, five);
    }
    wp += GB;
    x0 += Q8_I8N_GB;
    x1 += Q8_I8N_GB;
    x2 += Q8_I8N_GB;
  }
  if (in0) put(y, hsum(a00), first);
  if (in1) put(y + 4, hsum(a10), first);
  if (nt > 1) {
    if (in0) put(y + ys, hsum(a01), first);
    if (in1) put(y + ys + 4, hsum(a11), first);
  }
  if (nt > 2) {
    if (in0) put(y + ys * 2, hsum(a02), first);
    if (in1) put(y + ys * 2 + 4, hsum(a12), first);
  }
}

// One function per type and token count, so that each is compiled with both as constants (see
// matmul_q4.ts).
function r4_0_t1(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 1, false, false, i0, i1);
}
function r4_0_t2(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 2, false, false, i0, i1);
}
function r4_0_t3(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 3, false, false, i0, i1);
}
function r4_1_t1(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 1, true, false, i0, i1);
}
function r4_1_t2(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 2, true, false, i0, i1);
}
function r4_1_t3(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 3, true, false, i0, i1);
}
function r5_0_t1(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 1, false, true, i0, i1);
}
function r5_0_t2(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 2, false, true, i0, i1);
}
function r5_0_t3(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 3, false, true, i0, i1);
}
function r5_1_t1(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 1, true, true, i0, i1);
}
function r5_1_t2(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 2, true, true, i0, i1);
}
function r5_1_t3(wp: usize, xp: usize, as: usize, y: usize, ys: usize, gc: i32, f: bool, i0: bool, i1: bool): void {
  pairTokensRelaxed(wp, xp, as, y, ys, gc, f, 3, true, true, i0, i1);
}

export { r4_0_t1, r4_0_t2, r4_0_t3, r4_1_t1, r4_1_t2, r4_1_t3, r5_0_t1, r5_0_t2, r5_0_t3, r5_1_t1, r5_1_t2, r5_1_t3 };
