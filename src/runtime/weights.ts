/**
 * How each weight type lives in wasm memory and which kernels compute with it.
 *
 * A matrix of `rows` x `cols` (ggml: dims [cols, rows]) is packed once at load from its GGUF
 * bytes into a layout its kernels like (which may differ from GGUF's: e.g. scales split from
 * quants). Every matvec takes the activation already prepared in the format the type wants
 * (f32, or quantized to 8-bit blocks as llama.cpp does), so one prepared vector serves every
 * matrix that reads it (Q, K and V; Gate and Up).
 *
 * Kernel signatures (all arguments i32; pointers are byte offsets into the shared memory):
 *   matvec(w, xAct, y, rows, cols, r0, r1)        y[r] = W[r,:] . x            for r in [r0, r1)
 *   matmul(w, xAct, y, rows, cols, ntok, r0, r1)  y[t*rows + r] = W[r,:] . x_t for all t < ntok
 *   prepare_<act>(x, dst, cols, ntok)             ntok rows of f32 -> ntok prepared rows, each
 *                                                 activationBytes(act, cols) bytes apart
 * Any [r0, r1) inside [0, rows) is computed correctly; ranges whose ends are multiples of
 * `rowAlign` (or equal rows) waste no work (the packed types compute rows in tiles of 2 or 4).
 *
 * Packed layouts of the types here (details in the assembly/ file named):
 *   F32   row-major f32, as in GGUF                                  (matvec_f32.ts)
 *   Q8_0  tiles of 4 rows x 128 columns: 4 x 128 quant bytes interleaved so one 8-byte piece
 *         holds 2 adjacent values of each of the 4 blocks, then 4 x 4 f32 scales  (matvec_q8_0.ts)
 *   Q4_0  tiles of 2 rows x 128 columns: 2 x 64 bytes of nibbles, 4 per u16 lane, arranged so
 *         masks yield i16 lanes directly, then 2 x 4 f16 scales (as GGUF)   (matvec_q4.ts)
 *   Q4_1  as Q4_0 but 2 x 4 f32 scales, then 2 x 4 f32 mins
 * Rows are padded to a multiple of the tile height and columns to a multiple of 128, with zeros.
 * The 128-column groups are cut into chunks of 32 (4096 columns), each holding all rows, so a
 * kernel can stream a whole chunk while its activations stay in L1.
 * Scales are stored as f32 (converted from GGUF's f16 once, at load): the Q4 kernels are bound by
 * instruction count, and an f16 -> f32 step per block would cost them more than the bytes save.
 * Against GGUF sizes that is +0% for Q4_0 (f16 scales kept), +20% for Q4_1 and +6% for Q8_0.
 *
 * Activation formats (see assembly/prepare_q8.ts): "q8_0" / "q8_1" / "q8_K" are ggml's own block
 * layouts (for kernels that want them); "q8_i16" and "q8_i16n" hold the same quants as ggml's Q8_0
 * / Q8_1 (llama.cpp's x86 rounding) widened to i16 and interleaved 4 blocks at a time for the
 * packed Q8_0 and Q4_0/Q4_1 kernels.
 */
import { GGMLType, typeName } from "../format/ggml-types.js";
import { f16Table } from "../format/half.js";
import { MORE_KERNELS } from "./weights-more.js";

export type ActivationFormat = "f32" | "q8_0" | "q8_1" | "q8_K" | "q8_i16" | "q8_i16n";

export interface WeightKernel {
  readonly type: GGMLType;
  readonly act: ActivationFormat;
  /** bytes the packed matrix takes in wasm memory */
  packedBytes(rows: number, cols: number): number;
  /**
   * pack GGUF-layout rows [rowStart, rowStart + nrows) of the matrix (src holds just those rows)
   * into dst (the whole packed matrix). Packing the last row also writes the padding rows.
   */
  pack(src: Uint8Array, dst: Uint8Array, rowStart: number, nrows: number, rows: number, cols: number): void;
  /** export names of the kernels */
  readonly matvec: string;
  readonly matmul: string;
  /** row ranges handed to the kernels should start (and end, unless at `rows`) at multiples of this */
  readonly rowAlign: number;
}

/** Bytes one prepared activation row of `cols` values takes. */
export function activationBytes(fmt: ActivationFormat, cols: number): number {
  switch (fmt) {
    case "f32":
      return cols * 4;
    case "q8_0":
      return (cols / 32) * 34;
    case "q8_1":
      return (cols / 32) * 36;
    case "q8_K":
      return (cols / 256) * 292;
    case "q8_i16":
      return Math.ceil(cols / 128) * 272;
    case "q8_i16n":
      return Math.ceil(cols / 128) * 304;
  }
}

/** Export name of the kernel that prepares activations in `fmt` (none for f32). */
export function prepareKernel(fmt: ActivationFormat): string | undefined {
  return fmt === "f32" ? undefined : `prepare_${fmt}`;
}

// ---------------------------------------------------------------------------------------------
// Packing

const ceilTo = (n: number, m: number) => Math.ceil(n / m) * m;

function checkPack(
  name: string,
  src: Uint8Array,
  dst: Uint8Array,
  rowStart: number,
  nrows: number,
  rows: number,
  cols: number,
  rowBytes: number,
  packed: number,
): void {
  if (cols % 32 !== 0) throw new Error(`${name}: ${cols} columns are not a whole number of 32-value blocks`);
  if (rowStart < 0 || nrows < 0 || rowStart + nrows > rows)
    throw new Error(`${name}: rows [${rowStart}, ${rowStart + nrows}) are outside a matrix of ${rows} rows`);
  if (src.length < nrows * rowBytes)
    throw new Error(`${name}: source holds ${src.length} bytes, ${nrows} rows need ${nrows * rowBytes}`);
  if (dst.length < packed)
    throw new Error(`${name}: destination holds ${dst.length} bytes, the packed matrix needs ${packed}`);
  if (dst.byteOffset % 16 !== 0)
    throw new Error(`${name}: destination must be 16-byte aligned (offset ${dst.byteOffset})`);
}

/** Column groups per chunk: a kernel streams one chunk of all rows at a time (see assembly/matvec_q4.ts). */
const CHUNK = 32;

/**
 * Geometry of an R-row x 128-column tiled layout with `groupBytes` bytes per tile-group, its
 * groups cut into chunks of CHUNK stored one after the other.
 */
function tiled(tileRows: number, groupBytes: number) {
  const packedBytes = (rows: number, cols: number) =>
    (ceilTo(rows, tileRows) / tileRows) * (ceilTo(cols, 128) / 128) * groupBytes;
  /** Byte offset of tile-group (tile, g) in a matrix of `tiles` tiles and `ng` groups. */
  const at = (tiles: number, ng: number, tile: number, g: number) => {
    const g0 = g - (g % CHUNK),
      gc = Math.min(CHUNK, ng - g0);
    return (g0 * tiles + tile * gc + (g - g0)) * groupBytes;
  };
  return { packedBytes, at };
}

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

/** Q4_0 / Q4_1: row pairs x 128 columns: quants of both rows (64 B each), d of both (Q4_0: f16 x4 each; Q4_1: f32 x4 each), for Q4_1 m of both. */
function packQ4(type: GGMLType.Q4_0 | GGMLType.Q4_1) {
  const one = type === GGMLType.Q4_1;
  const GB = one ? 192 : 144,
    BS = one ? 20 : 18,
    QO = one ? 4 : 2;
  const name = one ? "Q4_1" : "Q4_0";
  const geo = tiled(2, GB);
  return {
    packedBytes: geo.packedBytes,
    pack(src: Uint8Array, dst: Uint8Array, rowStart: number, nrows: number, rows: number, cols: number): void {
      const nb = cols / 32,
        ng = ceilTo(cols, 128) / 128,
        rowBytes = nb * BS,
        tiles = ceilTo(rows, 2) / 2;
      checkPack(name, src, dst, rowStart, nrows, rows, cols, rowBytes, geo.packedBytes(rows, cols));
      const u16 = new Uint16Array(dst.buffer, dst.byteOffset, dst.length >> 1);
      const f32 = new Float32Array(dst.buffer, dst.byteOffset, dst.length >> 2);
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
            if (one) {
              f32[(base + 128 + ri * 16 + bi * 4) >> 2] = ok ? f16Table[src[o] | (src[o + 1] << 8)] : 0;
              f32[(base + 160 + ri * 16 + bi * 4) >> 2] = ok ? f16Table[src[o + 2] | (src[o + 3] << 8)] : 0;
            } else {
              // Q4_0 keeps GGUF's f16 scale: the kernel converts four at a time
              u16[(base + 128 + ri * 8 + bi * 2) >> 1] = ok ? src[o] | (src[o + 1] << 8) : 0;
            }
          }
        }
      }
    },
  };
}

const Q8_0_GB = 576;
const q8geo = tiled(4, Q8_0_GB);
function packQ8_0(src: Uint8Array, dst: Uint8Array, rowStart: number, nrows: number, rows: number, cols: number): void {
  const nb = cols / 32,
    ng = ceilTo(cols, 128) / 128,
    rowBytes = nb * 34,
    tiles = ceilTo(rows, 4) / 4;
  checkPack("Q8_0", src, dst, rowStart, nrows, rows, cols, rowBytes, q8geo.packedBytes(rows, cols));
  const f32 = new Float32Array(dst.buffer, dst.byteOffset, dst.length >> 2);
  const u16 = new Uint16Array(dst.buffer, dst.byteOffset, dst.length >> 1);
  const end = rowStart + nrows === rows ? ceilTo(rows, 4) : rowStart + nrows;
  for (let r = rowStart; r < end; r++) {
    const t = r >> 2,
      ri = r & 3,
      real = r < rows;
    const s0 = (r - rowStart) * rowBytes;
    for (let g = 0; g < ng; g++) {
      const base = q8geo.at(tiles, ng, t, g);
      const q = (base + ri * 128) >> 1;
      u16.fill(0, q, q + 64);
      for (let bi = 0; bi < 4; bi++) {
        const b = g * 4 + bi,
          o = s0 + b * 34;
        const ok = real && b < nb;
        // piece v, bytes 2 bi, 2 bi + 1  <-  elements 2v, 2v + 1 of block bi
        if (ok) for (let v = 0; v < 16; v++) u16[q + 4 * v + bi] = src[o + 2 + 2 * v] | (src[o + 3 + 2 * v] << 8);
        f32[(base + 512 + ri * 16 + bi * 4) >> 2] = ok ? f16Table[src[o] | (src[o + 1] << 8)] : 0;
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// The table

const F32: WeightKernel = {
  type: GGMLType.F32,
  act: "f32",
  packedBytes: (rows, cols) => rows * cols * 4,
  pack: (src, dst, rowStart, nrows, rows, cols) => {
    if (rowStart + nrows > rows)
      throw new Error(`F32: rows [${rowStart}, ${rowStart + nrows}) are outside a matrix of ${rows} rows`);
    dst.set(src.subarray(0, nrows * cols * 4), rowStart * cols * 4);
  },
  matvec: "matvec_f32",
  matmul: "matmul_f32",
  rowAlign: 4, // matmul_f32 computes rows in fours
};

const Q8_0: WeightKernel = {
  type: GGMLType.Q8_0,
  act: "q8_i16",
  packedBytes: q8geo.packedBytes,
  pack: packQ8_0,
  matvec: "matvec_q8_0",
  matmul: "matmul_q8_0",
  rowAlign: 4,
};

const Q4_0: WeightKernel = {
  type: GGMLType.Q4_0,
  act: "q8_i16n",
  ...packQ4(GGMLType.Q4_0),
  matvec: "matvec_q4_0",
  matmul: "matmul_q4_0",
  rowAlign: 2,
};
const Q4_1: WeightKernel = {
  type: GGMLType.Q4_1,
  act: "q8_i16n",
  ...packQ4(GGMLType.Q4_1),
  matvec: "matvec_q4_1",
  matmul: "matmul_q4_1",
  rowAlign: 2,
};

const KERNELS = new Map<GGMLType, WeightKernel>();
for (const k of [F32, Q8_0, Q4_0, Q4_1, ...MORE_KERNELS]) KERNELS.set(k.type, k);

export function weightKernel(type: GGMLType): WeightKernel {
  const k = KERNELS.get(type);
  if (!k) throw new Error(`no kernel for weight type ${typeName(type)}`);
  return k;
}

export function hasWeightKernel(type: GGMLType): boolean {
  return KERNELS.has(type);
}
