/**
 * The K-quants Q4_K, Q5_K and Q6_K (assembly/matvec_kquant.ts), in GGUF's rows (row-copy.ts), with
 * ggml's Q8_K activations. The relaxed-SIMD build packs all three its own way (Q4_K_RELAXED,
 * Q5_K_RELAXED, Q6_K_RELAXED below), with "q8_Ki" activations.
 */
import { GGMLType } from "../../format/ggml-types.js";
import { f16Table } from "../../format/half.js";
import { scaleMinK4 } from "../../format/quant.js";
import type { WeightKernel } from "../weight-kernels.js";
import { copyKernel } from "./row-copy.js";
import { checkPack } from "./tiled.js";

export const Q4_K = copyKernel(GGMLType.Q4_K, "q8_K", "q4_K");
export const Q5_K = copyKernel(GGMLType.Q5_K, "q8_K", "q5_K");
export const Q6_K = copyKernel(GGMLType.Q6_K, "q8_K", "q6_K");

/** GGUF's Q4_K block: d f16, dmin f16, 12 scale bytes, 128 bytes of nibbles (256 values). */
const Q4K_BYTES = 144;
/** The relaxed build's Q4_K block (see Q4_K_RELAXED). */
const Q4KI_BYTES = 152;
/** GGUF's Q5_K block (Q4_K's plus 32 bytes of fifth bits) and the relaxed build's. */
const Q5K_BYTES = 176;
const Q5KI_BYTES = 184;
/** Bytes of one "q8_Ki" activation block (256 values; q8KiFromQ8K). */
export const Q8KI_BYTES = 320;

/**
 * One GGUF Q4_K block at src[o..] (or Q5_K: `five`) -> the relaxed build's block at dst[p..]:
 * the nibbles (Q5_K: the low 4 bits) of sub-blocks 4h..4h+3 in 64 bytes at 64 h, vector j (16
 * bytes at 64 h + 16 j) holding in bytes 4b..4b+3 elements 8j..8j+3 (low nibbles) and 8j+4..8j+7
 * (high nibbles) of sub-block 4h + b; Q5_K then the fifth bits of half h in 16 bytes at
 * 128 + 16 h, bit 2j (low nibble) or 2j + 1 (high) of the byte whose nibble it completes; then the
 * 8 six-bit scales and the 8 mins as bytes, d and dmin as f32 (Q4_K @128, @136, @144, @148; Q5_K
 * @160, @168, @176, @180; written through `f32`, a view of dst's bytes).
 */
function packBlockKi(src: Uint8Array, o: number, dst: Uint8Array, f32: DataView, p: number, five: boolean): void {
  const tail = p + (five ? 160 : 128);
  dst.fill(0, p, tail);
  // GGUF: Q4_K d, dmin, scales[12] @4, qs[128] @16; Q5_K the same with qh[32] @16, qs @48
  const qs = o + (five ? 48 : 16);
  for (let sb = 0; sb < 8; sb++) {
    const [sc, m] = scaleMinK4(src, o + 4, sb);
    dst[tail + sb] = sc;
    dst[tail + 8 + sb] = m;
    const q = qs + 32 * (sb >> 1),
      shift = (sb & 1) * 4;
    const base = p + 64 * (sb >> 2) + 4 * (sb & 3);
    for (let e = 0; e < 32; e++) {
      const v = (src[q + e] >> shift) & 0x0f;
      const r = e & 7;
      const at = base + 16 * (e >> 3) + (r & 3);
      dst[at] |= r < 4 ? v : v << 4;
      if (five) {
        const i = 4 * (sb & 3) + (r & 3);
        dst[p + 128 + 16 * (sb >> 2) + i] |= ((src[o + 16 + e] >> sb) & 1) << (2 * (e >> 3) + (r < 4 ? 0 : 1));
      }
    }
  }
  f32.setFloat32(tail + 16, f16Table[src[o] | (src[o + 1] << 8)], true);
  f32.setFloat32(tail + 20, f16Table[src[o + 2] | (src[o + 3] << 8)], true);
}

/** One GGUF block at src[o..] -> the relaxed build's block at dst[p..] (f32: a view of dst's bytes). */
type PackBlock = (src: Uint8Array, o: number, dst: Uint8Array, f32: DataView, p: number) => void;

/** The relaxed build's K-quant kernel: `base`'s rows as blocks of `own` bytes, each written by packBlock. */
function relaxedKi(
  base: WeightKernel,
  name: string,
  ggufBytes: number,
  own: number,
  packBlock: PackBlock,
): WeightKernel {
  return {
    ...base,
    act: "q8_Ki",
    packedBytes: (rows, cols) => rows * (base.packedBytes(1, cols) / ggufBytes) * own,
    tailOffset: (_rows, cols, from) => from * (base.packedBytes(1, cols) / ggufBytes) * own,
    pack(src, dst, rowStart, nrows, rows, cols) {
      const nb = base.packedBytes(1, cols) / ggufBytes; // (throws for a width that is not whole blocks)
      checkPack(name, src, dst, rowStart, nrows, rows, cols, nb * ggufBytes, rows * nb * own);
      const f32 = new DataView(dst.buffer, dst.byteOffset, dst.byteLength);
      for (let r = 0; r < nrows; r++)
        for (let b = 0; b < nb; b++)
          packBlock(src, (r * nb + b) * ggufBytes, dst, f32, ((rowStart + r) * nb + b) * own);
    },
  };
}

/**
 * The relaxed-SIMD build's Q4_K: rows of 152-byte blocks (packBlockKi), the same kernel names,
 * "q8_Ki" activations (assembly/prepare_q8k.ts). Each relaxed dot then meets four sub-blocks at
 * once, their i16 sums scaled by one dot with the four scales (assembly/kquant_q4_k_relaxed.ts).
 */
export const Q4_K_RELAXED = relaxedKi(Q4_K, "Q4_K", Q4K_BYTES, Q4KI_BYTES, (src, o, dst, f32, p) =>
  packBlockKi(src, o, dst, f32, p, false),
);

/** The relaxed build's Q5_K: the same plus the fifth bits, 184-byte blocks (packBlockKi). */
export const Q5_K_RELAXED = relaxedKi(Q5_K, "Q5_K", Q5K_BYTES, Q5KI_BYTES, (src, o, dst, f32, p) =>
  packBlockKi(src, o, dst, f32, p, true),
);

/** GGUF's Q6_K block: 128 bytes of low nibbles, 64 of 2-bit tops, 16 i8 scales, d f16. */
const Q6K_BYTES = 210;
/** The relaxed build's Q6_K block (see Q6_K_RELAXED). */
const Q6KI_BYTES = 212;

/** The 6-bit quant (0..63, the value being q - 32) of element e (0..255) of the GGUF Q6_K block at src[o..]. */
function q6At(src: Uint8Array, o: number, e: number): number {
  const half = e >> 7,
    k = (e >> 5) & 3,
    l = e & 31;
  const ql = src[o + 64 * half + l + (k & 1) * 32];
  const lo = k < 2 ? ql & 15 : ql >> 4;
  return lo | (((src[o + 128 + 32 * half + l] >> (2 * k)) & 3) << 4);
}

/**
 * One GGUF Q6_K block at src[o..] -> the relaxed build's block at dst[p..]. Its 16 vectors of
 * 6-bit quants are q8_Ki's 16 activation vectors' partners (half h, then L_0, H_0, .., L_3, H_3:
 * bytes 4b..4b+3 of L_j hold elements 8j..8j+3 of 32-value sub-block 4h + b, of H_j 8j+4..8j+7),
 * stored four in three: vectors W_4g..W_4g+3 in 48 bytes at 48 g as A, B, C with
 * A = W_4g | W_4g+3 << 6, B = W_4g+1 | (W_4g+3 >> 2) << 6, C = W_4g+2 | (W_4g+3 >> 4) << 6 (per byte);
 * then GGUF's 16 scales @192 and d as f32 @208 (written through `f32`, a view of dst's bytes).
 */
function packBlockQ6K(src: Uint8Array, o: number, dst: Uint8Array, f32: DataView, p: number): void {
  dst.fill(0, p, p + 192); // the fourth vector's bits are or'ed into the first three's bytes
  for (let v = 0; v < 16; v++) {
    const h = v >> 3,
      j = (v >> 1) & 3,
      high = v & 1;
    const at = p + 48 * (v >> 2),
      slot = v & 3;
    for (let b = 0; b < 4; b++)
      for (let r = 0; r < 4; r++) {
        const q = q6At(src, o, 32 * (4 * h + b) + 8 * j + 4 * high + r);
        const i = 4 * b + r;
        if (slot < 3) dst[at + 16 * slot + i] = q;
        else {
          dst[at + i] |= (q & 3) << 6;
          dst[at + 16 + i] |= ((q >> 2) & 3) << 6;
          dst[at + 32 + i] |= (q >> 4) << 6;
        }
      }
  }
  dst.set(src.subarray(o + 192, o + 208), p + 192);
  f32.setFloat32(p + 208, f16Table[src[o + 208] | (src[o + 209] << 8)], true);
}

/**
 * The relaxed-SIMD build's Q6_K: rows of 212-byte blocks (packBlockQ6K), the same kernel names,
 * "q8_Ki" activations. Each relaxed dot meets four 16-value sub-blocks at once, whose quants come
 * out of their bytes in under three instructions per vector (assembly/kquant_q6_k_relaxed.ts).
 */
export const Q6_K_RELAXED = relaxedKi(Q6_K, "Q6_K", Q6K_BYTES, Q6KI_BYTES, packBlockQ6K);

/**
 * The "q8_Ki" activation (assembly/prepare_q8k.ts writes it from f32) from ggml's Q8_K blocks:
 * the plain-TS statement of its layout, for tests. Per 256 values (320 bytes): half h at 128 h,
 * vector L_j at 32 j and H_j at 32 j + 16 holding in bytes 4b..4b+3 elements 8j..8j+3 and
 * 8j+4..8j+7 of sub-block 4h + b; the sums of the 16 runs of 16 values as i16 @256 (Q8_K's
 * bsums: Q6_K's offset), of the 8 sub-blocks of 32 as i16 @288 (Q4_K's mins); d as f32 @304;
 * zeros.
 */
export function q8KiFromQ8K(q8k: Uint8Array, cols: number): Uint8Array {
  const nb = cols / 256;
  const out = new Uint8Array(nb * Q8KI_BYTES);
  const src = new DataView(q8k.buffer, q8k.byteOffset, q8k.byteLength);
  const dst = new DataView(out.buffer);
  for (let b = 0; b < nb; b++) {
    const i = b * 292,
      o = b * Q8KI_BYTES;
    for (let sb = 0; sb < 8; sb++) {
      let sum = 0;
      for (let e = 0; e < 32; e++) {
        const q = src.getInt8(i + 4 + 32 * sb + e);
        sum += q;
        const r = e & 7;
        out[o + 128 * (sb >> 2) + 32 * (e >> 3) + (r < 4 ? 0 : 16) + 4 * (sb & 3) + (r & 3)] = q & 0xff;
      }
      dst.setInt16(o + 288 + 2 * sb, sum, true);
    }
    for (let s = 0; s < 16; s++) dst.setInt16(o + 256 + 2 * s, src.getInt16(i + 260 + 2 * s, true), true);
    dst.setFloat32(o + 304, src.getFloat32(i, true), true);
  }
  return out;
}
