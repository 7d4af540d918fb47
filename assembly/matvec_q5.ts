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

const Q50: usize = 22;
const Q51: usize = 24;
const Q80: usize = 34;
const Q81: usize = 36;

@inline function f16(h: u32): f32 {
  const b = (h & 0x7fff) << 13;
  let f = reinterpret<f32>(b) * reinterpret<f32>(0x77800000);
  if ((h & 0x7c00) == 0x7c00) f = reinterpret<f32>(b | 0x7f800000);
  return h & 0x8000 ? -f : f;
}

@inline function hsumI(v: v128): f32 {
  const a = i32x4.add(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return <f32>i32x4.extract_lane(i32x4.add(a, i32x4.shuffle(a, a, 1, 0, 3, 2)), 0);
}

@inline function hsum(v: v128): f32 {
  const a = f32x4.add(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return f32x4.extract_lane(f32x4.add(a, i32x4.shuffle(a, a, 1, 0, 3, 2)), 0);
}

/** 0xFF in byte k where bit k (values 0..15, lo) or bit 16 + k (hi) of qh is set. */
@inline function bitsLo(qh: u32): v128 {
  const b = i32x4.splat(<i32>qh);
  const m = v128(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return i8x16.eq(v128.and(i8x16.shuffle(b, b, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1), m), m);
}
@inline function bitsHi(qh: u32): v128 {
  const b = i32x4.splat(<i32>qh);
  const m = v128(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128);
  return i8x16.eq(v128.and(i8x16.shuffle(b, b, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3), m), m);
}

/** 256 * dot(16 signed weight bytes w, 16 activation bytes x) as i32 lanes to be summed. */
@inline function dotSigned256(w: v128, x: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(i16x8.shr_s(i16x8.shl(w, 8), 8), i16x8.shl(x, 8)),
    i32x4.dot_i16x8_s(i16x8.shr_s(w, 8), v128.and(x, i16x8.splat(<i16>0xff00))));
}
/** 256 * dot(16 weight bytes w in 0..127, 16 activation bytes x) as i32 lanes to be summed. */
@inline function dotUnsigned256(w: v128, x: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(v128.and(w, i16x8.splat(0x00ff)), i16x8.shl(x, 8)),
    i32x4.dot_i16x8_s(i16x8.shr_u(w, 8), v128.and(x, i16x8.splat(<i16>0xff00))));
}

/** 256 * the integer dot of one Q5_0 block at wb with one Q8_0 block at xb, as i32 lanes to be summed. */
@inline function intQ50(wb: usize, xb: usize): v128 {
  const m0f = i8x16.splat(0x0f), mf0 = i8x16.splat(<i8>0xf0);
  const q = v128.load(wb + 6);
  const qh = load<u32>(wb + 2);
  // (nibble | fifth bit << 4) - 16 as a signed byte: the nibble, with 0xF0 set where the bit is clear
  const w0 = v128.or(v128.and(q, m0f), v128.andnot(mf0, bitsLo(qh)));
  const w1 = v128.or(v128.and(i16x8.shr_u(q, 4), m0f), v128.andnot(mf0, bitsHi(qh)));
  return i32x4.add(dotSigned256(w0, v128.load(xb + 2)), dotSigned256(w1, v128.load(xb + 18)));
}

/** 256 * the integer dot of one Q5_1 block with one Q8_1 block (the m * s term not included). */
@inline function intQ51(wb: usize, xb: usize): v128 {
  const m0f = i8x16.splat(0x0f), m10 = i8x16.splat(0x10);
  const q = v128.load(wb + 8);
  const qh = load<u32>(wb + 4);
  const w0 = v128.or(v128.and(q, m0f), v128.and(bitsLo(qh), m10));
  const w1 = v128.or(v128.and(i16x8.shr_u(q, 4), m0f), v128.and(bitsHi(qh), m10));
  return i32x4.add(dotUnsigned256(w0, v128.load(xb + 4)), dotUnsigned256(w1, v128.load(xb + 20)));
}

/** [sum a, sum b, sum c, sum d] of four i32x4 vectors. */
@inline function sum4(a: v128, b: v128, c: v128, d: v128): v128 {
  const ab = i32x4.add(i32x4.shuffle(a, b, 0, 1, 4, 5), i32x4.shuffle(a, b, 2, 3, 6, 7));
  const cd = i32x4.add(i32x4.shuffle(c, d, 0, 1, 4, 5), i32x4.shuffle(c, d, 2, 3, 6, 7));
  return i32x4.add(i32x4.shuffle(ab, cd, 0, 2, 4, 6), i32x4.shuffle(ab, cd, 1, 3, 5, 7));
}

/** Four f16 values (at p, p + stride, ...) -> f32x4; exact for finite halves. */
@inline function halves4(p: usize, stride: usize): v128 {
  let v = i16x8.splat(<i16>load<u16>(p));
  v = i16x8.replace_lane(v, 1, <i16>load<u16>(p + stride));
  v = i16x8.replace_lane(v, 2, <i16>load<u16>(p + 2 * stride));
  v = i16x8.replace_lane(v, 3, <i16>load<u16>(p + 3 * stride));
  const e = i32x4.extend_low_i16x8_s(v);
  return f32x4.mul(v128.and(i32x4.shl(e, 13), i32x4.splat(0x8fffe000)), f32x4.splat(reinterpret<f32>(0x77800000)));
}

// Four blocks at a time: their integer dots are summed side by side into one vector and scaled
// by a vector of four scale products, so the per-block float work is shared. Block scales that
// are inf or NaN (a damaged file) would read as finite here; the tail keeps the exact scalar path.

@inline function dotQ50(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  let b: usize = 0;
  for (; b + 4 <= nb; b += 4) {
    const wb = w + b * Q50, xb = x + b * Q80;
    const s = sum4(intQ50(wb, xb), intQ50(wb + Q50, xb + Q80), intQ50(wb + 2 * Q50, xb + 2 * Q80), intQ50(wb + 3 * Q50, xb + 3 * Q80));
    acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(s), f32x4.mul(halves4(wb, Q50), halves4(xb, Q80))));
  }
  let tail: f32 = 0;
  for (; b < nb; b++) {
    const wb = w + b * Q50, xb = x + b * Q80;
    tail += hsumI(intQ50(wb, xb)) * (f16(<u32>load<u16>(wb)) * f16(<u32>load<u16>(xb)));
  }
  return (hsum(acc) + tail) * (<f32>1.0 / 256.0);
}

@inline function dotQ51(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0), accm = f32x4.splat(0);
  let b: usize = 0;
  for (; b + 4 <= nb; b += 4) {
    const wb = w + b * Q51, xb = x + b * Q81;
    const s = sum4(intQ51(wb, xb), intQ51(wb + Q51, xb + Q81), intQ51(wb + 2 * Q51, xb + 2 * Q81), intQ51(wb + 3 * Q51, xb + 3 * Q81));
    acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(s), f32x4.mul(halves4(wb, Q51), halves4(xb, Q81))));
    accm = f32x4.add(accm, f32x4.mul(halves4(wb + 2, Q51), halves4(xb + 2, Q81)));
  }
  let tail: f32 = 0, tailm: f32 = 0;
  for (; b < nb; b++) {
    const wb = w + b * Q51, xb = x + b * Q81;
    const dm = load<u32>(wb), ds = load<u32>(xb);
    tail += hsumI(intQ51(wb, xb)) * (f16(dm & 0xffff) * f16(ds & 0xffff));
    tailm += f16(dm >> 16) * f16(ds >> 16);
  }
  return (hsum(acc) + tail) * (<f32>1.0 / 256.0) + hsum(accm) + tailm;
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q5_0 (GGUF layout), x one Q8_0 row. */
export function matvec_q5_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 5);
  const rb = nb * Q50;
  for (let r = r0; r < r1; r++) store<f32>(y + (<usize>r << 2), dotQ50(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q5_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 5);
  const rb = nb * Q50, xb = nb * Q80;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb;
    for (let t = 0; t < ntok; t++) {
      store<f32>(y + ((<usize>t * <usize>rows + <usize>r) << 2), dotQ50(wr, x + <usize>t * xb, nb));
    }
  }
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q5_1 (GGUF layout), x one Q8_1 row. */
export function matvec_q5_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 5);
  const rb = nb * Q51;
  for (let r = r0; r < r1; r++) store<f32>(y + (<usize>r << 2), dotQ51(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q5_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 5);
  const rb = nb * Q51, xb = nb * Q81;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb;
    for (let t = 0; t < ntok; t++) {
      store<f32>(y + ((<usize>t * <usize>rows + <usize>r) << 2), dotQ51(wr, x + <usize>t * xb, nb));
    }
  }
}
