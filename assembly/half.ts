// IEEE half precision (f16) <-> f32, shared by the kernels. All of them are @inline: each call
// site gets the code (AssemblyScript inlines imported @inline functions too).
//
// f16 -> f32 moves the bit pattern into place (sign kept, exponent and mantissa shifted) and
// re-biases the exponent (15 -> 127) by one exact multiplication by 2^112, which is right for
// normals, subnormals and zeros alike.

/** f16 bits -> f32, exact for every finite half (subnormals included), inf and NaN kept. */
@inline function f16ToF32(h: u32): f32 {
  const b = (h & 0x7fff) << 13;
  let f = reinterpret<f32>(b) * reinterpret<f32>(0x77800000); // * 2^112 re-biases the exponent
  if ((h & 0x7c00) == 0x7c00) f = reinterpret<f32>(b | 0x7f800000);
  return h & 0x8000 ? -f : f;
}

/**
 * f16 bits (h < 2^16) -> f32 for finite halves, without a branch: f16 infinities and NaNs, which
 * no sane weight scale holds, come out finite.
 */
@inline function f16ToF32Finite(h: u32): f32 {
  return reinterpret<f32>(((<i32>(h << 16)) >> 3) & 0x8fffffff) * reinterpret<f32>(0x77800000); // * 2^112
}

/** 4 sign-extended f16 values in i32 lanes -> f32x4 (exact for finite halves). */
@inline function halfLanes(e: v128): v128 {
  return f32x4.mul(v128.and(i32x4.shl(e, 13), i32x4.splat(0x8fffe000)), f32x4.splat(reinterpret<f32>(0x77800000)));
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

export { f16ToF32, f16ToF32Finite, halfLanes, f32ToF16 };
