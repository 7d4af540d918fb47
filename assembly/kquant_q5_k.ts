// Q5_K rows in GGUF's layout against Q8_K activations (the SIMD128 build's): the nibbles with their
// fifth bits from qh, as bytes, each 16 meeting the activation's in one 256-scaled byte dot.

import { hsumPairs } from "./lanes";
import { dotBytes256, finishK, K_NIB, minsDot, Q5K, Q8K, scalesMins, subScale } from "./kquant_blocks";
import { pin } from "./schedule_pin";

// Chunk c holds sub-blocks 2c (low nibbles, fifth bit = bit 2c of qh[l]) and 2c+1 (high
// nibbles, bit 2c+1). h0/h1 are the qh bytes for l = 0..15 / 16..31, shifted right by 2c with a
// 16-bit shift (bits 0 and 1 of each byte, the only ones used, never come from the neighbour).

// m0f, m10: 0x0f and 0x10 bytes (K_NIB), loaded once by the caller
@inline function k5Lo(q: v128, h: v128, m0f: v128, m10: v128): v128 {
  return v128.or(v128.and(q, m0f), v128.and(i16x8.shl(h, 4), m10));
}
@inline function k5Hi(q: v128, h: v128, m0f: v128, m10: v128): v128 {
  return v128.or(v128.and(i16x8.shr_u(q, 4), m0f), v128.and(i16x8.shl(h, 3), m10));
}

/**
 * s * (dot(a, x0) + dot(b, x1)): one 32-value sub-block, a and b its two 16-byte halves of 5-bit
 * weights, s the sub-block's scale splat into i32 lanes.
 */
@inline function subBlockK5(a: v128, b: v128, x0: v128, x1: v128, s: v128): v128 {
  // each dot is a multiple of 256 below 2^23: divide it out before scaling
  return i32x4.mul(i32x4.shr_s(i32x4.add(dotBytes256(a, x0), dotBytes256(b, x1)), 8), s);
}

/** isum + chunk c (0..3, a constant) of a Q5_K block: sub-blocks 2c and 2c + 1. */
@inline function chunkQ5K(isum: v128, wb: usize, xb: usize, c: usize, sm: v128, m0f: v128, m10: v128): v128 {
  const qp = wb + 48 + (c << 5),
    xp = xb + 4 + (c << 6);
  const q0 = v128.load(qp),
    q1 = v128.load(qp, 16);
  const h0 = i16x8.shr_u(v128.load(wb + 16), <i32>(c << 1)),
    h1 = i16x8.shr_u(v128.load(wb + 32), <i32>(c << 1));
  isum = i32x4.add(
    isum,
    i32x4.add(
      subBlockK5(
        k5Lo(q0, h0, m0f, m10),
        k5Lo(q1, h1, m0f, m10),
        v128.load(xp),
        v128.load(xp, 16),
        subScale(sm, <i32>(c << 1)),
      ),
      subBlockK5(
        k5Hi(q0, h0, m0f, m10),
        k5Hi(q1, h1, m0f, m10),
        v128.load(xp, 32),
        v128.load(xp, 48),
        subScale(sm, <i32>(c << 1) + 1),
      ),
    ),
  );
  // this chunk's arithmetic before the next chunk's loads (schedule_pin.ts)
  pin(isum);
  return isum;
}

@inline function dotQ5K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  const m0f = v128.load(K_NIB),
    m10 = v128.load(K_NIB, 32);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5K,
      xb = x + b * Q8K;
    const sm = scalesMins(wb + 4);
    let isum = chunkQ5K(i32x4.splat(0), wb, xb, 0, sm, m0f, m10);
    isum = chunkQ5K(isum, wb, xb, 1, sm, m0f, m10);
    isum = chunkQ5K(isum, wb, xb, 2, sm, m0f, m10);
    isum = chunkQ5K(isum, wb, xb, 3, sm, m0f, m10);
    acc = finishK(acc, wb, xb, isum, minsDot(sm, xb), 1.0);
  }
  return hsumPairs(acc);
}

/** One row against two activation rows: each 5-bit weight vector serves both tokens. */
@inline function dotQ5KTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  const m0f = v128.load(K_NIB),
    m10 = v128.load(K_NIB, 32);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5K,
      xb0 = x0 + b * Q8K,
      xb1 = x1 + b * Q8K;
    const sm = scalesMins(wb + 4);
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    let sc = sm;
    let h0 = v128.load(wb + 16),
      h1 = v128.load(wb + 32);
    for (let c: usize = 0; c < 4; c++) {
      const qp = wb + 48 + (c << 5),
        xo: usize = 4 + (c << 6);
      const q0 = v128.load(qp),
        q1 = v128.load(qp, 16);
      const l0 = k5Lo(q0, h0, m0f, m10),
        l1 = k5Lo(q1, h1, m0f, m10),
        u0 = k5Hi(q0, h0, m0f, m10),
        u1 = k5Hi(q1, h1, m0f, m10);
      const sl = i32x4.splat(i8x16.extract_lane_u(sc, 0)),
        sh = i32x4.splat(i8x16.extract_lane_u(sc, 1));
      let xp = xb0 + xo;
      is0 = i32x4.add(
        is0,
        i32x4.add(
          subBlockK5(l0, l1, v128.load(xp), v128.load(xp, 16), sl),
          subBlockK5(u0, u1, v128.load(xp, 32), v128.load(xp, 48), sh),
        ),
      );
      xp = xb1 + xo;
      is1 = i32x4.add(
        is1,
        i32x4.add(
          subBlockK5(l0, l1, v128.load(xp), v128.load(xp, 16), sl),
          subBlockK5(u0, u1, v128.load(xp, 32), v128.load(xp, 48), sh),
        ),
      );
      sc = i8x16.shuffle(sc, sc, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
      h0 = i16x8.shr_u(h0, 2);
      h1 = i16x8.shr_u(h1, 2);
    }
    acc0 = finishK(acc0, wb, xb0, is0, minsDot(sm, xb0), 1.0);
    acc1 = finishK(acc1, wb, xb1, is1, minsDot(sm, xb1), 1.0);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

export { dotQ5K, dotQ5KTokens2 };
