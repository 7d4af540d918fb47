// Q6_K rows in GGUF's layout against Q8_K activations (the SIMD128 build's), and the offset 32
// that both builds' Q6_K blocks take off with the activation's 16-value sums.

import { f16ToF32Finite } from "./half";
import { hsumPairs } from "./lanes";
import { dotBytes256, K_NIB, Q6K, Q8K } from "./kquant_blocks";
import { pin } from "./schedule_pin";

/**
 * sc * dot(q, x) for one 16-value group (the 256 divided out exactly first: no overflow); sc the
 * group's scale splat into i32 lanes. (The SIMD128 build's: the relaxed build has its own Q6_K blocks, kquant_q6_k_relaxed.ts.)
 */
@inline function groupK(q: v128, x: v128, sc: v128): v128 {
  return i32x4.mul(i32x4.shr_s(dotBytes256(q, x), 8), sc);
}

/** Q6_K stores q + 32: subtract 32 * sum_g sc_g * bsum_g (bsums: the activation's 16-value sums). */
@inline function offsetQ6K(isum: v128, wb: usize, bsums: usize): v128 {
  // the scales sit at 192 in both builds' blocks; bsums: the 16 sums (Q8_K's at 260, q8_Ki's at 256)
  const s8 = v128.load(wb + 192);
  const corr = i32x4.add(
    i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(s8), v128.load(bsums)),
    i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(s8), v128.load(bsums, 16)),
  );
  return i32x4.sub(isum, i32x4.shl(corr, 5));
}

// A block is walked in 4 steps of 64 values: step i = (half h, l0) reads ql bytes A (values
// l0..l0+15 of the half) and B (32 further), their 2-bit tops in qh byte H; the four 6-bit
// groups lo(A)|H<<4, lo(B)|H<<2, hi(A)|H, hi(B)|H>>2 are 32 values apart, each with its scale.

/**
 * 6-bit group g (0..3, a constant) of a step: the low or high nibbles of A or B with their 2-bit
 * tops from H; m0f, m30: 0x0f and 0x30 bytes (K_NIB). 16-bit shifts are safe: the byte masks drop
 * whatever crossed a byte boundary.
 */
@inline function q6Group(A: v128, B: v128, H: v128, g: i32, m0f: v128, m30: v128): v128 {
  if (g == 0) return v128.or(v128.and(A, m0f), v128.and(i16x8.shl(H, 4), m30));
  if (g == 1) return v128.or(v128.and(B, m0f), v128.and(i16x8.shl(H, 2), m30));
  if (g == 2) return v128.or(v128.and(i16x8.shr_u(A, 4), m0f), v128.and(H, m30));
  return v128.or(v128.and(i16x8.shr_u(B, 4), m0f), v128.and(i16x8.shr_u(H, 2), m30));
}

/** isum + step i (0..3, a constant) of a Q6_K block: its four 16-value groups. */
@inline function stepQ6K(isum: v128, wb: usize, xb: usize, i: usize, m0f: v128, m30: v128): v128 {
  const h = i >> 1,
    l0 = (i & 1) << 4;
  const ql = wb + (h << 6) + l0,
    qh = wb + 128 + (h << 5) + l0,
    sc = wb + 192 + (h << 3) + (i & 1);
  const xp = xb + 4 + (h << 7) + l0;
  const A = v128.load(ql),
    B = v128.load(ql, 32),
    H = v128.load(qh);
  isum = i32x4.add(isum, groupK(q6Group(A, B, H, 0, m0f, m30), v128.load(xp), i32x4.splat(<i32>load<i8>(sc))));
  isum = i32x4.add(isum, groupK(q6Group(A, B, H, 1, m0f, m30), v128.load(xp, 32), i32x4.splat(<i32>load<i8>(sc, 2))));
  isum = i32x4.add(isum, groupK(q6Group(A, B, H, 2, m0f, m30), v128.load(xp, 64), i32x4.splat(<i32>load<i8>(sc, 4))));
  isum = i32x4.add(isum, groupK(q6Group(A, B, H, 3, m0f, m30), v128.load(xp, 96), i32x4.splat(<i32>load<i8>(sc, 6))));
  // this step's arithmetic before the next step's loads (schedule_pin.ts)
  pin(isum);
  return isum;
}

@inline function dotQ6K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  const m0f = v128.load(K_NIB),
    m30 = v128.load(K_NIB, 16);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6K,
      xb = x + b * Q8K;
    let isum = stepQ6K(i32x4.splat(0), wb, xb, 0, m0f, m30);
    isum = stepQ6K(isum, wb, xb, 1, m0f, m30);
    isum = stepQ6K(isum, wb, xb, 2, m0f, m30);
    isum = stepQ6K(isum, wb, xb, 3, m0f, m30);
    isum = offsetQ6K(isum, wb, xb + 260);
    acc = f32x4.add(
      acc,
      f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(f16ToF32Finite(<u32>load<u16>(wb + 208)) * load<f32>(xb))),
    );
  }
  return hsumPairs(acc);
}

/** One row against two activation rows: each unpacked 6-bit group serves both tokens. */
@inline function dotQ6KTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  const m0f = v128.load(K_NIB),
    m30 = v128.load(K_NIB, 16);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6K,
      xb0 = x0 + b * Q8K,
      xb1 = x1 + b * Q8K;
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    for (let i: usize = 0; i < 4; i++) {
      const h = i >> 1,
        l0 = (i & 1) << 4;
      const ql = wb + (h << 6) + l0,
        qh = wb + 128 + (h << 5) + l0,
        sc = wb + 192 + (h << 3) + (i & 1);
      const xo: usize = 4 + (h << 7) + l0;
      const A = v128.load(ql),
        B = v128.load(ql, 32),
        H = v128.load(qh);
      let q = q6Group(A, B, H, 0, m0f, m30);
      let s = i32x4.splat(<i32>load<i8>(sc));
      is0 = i32x4.add(is0, groupK(q, v128.load(xb0 + xo), s));
      is1 = i32x4.add(is1, groupK(q, v128.load(xb1 + xo), s));
      q = q6Group(A, B, H, 1, m0f, m30);
      s = i32x4.splat(<i32>load<i8>(sc, 2));
      is0 = i32x4.add(is0, groupK(q, v128.load(xb0 + xo, 32), s));
      is1 = i32x4.add(is1, groupK(q, v128.load(xb1 + xo, 32), s));
      q = q6Group(A, B, H, 2, m0f, m30);
      s = i32x4.splat(<i32>load<i8>(sc, 4));
      is0 = i32x4.add(is0, groupK(q, v128.load(xb0 + xo, 64), s));
      is1 = i32x4.add(is1, groupK(q, v128.load(xb1 + xo, 64), s));
      q = q6Group(A, B, H, 3, m0f, m30);
      s = i32x4.splat(<i32>load<i8>(sc, 6));
      is0 = i32x4.add(is0, groupK(q, v128.load(xb0 + xo, 96), s));
      is1 = i32x4.add(is1, groupK(q, v128.load(xb1 + xo, 96), s));
    }
    const d = f16ToF32Finite(<u32>load<u16>(wb + 208));
    acc0 = f32x4.add(
      acc0,
      f32x4.mul(f32x4.convert_i32x4_s(offsetQ6K(is0, wb, xb0 + 260)), f32x4.splat(d * load<f32>(xb0))),
    );
    acc1 = f32x4.add(
      acc1,
      f32x4.mul(f32x4.convert_i32x4_s(offsetQ6K(is1, wb, xb1 + 260)), f32x4.splat(d * load<f32>(xb1))),
    );
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

export { offsetQ6K, dotQ6K, dotQ6KTokens2 };
