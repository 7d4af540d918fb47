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
// Four rows share each activation load. The decode walks four tiles at once, one from each
// quarter of the range (four weight streams: one ran at about half the streaming limit from DRAM,
// two at 1.2-1.4x that, four at 1.06-1.11x two, docs/benchmarks.md); touching lines ahead as a
// software prefetch did not help ("Kernel variants measured").
// The relaxed-SIMD build packs the quants in pieces of 16 B instead and takes "q8_i8s"
// activations (matvec_q8_0_relaxed.ts says why); tiles, groups, chunks, scales and the float
// order are the same, and so are the results.

import { q8Ones, step8 } from "./matvec_q8_0_relaxed";
import { hsum } from "./lanes";
import { CHUNK, put, Q8_GB, Q8_I16_GB, Q8_I8S_GB } from "./packed_layout";

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

// The build's step over one 16-byte piece of a row: the activation vectors it takes (actA,
// actB: |x| and the sign masks in the relaxed build, two i16 vectors in the SIMD128 one, loaded
// once for all the rows of a pass), a block sum's start (the relaxed build's c) and the step.
@inline function actA(xp: usize, k: usize): v128 {
  return ASC_FEATURE_RELAXED_SIMD ? v128.load(xp + k) : v128.load(xp + (k << 1));
}
@inline function actB(xp: usize, k: usize): v128 {
  return ASC_FEATURE_RELAXED_SIMD ? v128.load(xp + k, 128) : v128.load(xp + (k << 1), 16);
}
@inline function sumStart(xp: usize): v128 {
  // each block's sum starts at its c in the relaxed build (matvec_q8_0_relaxed.ts)
  return ASC_FEATURE_RELAXED_SIMD ? v128.load(xp, 256) : i32x4.splat(0);
}
@inline function piece(s: v128, w: usize, a: v128, b: v128, ones: v128): v128 {
  return ASC_FEATURE_RELAXED_SIMD ? step8(s, v128.load(w), a, b, ones) : i32x4.add(s, pieceDots(w, a, b));
}

// Tiles t, u, v, z (weights at wt, wu, wv, wz: four places in memory, four weight streams) over gc
// groups of one chunk: each group's rows 0 and 1 of t and u, then of v and z, then rows 2 and 3
// likewise. Each row's sums and float order are those of a tile alone: the same bits however the
// tiles are grouped. A tile index < 0 marks a stand-in (another tile's weights again): computed,
// not stored.
@inline function tile4Q8(
  wt: usize,
  wu: usize,
  wv: usize,
  wz: usize,
  xp: usize,
  y: usize,
  gc: i32,
  t: i32,
  u: i32,
  v: i32,
  z: i32,
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
    b3 = f32x4.splat(0),
    c0 = f32x4.splat(0),
    c1 = f32x4.splat(0),
    c2 = f32x4.splat(0),
    c3 = f32x4.splat(0),
    d0 = f32x4.splat(0),
    d1 = f32x4.splat(0),
    d2 = f32x4.splat(0),
    d3 = f32x4.splat(0);
  const ones = ASC_FEATURE_RELAXED_SIMD ? q8Ones() : i32x4.splat(0);
  for (let g = 0; g < gc; g++) {
    const dx = v128.load(xp, ACT_GB - 16);
    // the passes are written out: a pass returning its sums through globals ran 0.85-0.92x in cache
    let s0: v128, s1: v128, s2: v128, s3: v128;
    s0 = s1 = s2 = s3 = sumStart(xp);
    for (let k: usize = 0; k < 128; k += 16) {
      const a = actA(xp, k),
        b = actB(xp, k);
      s0 = piece(s0, wt + k, a, b, ones);
      s1 = piece(s1, wt + 128 + k, a, b, ones);
      s2 = piece(s2, wu + k, a, b, ones);
      s3 = piece(s3, wu + 128 + k, a, b, ones);
    }
    a0 = rowUpdate(a0, s0, wt + 512, dx);
    a1 = rowUpdate(a1, s1, wt + 528, dx);
    b0 = rowUpdate(b0, s2, wu + 512, dx);
    b1 = rowUpdate(b1, s3, wu + 528, dx);
    s0 = s1 = s2 = s3 = sumStart(xp);
    for (let k: usize = 0; k < 128; k += 16) {
      const a = actA(xp, k),
        b = actB(xp, k);
      s0 = piece(s0, wv + k, a, b, ones);
      s1 = piece(s1, wv + 128 + k, a, b, ones);
      s2 = piece(s2, wz + k, a, b, ones);
      s3 = piece(s3, wz + 128 + k, a, b, ones);
    }
    c0 = rowUpdate(c0, s0, wv + 512, dx);
    c1 = rowUpdate(c1, s1, wv + 528, dx);
    d0 = rowUpdate(d0, s2, wz + 512, dx);
    d1 = rowUpdate(d1, s3, wz + 528, dx);
    s0 = s1 = s2 = s3 = sumStart(xp);
    for (let k: usize = 0; k < 128; k += 16) {
      const a = actA(xp, k),
        b = actB(xp, k);
      s0 = piece(s0, wt + 256 + k, a, b, ones);
      s1 = piece(s1, wt + 384 + k, a, b, ones);
      s2 = piece(s2, wu + 256 + k, a, b, ones);
      s3 = piece(s3, wu + 384 + k, a, b, ones);
    }
    a2 = rowUpdate(a2, s0, wt + 544, dx);
    a3 = rowUpdate(a3, s1, wt + 560, dx);
    b2 = rowUpdate(b2, s2, wu + 544, dx);
    b3 = rowUpdate(b3, s3, wu + 560, dx);
    s0 = s1 = s2 = s3 = sumStart(xp);
    for (let k: usize = 0; k < 128; k += 16) {
      const a = actA(xp, k),
        b = actB(xp, k);
      s0 = piece(s0, wv + 256 + k, a, b, ones);
      s1 = piece(s1, wv + 384 + k, a, b, ones);
      s2 = piece(s2, wz + 256 + k, a, b, ones);
      s3 = piece(s3, wz + 384 + k, a, b, ones);
    }
    c2 = rowUpdate(c2, s0, wv + 544, dx);
    c3 = rowUpdate(c3, s1, wv + 560, dx);
    d2 = rowUpdate(d2, s2, wz + 544, dx);
    d3 = rowUpdate(d3, s3, wz + 560, dx);
    wt += Q8_GB;
    wu += Q8_GB;
    wv += Q8_GB;
    wz += Q8_GB;
    xp += ACT_GB;
  }
  if (t >= 0) storeRows(y, t, r0, r1, a0, a1, a2, a3, first);
  if (u >= 0) storeRows(y, u, r0, r1, b0, b1, b2, b3, first);
  if (v >= 0) storeRows(y, v, r0, r1, c0, c1, c2, c3, first);
  if (z >= 0) storeRows(y, z, r0, r1, d0, d1, d2, d3, first);
}

/**
 * y[r] = W[r,:] . x for r in [r0, r1); W packed Q8_0, x prepared q8_i16 (relaxed build: q8_i8s).
 * The range's tiles go four at a time, one from each quarter (four weight streams: tile4Q8).
 */
export function matvec_q8_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const ng = (cols + 127) >> 7;
  const ntiles = <usize>((rows + 3) >> 2);
  const t0 = r0 >> 2,
    t1 = (r1 + 3) >> 2;
  const q = (t1 - t0) >> 2;
  for (let g0 = 0; g0 < ng; g0 += CHUNK) {
    const gc = min(CHUNK, ng - g0);
    const wc = w + <usize>g0 * ntiles * Q8_GB;
    const xc = x + <usize>g0 * ACT_GB;
    const tileBytes = <usize>gc * Q8_GB;
    for (let i = 0; i < q; i++) {
      const t = t0 + i;
      const wt = wc + <usize>t * tileBytes;
      const wq = <usize>q * tileBytes;
      tile4Q8(wt, wt + wq, wt + 2 * wq, wt + 3 * wq, xc, y, gc, t, t + q, t + 2 * q, t + 3 * q, r0, r1, g0 == 0);
    }
    // the tiles past the quarters (at most three) at once, the first standing in for those missing
    const r = t0 + 4 * q;
    if (r < t1) {
      const u = r + 1 < t1 ? r + 1 : -1,
        v = r + 2 < t1 ? r + 2 : -1;
      const wr = wc + <usize>r * tileBytes;
      tile4Q8(
        wr,
        u < 0 ? wr : wr + tileBytes,
        v < 0 ? wr : wr + 2 * tileBytes,
        wr,
        xc,
        y,
        gc,
        r,
        u,
        v,
        -1,
        r0,
        r1,
        g0 == 0,
      );
    }
  }
}
