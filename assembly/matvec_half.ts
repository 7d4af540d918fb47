// F16 and BF16 weights times f32 activations prepared as "f32_eo" (prepare_f32_eo below: each 8
// values' even ones, then its odd ones). Rows are GGUF's: `cols` 16-bit values each.
//
// SIMD128 has no half-precision conversion. A v128 of 8 halves read as i32 lanes holds the odd
// ones in their lane's top 16 bits and the even ones a left shift by 16 away from there, so the
// kernels take each 8 values as their even 4 and their odd 4, against activations in that order
// (no shuffle per step). BF16 is the top half of an f32: an and (clearing the even value under
// it) makes the odd ones, the shift the even ones, 2 instructions for 8 values where widening
// took 5 (BF16 matvec 1.13-1.41x). F16 from the top 16 bits is shifted down arithmetically so its
// exponent and mantissa land in the f32 fields and masked (the sign's copies and what lay below
// cleared): that is the half's value times 2^-112 (the exponent bias 15 against f32's 127; exact
// for every finite half, subnormals and zeros included), 5 instructions for 8 values where the
// interleave with zeros took 6 (1.07-1.13x). Halves that are inf or NaN would come out as finite
// numbers near 2^16: the loader rejects such tensors (src/runtime/weight-kernels/half.ts).
//
// The F16 matvecs move the 2^112 onto the activations (times 2^96 when loaded, shared by the 4
// rows of a step, and times 2^16 on each row's sum): a power of two changes no rounding, so the
// bits are those of weight-side scaling, and a multiply per 4 weights is saved. The split keeps
// activations below 2^32 and products above 2^-110 out of f32's overflow and subnormal ranges.
// matmul, where one converted weight vector serves a tile of 4 tokens, scales the weights.
//
// The relaxed build adds F16's products with relaxed_madd (one fused instruction where the CPU
// has FMA; separate ones measured 0.96-0.97x): the two builds agree to rounding, each build's
// kernels with each other to the bit. BF16 adds with separate multiplies and adds in both builds
// (fused, its even/odd steps measured 0.78x), so its bits are the same in both.
import { f16Rebias, f16ToF32, f16XUp, F16_SUM_UP, halfEoMask, halfEven, halfOdd } from "./half";
import { hsumPairs } from "./lanes";

@inline function scalar(h: u32, bf: bool): f32 {
  return bf ? reinterpret<f32>(h << 16) : f16ToF32(h); // the tails: exact, inf and NaN kept
}

/** a + lo * xl + hi * xh: a row's 8-value step into its one accumulator (F16: fused in the relaxed build). */
@inline function step2(a: v128, lo: v128, xl: v128, hi: v128, xh: v128, bf: bool): v128 {
  if (ASC_FEATURE_RELAXED_SIMD && !bf) return f32x4.relaxed_madd(hi, xh, f32x4.relaxed_madd(lo, xl, a));
  return f32x4.add(a, f32x4.add(f32x4.mul(lo, xl), f32x4.mul(hi, xh)));
}

/**
 * ntok rows of cols f32 at x -> "f32_eo" at dst (as many bytes): each whole 8 values' even ones,
 * then its odd ones, as the F16 / BF16 kernels pair them; the values past the last whole 8 as they are.
 */
export function prepare_f32_eo(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const n = <usize>ntok * <usize>cols;
  for (let t: usize = 0; t < n; t += <usize>cols) {
    const xr = x + (t << 2),
      dr = dst + (t << 2);
    let i = 0;
    for (; i + 8 <= cols; i += 8) {
      const o = (<usize>i) << 2;
      const a = v128.load(xr + o),
        b = v128.load(xr + o, 16);
      v128.store(dr + o, i32x4.shuffle(a, b, 0, 2, 4, 6));
      v128.store(dr + o, i32x4.shuffle(a, b, 1, 3, 5, 7), 16);
    }
    for (; i < cols; i++) store<f32>(dr + ((<usize>i) << 2), load<f32>(xr + ((<usize>i) << 2)));
  }
}

/** The activations of a matvec step: F16's times 2^96 (see the top of the file). */
@inline function actIn(xp: usize, bf: bool, up: v128): v128 {
  return bf ? v128.load(xp) : f32x4.mul(v128.load(xp), up);
}

/** A row's sum from its accumulator, back to scale. */
@inline function rowSum(a: v128, bf: bool): f32 {
  return bf ? hsumPairs(a) : hsumPairs(a) * F16_SUM_UP;
}

// A row keeps one accumulator: two for F16 spilled (0.74x); BF16's two, fused, had run 1.09-1.19x
// its one with the widening conversion, below the even/odd one's separate multiplies and adds.

/**
 * dot of one 16-bit row with one f32 row, in the float order every kernel here uses for a row (its
 * accumulator of 8-value steps, its lanes summed, then the tail): a row's bits do not
 * depend on which rows it was computed with, so a thread split or a token tile changes nothing.
 */
@inline function dotRow(w: usize, x: usize, cols: i32, bf: bool): f32 {
  const mask = halfEoMask(bf),
    up = f16XUp();
  let a = f32x4.splat(0);
  let i = 0;
  for (; i + 8 <= cols; i += 8) {
    const xp = x + ((<usize>i) << 2);
    const v = v128.load(w + ((<usize>i) << 1));
    a = step2(a, halfEven(v, bf, mask), actIn(xp, bf, up), halfOdd(v, bf, mask), actIn(xp + 16, bf, up), bf);
  }
  let s = rowSum(a, bf);
  for (; i < cols; i++) s += scalar(<u32>load<u16>(w + ((<usize>i) << 1)), bf) * load<f32>(x + ((<usize>i) << 2));
  return s;
}

// Four rows from four places at once (rows r + k * quarter of the range): four memory streams in
// flight, and each activation load (and F16's scaling of it) serves four rows.
@inline function dotRows4(w: usize, rs: usize, x: usize, y: usize, ys: usize, cols: i32, bf: bool): void {
  const mask = halfEoMask(bf),
    up = f16XUp();
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0),
    a2 = f32x4.splat(0),
    a3 = f32x4.splat(0);
  let i = 0;
  for (; i + 8 <= cols; i += 8) {
    const wp = w + ((<usize>i) << 1);
    const xp = x + ((<usize>i) << 2);
    const xl = actIn(xp, bf, up),
      xh = actIn(xp + 16, bf, up);
    let v = v128.load(wp);
    a0 = step2(a0, halfEven(v, bf, mask), xl, halfOdd(v, bf, mask), xh, bf);
    v = v128.load(wp + rs);
    a1 = step2(a1, halfEven(v, bf, mask), xl, halfOdd(v, bf, mask), xh, bf);
    v = v128.load(wp + 2 * rs);
    a2 = step2(a2, halfEven(v, bf, mask), xl, halfOdd(v, bf, mask), xh, bf);
    v = v128.load(wp + 3 * rs);
    a3 = step2(a3, halfEven(v, bf, mask), xl, halfOdd(v, bf, mask), xh, bf);
  }
  let s0 = rowSum(a0, bf),
    s1 = rowSum(a1, bf),
    s2 = rowSum(a2, bf),
    s3 = rowSum(a3, bf);
  for (; i < cols; i++) {
    const xv = load<f32>(x + ((<usize>i) << 2));
    const wp = w + ((<usize>i) << 1);
    s0 += scalar(<u32>load<u16>(wp), bf) * xv;
    s1 += scalar(<u32>load<u16>(wp + rs), bf) * xv;
    s2 += scalar(<u32>load<u16>(wp + 2 * rs), bf) * xv;
    s3 += scalar(<u32>load<u16>(wp + 3 * rs), bf) * xv;
  }
  store<f32>(y, s0);
  store<f32>(y + ys, s1);
  store<f32>(y + 2 * ys, s2);
  store<f32>(y + 3 * ys, s3);
}

@inline function matvecHalf(w: usize, x: usize, y: usize, cols: i32, r0: i32, r1: i32, bf: bool): void {
  const rb = (<usize>cols) << 1;
  const q = (r1 - r0) >> 2;
  for (let r = r0; r < r0 + q; r++)
    dotRows4(w + <usize>r * rb, <usize>q * rb, x, y + ((<usize>r) << 2), (<usize>q) << 2, cols, bf);
  for (let r = r0 + 4 * q; r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotRow(w + <usize>r * rb, x, cols, bf));
}

@inline function matmulHalf(
  w: usize,
  x: usize,
  y: usize,
  rows: i32,
  cols: i32,
  ntok: i32,
  r0: i32,
  r1: i32,
  bf: bool,
): void {
  const rb = (<usize>cols) << 1,
    xs = (<usize>cols) << 2,
    ys = (<usize>rows) << 2;
  const mask = halfEoMask(bf),
    bias = f16Rebias();
  const TT = 4; // tokens per tile
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb;
    const yr = y + ((<usize>r) << 2);
    let t = 0;
    for (; t + TT <= ntok; t += TT) {
      const x0 = x + <usize>t * xs,
        x1 = x0 + xs,
        x2 = x1 + xs,
        x3 = x2 + xs;
      let a0 = f32x4.splat(0),
        a1 = f32x4.splat(0),
        a2 = f32x4.splat(0),
        a3 = f32x4.splat(0);
      let i = 0;
      for (; i + 8 <= cols; i += 8) {
        const v = v128.load(wr + ((<usize>i) << 1));
        let lo = halfEven(v, bf, mask),
          hi = halfOdd(v, bf, mask);
        if (!bf) {
          lo = f32x4.mul(lo, bias);
          hi = f32x4.mul(hi, bias);
        }
        const o = (<usize>i) << 2;
        a0 = step2(a0, lo, v128.load(x0 + o), hi, v128.load(x0 + o, 16), bf);
        a1 = step2(a1, lo, v128.load(x1 + o), hi, v128.load(x1 + o, 16), bf);
        a2 = step2(a2, lo, v128.load(x2 + o), hi, v128.load(x2 + o, 16), bf);
        a3 = step2(a3, lo, v128.load(x3 + o), hi, v128.load(x3 + o, 16), bf);
      }
      // (F16: the weights were scaled, not the activations: its rowSum's 2^16 does not apply)
      let s0 = hsumPairs(a0),
        s1 = hsumPairs(a1),
        s2 = hsumPairs(a2),
        s3 = hsumPairs(a3);
      for (; i < cols; i++) {
        const wv = scalar(<u32>load<u16>(wr + ((<usize>i) << 1)), bf);
        const o = (<usize>i) << 2;
        s0 += wv * load<f32>(x0 + o);
        s1 += wv * load<f32>(x1 + o);
        s2 += wv * load<f32>(x2 + o);
        s3 += wv * load<f32>(x3 + o);
      }
      const yt = yr + <usize>t * ys;
      store<f32>(yt, s0);
      store<f32>(yt + ys, s1);
      store<f32>(yt + 2 * ys, s2);
      store<f32>(yt + 3 * ys, s3);
    }
    for (; t < ntok; t++) store<f32>(yr + <usize>t * ys, dotRow(wr, x + <usize>t * xs, cols, bf));
  }
}

/** y[r] = W[r,:] . x for r in [r0, r1); W F16 rows, x f32_eo (prepare_f32_eo). */
export function matvec_f16(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  matvecHalf(w, x, y, cols, r0, r1, false);
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W F16 rows, x ntok f32_eo rows. */
export function matmul_f16(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  matmulHalf(w, x, y, rows, cols, ntok, r0, r1, false);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W BF16 rows, x f32_eo (prepare_f32_eo). */
export function matvec_bf16(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  matvecHalf(w, x, y, cols, r0, r1, true);
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W BF16 rows, x ntok f32_eo rows. */
export function matmul_bf16(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  matmulHalf(w, x, y, rows, cols, ntok, r0, r1, true);
}
