// Columns of a row-major f32 matrix as rows: Down's columns, which a store keeps as one row per
// neuron, gathered from a band of the checkpoint's rows (src/runtime/quant-kernels.ts).

/**
 * Columns [c0, c0 + count) of the f32 matrix at src (`rows` rows, `stride` floats apart) -> count
 * rows of `rows` f32 at dst: dst[k * rows + r] = src[r * stride + c0 + k]. Four rows by four
 * columns at a time, as 4 x 4 transposes in registers, a column group down all the rows: a stride
 * of a whole number of 4 KiB puts every row's line in the same cache set, and the lines a strip
 * reads are gone before the next group reads them again (5x slower); the caller's rows are an
 * odd number of cache lines apart (src/runtime/quant-kernels.ts putBand).
 */
export function transpose_columns(src: usize, rows: i32, stride: i32, c0: i32, count: i32, dst: usize): void {
  const R = <usize>rows,
    K = <usize>count;
  const rowStride = (<usize>stride) << 2,
    outStride = R << 2;
  let k: usize = 0;
  for (; k + 4 <= K; k += 4) {
    let p = src + ((<usize>c0 + k) << 2);
    const o = dst + k * outStride;
    let r: usize = 0;
    for (; r + 4 <= R; r += 4, p += rowStride << 2) {
      const a = v128.load(p),
        b = v128.load(p + rowStride),
        c = v128.load(p + 2 * rowStride),
        d = v128.load(p + 3 * rowStride);
      const ab0 = i32x4.shuffle(a, b, 0, 4, 1, 5),
        ab1 = i32x4.shuffle(a, b, 2, 6, 3, 7),
        cd0 = i32x4.shuffle(c, d, 0, 4, 1, 5),
        cd1 = i32x4.shuffle(c, d, 2, 6, 3, 7);
      v128.store(o + (r << 2), i64x2.shuffle(ab0, cd0, 0, 2));
      v128.store(o + outStride + (r << 2), i64x2.shuffle(ab0, cd0, 1, 3));
      v128.store(o + 2 * outStride + (r << 2), i64x2.shuffle(ab1, cd1, 0, 2));
      v128.store(o + 3 * outStride + (r << 2), i64x2.shuffle(ab1, cd1, 1, 3));
    }
    for (; r < R; r++, p += rowStride)
      for (let j: usize = 0; j < 4; j++) store<u32>(o + j * outStride + (r << 2), load<u32>(p + (j << 2)));
  }
  for (; k < K; k++) {
    const p = src + ((<usize>c0 + k) << 2);
    const o = dst + k * outStride;
    for (let r: usize = 0; r < R; r++) store<u32>(o + (r << 2), load<u32>(p + r * rowStride));
  }
}
