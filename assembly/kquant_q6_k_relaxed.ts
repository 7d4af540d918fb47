// The relaxed build's Q6_K (src/runtime/weight-kernels/kquant.ts packs it; "q8_Ki" activations
// as the relaxed Q4_K's): per 256-value block 16 vectors of 6-bit quants, the partners of q8_Ki's
// 16 activation vectors, stored four in three. Quad g (48 bytes at 48 g: A, B, C) holds
//   W0 = A & 0x3f, W1 = B & 0x3f, W2 = C & 0x3f, W3 = (A & 0xc0) >> 6 | (B & 0xc0) >> 4 | (C & 0xc0) >> 2
// (16-bit shifts: the masks clear every bit that would cross into the neighbouring byte): 11
// instructions for 64 values, against about 18 from GGUF's nibbles and 2-bit tops. They meet the
// activation vectors L_2k, H_2k, L_2k+1, H_2k+1 of half h (g = 2h + k), whose bytes 4b..4b+3 are
// all in 16-value sub-block 8h + 2b + k; so a relaxed dot leaves sub-block pairs in i16 lanes
// 2b, 2b + 1, two such dots add up in i16 (a lane is at most 2 * 2 * 63 * 127 = 32004), and one
// dot_i16x8_s with the quad's scales spread as [s, s] pairs gives lane b = s * dot. GGUF's layout
// needs a scale splat for every 16 values. Scales (GGUF's 16 i8) @192, d as f32 @208; the
// offset 32 comes off with the activation's 16-value sums, as in offsetQ6K. Integer sums as
// ggml's; the float lanes differ from the SIMD128 build's, so the builds agree to rounding.

import { hsumPairs } from "./lanes";
import { Q8KI } from "./kquant_blocks";
import { offsetQ6K } from "./kquant_q6_k";
import { pin, pin2 } from "./schedule_pin";

// +16 g: selector spreading scale bytes 8h + k, 8h + 2 + k, 8h + 4 + k, 8h + 6 + k (g = 2h + k)
// into byte pairs (the upper 8 bytes unused); +64: 0x3f bytes, +80: 0xc0 bytes
const Q6KI_SEL = memory.data<u8>(
  [
    0, 0, 2, 2, 4, 4, 6, 6, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1, 1, 3, 3, 5, 5, 7, 7, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 8, 8, 10, 10, 12, 12, 14, 14, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 9, 9,
    11, 11, 13, 13, 15, 15, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f,
    0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0,
    0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0,
  ],
  16,
);
const Q6KI: usize = 212;

/** Quad g's scales as i16 pairs, for dot_i16x8_s (wb: the block). */
@inline function spreadQ6Ki(wb: usize, g: usize): v128 {
  return i16x8.extend_low_i8x16_s(i8x16.relaxed_swizzle(v128.load(wb, 192), v128.load(Q6KI_SEL + (g << 4))));
}

/** The fourth 6-bit vector of a quad, from the top bits of its three bytes vectors. */
@inline function q6Fourth(A: v128, B: v128, C: v128, mc0: v128): v128 {
  return v128.or(
    v128.or(i16x8.shr_u(v128.and(A, mc0), 6), i16x8.shr_u(v128.and(B, mc0), 4)),
    i16x8.shr_u(v128.and(C, mc0), 2),
  );
}

/** isum + the quad's four unpacked vectors against the activation vectors at xq (64 bytes), scales sp. */
@inline function quadQ6KiDots(isum: v128, w0: v128, w1: v128, w2: v128, w3: v128, xq: usize, sp: v128): v128 {
  const s01 = i16x8.add(
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xq), w0),
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xq, 16), w1),
  );
  isum = i32x4.add(isum, i32x4.dot_i16x8_s(s01, sp));
  const s23 = i16x8.add(
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xq, 32), w2),
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xq, 48), w3),
  );
  return i32x4.add(isum, i32x4.dot_i16x8_s(s23, sp));
}

/** isum + quad g of the block at wb against the q8_Ki block at xb; m3f, mc0: 0x3f and 0xc0 bytes. */
@inline function quadQ6Ki(isum: v128, wb: usize, xb: usize, g: usize, m3f: v128, mc0: v128): v128 {
  const wq = wb + g * 48;
  const A = v128.load(wq),
    B = v128.load(wq, 16),
    C = v128.load(wq, 32);
  return quadQ6KiDots(
    isum,
    v128.and(A, m3f),
    v128.and(B, m3f),
    v128.and(C, m3f),
    q6Fourth(A, B, C, mc0),
    xb + (g << 6),
    spreadQ6Ki(wb, g),
  );
}

/** acc + a block's integer sum less its offset 32 (q8_Ki's 16-value sums), times d * dx. */
@inline function finishQ6Ki(acc: v128, isum: v128, wb: usize, xb: usize): v128 {
  return f32x4.add(
    acc,
    f32x4.mul(
      f32x4.convert_i32x4_s(offsetQ6K(isum, wb, xb + 256)),
      f32x4.splat(load<f32>(wb, 208) * load<f32>(xb, 304)),
    ),
  );
}

@inline function dotQ6Ki(w: usize, x: usize, nb: usize): f32 {
  const m3f = v128.load(Q6KI_SEL, 64),
    mc0 = v128.load(Q6KI_SEL, 80);
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6KI,
      xb = x + b * Q8KI;
    // the quads written out (a loop costs V8 a stack check and a branch per iteration)
    let isum = i32x4.splat(0);
    isum = quadQ6Ki(isum, wb, xb, 0, m3f, mc0);
    pin(isum);
    isum = quadQ6Ki(isum, wb, xb, 1, m3f, mc0);
    pin(isum);
    isum = quadQ6Ki(isum, wb, xb, 2, m3f, mc0);
    pin(isum);
    isum = quadQ6Ki(isum, wb, xb, 3, m3f, mc0);
    pin(isum);
    acc = finishQ6Ki(acc, isum, wb, xb);
  }
  return hsumPairs(acc);
}

/** Rows at wa and wc (two weight streams) against one q8_Ki row, quad by quad. */
@inline function dotQ6KiRows2(wa: usize, wc: usize, x: usize, nb: usize, ya: usize, yc: usize): void {
  const m3f = v128.load(Q6KI_SEL, 64),
    mc0 = v128.load(Q6KI_SEL, 80);
  let acca = f32x4.splat(0),
    accc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const ba = wa + b * Q6KI,
      bc = wc + b * Q6KI,
      xb = x + b * Q8KI;
    let isa = i32x4.splat(0),
      isc = i32x4.splat(0);
    // the quads written out (1.02-1.12x over a loop)
    isa = quadQ6Ki(isa, ba, xb, 0, m3f, mc0);
    pin(isa);
    isc = quadQ6Ki(isc, bc, xb, 0, m3f, mc0);
    pin(isc);
    isa = quadQ6Ki(isa, ba, xb, 1, m3f, mc0);
    pin(isa);
    isc = quadQ6Ki(isc, bc, xb, 1, m3f, mc0);
    pin(isc);
    isa = quadQ6Ki(isa, ba, xb, 2, m3f, mc0);
    pin(isa);
    isc = quadQ6Ki(isc, bc, xb, 2, m3f, mc0);
    pin(isc);
    isa = quadQ6Ki(isa, ba, xb, 3, m3f, mc0);
    pin(isa);
    isc = quadQ6Ki(isc, bc, xb, 3, m3f, mc0);
    pin(isc);
    acca = finishQ6Ki(acca, isa, ba, xb);
    accc = finishQ6Ki(accc, isc, bc, xb);
  }
  store<f32>(ya, hsumPairs(acca));
  store<f32>(yc, hsumPairs(accc));
}

/** One row against two q8_Ki rows (x0, x1): each unpacked quad serves both tokens. */
@inline function dotQ6KiTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  const m3f = v128.load(Q6KI_SEL, 64),
    mc0 = v128.load(Q6KI_SEL, 80);
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6KI,
      xa = x0 + b * Q8KI,
      xc = x1 + b * Q8KI;
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    // the quads written out (a loop costs V8 a stack check and a branch per iteration)
    {
      const A = v128.load(wb, 0),
        B = v128.load(wb, 16),
        C = v128.load(wb, 32);
      const w0 = v128.and(A, m3f),
        w1 = v128.and(B, m3f),
        w2 = v128.and(C, m3f),
        w3 = q6Fourth(A, B, C, mc0);
      const sp = spreadQ6Ki(wb, 0);
      is0 = quadQ6KiDots(is0, w0, w1, w2, w3, xa + 0, sp);
      is1 = quadQ6KiDots(is1, w0, w1, w2, w3, xc + 0, sp);
      pin2(is0, is1);
    }
    {
      const A = v128.load(wb, 48),
        B = v128.load(wb, 64),
        C = v128.load(wb, 80);
      const w0 = v128.and(A, m3f),
        w1 = v128.and(B, m3f),
        w2 = v128.and(C, m3f),
        w3 = q6Fourth(A, B, C, mc0);
      const sp = spreadQ6Ki(wb, 1);
      is0 = quadQ6KiDots(is0, w0, w1, w2, w3, xa + 64, sp);
      is1 = quadQ6KiDots(is1, w0, w1, w2, w3, xc + 64, sp);
      pin2(is0, is1);
    }
    {
      const A = v128.load(wb, 96),
        B = v128.load(wb, 112),
        C = v128.load(wb, 128);
      const w0 = v128.and(A, m3f),
        w1 = v128.and(B, m3f),
        w2 = v128.and(C, m3f),
        w3 = q6Fourth(A, B, C, mc0);
      const sp = spreadQ6Ki(wb, 2);
      is0 = quadQ6KiDots(is0, w0, w1, w2, w3, xa + 128, sp);
      is1 = quadQ6KiDots(is1, w0, w1, w2, w3, xc + 128, sp);
      pin2(is0, is1);
    }
    {
      const A = v128.load(wb, 144),
        B = v128.load(wb, 160),
        C = v128.load(wb, 176);
      const w0 = v128.and(A, m3f),
        w1 = v128.and(B, m3f),
        w2 = v128.and(C, m3f),
        w3 = q6Fourth(A, B, C, mc0);
      const sp = spreadQ6Ki(wb, 3);
      is0 = quadQ6KiDots(is0, w0, w1, w2, w3, xa + 192, sp);
      is1 = quadQ6KiDots(is1, w0, w1, w2, w3, xc + 192, sp);
      pin2(is0, is1);
    }
    acc0 = finishQ6Ki(acc0, is0, wb, xa);
    acc1 = finishQ6Ki(acc1, is1, wb, xc);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

export { Q6KI, dotQ6Ki, dotQ6KiRows2, dotQ6KiTokens2 };
