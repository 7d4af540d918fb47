// F32 weights: y[r] = dot(W[r, :], x) for rows r0..r1. W is row-major, `cols` floats per row
// (no repacking). Four rows share each activation load, and each row keeps two accumulators so
// the f32 add latency is hidden (SIMD128 has no fused multiply-add outside relaxed SIMD).

@inline function hsum(v: v128): f32 {
  return f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3);
}

@inline function fma4(acc: v128, a: v128, b: v128): v128 {
  return f32x4.add(acc, f32x4.mul(a, b));
}

/** Dot of one row with x, for the rows left over after the 4-row tiles. */
@inline function dotRow(row: usize, x: usize, cols: i32): f32 {
  let a = f32x4.splat(0), b = f32x4.splat(0);
  let i = 0;
  for (; i + 8 <= cols; i += 8) {
    const o = <usize>i << 2;
    a = fma4(a, v128.load(row + o), v128.load(x + o));
    b = fma4(b, v128.load(row + o, 16), v128.load(x + o, 16));
  }
  let s = hsum(f32x4.add(a, b));
  for (; i < cols; i++) s += load<f32>(row + (<usize>i << 2)) * load<f32>(x + (<usize>i << 2));
  return s;
}

/** y[r] = W[r,:] . x for r in [r0, r1); any rows, any cols. */
export function matvec_f32(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const stride = <usize>cols << 2;
  let r = r0;
  for (; r + 4 <= r1; r += 4) {
    const p0 = w + <usize>r * stride, p1 = p0 + stride, p2 = p1 + stride, p3 = p2 + stride;
    let a0 = f32x4.splat(0), b0 = f32x4.splat(0), a1 = f32x4.splat(0), b1 = f32x4.splat(0);
    let a2 = f32x4.splat(0), b2 = f32x4.splat(0), a3 = f32x4.splat(0), b3 = f32x4.splat(0);
    let i = 0;
    for (; i + 8 <= cols; i += 8) {
      const o = <usize>i << 2;
      const xa = v128.load(x + o), xb = v128.load(x + o, 16);
      a0 = fma4(a0, v128.load(p0 + o), xa); b0 = fma4(b0, v128.load(p0 + o, 16), xb);
      a1 = fma4(a1, v128.load(p1 + o), xa); b1 = fma4(b1, v128.load(p1 + o, 16), xb);
      a2 = fma4(a2, v128.load(p2 + o), xa); b2 = fma4(b2, v128.load(p2 + o, 16), xb);
      a3 = fma4(a3, v128.load(p3 + o), xa); b3 = fma4(b3, v128.load(p3 + o, 16), xb);
    }
    let s0 = hsum(f32x4.add(a0, b0)), s1 = hsum(f32x4.add(a1, b1)), s2 = hsum(f32x4.add(a2, b2)), s3 = hsum(f32x4.add(a3, b3));
    for (; i < cols; i++) {
      const o = <usize>i << 2;
      const xv = load<f32>(x + o);
      s0 += load<f32>(p0 + o) * xv; s1 += load<f32>(p1 + o) * xv;
      s2 += load<f32>(p2 + o) * xv; s3 += load<f32>(p3 + o) * xv;
    }
    const yp = y + (<usize>r << 2);
    store<f32>(yp, s0); store<f32>(yp, s1, 4); store<f32>(yp, s2, 8); store<f32>(yp, s3, 12);
  }
  for (; r < r1; r++) store<f32>(y + (<usize>r << 2), dotRow(w + <usize>r * stride, x, cols));
}
