// F32 weights: y[r] = dot(W[r, :], x) for rows r0..r1. W is row-major, `cols` floats per row
// (no repacking). F32 matvec is bound by memory (4 bytes per multiply-add), so what counts is how
// many weight streams are in flight: four rows at once, one from each quarter of the range, run
// 1.15-1.26x two rows from the two halves from DRAM, and those 1.32-1.38x one row at a time
// (bench/kernels A/B, docs/benchmarks-log.md); four adjacent rows sharing each activation load
// are slower than one. Two accumulators a row (eight chains in
// flight hide the f32 add latency; SIMD128 has no fused multiply-add outside relaxed SIMD).

import { fma4, hsum } from "./lanes";

// Row r's dot from its two accumulators (columns 8i..8i+3 and 8i+4..8i+7) and the tail past them:
// the one order every F32 row is summed in, whichever stream it was in.
@inline function rowSum(row: usize, x: usize, cols: i32, i: i32, a: v128, b: v128): f32 {
  for (; i + 8 <= cols; i += 8) {
    const o = (<usize>i) << 2;
    a = fma4(a, v128.load(row + o), v128.load(x + o));
    b = fma4(b, v128.load(row + o, 16), v128.load(x + o, 16));
  }
  let s = hsum(f32x4.add(a, b));
  for (; i < cols; i++) s += load<f32>(row + ((<usize>i) << 2)) * load<f32>(x + ((<usize>i) << 2));
  return s;
}

/** y[r] = W[r,:] . x for r in [r0, r1); any rows, any cols. */
export function matvec_f32(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const stride = (<usize>cols) << 2;
  // four rows at once, one from each quarter of the range (four weight streams); the rows past
  // the quarters (at most three) one at a time
  const q = (r1 - r0) >> 2;
  const c8 = cols & ~7;
  for (let k = 0; k < q; k++) {
    const r = r0 + k;
    const p0 = w + <usize>r * stride,
      p1 = p0 + <usize>q * stride,
      p2 = p1 + <usize>q * stride,
      p3 = p2 + <usize>q * stride;
    let a0 = f32x4.splat(0),
      b0 = f32x4.splat(0),
      a1 = f32x4.splat(0),
      b1 = f32x4.splat(0),
      a2 = f32x4.splat(0),
      b2 = f32x4.splat(0),
      a3 = f32x4.splat(0),
      b3 = f32x4.splat(0);
    for (let i = 0; i < c8; i += 8) {
      const o = (<usize>i) << 2;
      const x0 = v128.load(x + o),
        x1 = v128.load(x + o, 16);
      a0 = fma4(a0, v128.load(p0 + o), x0);
      a1 = fma4(a1, v128.load(p1 + o), x0);
      a2 = fma4(a2, v128.load(p2 + o), x0);
      a3 = fma4(a3, v128.load(p3 + o), x0);
      b0 = fma4(b0, v128.load(p0 + o, 16), x1);
      b1 = fma4(b1, v128.load(p1 + o, 16), x1);
      b2 = fma4(b2, v128.load(p2 + o, 16), x1);
      b3 = fma4(b3, v128.load(p3 + o, 16), x1);
    }
    store<f32>(y + ((<usize>r) << 2), rowSum(p0, x, cols, c8, a0, b0));
    store<f32>(y + ((<usize>(r + q)) << 2), rowSum(p1, x, cols, c8, a1, b1));
    store<f32>(y + ((<usize>(r + 2 * q)) << 2), rowSum(p2, x, cols, c8, a2, b2));
    store<f32>(y + ((<usize>(r + 3 * q)) << 2), rowSum(p3, x, cols, c8, a3, b3));
  }
  for (let r = r0 + 4 * q; r < r1; r++) {
    const z = f32x4.splat(0);
    store<f32>(y + ((<usize>r) << 2), rowSum(w + <usize>r * stride, x, cols, 0, z, z));
  }
}
