// Activation preparation: f32 rows -> 8-bit quants per 32-block, as ggml quantizes activations
// before a quantized dot product (and 16-bit ones, q16_0, for one kernel of this engine's). The
// rounding is the one llama.cpp's x86 build runs (AVX2 quantize_row_q8_0/_q8_1): d = amax / 127
// (stored as f16), q = round-half-to-even(x * (127 / amax)), and for Q8_1 s = f16(d * sum q) with
// the unrounded f32 d.
//
// Formats (all per token row; `cols` a multiple of 32; groups are 128 columns, zero-padded):
//   q8_0    ggml block_q8_0:  34 B per block: d f16, qs i8[32]
//   q8_1    ggml block_q8_1:  36 B per block: d f16, s f16, qs i8[32]
//   q8_i16  for packed Q8_0 weights: 272 B per group: 16 vectors of i16x8 quants, then the 4 block
//           scales d as f32. Vector v, lane l holds element 2v + (l & 1) of block l >> 1.
//   q8_i16n for packed Q4_0/Q4_1 weights: 304 B per group: the same 16 vectors with vector v
//           multiplied by 256, 16, 1, 256 for v % 4 = 0, 1, 2, 3 (see matvec_q4.ts), then
//           f32 d/256 x4, i32 2048 * sum q x4 (Q4_0's -8 offset), f32 s x4 (Q8_1's d * sum q).
//   q8_i8n  for packed Q4_0/Q4_1 weights in the relaxed-SIMD build: 176 B per group: 8 vectors of
//           i8 quants, L_0 H_0 L_1 H_1 .. H_3; bytes 4b..4b+3 of L_j hold elements 8j + 0, 4, 1, 5
//           of block b, of H_j elements 8j + 2, 6, 3, 7 (the order the packed nibbles come out in,
//           see matvec_q4_relaxed.ts); then f32 d x4, i32 8 * sum q x4, f32 s x4.
//   q8_i8s  for packed Q8_0 weights in the relaxed-SIMD build: 288 B per group: 8 vectors of |q|
//           as bytes, then 8 of sign masks (0xff where q < 0); bytes 4b..4b+3 of vector v hold
//           elements 4v..4v+3 of block b; then i32 c x4 (the sum of block b's negative quants'
//           magnitudes, see matvec_q8_0_relaxed.ts), f32 d x4.
//   q16_0   16-bit quants for Q8_0 weights in GGUF's rows (matvec_q8_0_rows.ts): 68 B per block:
//           d f32 (amax / 32767), qs i16[32] (round-half-to-even(x * (32767 / amax))). An
//           activation predictor's hidden row can hold one value far above the rest (a unit that
//           carries a bias); 8-bit quants would round the others to a few steps of its.

import { f16ToF32, f32ToF16 } from "./half";
import { hsumi } from "./lanes";

@inline function quantVecs(p: usize, id: v128, o: usize): v128 {
  return i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p + o), id)));
}

@inline function blockAmax(p: usize): f32 {
  let m = f32x4.max(
    f32x4.max(f32x4.abs(v128.load(p)), f32x4.abs(v128.load(p, 16))),
    f32x4.max(f32x4.abs(v128.load(p, 32)), f32x4.abs(v128.load(p, 48))),
  );
  m = f32x4.max(
    m,
    f32x4.max(
      f32x4.max(f32x4.abs(v128.load(p, 64)), f32x4.abs(v128.load(p, 80))),
      f32x4.max(f32x4.abs(v128.load(p, 96)), f32x4.abs(v128.load(p, 112))),
    ),
  );
  return max(
    max(f32x4.extract_lane(m, 0), f32x4.extract_lane(m, 1)),
    max(f32x4.extract_lane(m, 2), f32x4.extract_lane(m, 3)),
  );
}

/** ggml block_q8_0 rows: ntok rows of `cols` f32 at x -> ntok * (cols / 32) blocks of 34 B at dst. */
export function prepare_q8_0(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = cols >> 5;
  for (let t = 0; t < ntok; t++) {
    let p = x + <usize>t * ((<usize>cols) << 2);
    let o = dst + <usize>t * <usize>nb * 34;
    for (let b = 0; b < nb; b++) {
      const amax = blockAmax(p);
      store<u16>(o, <u16>f32ToF16(amax / <f32>127.0));
      const id = f32x4.splat(amax != 0 ? <f32>127.0 / amax : <f32>0);
      for (let k: usize = 0; k < 128; k += 32) {
        const a = i16x8.narrow_i32x4_s(quantVecs(p, id, k), quantVecs(p, id, k + 16));
        v128.store64_lane(o + 2 + (k >> 2), i8x16.narrow_i16x8_s(a, a), 0);
      }
      p += 128;
      o += 34;
    }
  }
}

/** "q16_0" rows (d f32, quants i16): ntok rows of `cols` f32 at x -> ntok * (cols / 32) blocks of 68 B at dst. */
export function prepare_q16_0(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = cols >> 5;
  for (let t = 0; t < ntok; t++) {
    let p = x + <usize>t * ((<usize>cols) << 2);
    let o = dst + <usize>t * <usize>nb * 68;
    for (let b = 0; b < nb; b++) {
      const amax = blockAmax(p);
      store<f32>(o, amax / <f32>32767.0);
      const id = f32x4.splat(amax != 0 ? <f32>32767.0 / amax : <f32>0);
      for (let k: usize = 0; k < 128; k += 32)
        v128.store(o + 4 + (k >> 1), i16x8.narrow_i32x4_s(quantVecs(p, id, k), quantVecs(p, id, k + 16)));
      p += 128;
      o += 68;
    }
  }
}

/** ggml block_q8_1 rows (d, s = d * sum q, quants): 36 B per block. */
export function prepare_q8_1(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = cols >> 5;
  for (let t = 0; t < ntok; t++) {
    let p = x + <usize>t * ((<usize>cols) << 2);
    let o = dst + <usize>t * <usize>nb * 36;
    for (let b = 0; b < nb; b++) {
      const amax = blockAmax(p);
      const d = amax / <f32>127.0;
      store<u16>(o, <u16>f32ToF16(d));
      const id = f32x4.splat(amax != 0 ? <f32>127.0 / amax : <f32>0);
      let sum = i32x4.splat(0);
      for (let k: usize = 0; k < 128; k += 32) {
        const q0 = quantVecs(p, id, k),
          q1 = quantVecs(p, id, k + 16);
        sum = i32x4.add(sum, i32x4.add(q0, q1));
        const a = i16x8.narrow_i32x4_s(q0, q1);
        v128.store64_lane(o + 4 + (k >> 2), i8x16.narrow_i16x8_s(a, a), 0);
      }
      store<u16>(o, <u16>f32ToF16(d * <f32>hsumi(sum)), 2);
      p += 128;
      o += 36;
    }
  }
}

// Write one block's quants into the interleaved i16 layout of a group at gp (block slot bi).
// Pair v (elements 2v, 2v+1) goes to bytes 16 v + 4 bi. `sA`/`sB` scale the quants of the vectors
// with even / odd index m (elements 4m..4m+3 = pairs 2m and 2m+1).
@inline function storePairs(p: usize, id: v128, gp: usize, sA: v128, sB: v128): v128 {
  let sum = i32x4.splat(0);
  for (let m: usize = 0; m < 8; m += 2) {
    const qa = quantVecs(p, id, m << 4),
      qb = quantVecs(p, id, (m + 1) << 4);
    sum = i32x4.add(sum, i32x4.add(qa, qb));
    const a = i16x8.narrow_i32x4_s(i32x4.mul(qa, sA), i32x4.mul(qb, sB));
    // pairs 2m, 2m+1 (from qa) and 2m+2, 2m+3 (from qb)
    v128.store32_lane(gp + (m << 5), a, 0);
    v128.store32_lane(gp + (m << 5), a, 1, 16);
    v128.store32_lane(gp + (m << 5), a, 2, 32);
    v128.store32_lane(gp + (m << 5), a, 3, 48);
  }
  return sum;
}

@inline function zeroPairs(gp: usize): void {
  for (let v: usize = 0; v < 16; v++) store<u32>(gp + (v << 4), 0);
}

/** q8_i16 rows (for Q8_0 weights): ntok rows of `cols` f32 -> ceil(cols / 128) groups of 272 B per row. */
export function prepare_q8_i16(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = cols >> 5;
  const ng = (cols + 127) >> 7;
  const one = i32x4.splat(1);
  for (let t = 0; t < ntok; t++) {
    const p0 = x + <usize>t * ((<usize>cols) << 2);
    const d0 = dst + <usize>t * <usize>ng * 272;
    for (let b = 0; b < ng << 2; b++) {
      const gp = d0 + <usize>(b >> 2) * 272 + ((<usize>(b & 3)) << 2);
      if (b < nb) {
        const p = p0 + ((<usize>b) << 7);
        const amax = blockAmax(p);
        const id = f32x4.splat(amax != 0 ? <f32>127.0 / amax : <f32>0);
        storePairs(p, id, gp, one, one);
        store<f32>(gp, f16ToF32(f32ToF16(amax / <f32>127.0)), 256);
      } else {
        zeroPairs(gp);
        store<f32>(gp, 0, 256);
      }
    }
  }
}

/** q8_i16n rows (for Q4_0 / Q4_1 weights): ceil(cols / 128) groups of 304 B per row. */
export function prepare_q8_i16n(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = cols >> 5;
  const ng = (cols + 127) >> 7;
  // vector m holds pairs 2m, 2m+1: factors for pair index % 4 = 0,1 (m even) and 2,3 (m odd)
  const sA = i32x4(256, 256, 16, 16),
    sB = i32x4(1, 1, 256, 256);
  for (let t = 0; t < ntok; t++) {
    const p0 = x + <usize>t * ((<usize>cols) << 2);
    const d0 = dst + <usize>t * <usize>ng * 304;
    for (let b = 0; b < ng << 2; b++) {
      const gp = d0 + <usize>(b >> 2) * 304 + ((<usize>(b & 3)) << 2);
      if (b < nb) {
        const p = p0 + ((<usize>b) << 7);
        const amax = blockAmax(p);
        const d = amax / <f32>127.0;
        const id = f32x4.splat(amax != 0 ? <f32>127.0 / amax : <f32>0);
        const sum = hsumi(storePairs(p, id, gp, sA, sB));
        store<f32>(gp, f16ToF32(f32ToF16(d)) * <f32>(1.0 / 256.0), 256);
        store<i32>(gp, sum << 11, 272);
        store<f32>(gp, f16ToF32(f32ToF16(d * <f32>sum)), 288);
      } else {
        zeroPairs(gp);
        store<f32>(gp, 0, 256);
        store<i32>(gp, 0, 272);
        store<f32>(gp, 0, 288);
      }
    }
  }
}

// One block's 16 quants of elements 8i..8i+15 (i = 0, 1) as i8, reordered to 0,4,1,5 | 2,6,3,7 |
// 8,12,9,13 | 10,14,11,15: the four 4-byte lanes go to L_2i, H_2i, L_2i+1, H_2i+1.
@inline function i8nLanes(p: usize, id: v128, o: usize): v128 {
  const a = i16x8.narrow_i32x4_s(quantVecs(p, id, o), quantVecs(p, id, o + 16));
  const b = i16x8.narrow_i32x4_s(quantVecs(p, id, o + 32), quantVecs(p, id, o + 48));
  const q = i8x16.narrow_i16x8_s(a, b);
  return i8x16.shuffle(q, q, 0, 4, 1, 5, 2, 6, 3, 7, 8, 12, 9, 13, 10, 14, 11, 15);
}

// The sum of a block's quants from its 8 reordered vectors' bytes (order does not matter).
@inline function sumI8(a: v128, b: v128): i32 {
  const s = i32x4.add(
    i32x4.extadd_pairwise_i16x8_s(i16x8.extadd_pairwise_i8x16_s(a)),
    i32x4.extadd_pairwise_i16x8_s(i16x8.extadd_pairwise_i8x16_s(b)),
  );
  return hsumi(s);
}

/** q8_i8n rows (for Q4_0 / Q4_1 weights, relaxed build): ceil(cols / 128) groups of 176 B per row. */
export function prepare_q8_i8n(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = cols >> 5;
  const ng = (cols + 127) >> 7;
  for (let t = 0; t < ntok; t++) {
    const p0 = x + <usize>t * ((<usize>cols) << 2);
    const d0 = dst + <usize>t * <usize>ng * 176;
    for (let b = 0; b < ng << 2; b++) {
      const gp = d0 + <usize>(b >> 2) * 176 + ((<usize>(b & 3)) << 2);
      if (b < nb) {
        const p = p0 + ((<usize>b) << 7);
        const amax = blockAmax(p);
        const d = amax / <f32>127.0;
        const id = f32x4.splat(amax != 0 ? <f32>127.0 / amax : <f32>0);
        const lo = i8nLanes(p, id, 0),
          hi = i8nLanes(p, id, 64);
        v128.store32_lane(gp, lo, 0);
        v128.store32_lane(gp, lo, 1, 16);
        v128.store32_lane(gp, lo, 2, 32);
        v128.store32_lane(gp, lo, 3, 48);
        v128.store32_lane(gp, hi, 0, 64);
        v128.store32_lane(gp, hi, 1, 80);
        v128.store32_lane(gp, hi, 2, 96);
        v128.store32_lane(gp, hi, 3, 112);
        const sum = sumI8(lo, hi);
        store<f32>(gp, f16ToF32(f32ToF16(d)), 128);
        store<i32>(gp, sum << 3, 144);
        store<f32>(gp, f16ToF32(f32ToF16(d * <f32>sum)), 160);
      } else {
        for (let v: usize = 0; v < 8; v++) store<u32>(gp + (v << 4), 0);
        store<f32>(gp, 0, 128);
        store<i32>(gp, 0, 144);
        store<f32>(gp, 0, 160);
      }
    }
  }
}

/** q8_i8s rows (for Q8_0 weights, relaxed build): ceil(cols / 128) groups of 288 B per row. */
export function prepare_q8_i8s(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = cols >> 5;
  const ng = (cols + 127) >> 7;
  const zero = i32x4.splat(0);
  for (let t = 0; t < ntok; t++) {
    const p0 = x + <usize>t * ((<usize>cols) << 2);
    const d0 = dst + <usize>t * <usize>ng * 288;
    for (let b = 0; b < ng << 2; b++) {
      const gp = d0 + <usize>(b >> 2) * 288 + ((<usize>(b & 3)) << 2);
      if (b < nb) {
        const p = p0 + ((<usize>b) << 7);
        const amax = blockAmax(p);
        const id = f32x4.splat(amax != 0 ? <f32>127.0 / amax : <f32>0);
        let c = zero;
        // elements 16h..16h+15: i32 lanes of 4 at a time, then one byte vector whose 4-byte lane
        // j goes to vector 4h + j
        for (let h: usize = 0; h < 2; h++) {
          const q0 = quantVecs(p, id, h << 6),
            q1 = quantVecs(p, id, (h << 6) + 16),
            q2 = quantVecs(p, id, (h << 6) + 32),
            q3 = quantVecs(p, id, (h << 6) + 48);
          c = i32x4.add(
            c,
            i32x4.add(
              i32x4.add(i32x4.max_s(i32x4.neg(q0), zero), i32x4.max_s(i32x4.neg(q1), zero)),
              i32x4.add(i32x4.max_s(i32x4.neg(q2), zero), i32x4.max_s(i32x4.neg(q3), zero)),
            ),
          );
          const q = i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(q0, q1), i16x8.narrow_i32x4_s(q2, q3));
          const a = i8x16.abs(q),
            m = i8x16.lt_s(q, zero);
          const o = gp + (h << 6);
          v128.store32_lane(o, a, 0);
          v128.store32_lane(o, a, 1, 16);
          v128.store32_lane(o, a, 2, 32);
          v128.store32_lane(o, a, 3, 48);
          v128.store32_lane(o, m, 0, 128);
          v128.store32_lane(o, m, 1, 144);
          v128.store32_lane(o, m, 2, 160);
          v128.store32_lane(o, m, 3, 176);
        }
        store<i32>(gp, hsumi(c), 256);
        store<f32>(gp, f16ToF32(f32ToF16(amax / <f32>127.0)), 272);
      } else {
        for (let v: usize = 0; v < 16; v++) store<u32>(gp + (v << 4), 0);
        store<i32>(gp, 0, 256);
        store<f32>(gp, 0, 272);
      }
    }
  }
}
