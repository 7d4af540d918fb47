// MXFP4 weights (gpt-oss's experts) times activations prepared as ggml's Q8_0 blocks
// (prepare_q8_0), with ggml's numerics (vec_dot_mxfp4_q8_0): per 32-value block an exact integer
// dot of the FP4 codes' values (the e2m1 values doubled: small integers, src/format/mxfp4.ts) with
// the i8 quants, times the f32 product of the activation's scale and half the block's E8M0 scale.
// The blocks' products are summed in four f32 lanes, added up at the row's end (ggml adds each
// block's total in turn: the same sum to float rounding); matvec and matmul share the order, so a
// token's result is the same bits either way.
//
// Weights stay in GGUF's rows (17-byte blocks: the exponent byte, then 16 bytes of nibbles), so
// packing is a copy and rows read from flash need no conversion. A block's nibbles become values
// with one swizzle through the 16-entry table; the low nibbles pair with the activation's first
// 16 quants, the high ones with its last 16. The bytes are widened and multiplied as i16 (each
// product at most 12 * 127: the sums stay inside i16 until the pairwise add to i32). The relaxed
// build runs this same code: its byte dot wants the second operand's bytes non-negative (x86's
// pmaddubsw), which the signed values are not. Both builds give the same bits.

import { f16ToF32 } from "./half";
import { hsum } from "./lanes";
import { e8m0Half, FP4 } from "./mxfp4_values";

const MXFP4_BLOCK: usize = 17;
const Q8_0_BLOCK: usize = 34;

/**
 * One MXFP4 block's 16 code bytes (q) times one Q8_0 block's 32 quants at xq: the integer
 * products summed into four i32 lanes (their total is the block's integer dot).
 */
@inline function blockLanes(q: v128, xq: usize, table: v128): v128 {
  const lo = i8x16.swizzle(table, v128.and(q, i8x16.splat(0x0f)));
  const hi = i8x16.swizzle(table, i8x16.shr_u(q, 4));
  const x0 = v128.load(xq);
  const x1 = v128.load(xq, 16);
  const s = i16x8.add(
    i16x8.add(i16x8.extmul_low_i8x16_s(x0, lo), i16x8.extmul_high_i8x16_s(x0, lo)),
    i16x8.add(i16x8.extmul_low_i8x16_s(x1, hi), i16x8.extmul_high_i8x16_s(x1, hi)),
  );
  return i32x4.extadd_pairwise_i16x8_s(s);
}

/** acc + (the block's integer lanes as f32) * d: a row's four f32 lanes, summed once at its end. */
@inline function addBlock(acc: v128, w: usize, xb: usize, dx: f32, table: v128): v128 {
  const d = f32x4.splat(dx * e8m0Half(<u32>load<u8>(w)));
  return f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(blockLanes(v128.load(w, 1), xb + 2, table)), d));
}

/** One row's dot with one activation row: nb blocks. */
@inline function dotRow(w: usize, x: usize, nb: usize, table: v128): f32 {
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const xb = x + b * Q8_0_BLOCK;
    acc = addBlock(acc, w + b * MXFP4_BLOCK, xb, f16ToF32(<u32>load<u16>(xb)), table);
  }
  return hsum(acc);
}

/** Four rows' dots with one activation row (each block's quants and scale loaded once for the four). */
@inline function dotRows4(w: usize, rb: usize, x: usize, nb: usize, y: usize, table: v128): void {
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0),
    a2 = f32x4.splat(0),
    a3 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * MXFP4_BLOCK,
      xb = x + b * Q8_0_BLOCK;
    const dx = f16ToF32(<u32>load<u16>(xb));
    a0 = addBlock(a0, wb, xb, dx, table);
    a1 = addBlock(a1, wb + rb, xb, dx, table);
    a2 = addBlock(a2, wb + 2 * rb, xb, dx, table);
    a3 = addBlock(a3, wb + 3 * rb, xb, dx, table);
  }
  store<f32>(y, hsum(a0));
  store<f32>(y, hsum(a1), 4);
  store<f32>(y, hsum(a2), 8);
  store<f32>(y, hsum(a3), 12);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W MXFP4 (GGUF rows), x one Q8_0 row. */
export function matvec_mxfp4(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 5);
  const rb = nb * MXFP4_BLOCK;
  const table = v128.load(FP4);
  let r = r0;
  for (; r + 4 <= r1; r += 4) dotRows4(w + <usize>r * rb, rb, x, nb, y + ((<usize>r) << 2), table);
  for (; r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotRow(w + <usize>r * rb, x, nb, table));
}

/** y[t * rows + r] = W[r,:] . x_t for every token t < ntok and r in [r0, r1); each result the matvec's bits. */
export function matmul_mxfp4(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 5);
  const rb = nb * MXFP4_BLOCK,
    xs = nb * Q8_0_BLOCK,
    ys = (<usize>rows) << 2;
  const table = v128.load(FP4);
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    for (let t = 0; t < ntok; t++) store<f32>(yr + <usize>t * ys, dotRow(wr, x + <usize>t * xs, nb, table));
  }
}
