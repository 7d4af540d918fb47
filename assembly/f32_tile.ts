// The 2 x 4 tile of dot products that the f32 matrix products share (matmul_f32's prefill,
// train.ts's C = A . B^T): two rows u0, u1 against four rows w, w + stride, w + 2 stride,
// w + 3 stride, k floats each. Each load of a u row serves four dots and each load of a w row two,
// with 8 independent accumulators to cover the f32 add latency. Float order per dot: 4-lane
// partial sums over the multiple of 4, their lanes summed (lanes.ts's hsum), then the tail in
// order. Not re-exported by index.ts: nothing here is a kernel.

import { fma4, hsum } from "./lanes";

/** out0[q] (+)= u0 . w_q and out1[q] (+)= u1 . w_q for q < 4 (f32 at out + 4 q); with `add` onto what is there. */
@inline function dots2x4(
  u0: usize,
  u1: usize,
  w: usize,
  stride: usize,
  k: i32,
  out0: usize,
  out1: usize,
  add: bool,
): void {
  const w0 = w,
    w1 = w0 + stride,
    w2 = w1 + stride,
    w3 = w2 + stride;
  const k4 = k & ~3;
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0),
    a2 = f32x4.splat(0),
    a3 = f32x4.splat(0);
  let b0 = f32x4.splat(0),
    b1 = f32x4.splat(0),
    b2 = f32x4.splat(0),
    b3 = f32x4.splat(0);
  for (let i = 0; i < k4; i += 4) {
    const o = (<usize>i) << 2;
    const va = v128.load(u0 + o),
      vb = v128.load(u1 + o);
    const x0 = v128.load(w0 + o),
      x1 = v128.load(w1 + o),
      x2 = v128.load(w2 + o),
      x3 = v128.load(w3 + o);
    a0 = fma4(a0, x0, va);
    a1 = fma4(a1, x1, va);
    a2 = fma4(a2, x2, va);
    a3 = fma4(a3, x3, va);
    b0 = fma4(b0, x0, vb);
    b1 = fma4(b1, x1, vb);
    b2 = fma4(b2, x2, vb);
    b3 = fma4(b3, x3, vb);
  }
  let sa0 = hsum(a0),
    sa1 = hsum(a1),
    sa2 = hsum(a2),
    sa3 = hsum(a3);
  let sb0 = hsum(b0),
    sb1 = hsum(b1),
    sb2 = hsum(b2),
    sb3 = hsum(b3);
  for (let i = k4; i < k; i++) {
    const o = (<usize>i) << 2;
    const ua = load<f32>(u0 + o),
      ub = load<f32>(u1 + o);
    const x0 = load<f32>(w0 + o),
      x1 = load<f32>(w1 + o),
      x2 = load<f32>(w2 + o),
      x3 = load<f32>(w3 + o);
    sa0 += x0 * ua;
    sa1 += x1 * ua;
    sa2 += x2 * ua;
    sa3 += x3 * ua;
    sb0 += x0 * ub;
    sb1 += x1 * ub;
    sb2 += x2 * ub;
    sb3 += x3 * ub;
  }
  if (add) {
    sa0 += load<f32>(out0);
    sa1 += load<f32>(out0, 4);
    sa2 += load<f32>(out0, 8);
    sa3 += load<f32>(out0, 12);
    sb0 += load<f32>(out1);
    sb1 += load<f32>(out1, 4);
    sb2 += load<f32>(out1, 8);
    sb3 += load<f32>(out1, 12);
  }
  store<f32>(out0, sa0);
  store<f32>(out0, sa1, 4);
  store<f32>(out0, sa2, 8);
  store<f32>(out0, sa3, 12);
  store<f32>(out1, sb0);
  store<f32>(out1, sb1, 4);
  store<f32>(out1, sb2, 8);
  store<f32>(out1, sb3, 12);
}

export { dots2x4 };
