/**
 * IEEE half (f16) and bfloat16 (bf16) <-> f32 conversions on raw 16-bit patterns.
 *
 * f32 -> f16/bf16 rounds to nearest, ties to even (what ggml's GGML_FP32_TO_FP16 and
 * GGML_FP32_TO_BF16 do), keeps infinities, turns NaN into a quiet NaN of the same sign and lets
 * overflow become infinity. f16 -> f32 is a table lookup: it sits inside every dequantization.
 */

const f32Box = new Float32Array(1);
const u32Box = new Uint32Array(f32Box.buffer);

/** f16 bit pattern -> f32 value, for all 65536 patterns (256 KiB, built once at import). */
const F16_TABLE: Float32Array = (() => {
  const t = new Float32Array(65536);
  for (let h = 0; h < 65536; h++) {
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >>> 10) & 0x1f;
    const man = h & 0x3ff;
    let v: number;
    if (exp === 0)
      v = man * 2 ** -24; // zero and subnormals
    else if (exp === 31) v = man ? NaN : Infinity;
    else v = (1 + man / 1024) * 2 ** (exp - 15);
    t[h] = sign * v;
  }
  return t;
})();

/** The table itself, for hot loops that want to index it directly. */
export const f16Table: Readonly<Float32Array> = F16_TABLE;

export function f16ToF32(h: number): number {
  return F16_TABLE[h & 0xffff];
}

export function f32ToF16(v: number): number {
  f32Box[0] = v;
  return f16BitsOfF32Bits(u32Box[0]);
}

/** f32 values to f16 bit patterns, element by element (a converter's hot loop: no boxing per value). */
export function f32ToF16Array(src: Float32Array, dst: Uint16Array): void {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < bits.length; i++) dst[i] = f16BitsOfF32Bits(bits[i]);
}

/** The f16 bit pattern nearest (ties to even) to the f32 with bit pattern x. */
function f16BitsOfF32Bits(x: number): number {
  const sign = (x >>> 16) & 0x8000;
  const a = x & 0x7fffffff;
  // f16's normal range (exponents 113..142), nearly every weight: re-biased, and rounded to
  // nearest even by adding 0xfff plus the kept lowest bit, with no branch on the dropped bits (a
  // coin toss per value); a carry out of the mantissa bumps the exponent, up to infinity
  if (a >= 0x38800000 && a < 0x47800000) return sign | ((a - 0x38000000 + 0xfff + ((x >>> 13) & 1)) >>> 13);
  const exp = (x >>> 23) & 0xff;
  const man = x & 0x7fffff;
  if (exp === 0xff) return man ? sign | 0x7e00 : sign | 0x7c00;
  // exponent re-biased for f16 (bias 15 instead of 127)
  const e = exp - 112;
  if (e >= 31) return sign | 0x7c00;
  // f16 subnormal (or zero): the value in units of 2^-24 is m >> shift
  if (e < -10) return sign; // below half the smallest subnormal: rounds to zero
  const m = man | 0x800000;
  const shift = 14 - e; // 14..24
  let h = m >>> shift;
  const rest = m & ((1 << shift) - 1);
  const half = 1 << (shift - 1);
  if (rest > half || (rest === half && h & 1)) h++;
  return sign | h;
}

export function bf16ToF32(h: number): number {
  u32Box[0] = (h & 0xffff) << 16;
  return f32Box[0];
}

export function f32ToBF16(v: number): number {
  f32Box[0] = v;
  return bf16BitsOfF32Bits(u32Box[0]);
}

/** f32 values to bf16 bit patterns, element by element (no boxing per value). */
export function f32ToBF16Array(src: Float32Array, dst: Uint16Array): void {
  const bits = new Uint32Array(src.buffer, src.byteOffset, src.length);
  for (let i = 0; i < bits.length; i++) dst[i] = bf16BitsOfF32Bits(bits[i]);
}

/**
 * bf16 values as f32ToBF16Array gives them back once widened to f32: the same bits, but a NaN
 * quieted (a bf16 widened is exact, and rounding it again changes nothing). The converter's copy
 * of a BF16 checkpoint's tensor into a BF16 one, without the f32 in between.
 */
export function bf16ThroughF32(src: Uint16Array, dst: Uint16Array): void {
  for (let i = 0; i < src.length; i++) {
    const h = src[i];
    dst[i] = (h & 0x7fff) > 0x7f80 ? h | 0x40 : h;
  }
}

function bf16BitsOfF32Bits(x: number): number {
  if ((x & 0x7fffffff) > 0x7f800000) return ((x >>> 16) | 0x40) & 0xffff; // quiet NaN
  // round to nearest even on the 16 dropped bits; overflow rounds up into infinity
  return ((x + 0x7fff + ((x >>> 16) & 1)) >>> 16) & 0xffff;
}

/** Round a number to the nearest f16 value (as an f32). */
export function roundF16(v: number): number {
  return F16_TABLE[f32ToF16(v)];
}
