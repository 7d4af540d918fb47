// The relaxed build's Q5_K (src/runtime/weight-kernels/kquant.ts packs it; "q8_Ki" activations):
// the relaxed Q4_K's block (the low 4 bits as its nibbles, 8 scale and 8 min bytes, d and dmin
// as f32) plus each half's fifth bits in a 16-byte vector at 128 + 16 h, bit 2j (2j + 1) of byte
// i with the low (high) nibble of byte i of nibble vector j: 184 B per 256 values (GGUF's: 176).
// A quant is the nibble or'ed with its fifth bit moved to 0x10 (q5Lo / q5Hi, as the relaxed
// Q5_0's); quants reach 31, so each step's two dots (at most 2 * 2 * 31 * 127 = 15748 per i16
// lane) meet the half's spread scales at once, into i32 lanes.

import { hsumPairs } from "./lanes";
import { K_NIB, Q8KI } from "./kquant_blocks";
import { finishKi, Q4KI_SEL } from "./kquant_q4_k_relaxed";
import { dotLoHi, q5Hi, q5Lo } from "./matvec_q4_relaxed";
import { pin, pin2 } from "./schedule_pin";

const Q5KI: usize = 184;

/** The i16 pair sums of step j (0..3, a constant) of half h of the block at wb against xb's vectors. */
@inline function stepQ5Ki(wb: usize, xb: usize, h: usize, j: i32, m: v128, m10: v128): v128 {
  const w = v128.load(wb + (h << 6) + ((<usize>j) << 4)),
    f = v128.load(wb + 128 + (h << 4));
  const xo = xb + (h << 7) + ((<usize>j) << 5);
  return dotLoHi(q5Lo(w, f, j, m, m10), q5Hi(w, f, j, m, m10), v128.load(xo), v128.load(xo, 16));
}

/** isum + steps j and j + 1 of half h, added in i16 (at most 2 * 15748 per lane), times the half's spread scales sp. */
@inline function twoStepsQ5Ki(
  isum: v128,
  wb: usize,
  xb: usize,
  h: usize,
  j: i32,
  sp: v128,
  m: v128,
  m10: v128,
): v128 {
  const d = i16x8.add(stepQ5Ki(wb, xb, h, j, m, m10), stepQ5Ki(wb, xb, h, j + 1, m, m10));
  return i32x4.add(isum, i32x4.dot_i16x8_s(d, sp));
}

/** Half h's scales spread as [sc, sc] i16 pairs (Q4KI_SEL). */
@inline function spreadQ5Ki(wb: usize, h: usize): v128 {
  return i8x16.relaxed_swizzle(v128.load(wb, 160), v128.load(Q4KI_SEL + (h << 4)));
}

@inline function dotQ5Ki(w: usize, x: usize, nb: usize): f32 {
  const m = v128.load(K_NIB),
    m10 = v128.load(K_NIB, 32);
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5KI,
      xb = x + b * Q8KI;
    // the halves unrolled (1.12-1.29x over a loop)
    let isum = i32x4.splat(0);
    let sp = spreadQ5Ki(wb, 0);
    isum = twoStepsQ5Ki(isum, wb, xb, 0, 0, sp, m, m10);
    pin(isum);
    isum = twoStepsQ5Ki(isum, wb, xb, 0, 2, sp, m, m10);
    pin(isum);
    sp = spreadQ5Ki(wb, 1);
    isum = twoStepsQ5Ki(isum, wb, xb, 1, 0, sp, m, m10);
    pin(isum);
    isum = twoStepsQ5Ki(isum, wb, xb, 1, 2, sp, m, m10);
    pin(isum);
    acc = finishKi(acc, isum, v128.load(wb, 160), wb + 176, xb);
  }
  return hsumPairs(acc);
}

/** is + the dots of one step's unpacked quants (lo, hi) with the activation vectors at xo, times the spread scales sp. */
@inline function dotQ5KiAdd(is: v128, lo: v128, hi: v128, xo: usize, sp: v128): v128 {
  return i32x4.add(is, i32x4.dot_i16x8_s(dotLoHi(lo, hi, v128.load(xo), v128.load(xo, 16)), sp));
}

/** One row against two q8_Ki rows (x0, x1): each step's quants unpacked once for both tokens. */
@inline function dotQ5KiTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  const m = v128.load(K_NIB),
    m10 = v128.load(K_NIB, 32);
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5KI;
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    {
      // half 0 (the halves unrolled: 1.04-1.12x over a loop)
      const wh = wb,
        f = v128.load(wb, 128),
        sp = spreadQ5Ki(wb, 0);
      const xa = x0 + b * Q8KI,
        xc = x1 + b * Q8KI;
      let w: v128, lo: v128, hi: v128;
      w = v128.load(wh);
      lo = q5Lo(w, f, 0, m, m10);
      hi = q5Hi(w, f, 0, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc, sp);
      pin2(is0, is1);
      w = v128.load(wh, 16);
      lo = q5Lo(w, f, 1, m, m10);
      hi = q5Hi(w, f, 1, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 32, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 32, sp);
      pin2(is0, is1);
      w = v128.load(wh, 32);
      lo = q5Lo(w, f, 2, m, m10);
      hi = q5Hi(w, f, 2, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 64, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 64, sp);
      pin2(is0, is1);
      w = v128.load(wh, 48);
      lo = q5Lo(w, f, 3, m, m10);
      hi = q5Hi(w, f, 3, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 96, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 96, sp);
      pin2(is0, is1);
    }
    {
      // half 1
      const wh = wb + 64,
        f = v128.load(wb, 144),
        sp = spreadQ5Ki(wb, 1);
      const xa = x0 + b * Q8KI + 128,
        xc = x1 + b * Q8KI + 128;
      let w: v128, lo: v128, hi: v128;
      w = v128.load(wh);
      lo = q5Lo(w, f, 0, m, m10);
      hi = q5Hi(w, f, 0, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc, sp);
      pin2(is0, is1);
      w = v128.load(wh, 16);
      lo = q5Lo(w, f, 1, m, m10);
      hi = q5Hi(w, f, 1, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 32, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 32, sp);
      pin2(is0, is1);
      w = v128.load(wh, 32);
      lo = q5Lo(w, f, 2, m, m10);
      hi = q5Hi(w, f, 2, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 64, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 64, sp);
      pin2(is0, is1);
      w = v128.load(wh, 48);
      lo = q5Lo(w, f, 3, m, m10);
      hi = q5Hi(w, f, 3, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 96, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 96, sp);
      pin2(is0, is1);
    }
    acc0 = finishKi(acc0, is0, v128.load(wb, 160), wb + 176, x0 + b * Q8KI);
    acc1 = finishKi(acc1, is1, v128.load(wb, 160), wb + 176, x1 + b * Q8KI);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

export { Q5KI, dotQ5Ki, dotQ5KiTokens2 };
