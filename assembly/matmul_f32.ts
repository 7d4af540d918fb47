// F32 weights times a batch of tokens: y[t * rows + r] = dot(W[r, :], x_t) for t < ntok and
// r in [r0, r1). W row-major (cols floats per row), x holds ntok rows of cols floats.
// Tiles of 4 rows x 2 tokens: each weight load serves two tokens and each activation load four
// rows, with 8 independent accumulators to cover the f32 add latency.

import { fma4, hsum } from "./lanes";

@inline function dot1(row: usize, x: usize, cols: i32): f32 {
  let a = f32x4.splat(0),
    b = f32x4.splat(0);
  let i = 0;
  for (; i + 8 <= cols; i += 8) {
    const o = (<usize>i) << 2;
    a = fma4(a, v128.load(row + o), v128.load(x + o));
    b = fma4(b, v128.load(row + o, 16), v128.load(x + o, 16));
  }
  let s = hsum(f32x4.add(a, b));
  for (; i < cols; i++) s += load<f32>(row + ((<usize>i) << 2)) * load<f32>(x + ((<usize>i) << 2));
  return s;
}

export function matmul_f32(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const stride = (<usize>cols) << 2;
  const ystride = (<usize>rows) << 2;
  const c4 = cols & ~3;
  let r = r0;
  for (; r + 4 <= r1; r += 4) {
    const p0 = w + <usize>r * stride,
      p1 = p0 + stride,
      p2 = p1 + stride,
      p3 = p2 + stride;
    let t = 0;
    for (; t + 2 <= ntok; t += 2) {
      const xa = x + <usize>t * stride,
        xb = xa + stride;
      let a0 = f32x4.splat(0),
        a1 = f32x4.splat(0),
        a2 = f32x4.splat(0),
        a3 = f32x4.splat(0);
      let b0 = f32x4.splat(0),
        b1 = f32x4.splat(0),
        b2 = f32x4.splat(0),
        b3 = f32x4.splat(0);
      for (let i = 0; i < c4; i += 4) {
        const o = (<usize>i) << 2;
        const va = v128.load(xa + o),
          vb = v128.load(xb + o);
        const w0 = v128.load(p0 + o),
          w1 = v128.load(p1 + o),
          w2 = v128.load(p2 + o),
          w3 = v128.load(p3 + o);
        a0 = fma4(a0, w0, va);
        a1 = fma4(a1, w1, va);
        a2 = fma4(a2, w2, va);
        a3 = fma4(a3, w3, va);
        b0 = fma4(b0, w0, vb);
        b1 = fma4(b1, w1, vb);
        b2 = fma4(b2, w2, vb);
        b3 = fma4(b3, w3, vb);
      }
      let sa0 = hsum(a0),
        sa1 = hsum(a1),
        sa2 = hsum(a2),
        sa3 = hsum(a3);
      let sb0 = hsum(b0),
        sb1 = hsum(b1),
        sb2 = hsum(b2),
        sb3 = hsum(b3);
      for (let i = c4; i < cols; i++) {
        const o = (<usize>i) << 2;
        const ua = load<f32>(xa + o),
          ub = load<f32>(xb + o);
        const u0 = load<f32>(p0 + o),
          u1 = load<f32>(p1 + o),
          u2 = load<f32>(p2 + o),
          u3 = load<f32>(p3 + o);
        sa0 += u0 * ua;
        sa1 += u1 * ua;
        sa2 += u2 * ua;
        sa3 += u3 * ua;
        sb0 += u0 * ub;
        sb1 += u1 * ub;
        sb2 += u2 * ub;
        sb3 += u3 * ub;
      }
      const ya = y + <usize>t * ystride + ((<usize>r) << 2),
        yb = ya + ystride;
      store<f32>(ya, sa0);
      store<f32>(ya, sa1, 4);
      store<f32>(ya, sa2, 8);
      store<f32>(ya, sa3, 12);
      store<f32>(yb, sb0);
      store<f32>(yb, sb1, 4);
      store<f32>(yb, sb2, 8);
      store<f32>(yb, sb3, 12);
    }
    for (; t < ntok; t++) {
      const xt = x + <usize>t * stride;
      const yt = y + <usize>t * ystride + ((<usize>r) << 2);
      store<f32>(yt, dot1(p0, xt, cols));
      store<f32>(yt, dot1(p1, xt, cols), 4);
      store<f32>(yt, dot1(p2, xt, cols), 8);
      store<f32>(yt, dot1(p3, xt, cols), 12);
    }
  }
  for (; r < r1; r++) {
    const p = w + <usize>r * stride;
    for (let t = 0; t < ntok; t++)
      store<f32>(y + <usize>t * ystride + ((<usize>r) << 2), dot1(p, x + <usize>t * stride, cols));
  }
}
