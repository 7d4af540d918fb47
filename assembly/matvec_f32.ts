// F32 weights: y[r] = dot(W[r, :], x) for rows r0..r1. W is row-major, `cols` floats per row
// (no repacking). One row at a time with four accumulators (SIMD128 has no fused multiply-add
// outside relaxed SIMD, so four chains hide the f32 add latency). F32 matvec is bound by memory
// (4 bytes per multiply-add): one row at a time is a single sequential stream, faster from DRAM
// than four rows sharing each activation load (four streams; speeds: docs/benchmarks.md,
// "Kernel variants measured").

@inline function hsum(v: v128): f32 {
  return f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3);
}

@inline function fma4(acc: v128, a: v128, b: v128): v128 {
  return f32x4.add(acc, f32x4.mul(a, b));
}

/** y[r] = W[r,:] . x for r in [r0, r1); any rows, any cols. */
export function matvec_f32(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const stride = (<usize>cols) << 2;
  for (let r = r0; r < r1; r++) {
    const row = w + <usize>r * stride;
    let a = f32x4.splat(0),
      b = f32x4.splat(0),
      c = f32x4.splat(0),
      d = f32x4.splat(0);
    let i = 0;
    for (; i + 16 <= cols; i += 16) {
      const o = (<usize>i) << 2;
      a = fma4(a, v128.load(row + o), v128.load(x + o));
      b = fma4(b, v128.load(row + o, 16), v128.load(x + o, 16));
      c = fma4(c, v128.load(row + o, 32), v128.load(x + o, 32));
      d = fma4(d, v128.load(row + o, 48), v128.load(x + o, 48));
    }
    for (; i + 4 <= cols; i += 4) a = fma4(a, v128.load(row + ((<usize>i) << 2)), v128.load(x + ((<usize>i) << 2)));
    let s = hsum(f32x4.add(f32x4.add(a, b), f32x4.add(c, d)));
    for (; i < cols; i++) s += load<f32>(row + ((<usize>i) << 2)) * load<f32>(x + ((<usize>i) << 2));
    store<f32>(y + ((<usize>r) << 2), s);
  }
}
