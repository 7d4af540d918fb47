/**
 * Q4_0 and Q4_1 weights (assembly/matvec_q4.ts): tiles of 2 rows x 128 columns (tiled.ts):
 * 2 x 64 bytes of nibbles, 4 per u16 lane, arranged so masks yield i16 lanes directly, then
 * 2 x 4 f16 scales (as GGUF), for Q4_1 then 2 x 4 f16 mins: no bigger than the file. Q5_0 / Q5_1
 * are packed the same way, their low 4 bits as the nibbles, plus each row's fifth bits (2 x 16
 * bytes) at the end of the group (assembly/matvec_q4_relaxed.ts, matvec_q4.ts dotw5).
 */
import { GGMLType, typeName } from "../../format/ggml-types.js";
import type { ActivationFormat, WeightKernel } from "../weight-kernels.js";
import { ceilTo, checkPack, tiled } from "./tiled.js";

/**
 * Q4_0 / Q4_1 nibble lanes of one block (quants at src[q..q+16)) into the 4 vectors of its row
 * group (u16 index `at`, block slot bi; see assembly/matvec_q4.ts): u16 lane 2 bi + p of vector j
 * holds the quants of elements 2 (4j + k) + p, k = 0..3, in bits 4k..4k+3. Element e < 16 is the
 * low nibble of byte e, element e >= 16 the high nibble of byte e - 16, so vector j reads bytes
 * 8 (j & 1) + p + 2k, low nibbles for j < 2 and high ones after.
 */
function packBlockNibbles(src: Uint8Array, q: number, u16: Uint16Array, at: number, bi: number): void {
  for (let h = 0; h < 2; h++) {
    const b = q + 8 * h;
    for (let p = 0; p < 2; p++) {
      const b0 = src[b + p],
        b1 = src[b + p + 2],
        b2 = src[b + p + 4],
        b3 = src[b + p + 6];
      u16[at + 8 * h + 2 * bi + p] = (b0 & 15) | ((b1 & 15) << 4) | ((b2 & 15) << 8) | ((b3 & 15) << 12);
      u16[at + 8 * (h + 2) + 2 * bi + p] = (b0 >> 4) | ((b1 >> 4) << 4) | ((b2 >> 4) << 8) | ((b3 >> 4) << 12);
    }
  }
}

/**
 * The fifth bits of block slot bi (qh, a u32, at src[h..h+4)) into its row group's 16-byte
 * vector at dst[f..]: bit 2j (2j + 1) of byte i goes with the low (high) nibble of byte i of
 * nibble vector j. By packBlockNibbles, byte i = 4 bi + 2 p + kb (u16 lane 2 bi + p, its low or
 * high byte) holds elements 2 (4j + 2 kb) + p (low nibble) and 2 (4j + 2 kb + 1) + p (high).
 */
function packBlockFifths(src: Uint8Array, h: number, dst: Uint8Array, f: number, bi: number): void {
  const qh = (src[h] | (src[h + 1] << 8) | (src[h + 2] << 16) | (src[h + 3] << 24)) >>> 0;
  for (let i = 4 * bi; i < 4 * bi + 4; i++) {
    const kb = i & 1,
      p = (i >> 1) & 1;
    let v = 0;
    for (let j = 0; j < 4; j++)
      for (let hi = 0; hi < 2; hi++) v |= ((qh >>> (2 * (4 * j + 2 * kb + hi) + p)) & 1) << (2 * j + hi);
    dst[f + i] = v;
  }
}

/**
 * Q4_0 / Q4_1 (and Q5_0 / Q5_1): row pairs x 128 columns: quants of both rows
 * (64 B each), d of both (f16 x4 each), for Q4_1 and Q5_1 m of both (f16 x4 each); for Q5 then
 * the fifth bits of both (16 B each). The scales and mins are GGUF's halves as they are: the
 * kernels convert eight at a time (assembly/packed_layout.ts), measured no slower than f32 copies
 * of them and a sixth fewer bytes for Q4_1 (docs/benchmarks-log.md).
 */
function packQ4(type: GGMLType.Q4_0 | GGMLType.Q4_1 | GGMLType.Q5_0 | GGMLType.Q5_1) {
  const one = type === GGMLType.Q4_1 || type === GGMLType.Q5_1,
    five = type === GGMLType.Q5_0 || type === GGMLType.Q5_1;
  // Q5's groups are Q4's plus the fifth bits at FO; GGUF blocks: d (m) (qh u32 at QH) qs at QO
  const FO = one ? 160 : 144,
    GB = FO + (five ? 32 : 0),
    BS = (one ? 20 : 18) + (five ? 4 : 0),
    QH = one ? 4 : 2,
    QO = QH + (five ? 4 : 0);
  const name = typeName(type);
  const geo = tiled(2, GB);
  return {
    packedBytes: geo.packedBytes,
    tailOffset: geo.tailOffset,
    pack(src: Uint8Array, dst: Uint8Array, rowStart: number, nrows: number, rows: number, cols: number): void {
      const nb = cols / 32,
        ng = ceilTo(cols, 128) / 128,
        rowBytes = nb * BS,
        tiles = ceilTo(rows, 2) / 2;
      checkPack(name, src, dst, rowStart, nrows, rows, cols, rowBytes, geo.packedBytes(rows, cols));
      const u16 = new Uint16Array(dst.buffer, dst.byteOffset, dst.length >> 1);
      const end = rowStart + nrows === rows ? ceilTo(rows, 2) : rowStart + nrows;
      for (let r = rowStart; r < end; r++) {
        const pr = r >> 1,
          ri = r & 1,
          real = r < rows;
        const s0 = (r - rowStart) * rowBytes;
        for (let g = 0; g < ng; g++) {
          const base = geo.at(tiles, ng, pr, g);
          const at = (base + ri * 64) >> 1;
          u16.fill(0, at, at + 32);
          for (let bi = 0; bi < 4; bi++) {
            const b = g * 4 + bi,
              o = s0 + b * BS;
            const ok = real && b < nb;
            if (ok) packBlockNibbles(src, o + QO, u16, at, bi);
            if (five) {
              if (bi === 0) dst.fill(0, base + FO + ri * 16, base + FO + ri * 16 + 16);
              if (ok) packBlockFifths(src, o + QH, dst, base + FO + ri * 16, bi);
            }
            // GGUF's f16 d (and m), kept as they are
            u16[(base + 128 + ri * 8 + bi * 2) >> 1] = ok ? src[o] | (src[o + 1] << 8) : 0;
            if (one) u16[(base + 144 + ri * 8 + bi * 2) >> 1] = ok ? src[o + 2] | (src[o + 3] << 8) : 0;
          }
        }
      }
    },
  };
}

/** A packed Q4 (or Q5) kernel: its tiles, activation format and exports. */
function tiledQ4(
  type: GGMLType.Q4_0 | GGMLType.Q4_1 | GGMLType.Q5_0 | GGMLType.Q5_1,
  act: ActivationFormat,
): WeightKernel {
  const suffix = typeName(type).toLowerCase();
  return { type, act, ...packQ4(type), matvec: `matvec_${suffix}`, matmul: `matmul_${suffix}`, rowAlign: 2 };
}

export const Q4_0 = tiledQ4(GGMLType.Q4_0, "q8_i16n");
export const Q4_1 = tiledQ4(GGMLType.Q4_1, "q8_i16n");
/** Q5_0 / Q5_1: Q4's tiles of their low 4 bits, plus fifth bits. */
export const Q5_0 = tiledQ4(GGMLType.Q5_0, "q8_i16n");
export const Q5_1 = tiledQ4(GGMLType.Q5_1, "q8_i16n");
