// Lane arithmetic shared by the kernels. Horizontal sums of a v128's four f32 lanes: each
// kernel's plain-TS reference adds a row's lanes in one of these two orders, so a kernel keeps
// the one its reference has.

/** ((l0 + l1) + l2) + l3: the packed Q4 / Q8_0, F32 and sparse kernels' order. */
@inline function hsum(v: v128): f32 {
  return f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3);
}

/** (l0 + l2) + (l1 + l3), two vector adds: the F16 / BF16 and K-quant kernels' order. */
@inline function hsumPairs(v: v128): f32 {
  const a = f32x4.add(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return f32x4.extract_lane(f32x4.add(a, i32x4.shuffle(a, a, 1, 0, 3, 2)), 0);
}

/** The four i32 lanes summed (exact: the order does not matter). */
@inline function hsumi(v: v128): i32 {
  return i32x4.extract_lane(v, 0) + i32x4.extract_lane(v, 1) + i32x4.extract_lane(v, 2) + i32x4.extract_lane(v, 3);
}

/** acc + a * b, unfused (the SIMD128 build has no fused multiply-add; relaxed_madd would change bits). */
@inline function fma4(acc: v128, a: v128, b: v128): v128 {
  return f32x4.add(acc, f32x4.mul(a, b));
}

export { fma4, hsum, hsumi, hsumPairs };
