/**
 * Q8_0 weights (assembly/matvec_q8_0.ts): tiles of 4 rows x 128 columns (tiled.ts): 4 x 128 quant
 * bytes interleaved so one 8-byte piece holds 2 adjacent values of each of the 4 blocks, then
 * 4 x 4 f32 scales. The relaxed-SIMD build's kernels (assembly/matvec_q8_0_relaxed.ts) take one
 * 16-byte piece with 4 adjacent values of each block instead; the rest is the same.
 */
import { GGMLType } from "../../format/ggml-types.js";
import { f16Table } from "../../format/half.js";
import type { WeightKernel } from "../weight-kernels.js";
import { ceilTo, checkPack, tiled } from "./tiled.js";

const Q8_0_GB = 576;
const q8geo = tiled(4, Q8_0_GB);
/**
 * Values per block in one piece of a row's 128 quant bytes: 2 (8-byte pieces, SIMD128 build) or
 * 4 (16-byte pieces, relaxed build). Piece v, bytes `per` * b .. holds elements `per` * v .. of block b.
 */
type PieceValues = 2 | 4;

function packQ8_0(
  per: PieceValues,
  src: Uint8Array,
  dst: Uint8Array,
  rowStart: number,
  nrows: number,
  rows: number,
  cols: number,
): void {
  const nb = cols / 32,
    ng = ceilTo(cols, 128) / 128,
    rowBytes = nb * 34,
    tiles = ceilTo(rows, 4) / 4;
  checkPack("Q8_0", src, dst, rowStart, nrows, rows, cols, rowBytes, q8geo.packedBytes(rows, cols));
  const f32 = new Float32Array(dst.buffer, dst.byteOffset, dst.length >> 2);
  const end = rowStart + nrows === rows ? ceilTo(rows, 4) : rowStart + nrows;
  for (let r = rowStart; r < end; r++) {
    const t = r >> 2,
      ri = r & 3,
      real = r < rows;
    const s0 = (r - rowStart) * rowBytes;
    for (let g = 0; g < ng; g++) {
      const base = q8geo.at(tiles, ng, t, g);
      const q = base + ri * 128;
      dst.fill(0, q, q + 128);
      for (let bi = 0; bi < 4; bi++) {
        const b = g * 4 + bi,
          o = s0 + b * 34;
        const ok = real && b < nb;
        // piece v (4 per bytes), bytes per bi + k  <-  element per v + k of block bi
        if (ok)
          for (let e = 0, d = q + per * bi; e < 32; e += per, d += 4 * per)
            for (let k = 0; k < per; k++) dst[d + k] = src[o + 2 + e + k];
        f32[(base + 512 + ri * 16 + bi * 4) >> 2] = ok ? f16Table[src[o] | (src[o + 1] << 8)] : 0;
      }
    }
  }
}

export const Q8_0: WeightKernel = {
  type: GGMLType.Q8_0,
  act: "q8_i16",
  packedBytes: q8geo.packedBytes,
  tailOffset: q8geo.tailOffset,
  pack: (src, dst, rowStart, nrows, rows, cols) => packQ8_0(2, src, dst, rowStart, nrows, rows, cols),
  matvec: "matvec_q8_0",
  matmul: "matmul_q8_0",
  rowAlign: 4,
};

/** The relaxed-SIMD build's Q8_0: 16-byte pieces, "q8_i8s" activations; the same kernel names. */
export const Q8_0_RELAXED: WeightKernel = {
  ...Q8_0,
  act: "q8_i8s",
  pack: (src, dst, rowStart, nrows, rows, cols) => packQ8_0(4, src, dst, rowStart, nrows, rows, cols),
};
