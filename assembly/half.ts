// IEEE half precision (f16) <-> f32, shared by the kernels. All of them are @inline: each call
// site gets the code (AssemblyScript inlines imported @inline functions too).
//
// f16 -> f32 moves the bit pattern into place (sign kept, exponent and mantissa shifted) and
// re-biases the exponent (15 -> 127) by one exact multiplication by 2^112, which is right for
// normals, subnormals and zeros alike.

// The bit patterns every f16 / bf16 conversion here uses, defined once.
/** 2^112 as f32 bits: the multiplier that re-biases a half's exponent (15) to f32's (127) */
const F16_REBIAS_BITS: u32 = 0x77800000;
/** 2^96 as f32 bits: F16_X_UP's */
const F16_X_UP_BITS: u32 = 0x6f800000;
/**
 * A half in a lane's high 16 bits, shifted right arithmetically by 3: this keeps its sign and its
 * 15 exponent and mantissa bits in f32's places (the sign spread over bits 28-30 cleared) and
 * clears the 13 bits below, where the lane's low half would land.
 */
const F16_FIELDS: u32 = 0x8fffe000;
/** F16_FIELDS without clearing the 13 low bits: for a lane whose low 16 bits are zero (they stay zero) */
const F16_FIELDS_WIDE: u32 = 0x8fffffff;
/** a bf16 in a lane's high 16 bits, the low half cleared */
const BF16_FIELDS: u32 = 0xffff0000;

/** f16 bits -> f32, exact for every finite half (subnormals included), inf and NaN kept. */
@inline function f16ToF32(h: u32): f32 {
  const b = (h & 0x7fff) << 13;
  let f = reinterpret<f32>(b) * reinterpret<f32>(F16_REBIAS_BITS); // * 2^112 re-biases the exponent
  if ((h & 0x7c00) == 0x7c00) f = reinterpret<f32>(b | 0x7f800000);
  return h & 0x8000 ? -f : f;
}

/**
 * f16 bits (h < 2^16) -> f32 for finite halves, without a branch: f16 infinities and NaNs, which
 * no sane weight scale holds, come out finite.
 */
@inline function f16ToF32Finite(h: u32): f32 {
  return reinterpret<f32>(((<i32>(h << 16)) >> 3) & F16_FIELDS_WIDE) * reinterpret<f32>(F16_REBIAS_BITS); // * 2^112
}

/** 4 sign-extended f16 values in i32 lanes -> f32x4 (exact for finite halves). */
@inline function halfLanes(e: v128): v128 {
  return f32x4.mul(v128.and(i32x4.shl(e, 13), i32x4.splat(F16_FIELDS)), f32x4.splat(reinterpret<f32>(F16_REBIAS_BITS)));
}

/** f32 -> f16 bits, rounding to nearest even (as GGML_FP32_TO_FP16), exact for subnormals. */
@inline function f32ToF16(v: f32): u32 {
  const x = reinterpret<u32>(v);
  const sign = (x >> 16) & 0x8000;
  const exp = <i32>((x >> 23) & 0xff);
  const man = x & 0x7fffff;
  if (exp == 0xff) return sign | (man != 0 ? 0x7e00 : 0x7c00);
  const e = exp - 112;
  if (e >= 31) return sign | 0x7c00;
  if (e >= 1) {
    let h = ((<u32>e) << 10) | (man >> 13);
    const rest = man & 0x1fff;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1) != 0)) h++; // a carry into the exponent is right
    return sign | h;
  }
  if (e < -10) return sign;
  const m = man | 0x800000;
  const shift = <u32>(14 - e);
  let h = m >> shift;
  const rest = m & (((<u32>1) << shift) - 1);
  const half = (<u32>1) << (shift - 1);
  if (rest > half || (rest == half && (h & 1) != 0)) h++;
  return sign | h;
}

// The same patterns as v128s for the SIMD conversions, loaded from memory: V8 rematerializes a
// v128.const at every use inside a loop (three instructions apiece), a loaded value stays in a
// register.
// prettier-ignore
const HALF_V128 = memory.data<u32>(
  [
    F16_FIELDS, F16_FIELDS, F16_FIELDS, F16_FIELDS, // 0
    BF16_FIELDS, BF16_FIELDS, BF16_FIELDS, BF16_FIELDS, // 16
    F16_FIELDS_WIDE, F16_FIELDS_WIDE, F16_FIELDS_WIDE, F16_FIELDS_WIDE, // 32
    F16_REBIAS_BITS, F16_REBIAS_BITS, F16_REBIAS_BITS, F16_REBIAS_BITS, // 48
    F16_X_UP_BITS, F16_X_UP_BITS, F16_X_UP_BITS, F16_X_UP_BITS, // 64
  ],
  16,
);
/** F16_FIELDS in each lane */
@inline function f16Fields(): v128 {
  return v128.load(HALF_V128);
}
/** F16_FIELDS_WIDE in each lane */
@inline function f16FieldsWide(): v128 {
  return v128.load(HALF_V128, 32);
}
/** 2^112 in each lane */
@inline function f16Rebias(): v128 {
  return v128.load(HALF_V128, 48);
}
/** 2^96 (F16_X_UP) in each lane */
@inline function f16XUp(): v128 {
  return v128.load(HALF_V128, 64);
}

// Eight 16-bit values in a v128, their low (Lo) or high (Hi) four as f32x4, for the sparse F16 /
// BF16 kernels (sparse_down_columns.ts; the dense ones in matvec_half.ts take each 8 values as their even
// and odd 4 instead). F16: the value times 2^-112 (`mask` = f16Fields(), F16_FIELDS as in
// halfLanes), exact for finite halves; the 2^112 is the caller's to apply, on the weights or on the
// activations (times F16_X_UP as loaded, the sum times F16_SUM_UP). The halves go into the
// high 16 bits of i32 lanes by one interleave with zeros (punpcklwd / punpckhwd on x86: a widening
// takes one instruction for the low half and two for the high) and shift down into f32's fields:
// the same bits as a widening and a left shift, F16 matvec 1.11-1.18x. BF16 keeps its widening
// and shift (its interleaved halves as they are measured 0.66-0.75x).
@inline function f16BitsLo(v: v128, mask: v128): v128 {
  const h = i8x16.shuffle(i32x4.splat(0), v, 0, 1, 16, 17, 2, 3, 18, 19, 4, 5, 20, 21, 6, 7, 22, 23);
  return v128.and(i32x4.shr_s(h, 3), mask);
}
@inline function f16BitsHi(v: v128, mask: v128): v128 {
  const h = i8x16.shuffle(i32x4.splat(0), v, 8, 9, 24, 25, 10, 11, 26, 27, 12, 13, 28, 29, 14, 15, 30, 31);
  return v128.and(i32x4.shr_s(h, 3), mask);
}
@inline function bf16Lo(v: v128): v128 {
  return i32x4.shl(i32x4.extend_low_i16x8_u(v), 16);
}
@inline function bf16Hi(v: v128): v128 {
  return i32x4.shl(i32x4.extend_high_i16x8_u(v), 16);
}
// The same 8 values as their even (halfEven) and odd (halfOdd) 4, for kernels whose activations
// come in that order ("f32_eo": matvec_half.ts explains): read as i32 lanes a v128 holds the odd
// halves in their lane's top 16 bits and the even ones a shift by 16 away. BF16: an and (clearing
// the even half under it) or the shift; F16: shifted down arithmetically into f32's fields and
// masked, times 2^-112 as above. `mask` is halfEoMask(bf)'s.
@inline function halfEoMask(bf: bool): v128 {
  return bf ? v128.load(HALF_V128, 16) : f16Fields();
}
@inline function halfEven(v: v128, bf: bool, mask: v128): v128 {
  return bf ? i32x4.shl(v, 16) : v128.and(i32x4.shr_s(i32x4.shl(v, 16), 3), mask);
}
@inline function halfOdd(v: v128, bf: bool, mask: v128): v128 {
  return bf ? v128.and(v, mask) : v128.and(i32x4.shr_s(v, 3), mask);
}
/** 2^96 and 2^16: F16 activations' and row sums' share of the 2^112 re-bias (f32 range: matvec_half.ts) */
const F16_X_UP: f32 = reinterpret<f32>(F16_X_UP_BITS);
const F16_SUM_UP: f32 = 65536;

export {
  f16ToF32,
  f16ToF32Finite,
  halfLanes,
  f32ToF16,
  f16BitsLo,
  f16BitsHi,
  bf16Lo,
  bf16Hi,
  f16Fields,
  f16FieldsWide,
  f16Rebias,
  f16XUp,
  halfEoMask,
  halfEven,
  halfOdd,
  F16_X_UP,
  F16_SUM_UP,
};
