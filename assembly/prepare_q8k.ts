// Activations for K-quant weights: f32 rows -> ggml's Q8_K blocks, bit for bit what
// quantize_row_q8_K_ref writes (src/format/quant.ts is the reference).
// A Q8_K block (292 bytes, 256 values): d f32 @0, qs i8[256] @4, bsums i16[16] @260.
// The scale comes from the value of largest magnitude (the first one on a tie of +v and -v,
// as the reference's scan does): iscale = -127 / max, q = round-half-even(iscale * x), <= 127.

const Q8K: usize = 292;

@inline function hmax(v: v128): f32 {
  const a = f32x4.max(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return f32x4.extract_lane(f32x4.max(a, i32x4.shuffle(a, a, 1, 0, 3, 2)), 0);
}
@inline function hmin(v: v128): f32 {
  const a = f32x4.min(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return f32x4.extract_lane(f32x4.min(a, i32x4.shuffle(a, a, 1, 0, 3, 2)), 0);
}

/** The value of largest magnitude of the 256 at `x` (the first of +v and -v on a tie), as the reference finds it. */
@inline function blockMax(x: usize): f32 {
  let vmax = v128.load(x),
    vmin = vmax;
  for (let i: usize = 16; i < 1024; i += 16) {
    const v = v128.load(x + i);
    vmax = f32x4.max(vmax, v);
    vmin = f32x4.min(vmin, v);
  }
  const hi = hmax(vmax),
    lo = hmin(vmin);
  let max: f32 = hi >= -lo ? hi : lo;
  if (hi == -lo) {
    // +v and -v both reach the largest magnitude: the reference keeps the first one it meets
    for (let i: usize = 0; i < 1024; i += 4) {
      const v = load<f32>(x + i);
      if (abs<f32>(v) == hi) {
        max = v;
        break;
      }
    }
  }
  return max;
}

/** 4 values at p quantized as the reference does: round-half-even(v * iscale), at most 127. */
@inline function quant4(p: usize, vs: v128): v128 {
  return i32x4.min_s(i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p), vs))), i32x4.splat(127));
}

/** Quantize one 256-value block at `x` into the Q8_K block at `dst`. */
@inline function blockQ8K(x: usize, dst: usize): void {
  const max = blockMax(x);
  if (max == 0) {
    memory.fill(dst, 0, Q8K);
    return;
  }
  const iscale: f32 = <f32>-127.0 / max;
  const vs = f32x4.splat(iscale);
  for (let g: usize = 0; g < 16; g++) {
    // 16 values -> 16 int8 and their sum
    const p = x + (g << 6);
    const q0 = quant4(p, vs),
      q1 = quant4(p + 16, vs),
      q2 = quant4(p + 32, vs),
      q3 = quant4(p + 48, vs);
    const b = i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(q0, q1), i16x8.narrow_i32x4_s(q2, q3));
    v128.store(dst + 4 + (g << 4), b);
    const s = i32x4.add(i32x4.add(q0, q1), i32x4.add(q2, q3));
    const t = i32x4.add(s, i32x4.shuffle(s, s, 2, 3, 0, 1));
    const u = i32x4.add(t, i32x4.shuffle(t, t, 1, 0, 3, 2));
    store<i16>(dst + 260 + (g << 1), <i16>i32x4.extract_lane(u, 0));
  }
  store<f32>(dst, <f32>1.0 / iscale);
}

/** ntok rows of `cols` f32 (cols a multiple of 256) at x -> ntok rows of Q8_K blocks at dst. */
export function prepare_q8_K(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = <usize>(cols >> 8);
  for (let t = 0; t < ntok; t++) {
    const xr = x + <usize>t * <usize>cols * 4;
    const dr = dst + <usize>t * nb * Q8K;
    for (let b: usize = 0; b < nb; b++) blockQ8K(xr + (b << 10), dr + b * Q8K);
  }
}

// The relaxed build's Q4_K and Q6_K activations, "q8_Ki" (320 bytes per 256 values): the same
// quants and d as Q8_K, ordered for the relaxed kernels (matvec_kquant.ts): half h (32-value
// sub-blocks 4h..4h+3) at 128 h holds for j = 0..3 vector L_j at 32 j and H_j at 32 j + 16; bytes
// 4b..4b+3 of L_j are elements 8j..8j+3 of sub-block 4h + b, of H_j elements 8j+4..8j+7. Then the
// sums of the 16 runs of 16 values as i16 @256 (Q8_K's bsums), of the 8 sub-blocks as i16 @288,
// d as f32 @304; 12 bytes of zeros.
const Q8KI: usize = 320;

/** The sum of the 4 i32 lanes of v. */
@inline function lanesSum(v: v128): i32 {
  const t = i32x4.add(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return i32x4.extract_lane(i32x4.add(t, i32x4.shuffle(t, t, 1, 0, 3, 2)), 0);
}

@inline function blockQ8Ki(x: usize, dst: usize): void {
  const max = blockMax(x);
  if (max == 0) {
    memory.fill(dst, 0, Q8KI);
    return;
  }
  const iscale: f32 = <f32>-127.0 / max;
  const vs = f32x4.splat(iscale);
  for (let sb: usize = 0; sb < 8; sb++) {
    const p = x + (sb << 7);
    const o = dst + ((sb >> 2) << 7) + ((sb & 3) << 2);
    let sum = i32x4.splat(0),
      first: i32 = 0;
    for (let j: usize = 0; j < 4; j++) {
      const lo = quant4(p + (j << 5), vs),
        hi = quant4(p + (j << 5) + 16, vs);
      sum = i32x4.add(sum, i32x4.add(lo, hi));
      const b = i8x16.narrow_i16x8_s(i16x8.narrow_i32x4_s(lo, hi), i16x8.narrow_i32x4_s(lo, hi));
      v128.store32_lane(o + (j << 5), b, 0);
      v128.store32_lane(o + (j << 5) + 16, b, 1);
      if (j == 1) first = lanesSum(sum); // the sub-block's first 16 values
    }
    const total = lanesSum(sum);
    store<i16>(dst + 256 + (sb << 2), <i16>first);
    store<i16>(dst + 258 + (sb << 2), <i16>(total - first));
    store<i16>(dst + 288 + (sb << 1), <i16>total);
  }
  store<f32>(dst, <f32>1.0 / iscale, 304);
  memory.fill(dst + 308, 0, 12);
}

/** ntok rows of `cols` f32 (cols a multiple of 256) at x -> ntok rows of q8_Ki blocks at dst. */
export function prepare_q8_Ki(x: usize, dst: usize, cols: i32, ntok: i32): void {
  const nb = <usize>(cols >> 8);
  for (let t = 0; t < ntok; t++) {
    const xr = x + <usize>t * <usize>cols * 4;
    const dr = dst + <usize>t * nb * Q8KI;
    for (let b: usize = 0; b < nb; b++) blockQ8Ki(xr + (b << 10), dr + b * Q8KI);
  }
}
