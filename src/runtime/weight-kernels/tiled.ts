/**
 * The tiled layouts of the packed types (Q8_0: q8.ts, Q4_0/Q4_1: q4.ts): rows in tiles of 2 or 4,
 * columns in groups of 128, each tile-group's quants and scales together. Rows are padded to a
 * multiple of the tile height and columns to a multiple of 128, with zeros. The 128-column groups
 * are cut into chunks of 32 (4096 columns), each holding all rows, so a kernel can stream a whole
 * chunk while its activations stay in L1.
 *
 * Q8_0's scales are stored as f32 (converted from GGUF's f16 once, at load: +6% against GGUF's
 * size); Q4_0's and Q4_1's stay GGUF's halves (+0%), which the kernels convert eight at a time:
 * f32 scales and mins would cost Q4_1 a fifth more bytes, and its f16 groups measure no slower per
 * weight (docs/benchmarks-log.md).
 */

export const ceilTo = (n: number, m: number) => Math.ceil(n / m) * m;

export function checkPack(
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
    throw new Error(`${name}: source holds ${src.length} bytes, ${nrows} rows need ${nrows * rowBytes} bytes`);
  if (dst.length < packed)
    throw new Error(`${name}: destination holds ${dst.length} bytes, the packed matrix needs ${packed} bytes`);
  if (dst.byteOffset % 16 !== 0)
    throw new Error(`${name}: destination must be 16-byte aligned (offset ${dst.byteOffset})`);
}

/** Column groups per chunk: a kernel streams one chunk of all rows at a time (see assembly/matvec_q4.ts). */
const CHUNK = 32;

/**
 * Geometry of an R-row x 128-column tiled layout with `groupBytes` bytes per tile-group, its
 * groups cut into chunks of CHUNK stored one after the other.
 */
export function tiled(tileRows: number, groupBytes: number) {
  const packedBytes = (rows: number, cols: number) =>
    (ceilTo(rows, tileRows) / tileRows) * (ceilTo(cols, 128) / 128) * groupBytes;
  /** Byte offset of tile-group (tile, g) in a matrix of `tiles` tiles and `ng` groups. */
  const at = (tiles: number, ng: number, tile: number, g: number) => {
    const g0 = g - (g % CHUNK),
      gc = Math.min(CHUNK, ng - g0);
    return (g0 * tiles + tile * gc + (g - g0)) * groupBytes;
  };
  /** Rows from a tile's start on, in a matrix of one chunk, are that matrix's tiles from there on. */
  const tailOffset = (_rows: number, cols: number, from: number) =>
    from % tileRows === 0 && ceilTo(cols, 128) / 128 <= CHUNK ? packedBytes(from, cols) : -1;
  return { packedBytes, at, tailOffset };
}
