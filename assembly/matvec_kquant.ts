// K-quant weights (Q4_K, Q5_K, Q6_K) times activations prepared as Q8_K (prepare_q8k.ts), with
// ggml's numerics: exact integer dots per sub-block, times the sub-block's integer scale, summed
// per 256-block and scaled by the f32 product of the two block scales; Q4_K/Q5_K subtract
// dmin * sum(min_j * bsum_j) from the activation's 16-value sums, as ggml does.
//
// The SIMD128 build keeps GGUF's layout (packing is a copy, so rows read from flash need no
// conversion; kquant_blocks.ts lists the layouts); the relaxed build packs all three its own way
// (kquant_q4_k_relaxed.ts, kquant_q5_k_relaxed.ts, kquant_q6_k_relaxed.ts). The kernels here pick
// one per build and walk rows and tokens; the dots are in kquant_q4_k.ts, kquant_q5_k.ts and
// kquant_q6_k.ts (GGUF layout) and the relaxed files.
//
// SIMD128 has no 8-bit dot product. Widening bytes to i16 costs 2-3 instructions per vector on
// x86, so the Q4_K kernel never widens: it reads 16 quant bytes as 8 u16 lanes of 4 nibbles and
// masks them in place (w & 0x000F, w & 0x0F00, w & 0x00F0, w >> 12), and shapes the activation
// bytes with one or two shifts so every product comes out as 256 * q_w * q_x; one
// i32x4.dot_i16x8_s then adds two such products. The 256 is divided out in the f32 block scale.
// (Bound: 8 sub-blocks * 63 * 8 products * 15 * 128 * 256 < 2^31, so i32 never overflows.)
//
// What measured fastest here (V8 on x86-64, 16 xmm registers; the speeds are in
// docs/benchmarks.md, "The less common weight types' kernels"): matvec shares each shaped
// activation vector between 2 rows (Q4_K, SIMD128 build) and matmul shares each unpacked weight vector between
// 2 tokens (all three types).
// Wider tiles spill. Inner loops stay loops: fully unrolled blocks made V8 hoist every load and
// spill most vectors to the stack, unless each step pins its partial sum (schedule_pin.ts), as the
// Q5_K and Q6_K blocks do.

import { Q4K, Q5K, Q6K, Q8K, Q8KI } from "./kquant_blocks";
import { dotQ4K, dotQ4KRows2, dotQ4KTokens2 } from "./kquant_q4_k";
import { dotQ4Ki, dotQ4KiRows2, dotQ4KiTokens2, Q4KI } from "./kquant_q4_k_relaxed";
import { dotQ5K, dotQ5KTokens2 } from "./kquant_q5_k";
import { dotQ5Ki, dotQ5KiTokens2, Q5KI } from "./kquant_q5_k_relaxed";
import { dotQ6K, dotQ6KTokens2 } from "./kquant_q6_k";
import { dotQ6Ki, dotQ6KiRows2, dotQ6KiTokens2, Q6KI } from "./kquant_q6_k_relaxed";

/** y[r] = W[r,:] . x for r in [r0, r1); W Q4_K (GGUF layout; relaxed build: its own), x one Q8_K row (relaxed: q8_Ki). */
export function matvec_q4_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  if (ASC_FEATURE_RELAXED_SIMD) {
    // a row from each half of the range at once: two long weight streams (two adjacent rows,
    // streams that end every row, ran from DRAM at about half the rate of single rows in the
    // GGUF-layout kernel before this one)
    const rbi = nb * Q4KI;
    const half = (r1 - r0) >> 1;
    for (let i = 0; i < half; i++) {
      const ra = <usize>(r0 + i),
        rc = <usize>(r0 + half + i);
      dotQ4KiRows2(w + ra * rbi, w + rc * rbi, x, nb, y + (ra << 2), y + (rc << 2));
    }
    for (let r = r0 + (half << 1); r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotQ4Ki(w + <usize>r * rbi, x, nb));
    return;
  }
  const rb = nb * Q4K;
  let r = r0;
  for (; r + 2 <= r1; r += 2) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    dotQ4KRows2(wr, wr + rb, x, nb, yr, yr + 4);
  }
  for (; r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotQ4K(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q4_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  // the relaxed build's blocks and activations are its own (the *_relaxed files); the loops are the same
  const rb = nb * (ASC_FEATURE_RELAXED_SIMD ? Q4KI : Q4K),
    xs = nb * (ASC_FEATURE_RELAXED_SIMD ? Q8KI : Q8K),
    ys = (<usize>rows) << 2;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    let t = 0;
    for (; t + 2 <= ntok; t += 2) {
      const xt = x + <usize>t * xs,
        yt = yr + <usize>t * ys;
      if (ASC_FEATURE_RELAXED_SIMD) dotQ4KiTokens2(wr, xt, xt + xs, nb, yt, yt + ys);
      else dotQ4KTokens2(wr, xt, xt + xs, nb, yt, yt + ys);
    }
    if (t < ntok) {
      const xt = x + <usize>t * xs;
      store<f32>(yr + <usize>t * ys, ASC_FEATURE_RELAXED_SIMD ? dotQ4Ki(wr, xt, nb) : dotQ4K(wr, xt, nb));
    }
  }
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q6_K (GGUF layout; relaxed build: its own), x one Q8_K row (relaxed: q8_Ki). */
export function matvec_q6_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  if (ASC_FEATURE_RELAXED_SIMD) {
    // a row from each half of the range at once: two weight streams (as the relaxed Q4_K)
    const rbi = nb * Q6KI;
    const half = (r1 - r0) >> 1;
    for (let i = 0; i < half; i++) {
      const ra = <usize>(r0 + i),
        rc = <usize>(r0 + half + i);
      dotQ6KiRows2(w + ra * rbi, w + rc * rbi, x, nb, y + (ra << 2), y + (rc << 2));
    }
    for (let r = r0 + (half << 1); r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotQ6Ki(w + <usize>r * rbi, x, nb));
    return;
  }
  const rb = nb * Q6K;
  for (let r = r0; r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotQ6K(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q6_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  // the relaxed build's blocks and activations are its own (the *_relaxed files); the loops are the same
  const rb = nb * (ASC_FEATURE_RELAXED_SIMD ? Q6KI : Q6K),
    xs = nb * (ASC_FEATURE_RELAXED_SIMD ? Q8KI : Q8K),
    ys = (<usize>rows) << 2;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    let t = 0;
    for (; t + 2 <= ntok; t += 2) {
      const xt = x + <usize>t * xs,
        yt = yr + <usize>t * ys;
      if (ASC_FEATURE_RELAXED_SIMD) dotQ6KiTokens2(wr, xt, xt + xs, nb, yt, yt + ys);
      else dotQ6KTokens2(wr, xt, xt + xs, nb, yt, yt + ys);
    }
    if (t < ntok) {
      const xt = x + <usize>t * xs;
      store<f32>(yr + <usize>t * ys, ASC_FEATURE_RELAXED_SIMD ? dotQ6Ki(wr, xt, nb) : dotQ6K(wr, xt, nb));
    }
  }
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q5_K (GGUF layout; relaxed build: its own), x one Q8_K row (relaxed: q8_Ki). */
export function matvec_q5_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  if (ASC_FEATURE_RELAXED_SIMD) {
    // one row at a time: two rows from the two halves of the range (as the relaxed Q4_K and
    // Q6_K) measured 0.89x, in cache and from DRAM
    const rbi = nb * Q5KI;
    for (let r = r0; r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotQ5Ki(w + <usize>r * rbi, x, nb));
    return;
  }
  const rb = nb * Q5K;
  for (let r = r0; r < r1; r++) store<f32>(y + ((<usize>r) << 2), dotQ5K(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q5_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  // the relaxed build's blocks and activations are its own (the *_relaxed files); the loops are the same
  const rb = nb * (ASC_FEATURE_RELAXED_SIMD ? Q5KI : Q5K),
    xs = nb * (ASC_FEATURE_RELAXED_SIMD ? Q8KI : Q8K),
    ys = (<usize>rows) << 2;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb,
      yr = y + ((<usize>r) << 2);
    let t = 0;
    for (; t + 2 <= ntok; t += 2) {
      const xt = x + <usize>t * xs,
        yt = yr + <usize>t * ys;
      if (ASC_FEATURE_RELAXED_SIMD) dotQ5KiTokens2(wr, xt, xt + xs, nb, yt, yt + ys);
      else dotQ5KTokens2(wr, xt, xt + xs, nb, yt, yt + ys);
    }
    if (t < ntok) {
      const xt = x + <usize>t * xs;
      store<f32>(yr + <usize>t * ys, ASC_FEATURE_RELAXED_SIMD ? dotQ5Ki(wr, xt, nb) : dotQ5K(wr, xt, nb));
    }
  }
}
