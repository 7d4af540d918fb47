// The f16 scales (and Q4_1 mins) of GGUF blocks, read one at a time or gathered four blocks at a
// time into f32 lanes: the row dots' block scales and the down columns' per-block multipliers.

import { f16Fields, f16FieldsWide, f16Rebias, f16ToF32Finite } from "./half";

// f16 at p -> f32 (half.ts's branch-free conversion: f16 infinities and NaNs come out finite).
@inline function f16(p: usize): f32 {
  return f16ToF32Finite(<u32>load<u16>(p));
}

// f16 values at p, p + bs, p + 2 bs, p + 3 bs -> f32x4 (the same bit moves as f16()); only the
// first n (1..4) are read, the other lanes are 0
@inline function f16x4(p: usize, bs: usize, n: i32): v128 {
  let v = i32x4.splat(0);
  v = v128.load16_lane(p, v, 1); // into the high half of each i32 lane: h << 16
  if (n == 4) {
    v = v128.load16_lane(p + bs, v, 3);
    v = v128.load16_lane(p + 2 * bs, v, 5);
    v = v128.load16_lane(p + 3 * bs, v, 7);
  } else {
    if (n > 1) v = v128.load16_lane(p + bs, v, 3);
    if (n > 2) v = v128.load16_lane(p + 2 * bs, v, 5);
  }
  return highHalves(v, false);
}

// f16 values in the high halves of the u32 lanes of v -> f32x4: sign kept, exponent and mantissa
// shifted into place (the mask clears what the arithmetic shift spread, and with `clearLow` the
// low half's bits too: pairM's lanes hold one there), re-biased by 2^112
@inline function highHalves(v: v128, clearLow: bool): v128 {
  return f32x4.mul(v128.and(i32x4.shr_s(v, 3), clearLow ? f16Fields() : f16FieldsWide()), f16Rebias());
}

// The f16 pairs (d, m) that start each of n (1..4) Q4_1 blocks at p, p + bs, ... in u32 lanes (d
// in the low half), one load each; pairD / pairM convert them (highHalves).
@inline function f16pairs(p: usize, bs: usize, n: i32): v128 {
  let v = i32x4.splat(0);
  v = v128.load32_lane(p, v, 0);
  if (n > 1) v = v128.load32_lane(p + bs, v, 1);
  if (n > 2) v = v128.load32_lane(p + 2 * bs, v, 2);
  if (n > 3) v = v128.load32_lane(p + 3 * bs, v, 3);
  return v;
}
@inline function pairD(v: v128): v128 {
  return highHalves(i32x4.shl(v, 16), false);
}
@inline function pairM(v: v128): v128 {
  return highHalves(v, true);
}

export { f16, f16x4, highHalves, f16pairs, pairD, pairM };
