// F32 weights: y[r] = dot(W[r, :], x) for rows r0..r1. W rows are contiguous, `cols` floats each.

export function matvec_f32(w: usize, x: usize, y: usize, cols: i32, r0: i32, r1: i32): void {
  const stride = <usize>cols << 2;
  for (let r = r0; r < r1; r++) {
    const row = w + <usize>r * stride;
    let acc = f32x4.splat(0);
    let i = 0;
    for (; i + 4 <= cols; i += 4) {
      acc = f32x4.add(acc, f32x4.mul(v128.load(row + (<usize>i << 2)), v128.load(x + (<usize>i << 2))));
    }
    let s = f32x4.extract_lane(acc, 0) + f32x4.extract_lane(acc, 1) + f32x4.extract_lane(acc, 2) + f32x4.extract_lane(acc, 3);
    for (; i < cols; i++) s += load<f32>(row + (<usize>i << 2)) * load<f32>(x + (<usize>i << 2));
    store<f32>(y + (<usize>r << 2), s);
  }
}
