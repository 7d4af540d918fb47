// Q4_0 and Q4_1 weights times activations prepared as "q8_i16n" (see prepare_q8.ts): matvec
// (decode; the prefill GEMM over the same layout is matmul_q4.ts), with ggml's numerics: an exact integer dot per 32-block, scaled by the f32 product of the two block
// scales (Q4_1 adds m_w * s_x, s_x = d_x * sum q_x as ggml's Q8_1 stores it).
//
// Packed weights (written by src/runtime/weight-kernels/q4.ts at load). Rows come in pairs,
// columns in groups of 128 (4 blocks); both are zero-padded. Groups are cut into chunks of 32
// (4096 columns), stored one after the other, each holding all row pairs: row pair p, group g of
// chunk c (g0 = 32 c <= g < g0 + gc, gc = min(32, ngroups - g0)) sits at
//   w + (c * npairs * 32 + p * gc + (g - g0)) * GB        (GB = 144 for Q4_0, 160 for Q4_1)
// and holds: quants of rows 0 and 1 (64 B each), then for Q4_0 the f16 scales d of rows 0 and 1
// (8 B each, blocks 0..3, as GGUF stores them: the packed matrix is no bigger than the file, which
// is what lets a 7B Q4_0 model fit in wasm32's 4 GiB), and for Q4_1 the f16 scales d of rows 0
// and 1, then their f16 mins m (8 B each: GGUF's size too; converted 8 at a time, packed_layout.ts).
// A row's 64 quant bytes are 4 vectors W_j of 8 u16 lanes. Lane l belongs to block l >> 1 and
// holds 4 nibbles: bits 4k..4k+3 are the quant of element 2 * (4j + k) + (l & 1) of that block.
// So `w & 0x000F`, `w & 0x00F0`, `w & 0x0F00` and `w >> 12` give four i16x8 vectors of quants
// (the middle two pre-multiplied by 16 and 256) in 4 instructions, and the activation vectors
// they meet carry the factors 256, 16, 1, 256, so every product comes out as 256 * q_w * q_x.
// One i32x4.dot_i16x8_s adds two products of the same block into that block's lane: after a
// group, lane b of a row's i32x4 is 256 times block b's integer dot. No horizontal sums until
// the row is done.
//
// A kernel walks one chunk at a time over all its rows, adding into y: the chunk's activations
// (32 x 304 B) then stay in L1 while the weights stream past (without chunks, a 4096 x 11008
// matrix's 26 KB of activations fell out of L1 between rows). Row pairs beat 4-row tiles (16 xmm
// registers do not hold 4 rows' accumulators plus the masks and activations) and a plain
// per-block kernel over GGUF's layout; the speeds are in docs/benchmarks.md, "Kernel variants
// measured". The decode walks two row pairs at once, one from each half of the range, a group
// of one then of the other (two long weight streams: one stream stalls on DRAM's latency; two
// adjacent pairs, whose streams restart every chunk, were far slower).
// The relaxed-SIMD build (scripts/build-wasm.mjs) runs the kernels of matvec_q4_relaxed.ts
// instead, over "q8_i8n" activations (any kernel here that reads activations must branch on
// ASC_FEATURE_RELAXED_SIMD the same way): it needs fewer registers per row, so it walks four row
// pairs at once, one from each quarter of the range (four streams).

import { hsum } from "./lanes";
import { octQ4Relaxed } from "./matvec_q4_relaxed";
import {
  CHUNK,
  f16Up,
  q4Halves,
  Q4_MASKS,
  q4GroupBytes,
  Q4_1_MINS,
  Q4_SCALES,
  Q8_I16N_GB,
  Q8_I8N_GB,
  storePair,
} from "./packed_layout";
import { q4ActC, q4ActD, q4RowGroup } from "./q4_group";

// activation bytes per group: the relaxed build reads its own, smaller q8_i8n
const ACT_GB: usize = ASC_FEATURE_RELAXED_SIMD ? Q8_I8N_GB : Q8_I16N_GB;

// Integer dot (x256) of one packed row vector W_j with the four activation vectors it meets.
@inline function dotw(w: v128, x0: v128, x1: v128, x2: v128, x3: v128, m0: v128, m1: v128, m2: v128): v128 {
  const a = i32x4.add(i32x4.dot_i16x8_s(v128.and(w, m0), x0), i32x4.dot_i16x8_s(v128.and(w, m1), x1));
  const b = i32x4.add(i32x4.dot_i16x8_s(v128.and(w, m2), x2), i32x4.dot_i16x8_s(i16x8.shr_u(w, 12), x3));
  return i32x4.add(a, b);
}

// Q5_0 / Q5_1 (both builds pack them as Q4's tiles plus each row's fifth bits, 16 bytes per row
// and group: matvec_q4_relaxed.ts): bit 2j (2j + 1) of byte i belongs to the element in the low
// (high) nibble of byte i of W_j. In u16 lane terms, with f = F >> 2j: the quant the mask for
// nibble k extracts gets its fifth bit from bit 0 (k = 0), 1 (k = 1), 8 (k = 2) or 9 (k = 3) of
// f, moved to bit 4, 8, 12 and 4 (where that split vector holds 16 times its quant's low bits).
// Quants reach 31: the products stay within i32 (dot_i16x8_s), 256 * 31 * 127 per product.
const Q5_FIFTHS = memory.data<u16>(
  [
    0x0010, 0x0010, 0x0010, 0x0010, 0x0010, 0x0010, 0x0010, 0x0010, 0x0100, 0x0100, 0x0100, 0x0100, 0x0100, 0x0100,
    0x0100, 0x0100, 0x1000, 0x1000, 0x1000, 0x1000, 0x1000, 0x1000, 0x1000, 0x1000,
  ],
  16,
);

// dotw for a Q5 row vector W_j, its fifth bits f already shifted right by 2j.
@inline function dotw5(
  w: v128,
  f: v128,
  x0: v128,
  x1: v128,
  x2: v128,
  x3: v128,
  m0: v128,
  m1: v128,
  m2: v128,
): v128 {
  const b4 = v128.load(Q5_FIFTHS),
    t = i16x8.shl(f, 4);
  const v0 = v128.or(v128.and(w, m0), v128.and(t, b4)),
    v1 = v128.or(v128.and(w, m1), v128.and(i16x8.shl(f, 7), v128.load(Q5_FIFTHS, 16))),
    v2 = v128.or(v128.and(w, m2), v128.and(t, v128.load(Q5_FIFTHS, 32))),
    v3 = v128.or(i16x8.shr_u(w, 12), v128.and(i16x8.shr_u(f, 5), b4));
  const a = i32x4.add(i32x4.dot_i16x8_s(v0, x0), i32x4.dot_i16x8_s(v1, x1));
  return i32x4.add(a, i32x4.add(i32x4.dot_i16x8_s(v2, x2), i32x4.dot_i16x8_s(v3, x3)));
}

// A group's integer sums of a row pair (pairSums), left in instance globals (each pool thread's
// own) because a function returns one value.
let S0: v128 = i64x2.splat(0),
  S1: v128 = i64x2.splat(0);

/**
 * One 128-column group of the row pair at wp against the activation group at xp: each row's
 * block sums (i32 lane b: 256 times block b's integer dot) into S0, S1.
 */
@inline function pairSums(wp: usize, xp: usize, m0: v128, m1: v128, m2: v128, one: bool, five: bool): void {
  const FO = q4GroupBytes(one, false); // Q5: the rows' fifth bits at +FO, +FO + 16
  let s0 = i32x4.splat(0),
    s1 = i32x4.splat(0);
  let f0 = five ? v128.load(wp + FO) : m0,
    f1 = five ? v128.load(wp + FO + 16) : m0;
  for (let j: usize = 0; j < 64; j += 16) {
    const x0 = v128.load(xp + (j << 2)),
      x1 = v128.load(xp + (j << 2), 16);
    const x2 = v128.load(xp + (j << 2), 32),
      x3 = v128.load(xp + (j << 2), 48);
    if (five) {
      s0 = i32x4.add(s0, dotw5(v128.load(wp + j), f0, x0, x1, x2, x3, m0, m1, m2));
      s1 = i32x4.add(s1, dotw5(v128.load(wp + j, 64), f1, x0, x1, x2, x3, m0, m1, m2));
      f0 = i16x8.shr_u(f0, 2);
      f1 = i16x8.shr_u(f1, 2);
    } else {
      s0 = i32x4.add(s0, dotw(v128.load(wp + j), x0, x1, x2, x3, m0, m1, m2));
      s1 = i32x4.add(s1, dotw(v128.load(wp + j, 64), x0, x1, x2, x3, m0, m1, m2));
    }
  }
  S0 = s0;
  S1 = s1;
}

// Both rows of one pair over gc groups of one chunk (weights at wp, activations at xp); the
// results go to y[r], y[r + 1] (added to what is there unless `first`), for rows inside [r0, r1).
@inline function pairQ4(
  wp: usize,
  xp: usize,
  y: usize,
  gc: i32,
  r: i32,
  r0: i32,
  r1: i32,
  first: bool,
  one: bool,
  five: bool,
): void {
  const m0 = v128.load(Q4_MASKS),
    m1 = v128.load(Q4_MASKS, 16),
    m2 = v128.load(Q4_MASKS, 32);
  const GB = q4GroupBytes(one, five);
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0);
  for (let g = 0; g < gc; g++) {
    pairSums(wp, xp, m0, m1, m2, one, five);
    // the activation's scales after the steps (two registers fewer during them)
    const dxu = q4ActD(xp + 256),
      c = q4ActC(xp + 256, one, five);
    a0 = q4RowGroup(a0, S0, wp, 0, dxu, c, one);
    a1 = q4RowGroup(a1, S1, wp, 1, dxu, c, one);
    wp += GB;
    xp += ACT_GB;
  }
  storePair(y, r, a0, a1, r0, r1, first);
}

// Two row pairs, rows r, r + 1 at wp and q, q + 1 at wq (another place in memory: two weight
// streams), over gc groups of one chunk, a group of one pair then of the other: each row's sums
// and float order are pairQ4's.
@inline function pair2Q4(
  wp: usize,
  wq: usize,
  xp: usize,
  y: usize,
  gc: i32,
  r: i32,
  q: i32,
  r0: i32,
  r1: i32,
  first: bool,
  one: bool,
  five: bool,
): void {
  const m0 = v128.load(Q4_MASKS),
    m1 = v128.load(Q4_MASKS, 16),
    m2 = v128.load(Q4_MASKS, 32);
  const GB = q4GroupBytes(one, five);
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0),
    a2 = f32x4.splat(0),
    a3 = f32x4.splat(0);
  for (let g = 0; g < gc; g++) {
    pairSums(wp, xp, m0, m1, m2, one, five);
    // the activation's scales after the steps (two registers fewer during them)
    const dxu = q4ActD(xp + 256),
      c = q4ActC(xp + 256, one, five);
    a0 = q4RowGroup(a0, S0, wp, 0, dxu, c, one);
    a1 = q4RowGroup(a1, S1, wp, 1, dxu, c, one);
    pairSums(wq, xp, m0, m1, m2, one, five);
    a2 = q4RowGroup(a2, S0, wq, 0, dxu, c, one);
    a3 = q4RowGroup(a3, S1, wq, 1, dxu, c, one);
    wp += GB;
    wq += GB;
    xp += ACT_GB;
  }
  storePair(y, r, a0, a1, r0, r1, first);
  storePair(y, q, a2, a3, r0, r1, first);
}

/** The Q4_0 / Q4_1 decode loops; five: Q5_0 / Q5_1 (Q4's tiles plus fifth bits, above). */
@inline function matvecQ4(
  w: usize,
  x: usize,
  y: usize,
  rows: i32,
  cols: i32,
  r0: i32,
  r1: i32,
  one: bool,
  five: bool = false,
): void {
  const GB = q4GroupBytes(one, five);
  const ng = (cols + 127) >> 7;
  const npairs = <usize>((rows + 1) >> 1);
  for (let g0 = 0; g0 < ng; g0 += CHUNK) {
    const gc = min(CHUNK, ng - g0);
    const wc = w + <usize>g0 * npairs * GB; // chunks before this one are CHUNK groups wide
    const xc = x + <usize>g0 * ACT_GB;
    let p = r0 >> 1;
    const pEnd = (r1 + 1) >> 1;
    const stride = <usize>gc * GB;
    if (ASC_FEATURE_RELAXED_SIMD) {
      // the four quarters of the pairs at once: four long weight streams
      const n = pEnd - p,
        qn = n >> 2;
      for (let i = 0; i < qn; i++) {
        const pa = p + i,
          pb = pa + qn,
          pc = pb + qn,
          pd = pc + qn;
        octQ4Relaxed(
          wc + <usize>pa * stride,
          wc + <usize>pb * stride,
          wc + <usize>pc * stride,
          wc + <usize>pd * stride,
          xc,
          y,
          gc,
          pa << 1,
          pb << 1,
          pc << 1,
          pd << 1,
          r0,
          r1,
          g0 == 0,
          one,
          five,
        );
      }
      // up to three pairs left: at once, the first standing in (not stored) for those missing
      p += qn << 2;
      if (p < pEnd) {
        const left = pEnd - p;
        const wl = wc + <usize>p * stride;
        octQ4Relaxed(
          wl,
          left > 1 ? wl + stride : wl,
          left > 2 ? wl + 2 * stride : wl,
          wl,
          xc,
          y,
          gc,
          p << 1,
          left > 1 ? (p + 1) << 1 : -2,
          left > 2 ? (p + 2) << 1 : -2,
          -2,
          r0,
          r1,
          g0 == 0,
          one,
          five,
        );
      }
    } else {
      // the first and second halves of the pairs at once: two long weight streams
      const half = (pEnd - p) >> 1;
      for (let i = 0; i < half; i++) {
        const pa = p + i,
          pb = pa + half;
        pair2Q4(
          wc + <usize>pa * stride,
          wc + <usize>pb * stride,
          xc,
          y,
          gc,
          pa << 1,
          pb << 1,
          r0,
          r1,
          g0 == 0,
          one,
          five,
        );
      }
      p += half << 1;
      if (p < pEnd) pairQ4(wc + <usize>p * stride, xc, y, gc, p << 1, r0, r1, g0 == 0, one, five);
    }
  }
}

/** y[r] = W[r,:] . x for r in [r0, r1); W packed Q4_0, x prepared q8_i16n. */
export function matvec_q4_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  matvecQ4(w, x, y, rows, cols, r0, r1, false);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W packed Q4_1, x prepared q8_i16n. */
export function matvec_q4_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  matvecQ4(w, x, y, rows, cols, r0, r1, true);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W packed Q5_0 (Q4_0's tiles plus fifth bits), x prepared q8_i16n. */
export function matvec_q5_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  matvecQ4(w, x, y, rows, cols, r0, r1, false, true);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W packed Q5_1 (Q4_1's tiles plus fifth bits), x prepared q8_i16n. */
export function matvec_q5_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  matvecQ4(w, x, y, rows, cols, r0, r1, true, true);
}

export { matvecQ4, pairQ4 };
