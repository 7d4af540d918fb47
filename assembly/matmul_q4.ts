// Prefill GEMM for packed Q4_0 and Q4_1 weights (layout: matvec_q4.ts) times ntok activation rows
// prepared as "q8_i16n": y[t*rows + r] = W[r,:] . x_t.
//
// The decode kernel splits each 16-byte weight vector into 4 i16x8 quant vectors (3 ands and a
// shift) and spends one i32x4.dot_i16x8_s and one i32x4.add on each: 3 ops per 8 multiply-adds.
// Here each split vector serves 3 tokens: a tile of the row pair x 3 tokens keeps 6 i32x4 block
// sums, the 2 rows' split vectors, a mask and the 3 tokens' activation vectors (V8 loads all of
// a loop body's vectors at its top) live: 13 of the 15 xmm registers V8 allocates on x64. A
// fourth token's 2 block sums made it spill one, and the store-to-load round trip on that sum
// every iteration cost more than the tile saved. The f32 accumulators are touched once per group
// and may live on the stack.
//
// The 4 splits run as 4 loops over the rows' 4 weight vectors (a body holding all 4 splits would
// have its 12 activation loads at its top, more than the registers hold); the raw weight vector
// is loaded again for each split rather than kept.
//
// Per (row, token) the arithmetic and its order are the decode kernel's (an exact integer dot per
// block, lane b of a group's i32x4 holding 256 times block b's dot, then the f32 group update,
// the lanes summed at the end of a 4096-column chunk, chunks added into y), so a token's result
// is bit for bit what matvec_q4_0/_1 gives for it alone.

// In the relaxed-SIMD build the activations come as "q8_i8n" and matmul_q4_relaxed.ts's tiles
// (the same row pair x 3 tokens, over relaxed dots) run in the same loops.

import {
  r4_0_t1,
  r4_0_t2,
  r4_0_t3,
  r4_1_t1,
  r4_1_t2,
  r4_1_t3,
  r5_0_t1,
  r5_0_t2,
  r5_0_t3,
  r5_1_t1,
  r5_1_t2,
  r5_1_t3,
} from "./matmul_q4_relaxed";
import { hsum } from "./lanes";
import { CHUNK, put, Q4_MASKS, q4GroupBytes, q4PairScales, Q8_I16N_GB, Q8_I8N_GB } from "./packed_layout";
import { q4_0Group, q4_1Group } from "./q4_group";
import { pairQ4 } from "./matvec_q4";

// Row pairs whose chunk of weights stays in L2 while all the tokens pass; the pool hands out
// rows in multiples of 16, one block.
const PAIR_BLOCK = 8;
// Tokens per pass over a row pair.
const NT = 3;

@inline function dot(s: v128, w: v128, x: v128): v128 {
  return i32x4.add(s, i32x4.dot_i16x8_s(w, x));
}

// One group's f32 update of a (row, token) accumulator: Q4_0 subtracts the activation's offset
// correction from the block sums; Q4_1 adds m_w * s_x.
@inline function acc(a: v128, s: v128, dw: v128, mw: v128, xg: usize, one: bool): v128 {
  const dx = v128.load(xg, 256);
  if (one) return q4_1Group(a, s, dw, dx, mw, v128.load(xg, 288));
  return q4_0Group(a, s, v128.load(xg, 272), dw, dx);
}

// The row pair whose groups start at wp (rows r, r + 1), over gc groups of one chunk, times nt
// (1..3, a constant) tokens whose chunk activations start at xp, astride bytes apart. Results go
// to y + t * ys (y: row r's output), added to what is there unless `first`; a row outside the
// range (in0 / in1 false) is computed but not stored.
@inline function pairTokens(
  wp: usize,
  xp: usize,
  astride: usize,
  y: usize,
  ys: usize,
  gc: i32,
  first: bool,
  nt: i32,
  one: bool,
  in0: bool,
  in1: bool,
): void {
  const GB = q4GroupBytes(one, false);
  let a00 = f32x4.splat(0),
    a01 = f32x4.splat(0),
    a02 = f32x4.splat(0),
    a10 = f32x4.splat(0),
    a11 = f32x4.splat(0),
    a12 = f32x4.splat(0);
  let x0 = xp,
    x1 = xp + astride,
    x2 = xp + astride * 2;
  for (let g = 0; g < gc; g++) {
    let s00 = i32x4.splat(0),
      s01 = i32x4.splat(0),
      s02 = i32x4.splat(0),
      s10 = i32x4.splat(0),
      s11 = i32x4.splat(0),
      s12 = i32x4.splat(0);
    // split k of the rows' weight vector j meets activation vector 4j + k
    let m = v128.load(Q4_MASKS);
    for (let j: usize = 0; j < 64; j += 16) {
      const u0 = v128.and(v128.load(wp + j), m),
        u1 = v128.and(v128.load(wp + j, 64), m);
      const o = j << 2;
      let x = v128.load(x0 + o);
      s00 = dot(s00, u0, x);
      s10 = dot(s10, u1, x);
      if (nt > 1) {
        x = v128.load(x1 + o);
        s01 = dot(s01, u0, x);
        s11 = dot(s11, u1, x);
      }
      if (nt > 2) {
        x = v128.load(x2 + o);
        s02 = dot(s02, u0, x);
        s12 = dot(s12, u1, x);
      }
    }
    m = v128.load(Q4_MASKS, 16);
    for (let j: usize = 0; j < 64; j += 16) {
      const u0 = v128.and(v128.load(wp + j), m),
        u1 = v128.and(v128.load(wp + j, 64), m);
      const o = (j << 2) + 16;
      let x = v128.load(x0 + o);
      s00 = dot(s00, u0, x);
      s10 = dot(s10, u1, x);
      if (nt > 1) {
        x = v128.load(x1 + o);
        s01 = dot(s01, u0, x);
        s11 = dot(s11, u1, x);
      }
      if (nt > 2) {
        x = v128.load(x2 + o);
        s02 = dot(s02, u0, x);
        s12 = dot(s12, u1, x);
      }
    }
    m = v128.load(Q4_MASKS, 32);
    for (let j: usize = 0; j < 64; j += 16) {
      const u0 = v128.and(v128.load(wp + j), m),
        u1 = v128.and(v128.load(wp + j, 64), m);
      const o = (j << 2) + 32;
      let x = v128.load(x0 + o);
      s00 = dot(s00, u0, x);
      s10 = dot(s10, u1, x);
      if (nt > 1) {
        x = v128.load(x1 + o);
        s01 = dot(s01, u0, x);
        s11 = dot(s11, u1, x);
      }
      if (nt > 2) {
        x = v128.load(x2 + o);
        s02 = dot(s02, u0, x);
        s12 = dot(s12, u1, x);
      }
    }
    for (let j: usize = 0; j < 64; j += 16) {
      const u0 = i16x8.shr_u(v128.load(wp + j), 12),
        u1 = i16x8.shr_u(v128.load(wp + j, 64), 12);
      const o = (j << 2) + 48;
      let x = v128.load(x0 + o);
      s00 = dot(s00, u0, x);
      s10 = dot(s10, u1, x);
      if (nt > 1) {
        x = v128.load(x1 + o);
        s01 = dot(s01, u0, x);
        s11 = dot(s11, u1, x);
      }
      if (nt > 2) {
        x = v128.load(x2 + o);
        s02 = dot(s02, u0, x);
        s12 = dot(s12, u1, x);
      }
    }
    const dw0 = q4PairScales(wp, 0, false),
      dw1 = q4PairScales(wp, 1, false);
    const mw0 = one ? q4PairScales(wp, 0, true) : dw0, // Q4_0 has no mins (acc reads none)
      mw1 = one ? q4PairScales(wp, 1, true) : dw1;
    a00 = acc(a00, s00, dw0, mw0, x0, one);
    a10 = acc(a10, s10, dw1, mw1, x0, one);
    if (nt > 1) {
      a01 = acc(a01, s01, dw0, mw0, x1, one);
      a11 = acc(a11, s11, dw1, mw1, x1, one);
    }
    if (nt > 2) {
      a02 = acc(a02, s02, dw0, mw0, x2, one);
      a12 = acc(a12, s12, dw1, mw1, x2, one);
    }
    wp += GB;
    x0 += Q8_I16N_GB;
    x1 += Q8_I16N_GB;
    x2 += Q8_I16N_GB;
  }
  if (in0) put(y, hsum(a00), first);
  if (in1) put(y + 4, hsum(a10), first);
  if (nt > 1) {
    if (in0) put(y + ys, hsum(a01), first);
    if (in1) put(y + ys + 4, hsum(a11), first);
  }
  if (nt > 2) {
    if (in0) put(y + ys * 2, hsum(a02), first);
    if (in1) put(y + ys * 2 + 4, hsum(a12), first);
  }
}

// One function per type and token count, so that each is compiled with both as constants
// (inlined copies that differ only in a constant were merged back into one with runtime tests).
function q4_0_t1(
  wp: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  first: bool,
  in0: bool,
  in1: bool,
): void {
  pairTokens(wp, xp, as, y, ys, gc, first, 1, false, in0, in1);
}
function q4_0_t2(
  wp: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  first: bool,
  in0: bool,
  in1: bool,
): void {
  pairTokens(wp, xp, as, y, ys, gc, first, 2, false, in0, in1);
}
function q4_0_t3(
  wp: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  first: bool,
  in0: bool,
  in1: bool,
): void {
  pairTokens(wp, xp, as, y, ys, gc, first, 3, false, in0, in1);
}
function q4_1_t1(
  wp: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  first: bool,
  in0: bool,
  in1: bool,
): void {
  pairTokens(wp, xp, as, y, ys, gc, first, 1, true, in0, in1);
}
function q4_1_t2(
  wp: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  first: bool,
  in0: bool,
  in1: bool,
): void {
  pairTokens(wp, xp, as, y, ys, gc, first, 2, true, in0, in1);
}
function q4_1_t3(
  wp: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  first: bool,
  in0: bool,
  in1: bool,
): void {
  pairTokens(wp, xp, as, y, ys, gc, first, 3, true, in0, in1);
}

@inline function matmulQ4(
  w: usize,
  x: usize,
  y: usize,
  rows: i32,
  cols: i32,
  ntok: i32,
  r0: i32,
  r1: i32,
  one: bool,
  five: bool = false,
): void {
  // five: Q5_0 / Q5_1 (Q4's tiles plus fifth bits: matvec_q4.ts), whose groups are larger
  const GB = q4GroupBytes(one, five);
  const AGB = ASC_FEATURE_RELAXED_SIMD ? Q8_I8N_GB : Q8_I16N_GB;
  const ng = (cols + 127) >> 7;
  const npairs = <usize>((rows + 1) >> 1);
  const as = <usize>ng * AGB;
  const ys = (<usize>rows) << 2;
  const p0 = r0 >> 1,
    p1 = (r1 + 1) >> 1;
  for (let g0 = 0; g0 < ng; g0 += CHUNK) {
    const gc = min(CHUNK, ng - g0);
    const wc = w + <usize>g0 * npairs * GB;
    const xc = x + <usize>g0 * AGB;
    const first = g0 == 0;
    for (let pb = p0; pb < p1; pb += PAIR_BLOCK) {
      const pe = min(pb + PAIR_BLOCK, p1);
      for (let k = 0; k < ntok; k += NT) {
        const xp = xc + <usize>k * as,
          nt = min(NT, ntok - k);
        for (let p = pb; p < pe; p++) {
          const r = p << 1;
          const wp = wc + <usize>p * <usize>gc * GB,
            yr = y + <usize>k * ys + ((<usize>r) << 2);
          const in0 = r >= r0 && r < r1,
            in1 = r + 1 >= r0 && r + 1 < r1;
          if (ASC_FEATURE_RELAXED_SIMD && five) {
            if (one) {
              if (nt == 3) r5_1_t3(wp, xp, as, yr, ys, gc, first, in0, in1);
              else if (nt == 2) r5_1_t2(wp, xp, as, yr, ys, gc, first, in0, in1);
              else r5_1_t1(wp, xp, as, yr, ys, gc, first, in0, in1);
            } else {
              if (nt == 3) r5_0_t3(wp, xp, as, yr, ys, gc, first, in0, in1);
              else if (nt == 2) r5_0_t2(wp, xp, as, yr, ys, gc, first, in0, in1);
              else r5_0_t1(wp, xp, as, yr, ys, gc, first, in0, in1);
            }
          } else if (ASC_FEATURE_RELAXED_SIMD) {
            if (one) {
              if (nt == 3) r4_1_t3(wp, xp, as, yr, ys, gc, first, in0, in1);
              else if (nt == 2) r4_1_t2(wp, xp, as, yr, ys, gc, first, in0, in1);
              else r4_1_t1(wp, xp, as, yr, ys, gc, first, in0, in1);
            } else {
              if (nt == 3) r4_0_t3(wp, xp, as, yr, ys, gc, first, in0, in1);
              else if (nt == 2) r4_0_t2(wp, xp, as, yr, ys, gc, first, in0, in1);
              else r4_0_t1(wp, xp, as, yr, ys, gc, first, in0, in1);
            }
          } else if (five) {
            // SIMD128 Q5: the decode kernel's row pair, token by token (prefill at decode's speed)
            for (let t = 0; t < nt; t++)
              pairQ4(wp, xp + <usize>t * as, y + <usize>(k + t) * ys, gc, r, r0, r1, first, one, true);
          } else if (one) {
            if (nt == 3) q4_1_t3(wp, xp, as, yr, ys, gc, first, in0, in1);
            else if (nt == 2) q4_1_t2(wp, xp, as, yr, ys, gc, first, in0, in1);
            else q4_1_t1(wp, xp, as, yr, ys, gc, first, in0, in1);
          } else {
            if (nt == 3) q4_0_t3(wp, xp, as, yr, ys, gc, first, in0, in1);
            else if (nt == 2) q4_0_t2(wp, xp, as, yr, ys, gc, first, in0, in1);
            else q4_0_t1(wp, xp, as, yr, ys, gc, first, in0, in1);
          }
        }
      }
    }
  }
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W packed Q4_0, x ntok q8_i16n rows. */
export function matmul_q4_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  matmulQ4(w, x, y, rows, cols, ntok, r0, r1, false);
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W packed Q4_1, x ntok q8_i16n rows. */
export function matmul_q4_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  matmulQ4(w, x, y, rows, cols, ntok, r0, r1, true);
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W packed Q5_0, x ntok q8_i16n rows. */
export function matmul_q5_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  matmulQ4(w, x, y, rows, cols, ntok, r0, r1, false, true);
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W packed Q5_1, x ntok q8_i16n rows. */
export function matmul_q5_1(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  matmulQ4(w, x, y, rows, cols, ntok, r0, r1, true, true);
}

export { matmulQ4 };
