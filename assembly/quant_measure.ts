// Rows quantized for a store and measured (src/offline/convert/row-conversion.ts's MeasureJob,
// through src/runtime/quant-kernels.ts): each row quantized (quant_blocks.ts), what was stored
// decoded again, and the row's error against its values summed: the sum of squared errors, the
// largest error and the largest |value|, as the reference (row-conversion.ts ErrorStats.add)
// computes them in double precision: d = got - value of the two floats widened, d * d added in
// index order. That order is a chain of dependent additions per row; four rows go at once, two
// to a f64x2, so that each row keeps its own order and two chains overlap.
import { decodeRow, quantizeValues, typeRowBytes } from "./quant_blocks";

/** Lanes 2 and 3 of v moved to 0 and 1. */
@inline function high(v: v128): v128 {
  return i32x4.shuffle(v, v, 2, 3, 2, 3);
}

/**
 * `rows` rows of n f32 at src -> `type` at dst, measured. `got` is room for 4 decoded rows
 * (16 n bytes), `scratch` quantize_rows's; errors[r] (f64) gets row r's sum of squared errors; maxima holds two f64, the
 * largest error and the largest |value| so far (max-ed into, NaN skipped as the reference's
 * comparisons skip it). Returns -1, or the first row whose stored values do not all decode to
 * finite numbers (rows after it are not done): the caller's reference then says which value.
 */
export function quantize_measure(
  type: i32,
  src: usize,
  rows: i32,
  n: i32,
  dst: usize,
  got: usize,
  errors: usize,
  maxima: usize,
  scratch: usize,
): i32 {
  const N = <usize>n;
  const rb = typeRowBytes(type, N);
  const rowF = N << 2;
  let errAb = f64x2.splat(load<f64>(maxima)),
    errCd = errAb;
  let maxVal = f32x4.splat(<f32>load<f64>(maxima, 8));
  for (let r0 = 0; r0 < rows; r0 += 4) {
    // a group of fewer than 4 rows repeats its last: the repeat's sums are dropped
    const live = min(4, rows - r0);
    for (let k = 0; k < live; k++) {
      const r = <usize>(r0 + k);
      quantizeValues(type, src + r * rowF, N, dst + r * rb, scratch);
      if (!decodeRow(type, dst + r * rb, N, got + <usize>k * rowF)) return r0 + k;
    }
    const sa = src + <usize>r0 * rowF;
    const sb = src + <usize>(r0 + min(1, live - 1)) * rowF,
      sc = src + <usize>(r0 + min(2, live - 1)) * rowF,
      sd = src + <usize>(r0 + min(3, live - 1)) * rowF;
    const ga = got,
      gb = got + <usize>min(1, live - 1) * rowF,
      gc = got + <usize>min(2, live - 1) * rowF,
      gd = got + <usize>min(3, live - 1) * rowF;
    let ab = f64x2.splat(0),
      cd = f64x2.splat(0);
    for (let i: usize = 0; i < rowF; i += 16) {
      const va = v128.load(sa + i),
        vb = v128.load(sb + i),
        vc = v128.load(sc + i),
        vd = v128.load(sd + i);
      maxVal = f32x4.pmax(maxVal, f32x4.abs(va));
      maxVal = f32x4.pmax(maxVal, f32x4.abs(vb));
      maxVal = f32x4.pmax(maxVal, f32x4.abs(vc));
      maxVal = f32x4.pmax(maxVal, f32x4.abs(vd));
      // [row a, row b] and [row c, row d] pairs of values 0, 1 (lo) and 2, 3 (hi)
      const sab = i32x4.shuffle(va, vb, 0, 4, 1, 5),
        sab2 = i32x4.shuffle(va, vb, 2, 6, 3, 7),
        scd = i32x4.shuffle(vc, vd, 0, 4, 1, 5),
        scd2 = i32x4.shuffle(vc, vd, 2, 6, 3, 7);
      const ua = v128.load(ga + i),
        ub = v128.load(gb + i),
        uc = v128.load(gc + i),
        ud = v128.load(gd + i);
      const gab = i32x4.shuffle(ua, ub, 0, 4, 1, 5),
        gab2 = i32x4.shuffle(ua, ub, 2, 6, 3, 7),
        gcd = i32x4.shuffle(uc, ud, 0, 4, 1, 5),
        gcd2 = i32x4.shuffle(uc, ud, 2, 6, 3, 7);
      const d0 = f64x2.sub(f64x2.promote_low_f32x4(gab), f64x2.promote_low_f32x4(sab)),
        d1 = f64x2.sub(f64x2.promote_low_f32x4(high(gab)), f64x2.promote_low_f32x4(high(sab))),
        d2 = f64x2.sub(f64x2.promote_low_f32x4(gab2), f64x2.promote_low_f32x4(sab2)),
        d3 = f64x2.sub(f64x2.promote_low_f32x4(high(gab2)), f64x2.promote_low_f32x4(high(sab2)));
      const e0 = f64x2.sub(f64x2.promote_low_f32x4(gcd), f64x2.promote_low_f32x4(scd)),
        e1 = f64x2.sub(f64x2.promote_low_f32x4(high(gcd)), f64x2.promote_low_f32x4(high(scd))),
        e2 = f64x2.sub(f64x2.promote_low_f32x4(gcd2), f64x2.promote_low_f32x4(scd2)),
        e3 = f64x2.sub(f64x2.promote_low_f32x4(high(gcd2)), f64x2.promote_low_f32x4(high(scd2)));
      ab = f64x2.add(ab, f64x2.mul(d0, d0));
      cd = f64x2.add(cd, f64x2.mul(e0, e0));
      ab = f64x2.add(ab, f64x2.mul(d1, d1));
      cd = f64x2.add(cd, f64x2.mul(e1, e1));
      ab = f64x2.add(ab, f64x2.mul(d2, d2));
      cd = f64x2.add(cd, f64x2.mul(e2, e2));
      ab = f64x2.add(ab, f64x2.mul(d3, d3));
      cd = f64x2.add(cd, f64x2.mul(e3, e3));
      // each error max-ed into a running maximum, never into another error: a NaN is skipped
      errAb = f64x2.pmax(
        f64x2.pmax(f64x2.pmax(f64x2.pmax(errAb, f64x2.abs(d0)), f64x2.abs(d1)), f64x2.abs(d2)),
        f64x2.abs(d3),
      );
      errCd = f64x2.pmax(
        f64x2.pmax(f64x2.pmax(f64x2.pmax(errCd, f64x2.abs(e0)), f64x2.abs(e1)), f64x2.abs(e2)),
        f64x2.abs(e3),
      );
    }
    const e = errors + ((<usize>r0) << 3);
    store<f64>(e, f64x2.extract_lane(ab, 0));
    if (live > 1) store<f64>(e, f64x2.extract_lane(ab, 1), 8);
    if (live > 2) store<f64>(e, f64x2.extract_lane(cd, 0), 16);
    if (live > 3) store<f64>(e, f64x2.extract_lane(cd, 1), 24);
  }
  const m = max(
    max(f64x2.extract_lane(errAb, 0), f64x2.extract_lane(errAb, 1)),
    max(f64x2.extract_lane(errCd, 0), f64x2.extract_lane(errCd, 1)),
  );
  store<f64>(maxima, m);
  const v = max(
    max(f32x4.extract_lane(maxVal, 0), f32x4.extract_lane(maxVal, 1)),
    max(f32x4.extract_lane(maxVal, 2), f32x4.extract_lane(maxVal, 3)),
  );
  store<f64>(maxima, <f64>v, 8);
  return -1;
}
