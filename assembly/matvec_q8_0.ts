// Q8_0 weights times activations prepared as "q8_i16" (see prepare_q8.ts): matvec (decode; the
// prefill GEMM over the same layout is matmul_q8_0.ts), with ggml's numerics:
// an exact integer dot per 32-block times the f32 product of the two block scales.
//
// Packed weights (written by src/runtime/weight-kernels/q8.ts at load). Rows come in tiles of 4,
// columns in groups of 128 (4 blocks); both are zero-padded. Groups are cut into chunks of 32
// (4096 columns) stored one after the other, each holding all tiles (see matvec_q4.ts for why):
// tile t, group g of chunk c (g0 = 32 c <= g < g0 + gc, gc = min(32, ngroups - g0)) sits at
//   w + (c * ntiles * 32 + t * gc + (g - g0)) * 576
// and holds the quants of rows 0..3 (128 B each), then the f32 scales of rows 0..3 (16 B each).
// A row's 128 quant bytes are 16 pieces of 8: piece v, byte l is element 2v + (l & 1) of block
// l >> 1. `v128.load8x8_s` widens a piece to i16x8 in one instruction, and i32x4.dot_i16x8_s
// with the matching activation vector adds both products of a block into that block's lane, so
// after a group lane b of a row's i32x4 is block b's integer dot: no horizontal sums.
// Four rows share each activation load. The decode walks two tiles at once, one from each half
// of the range (two weight streams: one ran at about half the streaming limit from DRAM, two at
// 1.2-1.4x that, docs/benchmarks.md); splitting each group into two row pairs (fewer live
// registers) or touching lines ahead as a software prefetch did not help ("Kernel variants
// measured").
// The relaxed-SIMD build packs the quants in pieces of 16 B instead and takes "q8_i8s"
// activations (matvec_q8_0_relaxed.ts says why); tiles, groups, chunks, scales and the float
// order are the same, and so are the results.

import { q8Ones, step8 } from "./matvec_q8_0_relaxed";
import { CHUNK, hsum, put, Q8_GB, Q8_I16_GB, Q8_I8S_GB } from "./packed_layout";

// activation bytes per group: the relaxed build reads its own q8_i8s
const ACT_GB: usize = ASC_FEATURE_RELAXED_SIMD ? Q8_I8S_GB : Q8_I16_GB;

@inline function storeRows(
  y: usize,
  t: i32,
  r0: i32,
  r1: i32,
  a0: v128,
  a1: v128,
  a2: v128,
  a3: v128,
  first: bool,
): void {
  const base = t << 2;
  const yp = y + ((<usize>base) << 2);
  if (base >= r0 && base + 4 <= r1) {
    put(yp, hsum(a0), first);
    put(yp + 4, hsum(a1), first);
    put(yp + 8, hsum(a2), first);
    put(yp + 12, hsum(a3), first);
    return;
  }
  // a tile cut by the range: only the rows inside it
  if (base >= r0 && base < r1) put(yp, hsum(a0), first);
  if (base + 1 >= r0 && base + 1 < r1) put(yp + 4, hsum(a1), first);
  if (base + 2 >= r0 && base + 2 < r1) put(yp + 8, hsum(a2), first);
  if (base + 3 >= r0 && base + 3 < r1) put(yp + 12, hsum(a3), first);
}

// SIMD128 build: the block-lane integer dots of 16 packed bytes of a row (two 8-byte pieces, at
// w) with their activation vectors.
@inline function pieceDots(w: usize, xa: v128, xb: v128): v128 {
  return i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(w), xa), i32x4.dot_i16x8_s(v128.load8x8_s(w, 8), xb));
}

// a + the group's block dots s of a row times its scales (at sp) times the activation's dx
@inline function rowUpdate(a: v128, s: v128, sp: usize, dx: v128): v128 {
  return f32x4.add(a, f32x4.mul(f32x4.convert_i32x4_s(s), f32x4.mul(v128.load(sp), dx)));
}

// Tiles t (weights at wp) and u (at wq, another place in memory: two weight streams, as the
// relaxed Q4 kernel walks two row pairs) over gc groups of one chunk: each group's rows 0 and 1
// of both tiles, then rows 2 and 3, each activation vector loaded once for four rows. Each row's
// sums and float order are those of a tile alone: the same bits. A lone tile goes in as both,
// with u < 0: its copy is computed and not stored.
@inline function tile2Q8(
  wp: usize,
  wq: usize,
  xp: usize,
  y: usize,
  gc: i32,
  t: i32,
  u: i32,
  r0: i32,
  r1: i32,
  first: bool,
): void {
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0),
    a2 = f32x4.splat(0),
    a3 = f32x4.splat(0),
    b0 = f32x4.splat(0),
    b1 = f32x4.splat(0),
    b2 = f32x4.splat(0),
    b3 = f32x4.splat(0);
  const ones = ASC_FEATURE_RELAXED_SIMD ? q8Ones() : i32x4.splat(0);
  for (let g = 0; g < gc; g++) {
    const dx = v128.load(xp, ACT_GB - 16);
    let s0: v128, s1: v128, s2: v128, s3: v128;
    if (ASC_FEATURE_RELAXED_SIMD) {
      // each block's sum starts at its c (matvec_q8_0_relaxed.ts)
      s0 = s1 = s2 = s3 = v128.load(xp, 256);
      for (let v: usize = 0; v < 128; v += 16) {
        const a = v128.load(xp + v),
          m = v128.load(xp + v, 128);
        s0 = step8(s0, v128.load(wp + v), a, m, ones);
        s1 = step8(s1, v128.load(wp + 128 + v), a, m, ones);
        s2 = step8(s2, v128.load(wq + v), a, m, ones);
        s3 = step8(s3, v128.load(wq + 128 + v), a, m, ones);
      }
    } else {
      s0 = s1 = s2 = s3 = i32x4.splat(0);
      for (let v: usize = 0; v < 128; v += 16) {
        const xa = v128.load(xp + (v << 1)),
          xb = v128.load(xp + (v << 1), 16);
        s0 = i32x4.add(s0, pieceDots(wp + v, xa, xb));
        s1 = i32x4.add(s1, pieceDots(wp + 128 + v, xa, xb));
        s2 = i32x4.add(s2, pieceDots(wq + v, xa, xb));
        s3 = i32x4.add(s3, pieceDots(wq + 128 + v, xa, xb));
      }
    }
    a0 = rowUpdate(a0, s0, wp + 512, dx);
    a1 = rowUpdate(a1, s1, wp + 528, dx);
    b0 = rowUpdate(b0, s2, wq + 512, dx);
    b1 = rowUpdate(b1, s3, wq + 528, dx);
    if (ASC_FEATURE_RELAXED_SIMD) {
      // each block's sum starts at its c (matvec_q8_0_relaxed.ts)
      s0 = s1 = s2 = s3 = v128.load(xp, 256);
      for (let v: usize = 0; v < 128; v += 16) {
        const a = v128.load(xp + v),
          m = v128.load(xp + v, 128);
        s0 = step8(s0, v128.load(wp + 256 + v), a, m, ones);
        s1 = step8(s1, v128.load(wp + 384 + v), a, m, ones);
        s2 = step8(s2, v128.load(wq + 256 + v), a, m, ones);
        s3 = step8(s3, v128.load(wq + 384 + v), a, m, ones);
      }
    } else {
      s0 = s1 = s2 = s3 = i32x4.splat(0);
      for (let v: usize = 0; v < 128; v += 16) {
        const xa = v128.load(xp + (v << 1)),
          xb = v128.load(xp + (v << 1), 16);
        s0 = i32x4.add(s0, pieceDots(wp + 256 + v, xa, xb));
        s1 = i32x4.add(s1, pieceDots(wp + 384 + v, xa, xb));
        s2 = i32x4.add(s2, pieceDots(wq + 256 + v, xa, xb));
        s3 = i32x4.add(s3, pieceDots(wq + 384 + v, xa, xb));
      }
    }
    a2 = rowUpdate(a2, s0, wp + 544, dx);
    a3 = rowUpdate(a3, s1, wp + 560, dx);
    b2 = rowUpdate(b2, s2, wq + 544, dx);
    b3 = rowUpdate(b3, s3, wq + 560, dx);
    wp += Q8_GB;
    wq += Q8_GB;
    xp += ACT_GB;
  }
  storeRows(y, t, r0, r1, a0, a1, a2, a3, first);
  if (u >= 0) storeRows(y, u, r0, r1, b0, b1, b2, b3, first);
}

/**
 * y[r] = W[r,:] . x for r in [r0, r1); W packed Q8_0, x prepared q8_i16 (relaxed build: q8_i8s).
 * The range's tiles go two at a time, one from each half (two weight streams: tile2Q8).
 */
export function matvec_q8_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const ng = (cols + 127) >> 7;
  const ntiles = <usize>((rows + 3) >> 2);
  const t0 = r0 >> 2,
    t1 = (r1 + 3) >> 2;
  const half = (t1 - t0) >> 1;
  for (let g0 = 0; g0 < ng; g0 += CHUNK) {
    const gc = min(CHUNK, ng - g0);
    const wc = w + <usize>g0 * ntiles * Q8_GB;
    const xc = x + <usize>g0 * ACT_GB;
    const tileBytes = <usize>gc * Q8_GB;
    for (let i = 0; i < half; i++) {
      const t = t0 + i,
        u = t1 - half + i;
      tile2Q8(wc + <usize>t * tileBytes, wc + <usize>u * tileBytes, xc, y, gc, t, u, r0, r1, g0 == 0);
    }
    if ((t1 - t0) & 1) {
      const wl = wc + <usize>(t0 + half) * tileBytes;
      tile2Q8(wl, wl, xc, y, gc, t0 + half, -1, r0, r1, g0 == 0);
    }
  }
}
