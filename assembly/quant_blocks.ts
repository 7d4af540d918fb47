// The converter's quantizers, one block at a time: f32 values into GGUF's F16, BF16, Q8_0, Q4_0,
// Q4_1, Q5_0 and Q5_1 bytes, and those bytes decoded again. quantize_rows.ts and quant_measure.ts
// call them; nothing here is a kernel (index.ts does not re-export it).
//
// The bytes are src/format/quant.ts quantizeRow's, which are ggml's reference quantizers': the
// same f32 operations in the same order (a double-precision step there is one whose rounding to
// f32 equals the f32 operation: a sum, product or quotient of two floats), with three things SIMD
// does not give for free, done by hand:
// - C's roundf (halves away from zero; f32x4.nearest ties to even): the quant is trunc(x), plus
//   the sign of x where the dropped fraction (x - trunc(x), exact) is at least a half.
// - JavaScript's `| 0` and `& 0xff` on a value past i32 (a block whose scale is an infinity or a
//   subnormal reaches them): trunc_sat saturates where JS keeps the low bits, which are all zero
//   for a float of 2^31 or more, so such lanes are cleared (Q8_0; the Q4/Q5 quants are clamped to
//   15 or 31 first and saturate to INT_MIN, whose low bits are zero too).
// - which of equal values decides: Q4_0/Q5_0's largest magnitude is the first one (in index
//   order) that reaches it, with NaN skipped; Q4_1/Q5_1's min and max skip NaN (pmin/pmax with
//   the running value first), and where one is a zero its sign is the first zero's.
import { f16ToF32, f32ToF16 } from "./half";
import {
  Q4_0_BS,
  Q4_1_BS,
  Q5_0_BS,
  Q5_1_BS,
  Q8_0_BS,
  T_BF16,
  T_F16,
  T_F32,
  T_Q4_0,
  T_Q4_1,
  T_Q5_0,
  T_Q5_1,
  T_Q8_0,
} from "./sparse_types";

/** Bytes of one 32-value block of a block type written here, 0 for the others. */
@inline function writtenBlockBytes(type: i32): usize {
  if (type == T_Q8_0) return Q8_0_BS;
  if (type == T_Q4_0) return Q4_0_BS;
  if (type == T_Q4_1) return Q4_1_BS;
  if (type == T_Q5_0) return Q5_0_BS;
  if (type == T_Q5_1) return Q5_1_BS;
  return 0;
}

/** Bytes of a row of n values of `type`, 0 for a type these kernels do not write. */
@inline function typeRowBytes(type: i32, n: usize): usize {
  if (type == T_F32) return n << 2;
  if (type == T_F16 || type == T_BF16) return n << 1;
  return (n >> 5) * writtenBlockBytes(type);
}

// Constants loaded from memory: V8 rematerializes a v128 constant at every use inside a loop
// (three instructions), a load is one.
// prettier-ignore
const QC = memory.data<u32>(
  [
    0x7fffffff, 0x7fffffff, 0x7fffffff, 0x7fffffff, // 0: |x|
    0x80000000, 0x80000000, 0x80000000, 0x80000000, // 16: sign
    0x3f800000, 0x3f800000, 0x3f800000, 0x3f800000, // 32: 1.0
    0x3f000000, 0x3f000000, 0x3f000000, 0x3f000000, // 48: 0.5
    0x4f000000, 0x4f000000, 0x4f000000, 0x4f000000, // 64: 2^31
    0x000000ff, 0x000000ff, 0x000000ff, 0x000000ff, // 80: a byte
    0x0000000f, 0x0000000f, 0x0000000f, 0x0000000f, // 96: a nibble, and Q4's top quant
    0x7f800000, 0x7f800000, 0x7f800000, 0x7f800000, // 112: +inf
    0xff800000, 0xff800000, 0xff800000, 0xff800000, // 128: -inf
    0x41080000, 0x41080000, 0x41080000, 0x41080000, // 144: 8.5 (Q4_0's 8 + 0.5)
    0x41840000, 0x41840000, 0x41840000, 0x41840000, // 160: 16.5 (Q5_0's 16 + 0.5)
    0x41700000, 0x41700000, 0x41700000, 0x41700000, // 176: 15.0
    0x41f80000, 0x41f80000, 0x41f80000, 0x41f80000, // 192: 31.0
    0x00000001, 0x00000001, 0x00000001, 0x00000001, // 208: 1
    0x37fff001, 0x37fff001, 0x37fff001, 0x37fff001, // 224: f16 normal: re-bias less the rounding's 0xfff
    0x38800000, 0x38800000, 0x38800000, 0x38800000, // 240: f16's smallest normal as f32 bits
    0x0000001f, 0x0000001f, 0x0000001f, 0x0000001f, // 256: Q5's top quant
    0x00007c00, 0x00007c00, 0x00007c00, 0x00007c00, // 272: f16 infinity
    0x00000200, 0x00000200, 0x00000200, 0x00000200, // 288: f16 NaN's quiet bit
    0x00008000, 0x00008000, 0x00008000, 0x00008000, // 304: f16 sign
    0x00007fff, 0x00007fff, 0x00007fff, 0x00007fff, // 320: bf16 rounding / f16 magnitude
    0x00000040, 0x00000040, 0x00000040, 0x00000040, // 336: bf16 quiet bit
    0x00000000, 0x00000000, 0x00000000, 0x00000000, // 352: 0
    0x77800000, 0x77800000, 0x77800000, 0x77800000, // 368: 2^112 (f16 -> f32 re-bias)
    0x3effffff, 0x3effffff, 0x3effffff, 0x3effffff, // 384: 0.49999997, the float below a half
    0x4b400000, 0x4b400000, 0x4b400000, 0x4b400000, // 400: 1.5 * 2^23 (MAGIC)
    0x7fc00000, 0x7fc00000, 0x7fc00000, 0x7fc00000, // 416: the quiet NaN
  ],
  16,
);
@inline function c(at: usize): v128 {
  return v128.load(QC + at);
}
const ABS: usize = 0,
  SIGN: usize = 16,
  ONE: usize = 32,
  HALF: usize = 48,
  TWO31: usize = 64,
  BYTE: usize = 80,
  NIBBLE: usize = 96,
  INF: usize = 112,
  NEG_INF: usize = 128,
  Q4_0_OFF: usize = 144,
  Q5_0_OFF: usize = 160,
  TOP4: usize = 176,
  TOP5: usize = 192,
  ONE_I: usize = 208,
  F16_NORM: usize = 224,
  F16_MIN_NORMAL: usize = 240,
  TOP5_I: usize = 256,
  F16_INF: usize = 272,
  F16_QUIET: usize = 288,
  F16_SIGN: usize = 304,
  LOW15: usize = 320,
  BF16_QUIET: usize = 336,
  ZERO: usize = 352,
  REBIAS: usize = 368,
  BELOW_HALF: usize = 384,
  MAGIC: usize = 400,
  CANONICAL_NAN: usize = 416;

/**
 * The f16 bits of a Q8_0 block's scale where a value is NaN. The reference's Math.max returns a
 * NaN of the engine's choosing (V8 on x64: negative, 0xfe00 as f16), which its scale keeps: the
 * caller says which (src/runtime/quant-kernels.ts).
 */
let nanScale: u32 = 0xfe00;
/** Sets nanScale. */
@inline function setNanScale(h: u32): void {
  nanScale = h & 0xffff;
}

/** Blocks per pass: their scales first (each a chain of dependent steps, which overlap across blocks), then their quants. */
const PASS: usize = 64;
/**
 * A block's record in the scratch between the passes (SCALE_BYTES each): 1 / d (f32) @0, the
 * min (f32, Q4_1 / Q5_1) @4, whether its quants take the fast path (i32) @8. The fast path is
 * for blocks of finite values whose quants stay far inside i32 (all but blocks holding an
 * infinity or a NaN, or whose scale is subnormal): an integer-valued float plus MAGIC has the
 * integer in its low bits, and rounding needs no fix-ups for lanes past i32.
 */
const SCALE_BYTES: usize = 16;
/** The scratch quantizeValues needs. */
const QUANT_SCRATCH: usize = PASS * SCALE_BYTES;

/** Four i32 lanes of 0..255 each into bytes: two narrowings (no saturation in that range). */
@inline function bytes16(a: v128, b: v128, c2: v128, d: v128): v128 {
  return i8x16.narrow_i16x8_u(i16x8.narrow_i32x4_u(a, b), i16x8.narrow_i32x4_u(c2, d));
}

/** The bits of the lanes' 4 masks (lane order) of 8 vectors: one bit per value of a block. */
@inline function maskBits(m0: v128, m1: v128, m2: v128, m3: v128, m4: v128, m5: v128, m6: v128, m7: v128): u32 {
  return (
    (<u32>i32x4.bitmask(m0)) |
    ((<u32>i32x4.bitmask(m1)) << 4) |
    ((<u32>i32x4.bitmask(m2)) << 8) |
    ((<u32>i32x4.bitmask(m3)) << 12) |
    (((<u32>i32x4.bitmask(m4)) << 16) |
      ((<u32>i32x4.bitmask(m5)) << 20) |
      ((<u32>i32x4.bitmask(m6)) << 24) |
      ((<u32>i32x4.bitmask(m7)) << 28))
  );
}

/** 1 / d, or 0 where d is 0 or NaN (JavaScript's `d ? 1 / d : 0`). */
@inline function inverse(d: f32): f32 {
  return d != 0 && d == d ? <f32>1 / d : 0;
}

/**
 * The largest magnitude among 8 vectors as f32 bits: an integer max of the magnitudes' bits,
 * which orders them as floats, a NaN above +inf.
 */
@inline function maxMagnitudeBits(
  v0: v128,
  v1: v128,
  v2: v128,
  v3: v128,
  v4: v128,
  v5: v128,
  v6: v128,
  v7: v128,
): u32 {
  const a = c(ABS);
  let m = i32x4.max_s(
    i32x4.max_s(i32x4.max_s(v128.and(v0, a), v128.and(v1, a)), i32x4.max_s(v128.and(v2, a), v128.and(v3, a))),
    i32x4.max_s(i32x4.max_s(v128.and(v4, a), v128.and(v5, a)), i32x4.max_s(v128.and(v6, a), v128.and(v7, a))),
  );
  m = i32x4.max_s(m, i32x4.shuffle(m, m, 2, 3, 0, 1));
  return <u32>i32x4.extract_lane(i32x4.max_s(m, i32x4.shuffle(m, m, 1, 0, 3, 2)), 0);
}

/** The smallest / largest lane (no lane NaN). */
@inline function lanesMin(v: v128): f32 {
  v = f32x4.pmin(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return f32x4.extract_lane(f32x4.pmin(v, i32x4.shuffle(v, v, 1, 0, 3, 2)), 0);
}
@inline function lanesMax(v: v128): f32 {
  v = f32x4.pmax(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return f32x4.extract_lane(f32x4.pmax(v, i32x4.shuffle(v, v, 1, 0, 3, 2)), 0);
}

/** An integer-valued float (|t| < 2^22) as that i32. */
@inline function asInt(t: v128): v128 {
  return i32x4.sub(f32x4.add(t, c(MAGIC)), c(MAGIC));
}

/** Q8_0's scale of the block at p into o's d, and its record at s. */
@inline function scalesQ8_0(p: usize, o: usize, s: usize): void {
  const bits = maxMagnitudeBits(
    v128.load(p),
    v128.load(p, 16),
    v128.load(p, 32),
    v128.load(p, 48),
    v128.load(p, 64),
    v128.load(p, 80),
    v128.load(p, 96),
    v128.load(p, 112),
  );
  // a NaN makes amax NaN, as Math.max does; which NaN is the reference's (nanScale)
  const amax = reinterpret<f32>(bits);
  const d = amax / <f32>127;
  store<u16>(o, <u16>(bits > 0x7f800000 ? nanScale : f32ToF16(d)));
  const id = inverse(d);
  store<f32>(s, id);
  // |quant| <= 127: the fast rounding and a signed narrowing hold
  store<i32>(s, bits < 0x7f800000 && amax * id < <f32>127.5 ? 1 : 0, 8);
}

/** Q8_0's quant of each lane (x = value * id), as C's roundf then `& 0xff`: 0..255 per i32 lane. */
@inline function q8Lane(v: v128, id: v128): v128 {
  const x = f32x4.mul(v, id);
  const t = f32x4.trunc(x);
  const away = v128.and(f32x4.ge(f32x4.abs(f32x4.sub(x, t)), c(HALF)), v128.or(v128.and(x, c(SIGN)), c(ONE)));
  const q = i32x4.trunc_sat_f32x4_s(f32x4.add(t, away));
  return v128.and(v128.andnot(q, f32x4.ge(f32x4.abs(x), c(TWO31))), c(BYTE));
}

/**
 * roundf(v * id) for |v * id| < 127.5, as i32: trunc(x + copysign(0.49999997, x)), which is x
 * rounded half away from zero for every float below 2^23 (the largest float below a half keeps
 * x + it from rounding up where x's fraction is under a half; at a half the sum rounds up).
 */
@inline function q8Fast(v: v128, id: v128): v128 {
  const x = f32x4.mul(v, id);
  return asInt(f32x4.trunc(f32x4.add(x, v128.or(v128.and(x, c(SIGN)), c(BELOW_HALF)))));
}

/** The Q8_0 quants of the block at p into o (its scale record at s). */
@inline function quantsQ8_0(p: usize, o: usize, s: usize): void {
  const id = f32x4.splat(load<f32>(s));
  if (load<i32>(s, 8)) {
    const a = i16x8.narrow_i32x4_s(q8Fast(v128.load(p), id), q8Fast(v128.load(p, 16), id)),
      b = i16x8.narrow_i32x4_s(q8Fast(v128.load(p, 32), id), q8Fast(v128.load(p, 48), id)),
      e = i16x8.narrow_i32x4_s(q8Fast(v128.load(p, 64), id), q8Fast(v128.load(p, 80), id)),
      f = i16x8.narrow_i32x4_s(q8Fast(v128.load(p, 96), id), q8Fast(v128.load(p, 112), id));
    v128.store(o, i8x16.narrow_i16x8_s(a, b), 2);
    v128.store(o, i8x16.narrow_i16x8_s(e, f), 18);
    return;
  }
  const q0 = q8Lane(v128.load(p), id),
    q1 = q8Lane(v128.load(p, 16), id),
    q2 = q8Lane(v128.load(p, 32), id),
    q3 = q8Lane(v128.load(p, 48), id);
  v128.store(o, bytes16(q0, q1, q2, q3), 2);
  const q4 = q8Lane(v128.load(p, 64), id),
    q5 = q8Lane(v128.load(p, 80), id),
    q6 = q8Lane(v128.load(p, 96), id),
    q7 = q8Lane(v128.load(p, 112), id);
  v128.store(o, bytes16(q4, q5, q6, q7), 18);
}

/** The first of a block's 32 values whose lane is set in its compare mask. */
@inline function firstOf(m0: v128, m1: v128, m2: v128, m3: v128, m4: v128, m5: v128, m6: v128, m7: v128): usize {
  return <usize>ctz(maskBits(m0, m1, m2, m3, m4, m5, m6, m7));
}

/** The first zero (of either sign) of the 32 values at p, as stored: a min or max that is a zero. */
@inline function firstZero(p: usize): f32 {
  const z = c(ZERO);
  const j = firstOf(
    f32x4.eq(v128.load(p), z),
    f32x4.eq(v128.load(p, 16), z),
    f32x4.eq(v128.load(p, 32), z),
    f32x4.eq(v128.load(p, 48), z),
    f32x4.eq(v128.load(p, 64), z),
    f32x4.eq(v128.load(p, 80), z),
    f32x4.eq(v128.load(p, 96), z),
    f32x4.eq(v128.load(p, 112), z),
  );
  return load<f32>(p + (j << 2));
}

/**
 * Q4_0 / Q4_1 / Q5_0 / Q5_1's (`one`: with a min; `five`: 5-bit quants) scale and min of the
 * block at p into o, and its record at s.
 */
@inline function scalesQ4(p: usize, o: usize, s: usize, one: bool, five: bool): void {
  const v0 = v128.load(p),
    v1 = v128.load(p, 16),
    v2 = v128.load(p, 32),
    v3 = v128.load(p, 48),
    v4 = v128.load(p, 64),
    v5 = v128.load(p, 80),
    v6 = v128.load(p, 96),
    v7 = v128.load(p, 112);
  const bits = maxMagnitudeBits(v0, v1, v2, v3, v4, v5, v6, v7);
  const finiteBlock = bits < 0x7f800000;
  let id: f32, span: f32;
  if (one) {
    let lo: v128, hi: v128;
    if (finiteBlock) {
      // no NaN: any order finds the extremes (a zero's sign is settled below)
      lo = f32x4.pmin(
        f32x4.pmin(f32x4.pmin(v0, v1), f32x4.pmin(v2, v3)),
        f32x4.pmin(f32x4.pmin(v4, v5), f32x4.pmin(v6, v7)),
      );
      hi = f32x4.pmax(
        f32x4.pmax(f32x4.pmax(v0, v1), f32x4.pmax(v2, v3)),
        f32x4.pmax(f32x4.pmax(v4, v5), f32x4.pmax(v6, v7)),
      );
    } else {
      // pmin / pmax with the running value first skip NaN (the `v < min` of the reference)
      lo = f32x4.pmin(f32x4.pmin(f32x4.pmin(f32x4.pmin(c(INF), v0), v1), v2), v3);
      hi = f32x4.pmax(f32x4.pmax(f32x4.pmax(f32x4.pmax(c(NEG_INF), v0), v1), v2), v3);
      lo = f32x4.pmin(f32x4.pmin(f32x4.pmin(f32x4.pmin(lo, v4), v5), v6), v7);
      hi = f32x4.pmax(f32x4.pmax(f32x4.pmax(f32x4.pmax(hi, v4), v5), v6), v7);
    }
    let mn = lanesMin(lo),
      mx = lanesMax(hi);
    if (mn == 0) mn = firstZero(p);
    if (mx == 0) mx = firstZero(p);
    span = mx - mn;
    const d = span / (five ? <f32>31 : <f32>15);
    store<u16>(o, <u16>f32ToF16(d));
    store<u16>(o, <u16>f32ToF16(mn), 2);
    id = inverse(d);
    store<f32>(s, mn, 4);
  } else {
    let amax = reinterpret<f32>(bits);
    if (!finiteBlock) {
      // NaN skipped: the running value first in pmax
      const z = c(ZERO);
      let a = f32x4.pmax(
        f32x4.pmax(f32x4.pmax(f32x4.pmax(z, f32x4.abs(v0)), f32x4.abs(v1)), f32x4.abs(v2)),
        f32x4.abs(v3),
      );
      a = f32x4.pmax(f32x4.pmax(f32x4.pmax(f32x4.pmax(a, f32x4.abs(v4)), f32x4.abs(v5)), f32x4.abs(v6)), f32x4.abs(v7));
      amax = lanesMax(a);
    }
    // the signed value: the first to reach amax (0 where every value is zero or NaN)
    let mx: f32 = 0;
    if (amax > 0) {
      const am = f32x4.splat(amax);
      const j = firstOf(
        f32x4.eq(f32x4.abs(v0), am),
        f32x4.eq(f32x4.abs(v1), am),
        f32x4.eq(f32x4.abs(v2), am),
        f32x4.eq(f32x4.abs(v3), am),
        f32x4.eq(f32x4.abs(v4), am),
        f32x4.eq(f32x4.abs(v5), am),
        f32x4.eq(f32x4.abs(v6), am),
        f32x4.eq(f32x4.abs(v7), am),
      );
      mx = load<f32>(p + (j << 2));
    }
    // a quotient by a power of two is the product by its inverse, exactly (a multiply, not a divide)
    const d = mx * (five ? <f32>-0.0625 : <f32>-0.125);
    store<u16>(o, <u16>f32ToF16(d));
    id = inverse(d);
    span = amax;
  }
  store<f32>(s, id);
  // |quant before the clamp| < 2^20: the fast path's integers are exact
  store<i32>(s, finiteBlock && span * abs(id) < <f32>1048576 ? 1 : 0, 8);
}

/** A Q4/Q5 quant per lane: trunc(min(top, (v - base) * id + offset)) (Q4_0/Q5_0: v * id + offset). */
@inline function q4Lane(v: v128, base: v128, id: v128, offset: v128, top: v128, one: bool): v128 {
  const x = f32x4.mul(one ? f32x4.sub(v, base) : v, id);
  return i32x4.trunc_sat_f32x4_s(f32x4.min(top, f32x4.add(x, offset)));
}

/** q4Lane for a block on the fast path: the clamp on the integer. */
@inline function q4Fast(v: v128, base: v128, id: v128, offset: v128, top: v128, one: bool): v128 {
  const x = f32x4.mul(one ? f32x4.sub(v, base) : v, id);
  return i32x4.min_s(asInt(f32x4.trunc(f32x4.add(x, offset))), top);
}

/** lo's low nibble | hi's low nibble << 4, per i32 lane. */
@inline function nibbles(lo: v128, hi: v128): v128 {
  return v128.or(v128.and(lo, c(NIBBLE)), i32x4.shl(v128.and(hi, c(NIBBLE)), 4));
}

/** A Q4/Q5 block's 32 quants (i32 lanes) into its bytes at o. */
@inline function storeQ4(
  o: usize,
  q0: v128,
  q1: v128,
  q2: v128,
  q3: v128,
  q4: v128,
  q5: v128,
  q6: v128,
  q7: v128,
  one: bool,
  five: bool,
): void {
  const qoff: usize = five ? (one ? 8 : 6) : one ? 4 : 2;
  // byte j: value j's low nibble, value j + 16's high
  v128.store(o + qoff, bytes16(nibbles(q0, q4), nibbles(q1, q5), nibbles(q2, q6), nibbles(q3, q7)));
  if (five) {
    // bit j of qh: value j's fifth bit (bit 4 moved to the sign for bitmask)
    const qh = maskBits(
      i32x4.shl(q0, 27),
      i32x4.shl(q1, 27),
      i32x4.shl(q2, 27),
      i32x4.shl(q3, 27),
      i32x4.shl(q4, 27),
      i32x4.shl(q5, 27),
      i32x4.shl(q6, 27),
      i32x4.shl(q7, 27),
    );
    store<u32>(o + (one ? 4 : 2), qh);
  }
}

/** The Q4/Q5 quant of each lane, by the fast path or the exact one. */
@inline function q4Quant(v: v128, base: v128, id: v128, offset: v128, fast: bool, one: bool, five: bool): v128 {
  if (fast) return q4Fast(v, base, id, offset, five ? c(TOP5_I) : c(NIBBLE), one);
  return q4Lane(v, base, id, offset, five ? c(TOP5) : c(TOP4), one);
}

/** The Q4/Q5 quants of the block at p into o (its record at s). */
@inline function quantsQ4(p: usize, o: usize, s: usize, one: bool, five: bool): void {
  const id = f32x4.splat(load<f32>(s));
  const base = f32x4.splat(load<f32>(s, 4));
  const offset = one ? c(HALF) : five ? c(Q5_0_OFF) : c(Q4_0_OFF);
  const fast = load<i32>(s, 8) != 0;
  storeQ4(
    o,
    q4Quant(v128.load(p), base, id, offset, fast, one, five),
    q4Quant(v128.load(p, 16), base, id, offset, fast, one, five),
    q4Quant(v128.load(p, 32), base, id, offset, fast, one, five),
    q4Quant(v128.load(p, 48), base, id, offset, fast, one, five),
    q4Quant(v128.load(p, 64), base, id, offset, fast, one, five),
    q4Quant(v128.load(p, 80), base, id, offset, fast, one, five),
    q4Quant(v128.load(p, 96), base, id, offset, fast, one, five),
    q4Quant(v128.load(p, 112), base, id, offset, fast, one, five),
    one,
    five,
  );
}

/** f32 lanes -> f16 bit patterns in i32 lanes (nearest, ties to even; src/format/half.ts f32ToF16). */
@inline function f16Lanes(x: v128): v128 {
  const a = v128.and(x, c(ABS));
  // normal halves: re-biased and rounded by adding 0xfff plus the kept lowest bit; from 65520 on
  // (infinity and NaN too) the sum reaches 0x7c00 or passes it, and is clamped to infinity
  const normal = i32x4.shr_u(i32x4.add(i32x4.sub(a, c(F16_NORM)), v128.and(i32x4.shr_u(x, 13), c(ONE_I))), 13);
  // subnormal halves (and zero): |x| + 0.5 rounds to a multiple of 2^-24, which the low bits count
  const sub = i32x4.sub(f32x4.add(a, c(HALF)), c(HALF));
  let h = i32x4.min_u(v128.bitselect(sub, normal, i32x4.lt_s(a, c(F16_MIN_NORMAL))), c(F16_INF));
  h = v128.or(h, v128.and(i32x4.gt_s(a, c(INF)), c(F16_QUIET)));
  return v128.or(h, v128.and(i32x4.shr_u(x, 16), c(F16_SIGN)));
}

/** f32 lanes -> bf16 bit patterns in i32 lanes (nearest, ties to even; a NaN quieted). */
@inline function bf16Lanes(x: v128): v128 {
  const hi = i32x4.shr_u(x, 16);
  const rounded = i32x4.shr_u(i32x4.add(x, i32x4.add(c(LOW15), v128.and(hi, c(ONE_I)))), 16);
  return v128.bitselect(v128.or(hi, c(BF16_QUIET)), rounded, i32x4.gt_s(v128.and(x, c(ABS)), c(INF)));
}

/** n f32 at p -> n halves (F16, or BF16 where `bf`) at o. */
@inline function halfRow(p: usize, n: usize, o: usize, bf: bool): void {
  let i: usize = 0;
  for (; i + 8 <= n; i += 8) {
    const a = v128.load(p + (i << 2)),
      b = v128.load(p + (i << 2), 16);
    v128.store(
      o + (i << 1),
      bf ? i16x8.narrow_i32x4_u(bf16Lanes(a), bf16Lanes(b)) : i16x8.narrow_i32x4_u(f16Lanes(a), f16Lanes(b)),
    );
  }
  for (; i < n; i++) {
    const x = i32x4.splat(load<u32>(p + (i << 2)));
    store<u16>(o + (i << 1), <u16>i32x4.extract_lane(bf ? bf16Lanes(x) : f16Lanes(x), 0));
  }
}

/**
 * n f32 values at p (n a multiple of 32 for the block types) -> `type` at o, with QUANT_SCRATCH
 * bytes of scratch. False for a type not written here.
 */
@inline function quantizeValues(type: i32, p: usize, n: usize, o: usize, scratch: usize): bool {
  if (type == T_F16) halfRow(p, n, o, false);
  else if (type == T_BF16) halfRow(p, n, o, true);
  else if (type == T_F32) memory.copy(o, p, n << 2);
  else {
    const bs = writtenBlockBytes(type);
    if (bs == 0) return false;
    const nb = n >> 5;
    for (let b0: usize = 0; b0 < nb; b0 += PASS) {
      const count = min(PASS, nb - b0);
      const pp = p + (b0 << 7),
        oo = o + b0 * bs;
      if (type == T_Q8_0) {
        for (let j: usize = 0; j < count; j++) scalesQ8_0(pp + (j << 7), oo + j * 34, scratch + j * SCALE_BYTES);
        for (let j: usize = 0; j < count; j++) quantsQ8_0(pp + (j << 7), oo + j * 34, scratch + j * SCALE_BYTES);
      } else if (type == T_Q4_0) {
        for (let j: usize = 0; j < count; j++)
          scalesQ4(pp + (j << 7), oo + j * 18, scratch + j * SCALE_BYTES, false, false);
        for (let j: usize = 0; j < count; j++)
          quantsQ4(pp + (j << 7), oo + j * 18, scratch + j * SCALE_BYTES, false, false);
      } else if (type == T_Q4_1) {
        for (let j: usize = 0; j < count; j++)
          scalesQ4(pp + (j << 7), oo + j * 20, scratch + j * SCALE_BYTES, true, false);
        for (let j: usize = 0; j < count; j++)
          quantsQ4(pp + (j << 7), oo + j * 20, scratch + j * SCALE_BYTES, true, false);
      } else if (type == T_Q5_0) {
        for (let j: usize = 0; j < count; j++)
          scalesQ4(pp + (j << 7), oo + j * 22, scratch + j * SCALE_BYTES, false, true);
        for (let j: usize = 0; j < count; j++)
          quantsQ4(pp + (j << 7), oo + j * 22, scratch + j * SCALE_BYTES, false, true);
      } else {
        for (let j: usize = 0; j < count; j++)
          scalesQ4(pp + (j << 7), oo + j * 24, scratch + j * SCALE_BYTES, true, true);
        for (let j: usize = 0; j < count; j++)
          quantsQ4(pp + (j << 7), oo + j * 24, scratch + j * SCALE_BYTES, true, true);
      }
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// Decoding what was stored (src/format/quant.ts dequantizeRow): every product and sum here is
// exact in f32 but the last, which rounds once, as the reference's double arithmetic rounded to
// f32 does. Each returns a mask of the lanes that are finite, and-ed over what it wrote.

/** f16 bit patterns in i32 lanes -> f32, exact, infinities and NaN kept (half.ts f16ToF32). */
@inline function f16Values(h: v128): v128 {
  const b = i32x4.shl(v128.and(h, c(LOW15)), 13);
  const f = f32x4.mul(b, c(REBIAS));
  const special = v128.or(b, c(INF));
  const v = v128.bitselect(special, f, i32x4.eq(v128.and(h, c(F16_INF)), c(F16_INF)));
  return v128.or(v, i32x4.shl(v128.and(h, c(F16_SIGN)), 16));
}

@inline function finite(v: v128): v128 {
  return f32x4.lt(f32x4.abs(v), c(INF));
}

/** 32 values of 4-bit (or 5-bit) quants (0..31 per i32 lane, 8 vectors) times d plus m (or less the offset), into g. */
@inline function decodeQ4Block(o: usize, g: usize, one: bool, five: bool, ok: v128): v128 {
  const d = f32x4.splat(f16ToF32(load<u16>(o)));
  const m = one ? f32x4.splat(f16ToF32(load<u16>(o, 2))) : c(ZERO);
  const qs = v128.load(o + (five ? (one ? 8 : 6) : one ? 4 : 2));
  let lo = v128.and(qs, i8x16.splat(15)),
    hi = i8x16.shr_u(qs, 4);
  if (five) {
    // fifth bits: bit j of qh for value j (lo: j < 16, hi: j + 16)
    const qh = load<u32>(o + (one ? 4 : 2));
    lo = v128.or(lo, fifthBits(qh & 0xffff));
    hi = v128.or(hi, fifthBits(qh >> 16));
  }
  const off = five ? <i32>16 : 8;
  ok = decode16(lo, d, m, off, one, false, g, ok);
  return decode16(hi, d, m, off, one, false, g + 64, ok);
}

/** Bit j of the 16 bits `bits` as 16 (0 or 16) in byte j. */
@inline function fifthBits(bits: u32): v128 {
  // each byte gets the mask byte holding its bit, then tests it
  const spread = i8x16.shuffle(
    i16x8.splat(<i16>bits),
    i16x8.splat(<i16>bits),
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    0,
    1,
    1,
    1,
    1,
    1,
    1,
    1,
    1,
  );
  const sel = v128.and(spread, v128(1, 2, 4, 8, 16, 32, 64, -128, 1, 2, 4, 8, 16, 32, 64, -128));
  return v128.and(i8x16.ne(sel, i8x16.splat(0)), i8x16.splat(16));
}

/** 16 quants (bytes, `signed` or not) -> 16 f32 at g: (q - off) * d, or q * d + m (`one`). */
@inline function decode16(q: v128, d: v128, m: v128, off: i32, one: bool, signed: bool, g: usize, ok: v128): v128 {
  const w0 = signed ? i16x8.extend_low_i8x16_s(q) : i16x8.extend_low_i8x16_u(q),
    w1 = signed ? i16x8.extend_high_i8x16_s(q) : i16x8.extend_high_i8x16_u(q);
  const a = decode4(signed ? i32x4.extend_low_i16x8_s(w0) : i32x4.extend_low_i16x8_u(w0), d, m, off, one),
    b = decode4(signed ? i32x4.extend_high_i16x8_s(w0) : i32x4.extend_high_i16x8_u(w0), d, m, off, one),
    e = decode4(signed ? i32x4.extend_low_i16x8_s(w1) : i32x4.extend_low_i16x8_u(w1), d, m, off, one),
    f = decode4(signed ? i32x4.extend_high_i16x8_s(w1) : i32x4.extend_high_i16x8_u(w1), d, m, off, one);
  v128.store(g, a);
  v128.store(g, b, 16);
  v128.store(g, e, 32);
  v128.store(g, f, 48);
  return v128.and(ok, v128.and(v128.and(finite(a), finite(b)), v128.and(finite(e), finite(f))));
}

@inline function decode4(q: v128, d: v128, m: v128, off: i32, one: bool): v128 {
  if (one) return f32x4.add(f32x4.mul(f32x4.convert_i32x4_s(q), d), m);
  return f32x4.mul(f32x4.convert_i32x4_s(off ? i32x4.sub(q, i32x4.splat(off)) : q), d);
}

/** One Q8_0 block at o -> 32 f32 at g. */
@inline function decodeQ8_0Block(o: usize, g: usize, ok: v128): v128 {
  const d = f32x4.splat(f16ToF32(load<u16>(o)));
  const z = c(ZERO);
  ok = decode16(v128.load(o, 2), d, z, 0, false, true, g, ok);
  return decode16(v128.load(o, 18), d, z, 0, false, true, g + 64, ok);
}

/**
 * n halves (F16, or BF16 where `bf`) at o -> f32 at g, each exactly (a bf16 moved into an f32's
 * top half, NaN payloads kept; every f16 NaN the quiet NaN 0x7fc00000, which src/format/half.ts's
 * table holds).
 */
@inline function halvesToF32(o: usize, n: usize, g: usize, bf: bool, ok: v128): v128 {
  let i: usize = 0;
  for (; i + 8 <= n; i += 8) {
    const h = v128.load(o + (i << 1));
    const a = i32x4.extend_low_i16x8_u(h),
      b = i32x4.extend_high_i16x8_u(h);
    const x = bf ? i32x4.shl(a, 16) : f16Widened(a),
      y = bf ? i32x4.shl(b, 16) : f16Widened(b);
    v128.store(g + (i << 2), x);
    v128.store(g + (i << 2), y, 16);
    ok = v128.and(ok, v128.and(finite(x), finite(y)));
  }
  for (; i < n; i++) {
    const x = i32x4.splat(<i32>load<u16>(o + (i << 1)));
    const v = bf ? i32x4.shl(x, 16) : f16Widened(x);
    store<u32>(g + (i << 2), i32x4.extract_lane(v, 0));
    ok = v128.and(ok, finite(v));
  }
  return ok;
}

/** f16 bit patterns in i32 lanes -> f32, every NaN the one quiet NaN. */
@inline function f16Widened(h: v128): v128 {
  const v = f16Values(h);
  return v128.bitselect(c(CANONICAL_NAN), v, f32x4.ne(v, v));
}

/** A row of n values of `type` at o -> f32 at g; false where a value decoded is not finite. */
@inline function decodeRow(type: i32, o: usize, n: usize, g: usize): bool {
  let ok = i32x4.splat(-1);
  if (type == T_Q8_0) for (let b: usize = 0; b < n; b += 32, o += 34, g += 128) ok = decodeQ8_0Block(o, g, ok);
  else if (type == T_Q4_0)
    for (let b: usize = 0; b < n; b += 32, o += 18, g += 128) ok = decodeQ4Block(o, g, false, false, ok);
  else if (type == T_Q4_1)
    for (let b: usize = 0; b < n; b += 32, o += 20, g += 128) ok = decodeQ4Block(o, g, true, false, ok);
  else if (type == T_Q5_0)
    for (let b: usize = 0; b < n; b += 32, o += 22, g += 128) ok = decodeQ4Block(o, g, false, true, ok);
  else if (type == T_Q5_1)
    for (let b: usize = 0; b < n; b += 32, o += 24, g += 128) ok = decodeQ4Block(o, g, true, true, ok);
  else if (type == T_F16) ok = halvesToF32(o, n, g, false, ok);
  else if (type == T_BF16) ok = halvesToF32(o, n, g, true, ok);
  else {
    memory.copy(g, o, n << 2);
    let i: usize = 0;
    for (; i + 4 <= n; i += 4) ok = v128.and(ok, finite(v128.load(g + (i << 2))));
    for (; i < n; i++) ok = v128.and(ok, finite(f32x4.splat(load<f32>(g + (i << 2)))));
  }
  return i32x4.all_true(ok);
}

export { QUANT_SCRATCH, setNanScale, typeRowBytes, quantizeValues, decodeRow, halvesToF32 };
