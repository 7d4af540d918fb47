/**
 * The moments of a generated row against the residual stream's model: what the planted bias of a
 * row is computed from. Read straight from the row's blocks (no dequantization to a buffer).
 */
import { GGMLType, typeTraits } from "../../format/ggml-types.js";
import { f16Table } from "../../format/half.js";

const F16 = f16Table;

/**
 * out[0] = sum omega_j W_j^2 and out[1] = sum nu_j W_j over elements [from, rowLen) of the row
 * at b[off..] (from: a multiple of the block size).
 */
export function rowMoments(
  type: GGMLType,
  b: Uint8Array,
  off: number,
  rowLen: number,
  from: number,
  omega: Float64Array,
  nu: Float64Array,
  out: Float64Array,
): void {
  let s2 = 0;
  let s1 = 0;
  switch (type) {
    case GGMLType.F32: {
      const f = new Float32Array(b.buffer, b.byteOffset + off, rowLen);
      for (let j = from; j < rowLen; j++) {
        const x = f[j];
        s2 += omega[j] * x * x;
        s1 += nu[j] * x;
      }
      break;
    }
    case GGMLType.F16: {
      const h = new Uint16Array(b.buffer, b.byteOffset + off, rowLen);
      for (let j = from; j < rowLen; j++) {
        const x = F16[h[j]];
        s2 += omega[j] * x * x;
        s1 += nu[j] * x;
      }
      break;
    }
    case GGMLType.Q8_0: {
      for (let e = from, o = off + (from >> 5) * 34; e < rowLen; e += 32, o += 34) {
        const d = F16[b[o] | (b[o + 1] << 8)];
        let a2 = 0;
        let a1 = 0;
        for (let j = 0; j < 32; j++) {
          const q = (b[o + 2 + j] << 24) >> 24;
          a2 += omega[e + j] * q * q;
          a1 += nu[e + j] * q;
        }
        s2 += a2 * d * d;
        s1 += a1 * d;
      }
      break;
    }
    case GGMLType.Q4_0: {
      for (let e = from, o = off + (from >> 5) * 18; e < rowLen; e += 32, o += 18) {
        const d = F16[b[o] | (b[o + 1] << 8)];
        let a2 = 0;
        let a1 = 0;
        for (let j = 0; j < 16; j++) {
          const byte = b[o + 2 + j];
          const lo = (byte & 15) - 8;
          const hi = (byte >>> 4) - 8;
          a2 += omega[e + j] * lo * lo + omega[e + j + 16] * hi * hi;
          a1 += nu[e + j] * lo + nu[e + j + 16] * hi;
        }
        s2 += a2 * d * d;
        s1 += a1 * d;
      }
      break;
    }
    case GGMLType.Q4_1: {
      // (n d + m)^2 = n^2 d^2 + 2 n d m + m^2, summed per block
      for (let e = from, o = off + (from >> 5) * 20; e < rowLen; e += 32, o += 20) {
        const d = F16[b[o] | (b[o + 1] << 8)];
        const m = F16[b[o + 2] | (b[o + 3] << 8)];
        let wnn = 0,
          wn = 0,
          w = 0,
          vn = 0,
          v = 0;
        for (let j = 0; j < 16; j++) {
          const byte = b[o + 4 + j];
          const lo = byte & 15;
          const hi = byte >>> 4;
          const w0 = omega[e + j];
          const w1 = omega[e + j + 16];
          wnn += w0 * lo * lo + w1 * hi * hi;
          wn += w0 * lo + w1 * hi;
          w += w0 + w1;
          vn += nu[e + j] * lo + nu[e + j + 16] * hi;
          v += nu[e + j] + nu[e + j + 16];
        }
        s2 += wnn * d * d + 2 * wn * d * m + w * m * m;
        s1 += vn * d + v * m;
      }
      break;
    }
    default:
      throw new RangeError(`synthetic model: no sparse planting for type ${typeTraits(type)?.name ?? type}`);
  }
  out[0] = s2;
  out[1] = s1;
}
