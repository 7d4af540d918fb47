// The "q8_sp" activation of the sparse FFN's quantized types (prepare_q8_sp).
//
// Activations: F32, F16 and BF16 rows meet x itself (f32). "q8_sp" (quantized types): ggml's Q8_0 quants of x (llama.cpp's x86 rounding, as
// prepare_q8_0 makes them) in groups of 4 blocks (128 values), 352 bytes a group: per block 80
// bytes (4 i16x8 vectors of quants, then an i32x4 offset correction), then f32x4 dx and f32x4 sx
// (lane = block). Blocks past the row in the last group are zero. Three arrangements, by `mode`:
//   mode 0 (Q8_0 weights): natural order, x[8v .. 8v+7] in vector v; dx = d; no correction.
//   mode 1 (Q4_0 / Q4_1 weights): vector 0 lane l = 256 x[2l], 1: 16 x[2l+16], 2: x[2l+1],
//     3: 256 x[2l+17]; dx = d / 256; correction lanes = 512 * sum q (8 * 256 * sum q over the
//     4 lanes: Q4_0's -8 offset, taken off in integer); sx = f16(d * sum q) as ggml's Q8_1
//     stores it (the Q4_1 min term). The relaxed-SIMD build stores the 32 quants as i8 in
//     natural order in the first 32 bytes instead (zeros after), for q4dotRelaxed, whose block
//     dots are not scaled by 256: there dx = d and the correction lanes 2 * sum q.
//   mode 2 (Q5_0 / Q5_1 weights): the relaxed build's mode 1; in the SIMD128 build mode 0's
//     natural-order i16 vectors with mode 1's correction and sx in the relaxed build's units.
// Why not ggml's q8_0 / q8_1 blocks: a GGUF Q4 block read as 8 u16 lanes holds in lane l the
// nibbles of elements 2l, 2l+16, 2l+1, 2l+17; three masks and a shift give four i16x8 vectors
// scaled by 1, 16, 256, 1, and activations arranged and scaled to match make every product
// 256 q_w q_x, so i32x4.dot_i16x8_s does the work in one instruction (the trick of
// matvec_q4.ts, on the GGUF layout). With i8 activations each block needs four extmuls and an
// extadd (about twice the x86 instructions). Q8_0 weights widen with v128.load8x8_s and meet
// natural-order i16 activations. The f32 scales in groups of 4 meet the weights' f16 scales
// gathered four at a time. Prepared once per token: 11 KiB for 4096 values.

import { f16ToF32Finite, f32ToF16 } from "./half";
import { hsumi } from "./lanes";
import { XBK, XG } from "./sparse_layout";

/**
 * "q8_sp" rows: ntok rows of `cols` f32 at x (cols a multiple of 32) -> ntok * ceil(cols / 128)
 * groups of 352 bytes at dst. mode 0: for Q8_0 weights, 1: for Q4_0 / Q4_1 weights, 2: for Q5_0 /
 * Q5_1 weights (see above).
 */
export function prepare_q8_sp(x: usize, dst: usize, cols: i32, ntok: i32, mode: i32): void {
  const nb = cols >> 5;
  const ng = (nb + 3) >> 2;
  for (let t = 0; t < ntok; t++) {
    const p0 = x + <usize>t * ((<usize>cols) << 2);
    const g0 = dst + <usize>t * <usize>ng * XG;
    for (let b = 0; b < ng << 2; b++) {
      const o = g0 + <usize>(b >> 2) * XG + <usize>(b & 3) * XBK; // this block's quants and correction
      const lane = g0 + <usize>(b >> 2) * XG + ((<usize>(b & 3)) << 2); // + 320 / 336: its dx, sx
      if (b >= nb) {
        for (let v: usize = 0; v < 80; v += 16) v128.store(o + v, i32x4.splat(0));
        store<f32>(lane, 0, 320);
        store<f32>(lane, 0, 336);
        continue;
      }
      const p = p0 + ((<usize>b) << 7);
      let m = f32x4.abs(v128.load(p));
      for (let k: usize = 16; k < 128; k += 16) m = f32x4.max(m, f32x4.abs(v128.load(p + k)));
      const amax = max(
        max(f32x4.extract_lane(m, 0), f32x4.extract_lane(m, 1)),
        max(f32x4.extract_lane(m, 2), f32x4.extract_lane(m, 3)),
      );
      const d = amax / <f32>127.0;
      const id = f32x4.splat(amax != 0 ? <f32>127.0 / amax : <f32>0);
      // the 32 quants as i32x4 q[4v .. 4v+3], rounded as prepare_q8_0 rounds them
      const q0 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p), id)));
      const q1 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 16), id)));
      const q2 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 32), id)));
      const q3 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 48), id)));
      const q4 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 64), id)));
      const q5 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 80), id)));
      const q6 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 96), id)));
      const q7 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 112), id)));
      const n0 = i16x8.narrow_i32x4_s(q0, q1); // x[0..7]
      const n1 = i16x8.narrow_i32x4_s(q2, q3); // x[8..15]
      const n2 = i16x8.narrow_i32x4_s(q4, q5); // x[16..23]
      const n3 = i16x8.narrow_i32x4_s(q6, q7); // x[24..31]
      const sum = hsumi(
        i32x4.add(i32x4.add(i32x4.add(q0, q1), i32x4.add(q2, q3)), i32x4.add(i32x4.add(q4, q5), i32x4.add(q6, q7))),
      );
      const dh = f16ToF32Finite(f32ToF16(d));
      if (mode == 0 || (mode == 2 && !ASC_FEATURE_RELAXED_SIMD)) {
        // natural order as i16 (mode 2: Q5's widened bytes meet them)
        v128.store(o, n0);
        v128.store(o, n1, 16);
        v128.store(o, n2, 32);
        v128.store(o, n3, 48);
        if (mode == 0) {
          v128.store(o, i32x4.splat(0), 64);
          store<f32>(lane, dh, 320);
          store<f32>(lane, 0, 336);
        } else {
          // Q5's unscaled block dots, as the relaxed build's mode 1
          v128.store(o, i32x4.splat(sum << 1), 64);
          store<f32>(lane, dh, 320);
          store<f32>(lane, f16ToF32Finite(f32ToF16(d * <f32>sum)), 336);
        }
      } else {
        if (ASC_FEATURE_RELAXED_SIMD) {
          // the relaxed build's Q4 dot (q4dotRelaxed): the quants as i8 in natural order
          v128.store(o, i8x16.narrow_i16x8_s(n0, n1));
          v128.store(o, i8x16.narrow_i16x8_s(n2, n3), 16);
          v128.store(o, i32x4.splat(0), 32);
          v128.store(o, i32x4.splat(0), 48);
        } else {
          // even / odd elements of x[0..15] and x[16..31]
          const e0 = v128.shuffle<i16>(n0, n1, 0, 2, 4, 6, 8, 10, 12, 14);
          const o0 = v128.shuffle<i16>(n0, n1, 1, 3, 5, 7, 9, 11, 13, 15);
          const e1 = v128.shuffle<i16>(n2, n3, 0, 2, 4, 6, 8, 10, 12, 14);
          const o1 = v128.shuffle<i16>(n2, n3, 1, 3, 5, 7, 9, 11, 13, 15);
          v128.store(o, i16x8.shl(e0, 8));
          v128.store(o, i16x8.shl(e1, 4), 16);
          v128.store(o, o0, 32);
          v128.store(o, i16x8.shl(o1, 8), 48);
        }
        // 4 lanes: 8 * sum q over the 4 lanes (the Q4_0 offset) and dx, in the units of the build's
        // block dots (x 256 in the SIMD128 build's, unscaled in the relaxed build's)
        v128.store(o, i32x4.splat(ASC_FEATURE_RELAXED_SIMD ? sum << 1 : sum << 9), 64);
        store<f32>(lane, ASC_FEATURE_RELAXED_SIMD ? dh : dh * <f32>(1.0 / 256.0), 320);
        store<f32>(lane, f16ToF32Finite(f32ToF16(d * <f32>sum)), 336);
      }
    }
  }
}
