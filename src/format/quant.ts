/**
 * Plain-TypeScript reference for ggml's block formats: dequantization of every type the engine
 * computes with, quantization from f32 with ggml's reference rounding (so a tensor quantized here
 * has the same bytes as one llama.cpp's `quantize` writes without an importance matrix), the
 * activation quantizers ggml applies before a quantized dot product (Q8_0, Q8_1, Q8_K), and a
 * reference dot product computed the way ggml computes it (integer block dots times block
 * scales). The WASM kernels are tested against this file; it is written for clarity first.
 *
 * Block layouts (little endian; "f16" is an IEEE half; offsets in bytes):
 *   Q4_0  18 B / 32: d f16 @0, qs[16] @2          x[j] = (lo4(qs[j]) - 8) d, x[j+16] = (hi4(qs[j]) - 8) d
 *   Q4_1  20 B / 32: d f16 @0, m f16 @2, qs[16] @4  x = q d + m (same nibble order)
 *   Q5_0  22 B / 32: d @0, qh u32 @2, qs[16] @6   5th bit of x[j] is bit j of qh; x = (q - 16) d
 *   Q5_1  24 B / 32: d @0, m @2, qh @4, qs[16] @8 x = q d + m
 *   Q8_0  34 B / 32: d @0, qs i8[32] @2           x = q d
 *   Q8_1  36 B / 32: d @0, s @2 (= d * sum q), qs i8[32] @4
 *   Q4_K 144 B / 256: d @0, dmin @2, scales[12] @4 (8 six-bit scales + 8 six-bit mins), qs[128] @16
 *        sub-block j (32 values) = d sc_j q - dmin m_j; qs byte chunk c (32 B) holds sub-blocks 2c
 *        (low nibbles) and 2c+1 (high nibbles)
 *   Q5_K 176 B / 256: as Q4_K plus qh[32] @16 (bit 2c / 2c+1 of qh[l] is the 5th bit), qs @48
 *   Q6_K 210 B / 256: ql[128] @0, qh[64] @128, scales i8[16] @192, d f16 @208;
 *        x = d sc_(16-group) (q - 32), q = 4 low bits from ql and 2 high bits from qh
 *   Q8_K 292 B / 256: d f32 @0, qs i8[256] @4, bsums i16[16] @260 (sums of 16 consecutive qs)
 *   MXFP4 17 B / 32: e8m0 @0, qs[16] @1 (mxfp4.ts)
 */
import { GGMLType, traitsBytes, typeName, typeTraits } from "./ggml-types.js";
import { f16Table, f32ToF16, f32ToBF16 } from "./half.js";
import { dequantizeMXFP4, dotMXFP4, quantizeMXFP4 } from "./mxfp4.js";

export class QuantError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "QuantError";
  }
}

const fr = Math.fround;
const F16 = f16Table;

function rd16(b: Uint8Array, o: number): number {
  return b[o] | (b[o + 1] << 8);
}
function rdF16(b: Uint8Array, o: number): number {
  return F16[b[o] | (b[o + 1] << 8)];
}
function rdI8(b: Uint8Array, o: number): number {
  return (b[o] << 24) >> 24;
}
function rdI16(b: Uint8Array, o: number): number {
  return ((b[o] | (b[o + 1] << 8)) << 16) >> 16;
}
function rdU32(b: Uint8Array, o: number): number {
  return (b[o] | (b[o + 1] << 8) | (b[o + 2] << 16) | (b[o + 3] << 24)) >>> 0;
}
const f32Box = new Float32Array(1);
const u8Box = new Uint8Array(f32Box.buffer);
function rdF32(b: Uint8Array, o: number): number {
  u8Box[0] = b[o];
  u8Box[1] = b[o + 1];
  u8Box[2] = b[o + 2];
  u8Box[3] = b[o + 3];
  return f32Box[0];
}
function wr16(b: Uint8Array, o: number, v: number): void {
  b[o] = v & 0xff;
  b[o + 1] = (v >>> 8) & 0xff;
}
function wrF32(b: Uint8Array, o: number, v: number): void {
  f32Box[0] = v;
  b[o] = u8Box[0];
  b[o + 1] = u8Box[1];
  b[o + 2] = u8Box[2];
  b[o + 3] = u8Box[3];
}

/** C's roundf: halves away from zero. */
function roundAway(v: number): number {
  return v >= 0 ? Math.floor(v + 0.5) : -Math.floor(-v + 0.5);
}
/** ggml's nearest_int: round half to even (the default FP rounding mode). */
export function roundEven(v: number): number {
  const f = Math.floor(v);
  const d = v - f;
  if (d > 0.5) return f + 1;
  if (d < 0.5) return f;
  return f % 2 === 0 ? f : f + 1;
}

function traits(type: GGMLType) {
  const t = typeTraits(type);
  if (!t) throw new QuantError(`unknown ggml type id ${type}`);
  return t;
}

/** Bytes of one row of `n` values of `type`. */
export function rowBytes(type: GGMLType, n: number): number {
  const t = traits(type);
  if (n % t.blockSize !== 0)
    throw new QuantError(`${t.name}: a row of ${n} values is not a whole number of ${t.blockSize}-value blocks`);
  return traitsBytes(t, n);
}

function checkRow(type: GGMLType, bytes: number, n: number, what: string): void {
  const need = rowBytes(type, n);
  if (bytes < need) throw new QuantError(`${typeName(type)}: ${what} holds ${bytes} bytes, ${n} values need ${need}`);
}

/** Unpack the 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K block's 12 scale bytes at `o`. */
export function scaleMinK4(b: Uint8Array, o: number, j: number): [number, number] {
  if (j < 4) return [b[o + j] & 63, b[o + j + 4] & 63];
  return [(b[o + j + 4] & 0x0f) | ((b[o + j - 4] >> 6) << 4), (b[o + j + 4] >> 4) | ((b[o + j] >> 6) << 4)];
}

// ---------------------------------------------------------------------------------------------
// Dequantization

/** Decode `n` values of `type` from `src` (which starts at the first block) into dst[dstOffset..]. */
export function dequantizeRow(type: GGMLType, src: Uint8Array, n: number, dst: Float32Array, dstOffset = 0): void {
  checkRow(type, src.length, n, "source");
  if (dst.length - dstOffset < n)
    throw new QuantError(`${typeName(type)}: destination has room for ${dst.length - dstOffset} values, need ${n}`);
  let y = dstOffset;
  switch (type) {
    case GGMLType.F32:
      for (let i = 0; i < n; i++) dst[y + i] = rdF32(src, 4 * i);
      return;
    case GGMLType.F16:
      for (let i = 0; i < n; i++) dst[y + i] = rdF16(src, 2 * i);
      return;
    case GGMLType.BF16: {
      const u = new Uint32Array(1),
        f = new Float32Array(u.buffer);
      for (let i = 0; i < n; i++) {
        u[0] = rd16(src, 2 * i) << 16;
        dst[y + i] = f[0];
      }
      return;
    }
    case GGMLType.Q4_0:
      for (let o = 0; o < src.length && y < dstOffset + n; o += 18, y += 32) {
        const d = rdF16(src, o);
        for (let j = 0; j < 16; j++) {
          const q = src[o + 2 + j];
          dst[y + j] = ((q & 15) - 8) * d;
          dst[y + j + 16] = ((q >> 4) - 8) * d;
        }
      }
      return;
    case GGMLType.Q4_1:
      for (let o = 0; y < dstOffset + n; o += 20, y += 32) {
        const d = rdF16(src, o),
          m = rdF16(src, o + 2);
        for (let j = 0; j < 16; j++) {
          const q = src[o + 4 + j];
          dst[y + j] = (q & 15) * d + m;
          dst[y + j + 16] = (q >> 4) * d + m;
        }
      }
      return;
    case GGMLType.Q5_0:
      for (let o = 0; y < dstOffset + n; o += 22, y += 32) {
        const d = rdF16(src, o),
          qh = rdU32(src, o + 2);
        for (let j = 0; j < 16; j++) {
          const q = src[o + 6 + j];
          dst[y + j] = (((q & 15) | (((qh >>> j) & 1) << 4)) - 16) * d;
          dst[y + j + 16] = (((q >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16) * d;
        }
      }
      return;
    case GGMLType.Q5_1:
      for (let o = 0; y < dstOffset + n; o += 24, y += 32) {
        const d = rdF16(src, o),
          m = rdF16(src, o + 2),
          qh = rdU32(src, o + 4);
        for (let j = 0; j < 16; j++) {
          const q = src[o + 8 + j];
          dst[y + j] = ((q & 15) | (((qh >>> j) & 1) << 4)) * d + m;
          dst[y + j + 16] = ((q >> 4) | (((qh >>> (j + 16)) & 1) << 4)) * d + m;
        }
      }
      return;
    case GGMLType.MXFP4:
      dequantizeMXFP4(src, n, dst, y);
      return;
    case GGMLType.Q8_0:
      for (let o = 0; y < dstOffset + n; o += 34, y += 32) {
        const d = rdF16(src, o);
        for (let j = 0; j < 32; j++) dst[y + j] = rdI8(src, o + 2 + j) * d;
      }
      return;
    case GGMLType.Q8_1:
      for (let o = 0; y < dstOffset + n; o += 36, y += 32) {
        const d = rdF16(src, o);
        for (let j = 0; j < 32; j++) dst[y + j] = rdI8(src, o + 4 + j) * d;
      }
      return;
    case GGMLType.Q4_K:
      for (let o = 0; y < dstOffset + n; o += 144) {
        const d = rdF16(src, o),
          dmin = rdF16(src, o + 2);
        for (let c = 0; c < 4; c++) {
          const [s1, m1] = scaleMinK4(src, o + 4, 2 * c);
          const [s2, m2] = scaleMinK4(src, o + 4, 2 * c + 1);
          const d1 = fr(d * s1),
            n1 = fr(dmin * m1),
            d2 = fr(d * s2),
            n2 = fr(dmin * m2);
          const q = o + 16 + 32 * c;
          for (let l = 0; l < 32; l++) dst[y + l] = d1 * (src[q + l] & 15) - n1;
          for (let l = 0; l < 32; l++) dst[y + 32 + l] = d2 * (src[q + l] >> 4) - n2;
          y += 64;
        }
      }
      return;
    case GGMLType.Q5_K:
      for (let o = 0; y < dstOffset + n; o += 176) {
        const d = rdF16(src, o),
          dmin = rdF16(src, o + 2);
        for (let c = 0; c < 4; c++) {
          const [s1, m1] = scaleMinK4(src, o + 4, 2 * c);
          const [s2, m2] = scaleMinK4(src, o + 4, 2 * c + 1);
          const d1 = fr(d * s1),
            n1 = fr(dmin * m1),
            d2 = fr(d * s2),
            n2 = fr(dmin * m2);
          const q = o + 48 + 32 * c,
            h = o + 16;
          for (let l = 0; l < 32; l++)
            dst[y + l] = d1 * ((src[q + l] & 15) | (((src[h + l] >> (2 * c)) & 1) << 4)) - n1;
          for (let l = 0; l < 32; l++)
            dst[y + 32 + l] = d2 * ((src[q + l] >> 4) | (((src[h + l] >> (2 * c + 1)) & 1) << 4)) - n2;
          y += 64;
        }
      }
      return;
    case GGMLType.Q6_K:
      for (let o = 0; y < dstOffset + n; o += 210) {
        const d = rdF16(src, o + 208);
        for (let half = 0; half < 2; half++) {
          const ql = o + 64 * half,
            qh = o + 128 + 32 * half,
            sc = o + 192 + 8 * half;
          for (let l = 0; l < 32; l++) {
            const is = l >> 4,
              h = src[qh + l];
            const q1 = ((src[ql + l] & 15) | ((h & 3) << 4)) - 32;
            const q2 = ((src[ql + l + 32] & 15) | (((h >> 2) & 3) << 4)) - 32;
            const q3 = ((src[ql + l] >> 4) | (((h >> 4) & 3) << 4)) - 32;
            const q4 = ((src[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32;
            dst[y + l] = fr(d * rdI8(src, sc + is)) * q1;
            dst[y + l + 32] = fr(d * rdI8(src, sc + is + 2)) * q2;
            dst[y + l + 64] = fr(d * rdI8(src, sc + is + 4)) * q3;
            dst[y + l + 96] = fr(d * rdI8(src, sc + is + 6)) * q4;
          }
          y += 128;
        }
      }
      return;
    case GGMLType.Q8_K:
      for (let o = 0; y < dstOffset + n; o += 292, y += 256) {
        const d = rdF32(src, o);
        for (let j = 0; j < 256; j++) dst[y + j] = rdI8(src, o + 4 + j) * d;
      }
      return;
    default:
      throw new QuantError(`cannot dequantize ${typeName(type)}: no block layout for it here`);
  }
}

/** Decode a whole tensor of `elements` values. */
export function dequantize(type: GGMLType, src: Uint8Array, elements: number): Float32Array {
  const out = new Float32Array(elements);
  dequantizeRow(type, src, elements, out, 0);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Quantization (ggml's *_ref rules: amax/min-max scales, the same roundings, f32 arithmetic)

/** Types quantizeRow can write. */
export const QUANTIZABLE: readonly GGMLType[] = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q8_0,
  GGMLType.Q8_1,
  GGMLType.Q8_K,
  GGMLType.MXFP4,
];

/**
 * Quantize `src` (its whole length, a multiple of the block size) into `dst` as `type`.
 * Arithmetic is carried out in f32 exactly as ggml's C reference does, so the bytes match.
 */
export function quantizeRow(type: GGMLType, src: Float32Array, dst: Uint8Array): void {
  const n = src.length;
  checkRow(type, dst.length, n, "destination");
  switch (type) {
    case GGMLType.F32:
      for (let i = 0; i < n; i++) wrF32(dst, 4 * i, src[i]);
      return;
    case GGMLType.F16:
      for (let i = 0; i < n; i++) wr16(dst, 2 * i, f32ToF16(src[i]));
      return;
    case GGMLType.BF16:
      for (let i = 0; i < n; i++) wr16(dst, 2 * i, f32ToBF16(src[i]));
      return;
    case GGMLType.Q4_0:
    case GGMLType.Q5_0: {
      const five = type === GGMLType.Q5_0;
      const bs = five ? 22 : 18,
        qoff = five ? 6 : 2,
        half = five ? 16 : 8,
        top = five ? 31 : 15;
      for (let b = 0, o = 0; b < n; b += 32, o += bs) {
        // the signed value of largest magnitude maps to -half (the first one wins on ties)
        let amax = 0,
          max = 0;
        for (let j = 0; j < 32; j++) {
          const v = src[b + j];
          if (amax < Math.abs(v)) {
            amax = Math.abs(v);
            max = v;
          }
        }
        const d = fr(max / -half);
        const id = d ? fr(1 / d) : 0;
        wr16(dst, o, f32ToF16(d));
        let qh = 0;
        for (let j = 0; j < 16; j++) {
          const x0 = fr(src[b + j] * id),
            x1 = fr(src[b + 16 + j] * id);
          // C's truncation to an integer: min(top, trunc(v)) is trunc(min(top, v)) for an integer top,
          // and `| 0` truncates
          const q0 = Math.min(top, fr(x0 + half + 0.5)) | 0;
          const q1 = Math.min(top, fr(x1 + half + 0.5)) | 0;
          dst[o + qoff + j] = (q0 & 15) | ((q1 & 15) << 4);
          qh |= ((q0 >> 4) & 1) << j;
          qh |= ((q1 >> 4) & 1) << (j + 16);
        }
        if (five) {
          wr16(dst, o + 2, qh & 0xffff);
          wr16(dst, o + 4, qh >>> 16);
        }
      }
      return;
    }
    case GGMLType.Q4_1:
    case GGMLType.Q5_1: {
      const five = type === GGMLType.Q5_1;
      const bs = five ? 24 : 20,
        qoff = five ? 8 : 4,
        levels = five ? 31 : 15;
      for (let b = 0, o = 0; b < n; b += 32, o += bs) {
        let min = Infinity,
          max = -Infinity;
        for (let j = 0; j < 32; j++) {
          min = Math.min(min, src[b + j]);
          max = Math.max(max, src[b + j]);
        }
        // Math.min and max (no branch per value) differ from ggml's comparisons only where a NaN
        // or a zero of either sign decides, which such a block recomputes as ggml does: a NaN
        // skipped, the first of two zeros kept
        if (min !== min || max !== max || min === 0 || max === 0) {
          min = Infinity;
          max = -Infinity;
          for (let j = 0; j < 32; j++) {
            const v = src[b + j];
            if (v < min) min = v;
            if (v > max) max = v;
          }
        }
        const d = fr(fr(max - min) / levels);
        const id = d ? fr(1 / d) : 0;
        wr16(dst, o, f32ToF16(d));
        wr16(dst, o + 2, f32ToF16(min));
        let qh = 0;
        for (let j = 0; j < 16; j++) {
          const x0 = fr(fr(src[b + j] - min) * id),
            x1 = fr(fr(src[b + 16 + j] - min) * id);
          // Q4_1 clamps at 15; Q5_1's reference does not clamp (x <= 31 + rounding slack there)
          const q0 = Math.min(levels, fr(x0 + 0.5)) | 0;
          const q1 = Math.min(levels, fr(x1 + 0.5)) | 0;
          dst[o + qoff + j] = (q0 & 15) | ((q1 & 15) << 4);
          qh |= ((q0 >> 4) & 1) << j;
          qh |= ((q1 >> 4) & 1) << (j + 16);
        }
        if (five) {
          wr16(dst, o + 4, qh & 0xffff);
          wr16(dst, o + 6, qh >>> 16);
        }
      }
      return;
    }
    case GGMLType.Q8_0:
    case GGMLType.Q8_1: {
      // roundf, as ggml's reference (and so llama.cpp's quantize) rounds weights. llama.cpp's
      // x86 build quantizes *activations* with round-half-even instead (its AVX2 path); the
      // two differ only on exact .5 ties.
      const one = type === GGMLType.Q8_1;
      const bs = one ? 36 : 34,
        qoff = one ? 4 : 2;
      for (let b = 0, o = 0; b < n; b += 32, o += bs) {
        let amax = 0;
        for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(src[b + j]));
        const d = fr(amax / 127);
        const id = d ? fr(1 / d) : 0;
        wr16(dst, o, f32ToF16(d));
        let sum = 0;
        for (let j = 0; j < 32; j++) {
          const x = fr(src[b + j] * id);
          // roundAway without a branch on the sign (a coin toss per weight): floor(x + 0.5) by
          // truncating a positive number (|x| <= 127 here), then a negative tie moved away from
          // zero; NaN and infinities (a non-finite block) as roundAway gives them
          let q = ((x + 256.5) | 0) - 256;
          if (q - x === 0.5) {
            if (x < 0) q--;
          } else if (!(Math.abs(x) <= 256)) q = roundAway(x);
          dst[o + qoff + j] = q & 0xff;
          sum += q;
        }
        if (one) wr16(dst, o + 2, f32ToF16(fr(sum * d)));
      }
      return;
    }
    case GGMLType.MXFP4:
      quantizeMXFP4(src, dst);
      return;
    case GGMLType.Q8_K:
      for (let b = 0, o = 0; b < n; b += 256, o += 292) {
        let amax = 0,
          max = 0;
        for (let j = 0; j < 256; j++) {
          const a = Math.abs(src[b + j]);
          if (a > amax) {
            amax = a;
            max = src[b + j];
          }
        }
        if (!amax) {
          dst.fill(0, o, o + 292);
          continue;
        }
        const iscale = fr(-127 / max);
        for (let j = 0; j < 256; j++) dst[o + 4 + j] = Math.min(127, roundEven(fr(iscale * src[b + j]))) & 0xff;
        for (let g = 0; g < 16; g++) {
          let s = 0;
          for (let j = 0; j < 16; j++) s += rdI8(dst, o + 4 + 16 * g + j);
          wr16(dst, o + 260 + 2 * g, s & 0xffff);
        }
        wrF32(dst, o, fr(1 / iscale));
      }
      return;
    default:
      throw new QuantError(
        `quantizing to ${typeName(type)} is not implemented (only ${QUANTIZABLE.map(typeName).join(", ")})`,
      );
  }
}

/** Quantize a whole tensor (rows of `rowLength` values; default one row). */
export function quantize(type: GGMLType, src: Float32Array, rowLength = src.length): Uint8Array {
  if (src.length % rowLength !== 0) throw new QuantError(`${src.length} values are not whole rows of ${rowLength}`);
  const rb = rowBytes(type, rowLength);
  const out = new Uint8Array((src.length / rowLength) * rb);
  for (let r = 0; r * rowLength < src.length; r++) {
    quantizeRow(type, src.subarray(r * rowLength, (r + 1) * rowLength), out.subarray(r * rb, (r + 1) * rb));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Reference dot products

/** The activation format ggml pairs with each weight type for its dot product (F32: plain floats). */
export function vecDotType(type: GGMLType): GGMLType {
  switch (type) {
    case GGMLType.F32:
    case GGMLType.F16:
    case GGMLType.BF16:
      return GGMLType.F32;
    case GGMLType.Q4_0:
    case GGMLType.Q5_0:
    case GGMLType.Q8_0:
    case GGMLType.MXFP4:
      return GGMLType.Q8_0;
    case GGMLType.Q4_1:
    case GGMLType.Q5_1:
      return GGMLType.Q8_1;
    case GGMLType.Q4_K:
    case GGMLType.Q5_K:
    case GGMLType.Q6_K:
      return GGMLType.Q8_K;
    default:
      throw new QuantError(`no dot product for weight type ${typeName(type)}`);
  }
}

/** Prepare an f32 activation row the way vecDot(type, ...) wants it. */
export function prepareActivation(type: GGMLType, x: Float32Array): Float32Array | Uint8Array {
  const at = vecDotType(type);
  if (at === GGMLType.F32) return x;
  const out = new Uint8Array(rowBytes(at, x.length));
  quantizeRow(at, x, out);
  return out;
}

/**
 * Dot product of one weight row (`n` values of `type`, GGUF layout) with an activation prepared
 * by prepareActivation(type, x): f32 values for F32/F16/BF16 weights, Q8_0/Q8_1/Q8_K bytes for
 * the quantized types. Per block, an exact integer dot of quants times the f32 product of the
 * two block scales, as ggml's scalar code does; blocks are summed in double precision.
 */
export function vecDot(type: GGMLType, wRow: Uint8Array, xAct: Uint8Array | Float32Array, n: number): number {
  checkRow(type, wRow.length, n, "weight row");
  const at = vecDotType(type);
  if (at === GGMLType.F32) {
    if (!(xAct instanceof Float32Array)) throw new QuantError(`${typeName(type)} dot product wants f32 activations`);
    if (xAct.length < n) throw new QuantError(`activation has ${xAct.length} values, need ${n}`);
    const w = new Float32Array(n);
    dequantizeRow(type, wRow, n, w);
    let s = 0;
    for (let i = 0; i < n; i++) s += w[i] * xAct[i];
    return s;
  }
  if (!(xAct instanceof Uint8Array))
    throw new QuantError(`${typeName(type)} dot product wants ${typeName(at)} activation bytes`);
  checkRow(at, xAct.length, n, "activation");
  const x = xAct;
  let sum = 0;
  switch (type) {
    case GGMLType.Q4_0:
    case GGMLType.Q5_0: {
      const five = type === GGMLType.Q5_0,
        bs = five ? 22 : 18,
        qoff = five ? 6 : 2;
      for (let o = 0, a = 0; a < x.length && o < wRow.length; o += bs, a += 34) {
        const qh = five ? rdU32(wRow, o + 2) : 0;
        let si = 0;
        for (let j = 0; j < 16; j++) {
          const q = wRow[o + qoff + j];
          const q0 = five ? ((q & 15) | (((qh >>> j) & 1) << 4)) - 16 : (q & 15) - 8;
          const q1 = five ? ((q >> 4) | (((qh >>> (j + 16)) & 1) << 4)) - 16 : (q >> 4) - 8;
          si += q0 * rdI8(x, a + 2 + j) + q1 * rdI8(x, a + 18 + j);
        }
        sum += si * fr(rdF16(wRow, o) * rdF16(x, a));
      }
      return sum;
    }
    case GGMLType.Q4_1:
    case GGMLType.Q5_1: {
      const five = type === GGMLType.Q5_1,
        bs = five ? 24 : 20,
        qoff = five ? 8 : 4;
      for (let o = 0, a = 0; o < wRow.length; o += bs, a += 36) {
        const qh = five ? rdU32(wRow, o + 4) : 0;
        let si = 0;
        for (let j = 0; j < 16; j++) {
          const q = wRow[o + qoff + j];
          const q0 = (q & 15) | (five ? ((qh >>> j) & 1) << 4 : 0);
          const q1 = (q >> 4) | (five ? ((qh >>> (j + 16)) & 1) << 4 : 0);
          si += q0 * rdI8(x, a + 4 + j) + q1 * rdI8(x, a + 20 + j);
        }
        // the min term uses the activation block's stored sum s = d_x * sum(q_x)
        sum += si * fr(rdF16(wRow, o) * rdF16(x, a)) + fr(rdF16(wRow, o + 2) * rdF16(x, a + 2));
      }
      return sum;
    }
    case GGMLType.MXFP4:
      return dotMXFP4(wRow, x, n, rdF16);
    case GGMLType.Q8_0:
      for (let o = 0; o < wRow.length; o += 34) {
        let si = 0;
        for (let j = 0; j < 32; j++) si += rdI8(wRow, o + 2 + j) * rdI8(x, o + 2 + j);
        sum += si * fr(rdF16(wRow, o) * rdF16(x, o));
      }
      return sum;
    case GGMLType.Q4_K:
    case GGMLType.Q5_K: {
      const five = type === GGMLType.Q5_K,
        bs = five ? 176 : 144,
        qoff = five ? 48 : 16;
      for (let o = 0, a = 0; o < wRow.length; o += bs, a += 292) {
        let si = 0,
          mi = 0;
        for (let c = 0; c < 4; c++) {
          const [s1, m1] = scaleMinK4(wRow, o + 4, 2 * c);
          const [s2, m2] = scaleMinK4(wRow, o + 4, 2 * c + 1);
          let d1 = 0,
            d2 = 0;
          for (let l = 0; l < 32; l++) {
            const q = wRow[o + qoff + 32 * c + l],
              h = five ? wRow[o + 16 + l] : 0;
            const lo = (q & 15) | (((h >> (2 * c)) & 1) << 4);
            const hi = (q >> 4) | (((h >> (2 * c + 1)) & 1) << 4);
            d1 += lo * rdI8(x, a + 4 + 64 * c + l);
            d2 += hi * rdI8(x, a + 4 + 64 * c + 32 + l);
          }
          si += s1 * d1 + s2 * d2;
          // the mins multiply whole-sub-block activation sums: two 16-value bsums each
          mi += m1 * (rdI16(x, a + 260 + 8 * c) + rdI16(x, a + 262 + 8 * c));
          mi += m2 * (rdI16(x, a + 264 + 8 * c) + rdI16(x, a + 266 + 8 * c));
        }
        const dx = rdF32(x, a);
        sum += fr(rdF16(wRow, o) * dx) * si - fr(rdF16(wRow, o + 2) * dx) * mi;
      }
      return sum;
    }
    case GGMLType.Q6_K:
      for (let o = 0, a = 0; o < wRow.length; o += 210, a += 292) {
        let si = 0;
        for (let half = 0; half < 2; half++) {
          const ql = o + 64 * half,
            qh = o + 128 + 32 * half,
            sc = o + 192 + 8 * half,
            xa = a + 4 + 128 * half;
          const part = [0, 0, 0, 0, 0, 0, 0, 0];
          for (let l = 0; l < 32; l++) {
            const is = l >> 4,
              h = wRow[qh + l];
            part[is + 0] += (((wRow[ql + l] & 15) | ((h & 3) << 4)) - 32) * rdI8(x, xa + l);
            part[is + 2] += (((wRow[ql + l + 32] & 15) | (((h >> 2) & 3) << 4)) - 32) * rdI8(x, xa + l + 32);
            part[is + 4] += (((wRow[ql + l] >> 4) | (((h >> 4) & 3) << 4)) - 32) * rdI8(x, xa + l + 64);
            part[is + 6] += (((wRow[ql + l + 32] >> 4) | (((h >> 6) & 3) << 4)) - 32) * rdI8(x, xa + l + 96);
          }
          for (let g = 0; g < 8; g++) si += rdI8(wRow, sc + g) * part[g];
        }
        sum += fr(rdF16(wRow, o + 208) * rdF32(x, a)) * si;
      }
      return sum;
    default:
      throw new QuantError(`no dot product for weight type ${typeName(type)}`);
  }
}
