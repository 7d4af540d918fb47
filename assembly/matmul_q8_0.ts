// Prefill GEMM for packed Q8_0 weights (layout: matvec_q8_0.ts) times ntok activation rows
// prepared as "q8_i16": y[t*rows + r] = W[r,:] . x_t.
//
// The decode tile spends, per 8 multiply-adds, one widening load of 8 weight bytes, one
// i32x4.dot_i16x8_s and one i32x4.add. Here each widened weight vector serves 4 tokens: a tile of
// 2 rows x 4 tokens keeps 8 i32x4 block sums, 2 widened weight vectors, the 4 tokens' activation
// vectors (V8 loads all of a loop body's vectors at its top) and a product live: the 15 xmm
// registers V8 allocates on x64, no spill. The f32 accumulators are touched once per group and
// may live on the stack. The widening is paid once per 4 dots.
//
// Per (row, token) the arithmetic and its order are the decode kernel's: an exact integer dot per
// block, lane b of a group's i32x4 holding block b, then a += f32(s) * (d_w * d_x) per group, the
// 4 lanes summed at the end of a 4096-column chunk, chunks added into y. So a token's result is
// bit for bit what matvec_q8_0 gives for it alone.

// The relaxed-SIMD build's tile is the same 2 rows x 4 tokens over its own layout and q8_i8s
// activations (matvec_q8_0_relaxed.ts): per 16 multiply-adds of a (row, token) an xor, a relaxed
// dot, a dot with ones and an add, each weight vector loaded once for the 4 tokens. Same integer
// sums, same float order: the same bits as the decode kernels of both builds.

import { q8Ones, step8 } from "./matvec_q8_0_relaxed";
import { hsum } from "./lanes";
import { CHUNK, put, Q8_GB, Q8_I16_GB, Q8_I8S_GB } from "./packed_layout";
import { pin2 } from "./schedule_pin";

// activation bytes per group: the relaxed build reads its own q8_i8s
const ACT_GB: usize = ASC_FEATURE_RELAXED_SIMD ? Q8_I8S_GB : Q8_I16_GB;

// Tiles whose chunk of weights (4 tiles x 32 groups x 576 B) stays in L2 while all the tokens
// pass; the pool hands out rows in multiples of 16, one block.
const TILE_BLOCK = 4;
// Tokens per pass over a row pair.
const NT = 4;

@inline function dot(s: v128, w: v128, x: v128): v128 {
  return i32x4.add(s, i32x4.dot_i16x8_s(w, x));
}

@inline function acc(a: v128, s: v128, ds: v128, dx: v128): v128 {
  return f32x4.add(a, f32x4.mul(f32x4.convert_i32x4_s(s), f32x4.mul(ds, dx)));
}

// Rows r and r + 1 (quants of row r at wq, its scales at ws; row r + 1's 128 B / 16 B further)
// over gc groups of one chunk, times nt (1..4, a constant after inlining) tokens whose chunk
// activations start at xp, astride bytes apart. Results for rows inside [r0, r1) go to
// y + t * ys (added to what is there unless `first`).
@inline function pairTokens(
  wq: usize,
  ws: usize,
  xp: usize,
  astride: usize,
  y: usize,
  ys: usize,
  gc: i32,
  r: i32,
  r0: i32,
  r1: i32,
  first: bool,
  nt: i32,
): void {
  let a00 = f32x4.splat(0),
    a01 = f32x4.splat(0),
    a02 = f32x4.splat(0),
    a03 = f32x4.splat(0),
    a10 = f32x4.splat(0),
    a11 = f32x4.splat(0),
    a12 = f32x4.splat(0),
    a13 = f32x4.splat(0);
  let x0 = xp,
    x1 = xp + astride,
    x2 = xp + astride * 2,
    x3 = xp + astride * 3;
  const ones = ASC_FEATURE_RELAXED_SIMD ? q8Ones() : i32x4.splat(0);
  for (let g = 0; g < gc; g++) {
    let s00 = i32x4.splat(0),
      s01 = i32x4.splat(0),
      s02 = i32x4.splat(0),
      s03 = i32x4.splat(0),
      s10 = i32x4.splat(0),
      s11 = i32x4.splat(0),
      s12 = i32x4.splat(0),
      s13 = i32x4.splat(0);
    if (ASC_FEATURE_RELAXED_SIMD) {
      // each block's sum starts at the token's c (matvec_q8_0_relaxed.ts)
      s00 = s10 = v128.load(x0, 256);
      if (nt > 1) s01 = s11 = v128.load(x1, 256);
      if (nt > 2) s02 = s12 = v128.load(x2, 256);
      if (nt > 3) s03 = s13 = v128.load(x3, 256);
      for (let v: usize = 0; v < 128; v += 16) {
        const w0 = v128.load(wq + v),
          w1 = v128.load(wq + v, 128);
        let a = v128.load(x0 + v),
          m = v128.load(x0 + v, 128);
        s00 = step8(s00, w0, a, m, ones);
        s10 = step8(s10, w1, a, m, ones);
        pin2(s00, s10);
        if (nt > 1) {
          a = v128.load(x1 + v);
          m = v128.load(x1 + v, 128);
          s01 = step8(s01, w0, a, m, ones);
          s11 = step8(s11, w1, a, m, ones);
          pin2(s01, s11);
        }
        if (nt > 2) {
          a = v128.load(x2 + v);
          m = v128.load(x2 + v, 128);
          s02 = step8(s02, w0, a, m, ones);
          s12 = step8(s12, w1, a, m, ones);
          pin2(s02, s12);
        }
        if (nt > 3) {
          a = v128.load(x3 + v);
          m = v128.load(x3 + v, 128);
          s03 = step8(s03, w0, a, m, ones);
          s13 = step8(s13, w1, a, m, ones);
        }
      }
    } else {
      for (let v: usize = 0; v < 128; v += 8) {
        const w0 = v128.load8x8_s(wq + v),
          w1 = v128.load8x8_s(wq + v, 128);
        const o = v << 1;
        let x = v128.load(x0 + o);
        s00 = dot(s00, w0, x);
        s10 = dot(s10, w1, x);
        if (nt > 1) {
          x = v128.load(x1 + o);
          s01 = dot(s01, w0, x);
          s11 = dot(s11, w1, x);
        }
        if (nt > 2) {
          x = v128.load(x2 + o);
          s02 = dot(s02, w0, x);
          s12 = dot(s12, w1, x);
        }
        if (nt > 3) {
          x = v128.load(x3 + o);
          s03 = dot(s03, w0, x);
          s13 = dot(s13, w1, x);
        }
      }
    }
    const d0 = v128.load(ws),
      d1 = v128.load(ws, 16);
    let dx = v128.load(x0, ACT_GB - 16);
    a00 = acc(a00, s00, d0, dx);
    a10 = acc(a10, s10, d1, dx);
    if (nt > 1) {
      dx = v128.load(x1, ACT_GB - 16);
      a01 = acc(a01, s01, d0, dx);
      a11 = acc(a11, s11, d1, dx);
    }
    if (nt > 2) {
      dx = v128.load(x2, ACT_GB - 16);
      a02 = acc(a02, s02, d0, dx);
      a12 = acc(a12, s12, d1, dx);
    }
    if (nt > 3) {
      dx = v128.load(x3, ACT_GB - 16);
      a03 = acc(a03, s03, d0, dx);
      a13 = acc(a13, s13, d1, dx);
    }
    wq += Q8_GB;
    ws += Q8_GB;
    x0 += ACT_GB;
    x1 += ACT_GB;
    x2 += ACT_GB;
    x3 += ACT_GB;
  }
  const in0 = r >= r0 && r < r1,
    in1 = r + 1 >= r0 && r + 1 < r1;
  const yp = y + ((<usize>r) << 2);
  if (in0) put(yp, hsum(a00), first);
  if (in1) put(yp + 4, hsum(a10), first);
  if (nt > 1) {
    if (in0) put(yp + ys, hsum(a01), first);
    if (in1) put(yp + ys + 4, hsum(a11), first);
  }
  if (nt > 2) {
    if (in0) put(yp + ys * 2, hsum(a02), first);
    if (in1) put(yp + ys * 2 + 4, hsum(a12), first);
  }
  if (nt > 3) {
    if (in0) put(yp + ys * 3, hsum(a03), first);
    if (in1) put(yp + ys * 3 + 4, hsum(a13), first);
  }
}

// One function per token count, so that each is compiled with it as a constant (inlined copies
// that differ only in a constant get merged back into one with runtime tests).
function q8_t1(
  wq: usize,
  ws: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  r: i32,
  r0: i32,
  r1: i32,
  first: bool,
): void {
  pairTokens(wq, ws, xp, as, y, ys, gc, r, r0, r1, first, 1);
}
function q8_t2(
  wq: usize,
  ws: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  r: i32,
  r0: i32,
  r1: i32,
  first: bool,
): void {
  pairTokens(wq, ws, xp, as, y, ys, gc, r, r0, r1, first, 2);
}
function q8_t3(
  wq: usize,
  ws: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  r: i32,
  r0: i32,
  r1: i32,
  first: bool,
): void {
  pairTokens(wq, ws, xp, as, y, ys, gc, r, r0, r1, first, 3);
}
function q8_t4(
  wq: usize,
  ws: usize,
  xp: usize,
  as: usize,
  y: usize,
  ys: usize,
  gc: i32,
  r: i32,
  r0: i32,
  r1: i32,
  first: bool,
): void {
  pairTokens(wq, ws, xp, as, y, ys, gc, r, r0, r1, first, 4);
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1); W packed Q8_0, x ntok q8_i16 rows (relaxed build: q8_i8s). */
export function matmul_q8_0(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const ng = (cols + 127) >> 7;
  const ntiles = <usize>((rows + 3) >> 2);
  const astride = <usize>ng * ACT_GB;
  const ys = (<usize>rows) << 2;
  const t0 = r0 >> 2,
    t1 = (r1 + 3) >> 2;
  for (let g0 = 0; g0 < ng; g0 += CHUNK) {
    const gc = min(CHUNK, ng - g0);
    const wc = w + <usize>g0 * ntiles * Q8_GB;
    const xc = x + <usize>g0 * ACT_GB;
    const first = g0 == 0;
    for (let tb = t0; tb < t1; tb += TILE_BLOCK) {
      const te = min(tb + TILE_BLOCK, t1);
      for (let k = 0; k < ntok; k += NT) {
        const xk = xc + <usize>k * astride,
          yk = y + <usize>k * ys;
        const nt = min(NT, ntok - k);
        for (let t = tb; t < te; t++) {
          const wt = wc + <usize>t * <usize>gc * Q8_GB;
          for (let h = 0; h < 2; h++) {
            const r = (t << 2) + (h << 1);
            if (r + 1 < r0 || r >= r1) continue;
            const wq = wt + <usize>h * 256,
              ws = wt + 512 + <usize>h * 32;
            if (nt == 4) q8_t4(wq, ws, xk, astride, yk, ys, gc, r, r0, r1, first);
            else if (nt == 3) q8_t3(wq, ws, xk, astride, yk, ys, gc, r, r0, r1, first);
            else if (nt == 2) q8_t2(wq, ws, xk, astride, yk, ys, gc, r, r0, r1, first);
            else q8_t1(wq, ws, xk, astride, yk, ys, gc, r, r0, r1, first);
          }
        }
      }
    }
  }
}
