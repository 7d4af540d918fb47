// Q8_0 weights in GGUF's own rows (34-byte blocks: the f16 scale, then 32 i8 quants) times
// activations prepared as "q16_0" (prepare_q16_0: per 32-value block an f32 scale and 32 i16
// quants), for matrices a few blocks wide (an activation predictor's fc2: 768 rows of 32 columns).
// The packed Q8_0 layout (matvec_q8_0.ts) pads each row to 128 columns; here a row takes its
// blocks' bytes and nothing more.
//
// Why 16-bit activations: this kernel's input is a predictor's hidden row, which can hold one value
// far above the rest (a unit that carries a bias: synth's planted predictors have one, 22.6 against
// at most 0.7 for the others in test/predictor-q8.test.ts's); ggml's 8-bit quants would round
// every other value to a few steps of that one's (recall of the firing neurons 0.996 there, 0.9985
// with these, fc2's columns evened out either way: predictor.ts fc2Balance). 16-bit quants cost
// nothing here: the weights' bytes widen to i16 in their loads either way (q8dot:
// v128.load8x8_s), and i32x4.dot_i16x8_s takes the i16 activations as they are. Each lane of a
// block's dot sums 8 products of at most 128 * 32767: exact in i32.
//
// Per block: the exact integer dot times the f32 product of the weight's f16 scale and the
// activation's f32 scale, the blocks added in turn into one f32 per row. Rows go four at a time:
// the activation block is loaded once for the four, their integer dots are transpose-added into
// one i32x4 (row j's dot in lane j), and the four weight scales are gathered into one vector
// (f16x4), so a block of four rows costs one convert, two multiplies and one add, and the four
// results are one store. A row left over (a range not a multiple of 4) runs the same operations
// one lane at a time, so a row's bits do not depend on the range it was computed in (thread
// splits, rowTail) nor on matvec or matmul. The relaxed build runs this same code (its dots take
// bytes, not the i16 activations): both builds give the same bits.

import { f16, f16x4 } from "./sparse_block_scales";
import { q8dot } from "./sparse_block_dots";
import { hsumi } from "./lanes";
import { transposeRest } from "./sparse_row_dots";

/** bytes of a weight block (f16 d, i8 qs[32]) and of an activation block (f32 d, i16 qs[32]) */
const WB: usize = 34;
const XB: usize = 68;

/** Rows r .. r + 3 (the first at w, `rb` bytes apart) times the activation row at x: their four results at y. */
@inline function rows4(w: usize, rb: usize, x: usize, nb: usize, y: usize): void {
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const xb = x + b * XB,
      wb = w + b * WB;
    const x0 = v128.load(xb, 4),
      x1 = v128.load(xb, 20),
      x2 = v128.load(xb, 36),
      x3 = v128.load(xb, 52);
    const d0 = q8dot(wb + 2, x0, x1, x2, x3),
      d1 = q8dot(wb + rb + 2, x0, x1, x2, x3);
    const t01 = i32x4.add(i32x4.shuffle(d0, d1, 0, 4, 1, 5), i32x4.shuffle(d0, d1, 2, 6, 3, 7));
    const d2 = q8dot(wb + 2 * rb + 2, x0, x1, x2, x3),
      d3 = q8dot(wb + 3 * rb + 2, x0, x1, x2, x3);
    const sc = f32x4.mul(f16x4(wb, rb, 4), f32x4.splat(load<f32>(xb)));
    acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(transposeRest(t01, d2, d3)), sc));
  }
  v128.store(y, acc);
}

/** One row at w times the activation row at x: rows4's operations for one lane. */
@inline function row1(w: usize, x: usize, nb: usize): f32 {
  let acc: f32 = 0;
  for (let b: usize = 0; b < nb; b++) {
    const xb = x + b * XB,
      wb = w + b * WB;
    const d = q8dot(wb + 2, v128.load(xb, 4), v128.load(xb, 20), v128.load(xb, 36), v128.load(xb, 52));
    acc += <f32>hsumi(d) * (f16(wb) * load<f32>(xb));
  }
  return acc;
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q8_0 in GGUF rows, x one q16_0 row. */
export function matvec_q8_0_rows(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 5);
  const rb = nb * WB;
  let r = r0;
  for (; r + 4 <= r1; r += 4) rows4(w + <usize>r * rb, rb, x, nb, y + ((<usize>r) << 2));
  for (; r < r1; r++) store<f32>(y + ((<usize>r) << 2), row1(w + <usize>r * rb, x, nb));
}

/** y[t * rows + r] = W[r,:] . x_t for every token t < ntok and r in [r0, r1); each result the matvec's bits. */
export function matmul_q8_0_rows(
  w: usize,
  x: usize,
  y: usize,
  rows: i32,
  cols: i32,
  ntok: i32,
  r0: i32,
  r1: i32,
): void {
  const nb = <usize>(cols >> 5);
  const rb = nb * WB,
    xs = nb * XB,
    ys = (<usize>rows) << 2;
  let r = r0;
  for (; r + 4 <= r1; r += 4) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    for (let t = 0; t < ntok; t++) rows4(wr, rb, x + <usize>t * xs, nb, yr + <usize>t * ys);
  }
  for (; r < r1; r++) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    for (let t = 0; t < ntok; t++) store<f32>(yr + <usize>t * ys, row1(wr, x + <usize>t * xs, nb));
  }
}
