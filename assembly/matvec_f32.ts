// F32 weights: y[r] = dot(W[r, :], x) for rows r0..r1. W is row-major, `cols` floats per row
// (no repacking). Four accumulators a row (SIMD128 has no fused multiply-add outside relaxed
// SIMD, so four chains hide the f32 add latency). F32 matvec is bound by memory (4 bytes per
// multiply-add): two rows at once, one from each half of the range (two weight streams), ran
// 1.32-1.38x one row at a time from DRAM (bench/kernels A/B, 2026-12-04); four adjacent rows
// sharing each activation load had been slower than one ("Kernel variants measured").

@inline function hsum(v: v128): f32 {
  return f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3);
}

@inline function fma4(acc: v128, a: v128, b: v128): v128 {
  return f32x4.add(acc, f32x4.mul(a, b));
}

// Row r's dot from its four accumulators and the tail past them: the one order every F32 row is summed in.
@inline function rowSum(row: usize, x: usize, cols: i32, i: i32, a: v128, b: v128, c: v128, d: v128): f32 {
  for (; i + 4 <= cols; i += 4) a = fma4(a, v128.load(row + ((<usize>i) << 2)), v128.load(x + ((<usize>i) << 2)));
  let s = hsum(f32x4.add(f32x4.add(a, b), f32x4.add(c, d)));
  for (; i < cols; i++) s += load<f32>(row + ((<usize>i) << 2)) * load<f32>(x + ((<usize>i) << 2));
  return s;
}

/** y[r] = W[r,:] . x for r in [r0, r1); any rows, any cols. */
export function matvec_f32(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const stride = (<usize>cols) << 2;
  // rows from the two halves of the range at once (two weight streams); the middle row of an odd
  // count goes in as both, its copy not stored
  const half = (r1 - r0) >> 1;
  for (let k = 0; k < (r1 - r0 + 1) >> 1; k++) {
    const r = r0 + k,
      q = k < half ? r1 - half + k : r;
    const row = w + <usize>r * stride,
      roq = w + <usize>q * stride;
    let a = f32x4.splat(0),
      b = f32x4.splat(0),
      c = f32x4.splat(0),
      d = f32x4.splat(0),
      e = f32x4.splat(0),
      f = f32x4.splat(0),
      g = f32x4.splat(0),
      h = f32x4.splat(0);
    let i = 0;
    for (; i + 16 <= cols; i += 16) {
      const o = (<usize>i) << 2;
      const x0 = v128.load(x + o),
        x1 = v128.load(x + o, 16),
        x2 = v128.load(x + o, 32),
        x3 = v128.load(x + o, 48);
      a = fma4(a, v128.load(row + o), x0);
      e = fma4(e, v128.load(roq + o), x0);
      b = fma4(b, v128.load(row + o, 16), x1);
      f = fma4(f, v128.load(roq + o, 16), x1);
      c = fma4(c, v128.load(row + o, 32), x2);
      g = fma4(g, v128.load(roq + o, 32), x2);
      d = fma4(d, v128.load(row + o, 48), x3);
      h = fma4(h, v128.load(roq + o, 48), x3);
    }
    store<f32>(y + ((<usize>r) << 2), rowSum(row, x, cols, i, a, b, c, d));
    if (q != r) store<f32>(y + ((<usize>q) << 2), rowSum(roq, x, cols, i, e, f, g, h));
  }
}
