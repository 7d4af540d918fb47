// F16 / BF16 rows (GGUF: nEmbd 16-bit values) against x as f32 ("f32_eo": each 8 values' even
// ones, then its odd ones), 16 weights per step into two accumulators. A half converts as the
// dense kernels convert it (matvec_half.ts; half.ts for the down columns): BF16 is the top
// half of an f32; F16's sign, exponent and mantissa are moved into f32's fields, which is its
// value times 2^-112 (exact for finite halves; inf and NaN come out finite, and convert refuses
// to write them). The 2^112 goes onto x instead (times 2^96 as loaded, shared by the two rows of
// dotHalf2; the sum times 2^16): powers of two change no rounding, and it saves a multiply per 4
// weights. The products are added unfused in both builds, so the gate and up dots, whose signs
// decide what is computed, have the same bits in both; dotHalf2 gives each row dotHalf's bits.
// The dots take each 8 values as their even and odd 4 (half.ts's halfEven / halfOdd, as
// matvec_half.ts), against x prepared in that order ("f32_eo"): fewer instructions than the
// natural-order halves the down columns keep (their sums land in y in the natural order).

import { F16_SUM_UP, F16_X_UP, halfEoMask, halfEven, halfOdd } from "./half";
import { hsum } from "./lanes";

// 4 values of x at p, scaled for halfEven/halfOdd's F16 weights (2^96: see above)
@inline function halfX(bf: bool, p: usize, up: v128): v128 {
  return bf ? v128.load(p) : f32x4.mul(v128.load(p), up);
}

@inline function dotHalf(bf: bool, a: usize, x: usize, n: i32): f32 {
  const mask = halfEoMask(bf),
    up = f32x4.splat(F16_X_UP);
  let s0 = f32x4.splat(0),
    s1 = f32x4.splat(0);
  const end = x + ((<usize>n) << 2);
  for (; x < end; x += 64) {
    const w0 = v128.load(a),
      w1 = v128.load(a, 16);
    s0 = f32x4.add(s0, f32x4.mul(halfEven(w0, bf, mask), halfX(bf, x, up)));
    s1 = f32x4.add(s1, f32x4.mul(halfOdd(w0, bf, mask), halfX(bf, x + 16, up)));
    s0 = f32x4.add(s0, f32x4.mul(halfEven(w1, bf, mask), halfX(bf, x + 32, up)));
    s1 = f32x4.add(s1, f32x4.mul(halfOdd(w1, bf, mask), halfX(bf, x + 48, up)));
    a += 32;
  }
  const s = hsum(f32x4.add(s0, s1));
  return bf ? s : s * F16_SUM_UP;
}

// dotHalf of the rows at a and b (lanes 0 and 1), streamed at once: two reads in flight.
@inline function dotHalf2(bf: bool, a: usize, b: usize, x: usize, n: i32): v128 {
  const mask = halfEoMask(bf),
    up = f32x4.splat(F16_X_UP);
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0),
    b0 = f32x4.splat(0),
    b1 = f32x4.splat(0);
  const end = x + ((<usize>n) << 2);
  for (; x < end; x += 64) {
    const wa0 = v128.load(a),
      wb0 = v128.load(b);
    const x0 = halfX(bf, x, up),
      x1 = halfX(bf, x + 16, up);
    a0 = f32x4.add(a0, f32x4.mul(halfEven(wa0, bf, mask), x0));
    b0 = f32x4.add(b0, f32x4.mul(halfEven(wb0, bf, mask), x0));
    a1 = f32x4.add(a1, f32x4.mul(halfOdd(wa0, bf, mask), x1));
    b1 = f32x4.add(b1, f32x4.mul(halfOdd(wb0, bf, mask), x1));
    const wa1 = v128.load(a, 16),
      wb1 = v128.load(b, 16);
    const x2 = halfX(bf, x + 32, up),
      x3 = halfX(bf, x + 48, up);
    a0 = f32x4.add(a0, f32x4.mul(halfEven(wa1, bf, mask), x2));
    b0 = f32x4.add(b0, f32x4.mul(halfEven(wb1, bf, mask), x2));
    a1 = f32x4.add(a1, f32x4.mul(halfOdd(wa1, bf, mask), x3));
    b1 = f32x4.add(b1, f32x4.mul(halfOdd(wb1, bf, mask), x3));
    a += 32;
    b += 32;
  }
  let sa = hsum(f32x4.add(a0, a1)),
    sb = hsum(f32x4.add(b0, b1));
  if (!bf) {
    sa *= F16_SUM_UP;
    sb *= F16_SUM_UP;
  }
  return f32x4.replace_lane(f32x4.splat(sa), 1, sb);
}

export { dotHalf, dotHalf2 };
