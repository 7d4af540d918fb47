// F32 weights times a batch of tokens: y[t * rows + r] = dot(W[r, :], x_t) for t < ntok and
// r in [r0, r1). W row-major (cols floats per row), x holds ntok rows of cols floats.
// Tiles of 4 rows x 2 tokens (f32_tile.ts, which train.ts's products share).

import { dots2x4 } from "./f32_tile";
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
  let r = r0;
  for (; r + 4 <= r1; r += 4) {
    const p0 = w + <usize>r * stride,
      p1 = p0 + stride,
      p2 = p1 + stride,
      p3 = p2 + stride;
    let t = 0;
    for (; t + 2 <= ntok; t += 2) {
      const xa = x + <usize>t * stride;
      const ya = y + <usize>t * ystride + ((<usize>r) << 2);
      dots2x4(xa, xa + stride, p0, stride, cols, ya, ya + ystride, false);
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
