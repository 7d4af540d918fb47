/**
 * MXFP4 (ggml type 39, gpt-oss's expert weights), in plain TypeScript: the block layout, ggml's
 * dequantization and reference quantization, and its dot product with a Q8_0 activation row as
 * ggml computes it. quant.ts dispatches here; the wasm kernel (assembly/matvec_mxfp4.ts) is
 * tested against these.
 *
 *   MXFP4  17 B / 32: e u8 @0 (E8M0: a power of two), qs[16] @1
 *          x[j] = FP4[lo4(qs[j])] d, x[j+16] = FP4[hi4(qs[j])] d, d = 2^(e - 128)
 *
 * FP4 holds the e2m1 values doubled (0, 0.5, 1, 1.5, 2, 3, 4, 6 and their negatives, times 2),
 * so they are small integers, and d is half the E8M0 scale 2^(e - 127) to make up for it: this
 * is ggml's convention (kvalues_mxfp4 and GGML_E8M0_TO_FP32_HALF), and a block of a file holds
 * exactly its bytes.
 */

/** The e2m1 values, doubled: index = the 4-bit code (sign in bit 3). */
export const MXFP4_VALUES: readonly number[] = [0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12];

/** Bytes of one block of 32 values. */
export const MXFP4_BLOCK_BYTES = 17;

const bits = new Uint32Array(1);
const asF32 = new Float32Array(bits.buffer);

/** Half the E8M0 scale of exponent byte e: 2^(e - 128) as an f32 (e < 2 subnormal, as ggml). */
export function e8m0Half(e: number): number {
  bits[0] = e < 2 ? 0x00200000 << e : (e - 1) << 23;
  return asF32[0];
}

/** Decode `n` values (whole blocks) from src into dst[y..]. */
export function dequantizeMXFP4(src: Uint8Array, n: number, dst: Float32Array, y: number): void {
  for (let o = 0, end = y + n; y < end; o += MXFP4_BLOCK_BYTES, y += 32) {
    const d = e8m0Half(src[o]);
    for (let j = 0; j < 16; j++) {
      const q = src[o + 1 + j];
      dst[y + j] = MXFP4_VALUES[q & 15] * d;
      dst[y + j + 16] = MXFP4_VALUES[q >> 4] * d;
    }
  }
}

/** The code whose value times d is nearest x (the first of equals), in f32 as ggml's best_index_mxfp4. */
function nearestCode(x: number, d: number): number {
  let best = 0;
  let bestErr = Math.abs(Math.fround(MXFP4_VALUES[0] * d) - x);
  for (let i = 1; i < 16; i++) {
    const err = Math.fround(Math.abs(Math.fround(Math.fround(MXFP4_VALUES[i] * d) - x)));
    if (err < bestErr) {
      best = i;
      bestErr = err;
    }
  }
  return best;
}

/**
 * Quantize src (whole blocks) into dst as ggml's quantize_row_mxfp4_ref does: per block the
 * exponent floor(log2(amax)) - 2 + 127 (0 for an all-zero block), then each value's nearest code.
 */
export function quantizeMXFP4(src: Float32Array, dst: Uint8Array): void {
  for (let b = 0, o = 0; b < src.length; b += 32, o += MXFP4_BLOCK_BYTES) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(src[b + j]));
    // ggml casts a float to uint8_t: an exponent outside 0..255 (|x| below 2^-125 or beyond
    // f32's range) has no defined byte there, so it is refused here rather than guessed
    // log2 rounded to f32 first, as log2f: just below a power of two it rounds up to it
    const e = amax > 0 ? Math.floor(Math.fround(Math.log2(amax))) - 2 + 127 : 0;
    if (e < 0 || e > 255)
      throw new RangeError(`MXFP4: a block's largest magnitude ${amax} has no E8M0 exponent (byte ${e})`);
    const d = e8m0Half(e);
    dst[o] = e;
    for (let j = 0; j < 16; j++) dst[o + 1 + j] = nearestCode(src[b + j], d) | (nearestCode(src[b + 16 + j], d) << 4);
  }
}

/**
 * The dot product of an MXFP4 row (n values) with a Q8_0 activation row as ggml's
 * vec_dot_mxfp4_q8_0: per block an exact integer dot of FP4 codes' values with the i8 quants,
 * times the f32 product of the activation's f16 scale (as f32: `xScale`) and the half scale.
 * Blocks are summed in double precision (the kernels in f32; the difference is float rounding).
 */
export function dotMXFP4(
  w: Uint8Array,
  x: Uint8Array,
  n: number,
  xScale: (x: Uint8Array, o: number) => number,
): number {
  let sum = 0;
  for (let o = 0, a = 0; a < (n / 32) * 34; o += MXFP4_BLOCK_BYTES, a += 34) {
    let si = 0;
    for (let j = 0; j < 16; j++) {
      const q = w[o + 1 + j];
      si += MXFP4_VALUES[q & 15] * ((x[a + 2 + j] << 24) >> 24) + MXFP4_VALUES[q >> 4] * ((x[a + 18 + j] << 24) >> 24);
    }
    sum += si * Math.fround(xScale(x, a) * e8m0Half(w[o]));
  }
  return sum;
}
