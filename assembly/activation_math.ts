// The activation functions' arithmetic, shared by the dense kernels (model_ops.ts) and the sparse
// ones (sparse_gate_factor.ts) so that both compute the same values. All @inline (each call site gets
// the code), as half.ts.

// SiLU four lanes at a time: x / (1 + e^-x), with e^-x from exp4 below (SIMD128 only and no fused
// multiply-add, so both kernel builds give the same bits). With the scalar Mathf.exp the SiLU took
// 0.6-1 ms of a 1b model's token (124k activations, serial on the main thread), 0.21-0.23 now;
// within 2 ulp of the exact SiLU from -87 up (test/ops.test.ts).
@inline function silu4(x: v128): v128 {
  return f32x4.div(x, f32x4.add(f32x4.splat(1), exp4(f32x4.neg(x))));
}
@inline function silu(x: f32): f32 {
  return f32x4.extract_lane(silu4(f32x4.splat(x)), 0);
}

// e^x in four lanes (the SiLU and attention's softmax), x clamped to [-104, 89]: above 88.73 it
// is infinity, below -103.3 the smallest subnormal or 0, as e^x in f32. x = n ln 2 + r with
// |r| <= ln 2 / 2, ln 2 split in two so that n ln 2 is exact enough (Cody and Waite),
// e^r = 1 + r + r^2 p(r) with p of degree 5 (Cephes' expf coefficients), 2^n put into exponent bits.
const EXP_C = memory.data<f32>(
  [
    89.0, -104.0, 1.44269504088896341, 0.693359375, -2.1219444e-4, 1.98756915e-4, 1.3981999507e-3, 8.3334519073e-3,
    4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1,
  ],
  16,
);
@inline function expC(i: usize): v128 {
  return v128.load32_splat(EXP_C + (i << 2));
}
@inline function exp4(x: v128): v128 {
  x = f32x4.pmax(f32x4.pmin(x, expC(0)), expC(1));
  const n = f32x4.nearest(f32x4.mul(x, expC(2)));
  const r = f32x4.sub(f32x4.sub(x, f32x4.mul(n, expC(3))), f32x4.mul(n, expC(4)));
  let p = f32x4.add(f32x4.mul(expC(5), r), expC(6));
  p = f32x4.add(f32x4.mul(p, r), expC(7));
  p = f32x4.add(f32x4.mul(p, r), expC(8));
  p = f32x4.add(f32x4.mul(p, r), expC(9));
  p = f32x4.add(f32x4.mul(p, r), expC(10));
  p = f32x4.add(f32x4.add(f32x4.mul(f32x4.mul(p, r), r), r), f32x4.splat(1));
  // 2^n as 2^h 2^(n - h), h = n >> 1: n is in [-150, 129] after the clamp, beyond one exponent
  // field, so results overflow to infinity (the SiLU's limit for large -x) and underflow
  // gradually into subnormals as e^x does
  const ni = i32x4.trunc_sat_f32x4_s(n);
  const h = i32x4.shr_s(ni, 1);
  const b = i32x4.splat(127);
  return f32x4.mul(f32x4.mul(p, i32x4.shl(i32x4.add(h, b), 23)), i32x4.shl(i32x4.add(i32x4.sub(ni, h), b), 23));
}
// e^x of one value, exp4's bits (a tail of the vector loops)
@inline function exp1(x: f32): f32 {
  return f32x4.extract_lane(exp4(f32x4.splat(x)), 0);
}
@inline function gelu(x: f32): f32 {
  // tanh approximation, as ggml's gelu
  const c: f32 = 0.7978845608028654;
  return <f32>0.5 * x * (<f32>1.0 + Mathf.tanh(c * x * (<f32>1.0 + <f32>0.044715 * x * x)));
}

// gpt-oss's clamped SwiGLU (llama.cpp's swiglu_oai; the same numbers as src/format/activations.ts):
// the gate capped at 7 from above times sigmoid(1.702 * it); the up factor is (u clamped to
// +-7) + 1 (swigluOaiUp)
@inline function swigluOaiGate(g: f32): f32 {
  const x = min(g, <f32>7);
  return x / (<f32>1 + exp1(<f32>-1.702 * x));
}
@inline function swigluOaiUp(u: f32): f32 {
  return min(max(u, <f32>-7), <f32>7) + <f32>1;
}

export { exp4, exp1, silu4, silu, gelu, swigluOaiGate, swigluOaiUp };
