// Q5_0 weights times Q8_0 activations and Q5_1 weights times Q8_1 activations, with ggml's
// numerics: an exact integer dot per 32-block scaled by the f32 product of the block scales
// (Q5_1 adds m_w * s_x, where s_x = d_x * sum(q_x) as Q8_1 stores it).
//
// Layouts stay GGUF's (packing is a copy):
//   Q5_0 22 B: d f16 @0, qh u32 @2, qs[16] @6      value j = (nibble | bit j of qh << 4) - 16
//   Q5_1 24 B: d @0, m @2, qh @4, qs[16] @8        value j = (nibble | bit j of qh << 4) d + m
//   Q8_0 34 B: d f16 @0, qs i8[32] @2;  Q8_1 36 B: d @0, s @2, qs i8[32] @4
// Nibble j holds value j (low nibbles) or j + 16 (high nibbles).
//
// The 32 fifth bits are spread to bytes with one shuffle and one compare per 16 values. Bytes
// meet bytes through i32x4.dot_i16x8_s after an in-lane split into even and odd positions (the
// activation side is shifted so each product is 256 * q_w * q_x; the 256 goes into the scale).

import { f16ToF32, halfLanes } from "./half";
import { matmulQ4 } from "./matmul_q4";
import { matvecQ4 } from "./matvec_q4";
import { pin } from "./schedule_pin";

const Q50: usize = 22;
const Q51: usize = 24;
const Q80: usize = 34;
const Q81: usize = 36;

@inline function hsumI(v: v128): f32 {
  const a = i32x4.add(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return <f32>i32x4.extract_lane(i32x4.add(a, i32x4.shuffle(a, a, 1, 0, 3, 2)), 0);
}

@inline function hsum(v: v128): f32 {
  const a = f32x4.add(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return f32x4.extract_lane(f32x4.add(a, i32x4.shuffle(a, a, 1, 0, 3, 2)), 0);
}

// The kernels' v128 constants, loaded rather than written as constants: V8 rebuilds a v128.const
// at every use inside a loop (three instructions apiece), a load is one.
//   +0  bit k of each byte's group (1, 2, .., 128, twice)   +16 0x0f bytes   +32 0xf0 bytes
//   +48 0x10 bytes   +64 0x00ff words   +80 0xff00 words   +96 i16 ones
//   +112 byte selectors spreading qh's bytes 0, 1 (values 0..15) and +128 bytes 2, 3 (16..31)
const Q5_K = memory.data<u8>(
  [
    1, 2, 4, 8, 16, 32, 64, 128, 1, 2, 4, 8, 16, 32, 64, 128, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15,
    15, 15, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 0xf0, 16, 16, 16,
    16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 16, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0,
    0xff, 0, 0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 0, 0xff, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0,
    1, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
  ],
  16,
);

// qh's bytes spread by the selectors at `sel` (a shuffle with constant lanes made V8 build its
// mask from immediates each time: four instructions).
@inline function spread(qh: u32, sel: usize): v128 {
  return i8x16.swizzle(i32x4.splat(<i32>qh), v128.load(sel));
}

/** 0xFF in byte k where bit k (values 0..15, lo) or bit 16 + k (hi) of qh is set. */
@inline function bitsLo(qh: u32): v128 {
  const m = v128.load(Q5_K);
  return i8x16.eq(v128.and(spread(qh, Q5_K + 112), m), m);
}
@inline function bitsHi(qh: u32): v128 {
  const m = v128.load(Q5_K);
  return i8x16.eq(v128.and(spread(qh, Q5_K + 128), m), m);
}

/** 256 * dot(16 signed weight bytes w, 16 activation bytes x) as i32 lanes to be summed. */
@inline function dotSigned256(w: v128, x: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(i16x8.shr_s(i16x8.shl(w, 8), 8), i16x8.shl(x, 8)),
    i32x4.dot_i16x8_s(i16x8.shr_s(w, 8), v128.and(x, v128.load(Q5_K, 80))),
  );
}
/** 256 * dot(16 weight bytes w in 0..127, 16 activation bytes x) as i32 lanes to be summed. */
@inline function dotUnsigned256(w: v128, x: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(v128.and(w, v128.load(Q5_K, 64)), i16x8.shl(x, 8)),
    i32x4.dot_i16x8_s(i16x8.shr_u(w, 8), v128.and(x, v128.load(Q5_K, 80))),
  );
}

// Weight bytes of one block: values 0..15 (lo) and 16..31 (hi), nibble | fifth bit << 4. Q5_0
// subtracts 16 (the nibble with 0xF0 set where the fifth bit is clear, signed); Q5_1's are these.
@inline function w5Lo(q: usize, qh: usize): v128 {
  return v128.or(v128.and(v128.load(q), v128.load(Q5_K, 16)), v128.and(bitsLo(load<u32>(qh)), v128.load(Q5_K, 48)));
}
@inline function w5Hi(q: usize, qh: usize): v128 {
  return v128.or(
    v128.and(i16x8.shr_u(v128.load(q), 4), v128.load(Q5_K, 16)),
    v128.and(bitsHi(load<u32>(qh)), v128.load(Q5_K, 48)),
  );
}
@inline function w50Lo(wb: usize): v128 {
  return v128.or(
    v128.and(v128.load(wb + 6), v128.load(Q5_K, 16)),
    v128.andnot(v128.load(Q5_K, 32), bitsLo(load<u32>(wb + 2))),
  );
}
@inline function w50Hi(wb: usize): v128 {
  return v128.or(
    v128.and(i16x8.shr_u(v128.load(wb + 6), 4), v128.load(Q5_K, 16)),
    v128.andnot(v128.load(Q5_K, 32), bitsHi(load<u32>(wb + 2))),
  );
}
@inline function w51Lo(wb: usize): v128 {
  return w5Lo(wb + 8, wb + 4);
}
@inline function w51Hi(wb: usize): v128 {
  return w5Hi(wb + 8, wb + 4);
}

// (The relaxed build packs Q5 as Q4 tiles with fifth bits, matvec_q4_relaxed.ts; these GGUF-layout
// kernels are the SIMD128 build's.)
const Q5_SCALE: f32 = <f32>1.0 / 256.0;

/** 256 times the integer dot of a Q5_0 block's bytes with a Q8_0 block's halves, as lanes to be summed. */
@inline function dot50(lo: v128, hi: v128, xl: v128, xh: v128): v128 {
  return i32x4.add(dotSigned256(lo, xl), dotSigned256(hi, xh));
}
/** The same for a Q5_1 block and a Q8_1 block. */
@inline function dot51(lo: v128, hi: v128, xl: v128, xh: v128): v128 {
  return i32x4.add(dotUnsigned256(lo, xl), dotUnsigned256(hi, xh));
}

/** 256 times the integer dot of one Q5_0 block at wb with one Q8_0 block at xb, as i32 lanes to be summed. */
@inline function intQ50(wb: usize, xb: usize): v128 {
  return dot50(w50Lo(wb), w50Hi(wb), v128.load(xb + 2), v128.load(xb + 18));
}

/** 256 times the integer dot of one Q5_1 block with one Q8_1 block (the m * s term not included). */
@inline function intQ51(wb: usize, xb: usize): v128 {
  return dot51(w51Lo(wb), w51Hi(wb), v128.load(xb + 4), v128.load(xb + 20));
}

/** [a0 + a2, a1 + a3, b0 + b2, b1 + b3]: half of summing four vectors side by side. */
@inline function pair2(a: v128, b: v128): v128 {
  return i32x4.add(i32x4.shuffle(a, b, 0, 1, 4, 5), i32x4.shuffle(a, b, 2, 3, 6, 7));
}
/** [sum ab(0,1), sum ab(2,3), sum cd(0,1), sum cd(2,3)] of two pair2 results. */
@inline function pair4(ab: v128, cd: v128): v128 {
  return i32x4.add(i32x4.shuffle(ab, cd, 0, 2, 4, 6), i32x4.shuffle(ab, cd, 1, 3, 5, 7));
}
/** [sum a, sum b, sum c, sum d] of four i32x4 vectors. */
@inline function sum4(a: v128, b: v128, c: v128, d: v128): v128 {
  return pair4(pair2(a, b), pair2(c, d));
}

/** Four f16 values (at p, p + stride, ...) -> f32x4; exact for finite halves. */
@inline function halves4(p: usize, stride: usize): v128 {
  let v = i16x8.splat(<i16>load<u16>(p));
  v = i16x8.replace_lane(v, 1, <i16>load<u16>(p + stride));
  v = i16x8.replace_lane(v, 2, <i16>load<u16>(p + 2 * stride));
  v = i16x8.replace_lane(v, 3, <i16>load<u16>(p + 3 * stride));
  return halfLanes(i32x4.extend_low_i16x8_s(v));
}

// Four blocks at a time: their integer dots are summed side by side into one vector and scaled
// by a vector of four scale products, so the per-block float work is shared. Block scales that
// are inf or NaN (a damaged file) would read as finite here; the tail keeps the exact scalar path.

@inline function dotQ50(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  let b: usize = 0;
  for (; b + 4 <= nb; b += 4) {
    const wb = w + b * Q50,
      xb = x + b * Q80;
    // each block's dot pinned before the next block's loads (schedule_pin.ts): without it V8
    // issued all four blocks' loads first and spilled
    const d0 = intQ50(wb, xb);
    pin(d0);
    const d1 = intQ50(wb + Q50, xb + Q80);
    pin(d1);
    const d2 = intQ50(wb + 2 * Q50, xb + 2 * Q80);
    pin(d2);
    const s = sum4(d0, d1, d2, intQ50(wb + 3 * Q50, xb + 3 * Q80));
    acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(s), f32x4.mul(halves4(wb, Q50), halves4(xb, Q80))));
  }
  let tail: f32 = 0;
  for (; b < nb; b++) {
    const wb = w + b * Q50,
      xb = x + b * Q80;
    tail += hsumI(intQ50(wb, xb)) * (f16ToF32(<u32>load<u16>(wb)) * f16ToF32(<u32>load<u16>(xb)));
  }
  return (hsum(acc) + tail) * Q5_SCALE;
}

@inline function dotQ51(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0),
    accm = f32x4.splat(0);
  let b: usize = 0;
  for (; b + 4 <= nb; b += 4) {
    const wb = w + b * Q51,
      xb = x + b * Q81;
    // each block's dot pinned before the next block's loads (schedule_pin.ts): without it V8
    // issued all four blocks' loads first and spilled
    const d0 = intQ51(wb, xb);
    pin(d0);
    const d1 = intQ51(wb + Q51, xb + Q81);
    pin(d1);
    const d2 = intQ51(wb + 2 * Q51, xb + 2 * Q81);
    pin(d2);
    const s = sum4(d0, d1, d2, intQ51(wb + 3 * Q51, xb + 3 * Q81));
    acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(s), f32x4.mul(halves4(wb, Q51), halves4(xb, Q81))));
    accm = f32x4.add(accm, f32x4.mul(halves4(wb + 2, Q51), halves4(xb + 2, Q81)));
  }
  let tail: f32 = 0,
    tailm: f32 = 0;
  for (; b < nb; b++) {
    const wb = w + b * Q51,
      xb = x + b * Q81;
    const dm = load<u32>(wb),
      ds = load<u32>(xb);
    tail += hsumI(intQ51(wb, xb)) * (f16ToF32(dm & 0xffff) * f16ToF32(ds & 0xffff));
    tailm += f16ToF32(dm >> 16) * f16ToF32(ds >> 16);
  }
  return (hsum(acc) + tail) * Q5_SCALE + hsum(accm) + tailm;
}

/** One Q5_0 row against two Q8_0 rows: each block's weight bytes serve both tokens. */
@inline function dotQ50Tokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  let b: usize = 0;
  for (; b + 4 <= nb; b += 4) {
    const wb = w + b * Q50,
      xa = x0 + b * Q80,
      xc = x1 + b * Q80;
    let lo = w50Lo(wb),
      hi = w50Hi(wb);
    let a0 = dot50(lo, hi, v128.load(xa + 2), v128.load(xa + 18));
    let a1 = dot50(lo, hi, v128.load(xc + 2), v128.load(xc + 18));
    lo = w50Lo(wb + Q50);
    hi = w50Hi(wb + Q50);
    const p0 = pair2(a0, dot50(lo, hi, v128.load(xa + Q80 + 2), v128.load(xa + Q80 + 18)));
    const p1 = pair2(a1, dot50(lo, hi, v128.load(xc + Q80 + 2), v128.load(xc + Q80 + 18)));
    lo = w50Lo(wb + 2 * Q50);
    hi = w50Hi(wb + 2 * Q50);
    a0 = dot50(lo, hi, v128.load(xa + 2 * Q80 + 2), v128.load(xa + 2 * Q80 + 18));
    a1 = dot50(lo, hi, v128.load(xc + 2 * Q80 + 2), v128.load(xc + 2 * Q80 + 18));
    lo = w50Lo(wb + 3 * Q50);
    hi = w50Hi(wb + 3 * Q50);
    const q0 = pair2(a0, dot50(lo, hi, v128.load(xa + 3 * Q80 + 2), v128.load(xa + 3 * Q80 + 18)));
    const q1 = pair2(a1, dot50(lo, hi, v128.load(xc + 3 * Q80 + 2), v128.load(xc + 3 * Q80 + 18)));
    const dw = halves4(wb, Q50);
    acc0 = f32x4.add(acc0, f32x4.mul(f32x4.convert_i32x4_s(pair4(p0, q0)), f32x4.mul(dw, halves4(xa, Q80))));
    acc1 = f32x4.add(acc1, f32x4.mul(f32x4.convert_i32x4_s(pair4(p1, q1)), f32x4.mul(dw, halves4(xc, Q80))));
  }
  let t0: f32 = 0,
    t1: f32 = 0;
  for (; b < nb; b++) {
    const wb = w + b * Q50,
      xa = x0 + b * Q80,
      xc = x1 + b * Q80;
    const dw = f16ToF32(<u32>load<u16>(wb));
    t0 += hsumI(intQ50(wb, xa)) * (dw * f16ToF32(<u32>load<u16>(xa)));
    t1 += hsumI(intQ50(wb, xc)) * (dw * f16ToF32(<u32>load<u16>(xc)));
  }
  store<f32>(y0, (hsum(acc0) + t0) * Q5_SCALE);
  store<f32>(y1, (hsum(acc1) + t1) * Q5_SCALE);
}

/** One Q5_1 row against two Q8_1 rows: each block's weight bytes serve both tokens. */
@inline function dotQ51Tokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0),
    accm0 = f32x4.splat(0),
    accm1 = f32x4.splat(0);
  let b: usize = 0;
  for (; b + 4 <= nb; b += 4) {
    const wb = w + b * Q51,
      xa = x0 + b * Q81,
      xc = x1 + b * Q81;
    let lo = w51Lo(wb),
      hi = w51Hi(wb);
    let a0 = dot51(lo, hi, v128.load(xa + 4), v128.load(xa + 20));
    let a1 = dot51(lo, hi, v128.load(xc + 4), v128.load(xc + 20));
    lo = w51Lo(wb + Q51);
    hi = w51Hi(wb + Q51);
    const p0 = pair2(a0, dot51(lo, hi, v128.load(xa + Q81 + 4), v128.load(xa + Q81 + 20)));
    const p1 = pair2(a1, dot51(lo, hi, v128.load(xc + Q81 + 4), v128.load(xc + Q81 + 20)));
    lo = w51Lo(wb + 2 * Q51);
    hi = w51Hi(wb + 2 * Q51);
    a0 = dot51(lo, hi, v128.load(xa + 2 * Q81 + 4), v128.load(xa + 2 * Q81 + 20));
    a1 = dot51(lo, hi, v128.load(xc + 2 * Q81 + 4), v128.load(xc + 2 * Q81 + 20));
    lo = w51Lo(wb + 3 * Q51);
    hi = w51Hi(wb + 3 * Q51);
    const q0 = pair2(a0, dot51(lo, hi, v128.load(xa + 3 * Q81 + 4), v128.load(xa + 3 * Q81 + 20)));
    const q1 = pair2(a1, dot51(lo, hi, v128.load(xc + 3 * Q81 + 4), v128.load(xc + 3 * Q81 + 20)));
    const dw = halves4(wb, Q51),
      mw = halves4(wb + 2, Q51);
    acc0 = f32x4.add(acc0, f32x4.mul(f32x4.convert_i32x4_s(pair4(p0, q0)), f32x4.mul(dw, halves4(xa, Q81))));
    acc1 = f32x4.add(acc1, f32x4.mul(f32x4.convert_i32x4_s(pair4(p1, q1)), f32x4.mul(dw, halves4(xc, Q81))));
    accm0 = f32x4.add(accm0, f32x4.mul(mw, halves4(xa + 2, Q81)));
    accm1 = f32x4.add(accm1, f32x4.mul(mw, halves4(xc + 2, Q81)));
  }
  let t0: f32 = 0,
    t1: f32 = 0,
    m0: f32 = 0,
    m1: f32 = 0;
  for (; b < nb; b++) {
    const wb = w + b * Q51,
      xa = x0 + b * Q81,
      xc = x1 + b * Q81;
    const dm = load<u32>(wb),
      da = load<u32>(xa),
      dc = load<u32>(xc);
    const dw = f16ToF32(dm & 0xffff),
      mw = f16ToF32(dm >> 16);
    t0 += hsumI(intQ51(wb, xa)) * (dw * f16ToF32(da & 0xffff));
    t1 += hsumI(intQ51(wb, xc)) * (dw * f16ToF32(dc & 0xffff));
    m0 += mw * f16ToF32(da >> 16);
    m1 += mw * f16ToF32(dc >> 16);
  }
  store<f32>(y0, (hsum(acc0) + t0) * Q5_SCALE + hsum(accm0) + m0);
  store<f32>(y1, (hsum(acc1) + t1) * Q5_SCALE + hsum(accm1) + m1);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q5_0 (GGUF layout; relaxed build: Q4 tiles), x one Q8_0 row (relaxed: q8_i8n). */
export function matvec_q5_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  if (ASC_FEATURE_RELAXED_SIMD) {
    // the relaxed build packs Q5 as Q4 tiles plus fifth bits (matvec_q4_relaxed.ts)
    matvecQ4(w, x, y, rows, cols, r0, r1, false, true);
    return;
  }
  const nb = <usize>(cols >> 5);
  const rb = nb * Q50;
  for (let r = r0; r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotQ50(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q5_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  if (ASC_FEATURE_RELAXED_SIMD) {
    // the relaxed build packs Q5 as Q4 tiles plus fifth bits (matvec_q4_relaxed.ts)
    matmulQ4(w, x, y, rows, cols, ntok, r0, r1, false, true);
    return;
  }
  const nb = <usize>(cols >> 5);
  const rb = nb * Q50,
    xs = nb * Q80,
    ys = (<usize>rows) << 2;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    let t = 0;
    for (; t + 2 <= ntok; t += 2) {
      const xt = x + <usize>t * xs,
        yt = yr + <usize>t * ys;
      dotQ50Tokens2(wr, xt, xt + xs, nb, yt, yt + ys);
    }
    if (t < ntok) store<f32>(yr + <usize>t * ys, dotQ50(wr, x + <usize>t * xs, nb));
  }
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q5_1 (GGUF layout; relaxed build: Q4 tiles), x one Q8_1 row (relaxed: q8_i8n). */
export function matvec_q5_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  if (ASC_FEATURE_RELAXED_SIMD) {
    // the relaxed build packs Q5 as Q4 tiles plus fifth bits (matvec_q4_relaxed.ts)
    matvecQ4(w, x, y, rows, cols, r0, r1, true, true);
    return;
  }
  const nb = <usize>(cols >> 5);
  const rb = nb * Q51;
  for (let r = r0; r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotQ51(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q5_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  if (ASC_FEATURE_RELAXED_SIMD) {
    // the relaxed build packs Q5 as Q4 tiles plus fifth bits (matvec_q4_relaxed.ts)
    matmulQ4(w, x, y, rows, cols, ntok, r0, r1, true, true);
    return;
  }
  const nb = <usize>(cols >> 5);
  const rb = nb * Q51,
    xs = nb * Q81,
    ys = (<usize>rows) << 2;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    let t = 0;
    for (; t + 2 <= ntok; t += 2) {
      const xt = x + <usize>t * xs,
        yt = yr + <usize>t * ys;
      dotQ51Tokens2(wr, xt, xt + xs, nb, yt, yt + ys);
    }
    if (t < ntok) store<f32>(yr + <usize>t * ys, dotQ51(wr, x + <usize>t * xs, nb));
  }
}
