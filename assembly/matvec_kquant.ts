// K-quant weights (Q4_K, Q5_K, Q6_K) times activations prepared as Q8_K (prepare_q8k.ts), with
// ggml's numerics: exact integer dots per sub-block, times the sub-block's integer scale, summed
// per 256-block and scaled by the f32 product of the two block scales; Q4_K/Q5_K subtract
// dmin * sum(min_j * bsum_j) from the activation's 16-value sums, as ggml does.
//
// The SIMD128 build keeps GGUF's layout (packing is a copy, so rows read from flash need no
// conversion); the relaxed build packs all three its own way (below, at their kernels):
//   Q4_K 144 B: d f16 @0, dmin f16 @2, scales[12] @4, qs[128] @16
//   Q5_K 176 B: d @0, dmin @2, scales[12] @4, qh[32] @16, qs[128] @48
//   Q6_K 210 B: ql[128] @0, qh[64] @128, scales i8[16] @192, d f16 @208
//   Q8_K 292 B: d f32 @0, qs i8[256] @4, bsums i16[16] @260
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
// Q5_K and Q6_K blocks below do.

import { f16ToF32Finite } from "./half";
import { hsumPairs } from "./lanes";
import { dotLoHi, dotw, q5Hi, q5Lo } from "./matvec_q4_relaxed";
import { pin, pin2 } from "./schedule_pin";

const Q4K: usize = 144;
const Q5K: usize = 176;
const Q6K: usize = 210;
const Q8K: usize = 292;

// scalesMins' constants, loaded rather than written as constants (V8 rebuilds a v128.const at
// every use): +0 and +16 the masks m1, m2, +32 0x30 bytes
const K_SM = memory.data<u8>(
  [
    63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
  ],
  16,
);

/**
 * The 12 scale bytes of a Q4_K/Q5_K block (at p; 16 bytes are read) -> u8 lanes
 * [sc0..sc7, m0..m7]. Sub-blocks 0..3 keep 6 bits in bytes 0..3 (scales) and 4..7 (mins);
 * sub-blocks 4..7 keep 4 low bits in bytes 8..11 and their 2 high bits in the top bits of
 * bytes 0..7.
 */
@inline function scalesMins(p: usize): v128 {
  const v = v128.load(p);
  const z = i64x2.splat(0);
  const low = i8x16.shuffle(v, v, 0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11),
    top = i8x16.shuffle(v, z, 16, 16, 16, 16, 0, 1, 2, 3, 16, 16, 16, 16, 4, 5, 6, 7);
  // 16-bit shifts are safe here: the masks drop every bit that crossed a byte boundary
  const lo = v128.or(v128.and(low, v128.load(K_SM)), v128.and(i16x8.shr_u(low, 4), v128.load(K_SM, 16)));
  return v128.or(lo, v128.and(i16x8.shr_u(top, 2), v128.load(K_SM, 32)));
}

/** sum_j min_j * (bsums[2j] + bsums[2j+1]) of a Q8_K block at xb, as i32 lanes to be added. */
@inline function minsDot(sm: v128, xb: usize): v128 {
  const z = i64x2.splat(0);
  const md0 = i8x16.shuffle(sm, z, 8, 16, 8, 16, 9, 16, 9, 16, 10, 16, 10, 16, 11, 16, 11, 16),
    md1 = i8x16.shuffle(sm, z, 12, 16, 12, 16, 13, 16, 13, 16, 14, 16, 14, 16, 15, 16, 15, 16);
  return i32x4.add(i32x4.dot_i16x8_s(v128.load(xb, 260), md0), i32x4.dot_i16x8_s(v128.load(xb, 276), md1));
}

/** Scale k (0..7, a constant) of the unpacked scales sm, splat into i32 lanes. */
@inline function subScale(sm: v128, k: i32): v128 {
  // extract_lane takes a literal lane
  if (k == 0) return i32x4.splat(i8x16.extract_lane_u(sm, 0));
  if (k == 1) return i32x4.splat(i8x16.extract_lane_u(sm, 1));
  if (k == 2) return i32x4.splat(i8x16.extract_lane_u(sm, 2));
  if (k == 3) return i32x4.splat(i8x16.extract_lane_u(sm, 3));
  if (k == 4) return i32x4.splat(i8x16.extract_lane_u(sm, 4));
  if (k == 5) return i32x4.splat(i8x16.extract_lane_u(sm, 5));
  if (k == 6) return i32x4.splat(i8x16.extract_lane_u(sm, 6));
  return i32x4.splat(i8x16.extract_lane_u(sm, 7));
}

// ---------------------------------------------------------------------------------------------
// Q4_K

/** Integer part of one Q4_K block against one Q8_K block: [256 * sum_j sc_j dot_j] lanes. */
@inline function intQ4K(wb: usize, xb: usize, sm: v128): v128 {
  let isum = i32x4.splat(0);
  let sc = sm;
  // chunk c: 32 quant bytes; low nibbles are sub-block 2c, high nibbles sub-block 2c+1
  for (let c: usize = 0; c < 4; c++) {
    const qp = wb + 16 + (c << 5),
      xp = xb + 4 + (c << 6);
    let lo = i32x4.splat(0),
      hi = i32x4.splat(0);
    for (let k: usize = 0; k < 32; k += 16) {
      const q = v128.load(qp + k),
        xl = v128.load(xp + k),
        xh = v128.load(xp + k, 32);
      lo = i32x4.add(
        lo,
        i32x4.add(
          i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x000f)), i16x8.shl(xl, 8)),
          i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x0f00)), i16x8.shr_s(xl, 8)),
        ),
      );
      hi = i32x4.add(
        hi,
        i32x4.add(
          i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00f0)), i16x8.shr_s(i16x8.shl(xh, 8), 4)),
          i32x4.dot_i16x8_s(i16x8.shr_u(q, 12), v128.and(xh, i16x8.splat(<i16>0xff00))),
        ),
      );
    }
    isum = i32x4.add(
      isum,
      i32x4.add(
        i32x4.mul(lo, i32x4.splat(i8x16.extract_lane_u(sc, 0))),
        i32x4.mul(hi, i32x4.splat(i8x16.extract_lane_u(sc, 1))),
      ),
    );
    sc = i8x16.shuffle(sc, sc, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
  }
  return isum;
}

// 0x0f bytes, then 0x30 bytes (Q6_K) and 0x10 bytes (Q5_K), loaded rather than written as
// constants (V8 rebuilds a v128.const at every use)
const K_NIB = memory.data<u8>(
  [
    15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 15, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30,
    0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x30, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10,
    0x10, 0x10, 0x10, 0x10, 0x10,
  ],
  16,
);

/** acc + d_w d_x / 256 * isum - dmin_w d_x * mins: one finished Q4_K/Q5_K block. */
@inline function finishK(acc: v128, wb: usize, xb: usize, isum: v128, mi: v128, scale: f32): v128 {
  const dd = load<u32>(wb);
  const dx = load<f32>(xb);
  return f32x4.add(
    acc,
    f32x4.sub(
      f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(f16ToF32Finite(dd & 0xffff) * dx * scale)),
      f32x4.mul(f32x4.convert_i32x4_s(mi), f32x4.splat(f16ToF32Finite(dd >> 16) * dx)),
    ),
  );
}

@inline function dotQ4K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q4K,
      xb = x + b * Q8K;
    const sm = scalesMins(wb + 4);
    acc = finishK(acc, wb, xb, intQ4K(wb, xb, sm), minsDot(sm, xb), <f32>1.0 / 256.0);
  }
  return hsumPairs(acc);
}

/** Two rows against one activation row: each shaped activation vector serves both rows. */
@inline function dotQ4KRows2(w0: usize, w1: usize, x: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb0 = w0 + b * Q4K,
      wb1 = w1 + b * Q4K,
      xb = x + b * Q8K;
    const sm0 = scalesMins(wb0 + 4),
      sm1 = scalesMins(wb1 + 4);
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    let sc0 = sm0,
      sc1 = sm1;
    for (let c: usize = 0; c < 4; c++) {
      const qo: usize = 16 + (c << 5),
        xp = xb + 4 + (c << 6);
      let lo0 = i32x4.splat(0),
        hi0 = i32x4.splat(0),
        lo1 = i32x4.splat(0),
        hi1 = i32x4.splat(0);
      for (let k: usize = 0; k < 32; k += 16) {
        const xl = v128.load(xp + k),
          xh = v128.load(xp + k, 32);
        const le = i16x8.shl(xl, 8),
          lo = i16x8.shr_s(xl, 8);
        const he = i16x8.shr_s(i16x8.shl(xh, 8), 4),
          ho = v128.and(xh, i16x8.splat(<i16>0xff00));
        let q = v128.load(wb0 + qo + k);
        lo0 = i32x4.add(
          lo0,
          i32x4.add(
            i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x000f)), le),
            i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x0f00)), lo),
          ),
        );
        hi0 = i32x4.add(
          hi0,
          i32x4.add(i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00f0)), he), i32x4.dot_i16x8_s(i16x8.shr_u(q, 12), ho)),
        );
        q = v128.load(wb1 + qo + k);
        lo1 = i32x4.add(
          lo1,
          i32x4.add(
            i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x000f)), le),
            i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x0f00)), lo),
          ),
        );
        hi1 = i32x4.add(
          hi1,
          i32x4.add(i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00f0)), he), i32x4.dot_i16x8_s(i16x8.shr_u(q, 12), ho)),
        );
      }
      is0 = i32x4.add(
        is0,
        i32x4.add(
          i32x4.mul(lo0, i32x4.splat(i8x16.extract_lane_u(sc0, 0))),
          i32x4.mul(hi0, i32x4.splat(i8x16.extract_lane_u(sc0, 1))),
        ),
      );
      is1 = i32x4.add(
        is1,
        i32x4.add(
          i32x4.mul(lo1, i32x4.splat(i8x16.extract_lane_u(sc1, 0))),
          i32x4.mul(hi1, i32x4.splat(i8x16.extract_lane_u(sc1, 1))),
        ),
      );
      sc0 = i8x16.shuffle(sc0, sc0, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
      sc1 = i8x16.shuffle(sc1, sc1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
    }
    acc0 = finishK(acc0, wb0, xb, is0, minsDot(sm0, xb), <f32>1.0 / 256.0);
    acc1 = finishK(acc1, wb1, xb, is1, minsDot(sm1, xb), <f32>1.0 / 256.0);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

/** One row against two activation rows: each masked weight vector serves both tokens. */
@inline function dotQ4KTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q4K,
      xb0 = x0 + b * Q8K,
      xb1 = x1 + b * Q8K;
    const sm = scalesMins(wb + 4);
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    let sc = sm;
    for (let c: usize = 0; c < 4; c++) {
      const qp = wb + 16 + (c << 5),
        xo: usize = 4 + (c << 6);
      let lo0 = i32x4.splat(0),
        hi0 = i32x4.splat(0),
        lo1 = i32x4.splat(0),
        hi1 = i32x4.splat(0);
      for (let k: usize = 0; k < 32; k += 16) {
        const q = v128.load(qp + k);
        const q1 = v128.and(q, i16x8.splat(0x000f)),
          q2 = v128.and(q, i16x8.splat(0x0f00));
        const q3 = v128.and(q, i16x8.splat(0x00f0)),
          q4 = i16x8.shr_u(q, 12);
        let xl = v128.load(xb0 + xo + k),
          xh = v128.load(xb0 + xo + k, 32);
        lo0 = i32x4.add(
          lo0,
          i32x4.add(i32x4.dot_i16x8_s(q1, i16x8.shl(xl, 8)), i32x4.dot_i16x8_s(q2, i16x8.shr_s(xl, 8))),
        );
        hi0 = i32x4.add(
          hi0,
          i32x4.add(
            i32x4.dot_i16x8_s(q3, i16x8.shr_s(i16x8.shl(xh, 8), 4)),
            i32x4.dot_i16x8_s(q4, v128.and(xh, i16x8.splat(<i16>0xff00))),
          ),
        );
        xl = v128.load(xb1 + xo + k);
        xh = v128.load(xb1 + xo + k, 32);
        lo1 = i32x4.add(
          lo1,
          i32x4.add(i32x4.dot_i16x8_s(q1, i16x8.shl(xl, 8)), i32x4.dot_i16x8_s(q2, i16x8.shr_s(xl, 8))),
        );
        hi1 = i32x4.add(
          hi1,
          i32x4.add(
            i32x4.dot_i16x8_s(q3, i16x8.shr_s(i16x8.shl(xh, 8), 4)),
            i32x4.dot_i16x8_s(q4, v128.and(xh, i16x8.splat(<i16>0xff00))),
          ),
        );
      }
      const sl = i32x4.splat(i8x16.extract_lane_u(sc, 0)),
        sh = i32x4.splat(i8x16.extract_lane_u(sc, 1));
      is0 = i32x4.add(is0, i32x4.add(i32x4.mul(lo0, sl), i32x4.mul(hi0, sh)));
      is1 = i32x4.add(is1, i32x4.add(i32x4.mul(lo1, sl), i32x4.mul(hi1, sh)));
      sc = i8x16.shuffle(sc, sc, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
    }
    acc0 = finishK(acc0, wb, xb0, is0, minsDot(sm, xb0), <f32>1.0 / 256.0);
    acc1 = finishK(acc1, wb, xb1, is1, minsDot(sm, xb1), <f32>1.0 / 256.0);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

// The relaxed build's Q4_K (src/runtime/weight-kernels/kquant.ts packs it; prepare_q8k.ts makes
// its "q8_Ki" activations): per 256-value block the nibbles of sub-blocks 4h..4h+3 sit in 4
// vectors whose bytes 4b..4b+3 belong to sub-block 4h + b (low nibbles one element run, high
// nibbles the next), the activation bytes in the same places. A relaxed dot (pmaddubsw) then
// leaves sub-block b's pair sums in i16 lanes 2b, 2b+1; a half's 8 dots add up in i16 (a lane is
// at most 8 * 2 * 15 * 128 = 30720), and one i32x4.dot_i16x8_s with the scales spread as
// [sc0, sc0, sc1, sc1, ..] (one swizzle of the block's scale bytes) gives lane b = sc_b * dot_b.
// Against GGUF's layout, where every vector is one sub-block and each needs its scale splat,
// that is about half the instructions. The mins meet the activation's sub-block sums in one more
// dot. Integer sums as ggml's; the float lanes differ from the SIMD128 build's (4 lanes of other
// sub-block mixes), so the two builds agree to rounding, not to the bit.

// +0: selector spreading scale bytes 0..3 to i16 pairs, +16: bytes 4..7, +32: min bytes 8..15 to
// i16 lanes (0x80: a zero byte)
const Q4KI_SEL = memory.data<u8>(
  [
    0, 0x80, 0, 0x80, 1, 0x80, 1, 0x80, 2, 0x80, 2, 0x80, 3, 0x80, 3, 0x80, 4, 0x80, 4, 0x80, 5, 0x80, 5, 0x80, 6, 0x80,
    6, 0x80, 7, 0x80, 7, 0x80, 8, 0x80, 9, 0x80, 10, 0x80, 11, 0x80, 12, 0x80, 13, 0x80, 14, 0x80, 15, 0x80,
  ],
  16,
);
const Q4KI: usize = 152;
const Q8KI: usize = 320;

/** i16 pair sums of one half (64 weight bytes at wh, 128 activation bytes at xh) of a block. */
@inline function halfQ4Ki(wh: usize, xh: usize, m: v128): v128 {
  let h = i16x8.splat(0);
  for (let j: usize = 0; j < 64; j += 16) {
    const o = xh + (j << 1);
    h = i16x8.add(h, dotw(v128.load(wh + j), v128.load(o), v128.load(o, 16), m));
  }
  return h;
}

/** acc + one relaxed-layout Q4_K block at wb against one q8_Ki block at xb. */
@inline function blockQ4Ki(acc: v128, wb: usize, xb: usize, m: v128): v128 {
  const h0 = halfQ4Ki(wb, xb, m);
  pin(h0);
  return finishQ4Ki(acc, h0, halfQ4Ki(wb + 64, xb + 128, m), wb, xb);
}

/** The scaled integer sums and the mins term of one block from its two halves' i16 sums. */
@inline function finishQ4Ki(acc: v128, h0: v128, h1: v128, wb: usize, xb: usize): v128 {
  const sm = v128.load(wb, 128);
  const isum = i32x4.add(
    i32x4.dot_i16x8_s(h0, i8x16.relaxed_swizzle(sm, v128.load(Q4KI_SEL))),
    i32x4.dot_i16x8_s(h1, i8x16.relaxed_swizzle(sm, v128.load(Q4KI_SEL, 16))),
  );
  return finishKi(acc, isum, sm, wb + 144, xb);
}

/**
 * acc + (isum * d - mins term * dmin) * dx for a relaxed Q4_K / Q5_K block: isum its scaled
 * integer sums, sm its 8 scale then 8 min bytes, d and dmin as f32 at ds, xb its q8_Ki block.
 */
@inline function finishKi(acc: v128, isum: v128, sm: v128, ds: usize, xb: usize): v128 {
  const mi = i32x4.dot_i16x8_s(i8x16.relaxed_swizzle(sm, v128.load(Q4KI_SEL, 32)), v128.load(xb, 288));
  const dx = load<f32>(xb, 304);
  return f32x4.add(
    acc,
    f32x4.sub(
      f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(load<f32>(ds) * dx)),
      f32x4.mul(f32x4.convert_i32x4_s(mi), f32x4.splat(load<f32>(ds, 4) * dx)),
    ),
  );
}

/** Rows at wa and wc (two places in memory: two weight streams), each activation vector loaded once for both. */
@inline function dotQ4KiRows2(wa: usize, wc: usize, x: usize, nb: usize, ya: usize, yc: usize): void {
  const m = v128.load(K_NIB);
  let acca = f32x4.splat(0),
    accc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const ba = wa + b * Q4KI,
      bc = wc + b * Q4KI,
      xb = x + b * Q8KI;
    let ha0 = i16x8.splat(0),
      hc0 = i16x8.splat(0),
      ha1 = i16x8.splat(0),
      hc1 = i16x8.splat(0);
    // the four steps written out (a loop costs V8 a stack check and a branch per iteration:
    // 1.01-1.10x), both halves per step (one loop over all 8 vectors, branching on the half:
    // 0.96x from DRAM)
    {
      const xl = v128.load(xb),
        xh = v128.load(xb, 16);
      ha0 = i16x8.add(ha0, dotw(v128.load(ba), xl, xh, m));
      hc0 = i16x8.add(hc0, dotw(v128.load(bc), xl, xh, m));
      pin2(ha0, hc0);
      const xl1 = v128.load(xb, 128),
        xh1 = v128.load(xb, 144);
      ha1 = i16x8.add(ha1, dotw(v128.load(ba, 64), xl1, xh1, m));
      hc1 = i16x8.add(hc1, dotw(v128.load(bc, 64), xl1, xh1, m));
      pin2(ha1, hc1);
    }
    {
      const xl = v128.load(xb, 32),
        xh = v128.load(xb, 48);
      ha0 = i16x8.add(ha0, dotw(v128.load(ba, 16), xl, xh, m));
      hc0 = i16x8.add(hc0, dotw(v128.load(bc, 16), xl, xh, m));
      pin2(ha0, hc0);
      const xl1 = v128.load(xb, 160),
        xh1 = v128.load(xb, 176);
      ha1 = i16x8.add(ha1, dotw(v128.load(ba, 80), xl1, xh1, m));
      hc1 = i16x8.add(hc1, dotw(v128.load(bc, 80), xl1, xh1, m));
      pin2(ha1, hc1);
    }
    {
      const xl = v128.load(xb, 64),
        xh = v128.load(xb, 80);
      ha0 = i16x8.add(ha0, dotw(v128.load(ba, 32), xl, xh, m));
      hc0 = i16x8.add(hc0, dotw(v128.load(bc, 32), xl, xh, m));
      pin2(ha0, hc0);
      const xl1 = v128.load(xb, 192),
        xh1 = v128.load(xb, 208);
      ha1 = i16x8.add(ha1, dotw(v128.load(ba, 96), xl1, xh1, m));
      hc1 = i16x8.add(hc1, dotw(v128.load(bc, 96), xl1, xh1, m));
      pin2(ha1, hc1);
    }
    {
      const xl = v128.load(xb, 96),
        xh = v128.load(xb, 112);
      ha0 = i16x8.add(ha0, dotw(v128.load(ba, 48), xl, xh, m));
      hc0 = i16x8.add(hc0, dotw(v128.load(bc, 48), xl, xh, m));
      pin2(ha0, hc0);
      const xl1 = v128.load(xb, 224),
        xh1 = v128.load(xb, 240);
      ha1 = i16x8.add(ha1, dotw(v128.load(ba, 112), xl1, xh1, m));
      hc1 = i16x8.add(hc1, dotw(v128.load(bc, 112), xl1, xh1, m));
      pin2(ha1, hc1);
    }
    acca = finishQ4Ki(acca, ha0, ha1, ba, xb);
    accc = finishQ4Ki(accc, hc0, hc1, bc, xb);
  }
  store<f32>(ya, hsumPairs(acca));
  store<f32>(yc, hsumPairs(accc));
}

/** One row against two q8_Ki rows (x0, x1): each unpacked weight vector serves both tokens. */
@inline function dotQ4KiTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  const m = v128.load(K_NIB);
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q4KI,
      xa = x0 + b * Q8KI,
      xc = x1 + b * Q8KI;
    let a0 = i16x8.splat(0),
      c0 = i16x8.splat(0),
      a1 = i16x8.splat(0),
      c1 = i16x8.splat(0);
    // the 8 vectors written out (a loop costs V8 a stack check and a branch per iteration), the
    // first half (sub-blocks 0..3) then the second
    {
      const wv = v128.load(wb);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a0 = i16x8.add(a0, dotLoHi(lo, hi, v128.load(xa), v128.load(xa, 16)));
      c0 = i16x8.add(c0, dotLoHi(lo, hi, v128.load(xc), v128.load(xc, 16)));
      pin2(a0, c0);
    }
    {
      const wv = v128.load(wb, 16);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a0 = i16x8.add(a0, dotLoHi(lo, hi, v128.load(xa, 32), v128.load(xa, 48)));
      c0 = i16x8.add(c0, dotLoHi(lo, hi, v128.load(xc, 32), v128.load(xc, 48)));
      pin2(a0, c0);
    }
    {
      const wv = v128.load(wb, 32);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a0 = i16x8.add(a0, dotLoHi(lo, hi, v128.load(xa, 64), v128.load(xa, 80)));
      c0 = i16x8.add(c0, dotLoHi(lo, hi, v128.load(xc, 64), v128.load(xc, 80)));
      pin2(a0, c0);
    }
    {
      const wv = v128.load(wb, 48);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a0 = i16x8.add(a0, dotLoHi(lo, hi, v128.load(xa, 96), v128.load(xa, 112)));
      c0 = i16x8.add(c0, dotLoHi(lo, hi, v128.load(xc, 96), v128.load(xc, 112)));
      pin2(a0, c0);
    }
    {
      const wv = v128.load(wb, 64);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a1 = i16x8.add(a1, dotLoHi(lo, hi, v128.load(xa, 128), v128.load(xa, 144)));
      c1 = i16x8.add(c1, dotLoHi(lo, hi, v128.load(xc, 128), v128.load(xc, 144)));
      pin2(a1, c1);
    }
    {
      const wv = v128.load(wb, 80);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a1 = i16x8.add(a1, dotLoHi(lo, hi, v128.load(xa, 160), v128.load(xa, 176)));
      c1 = i16x8.add(c1, dotLoHi(lo, hi, v128.load(xc, 160), v128.load(xc, 176)));
      pin2(a1, c1);
    }
    {
      const wv = v128.load(wb, 96);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a1 = i16x8.add(a1, dotLoHi(lo, hi, v128.load(xa, 192), v128.load(xa, 208)));
      c1 = i16x8.add(c1, dotLoHi(lo, hi, v128.load(xc, 192), v128.load(xc, 208)));
      pin2(a1, c1);
    }
    {
      const wv = v128.load(wb, 112);
      const lo = v128.and(wv, m),
        hi = v128.and(i16x8.shr_u(wv, 4), m);
      a1 = i16x8.add(a1, dotLoHi(lo, hi, v128.load(xa, 224), v128.load(xa, 240)));
      c1 = i16x8.add(c1, dotLoHi(lo, hi, v128.load(xc, 224), v128.load(xc, 240)));
      pin2(a1, c1);
    }
    acc0 = finishQ4Ki(acc0, a0, a1, wb, xa);
    acc1 = finishQ4Ki(acc1, c0, c1, wb, xc);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

@inline function dotQ4Ki(w: usize, x: usize, nb: usize): f32 {
  const m = v128.load(K_NIB);
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    acc = blockQ4Ki(acc, w + b * Q4KI, x + b * Q8KI, m);
    pin(acc);
  }
  return hsumPairs(acc);
}

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
  // the relaxed build's blocks and activations are its own (above); the loops are the same
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

// ---------------------------------------------------------------------------------------------
// Q6_K

/** 256 * dot(16 weight bytes q (values 0..63), 16 activation bytes x): i32x4 to be summed. */
@inline function dotBytes256(q: v128, x: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00ff)), i16x8.shl(x, 8)),
    i32x4.dot_i16x8_s(i16x8.shr_u(q, 8), v128.and(x, i16x8.splat(<i16>0xff00))),
  );
}

/**
 * sc * dot(q, x) for one 16-value group (the 256 divided out exactly first: no overflow); sc the
 * group's scale splat into i32 lanes. (The SIMD128 build's: the relaxed build has its own Q6_K blocks, below.)
 */
@inline function groupK(q: v128, x: v128, sc: v128): v128 {
  return i32x4.mul(i32x4.shr_s(dotBytes256(q, x), 8), sc);
}

/** Q6_K stores q + 32: subtract 32 * sum_g sc_g * bsum_g (bsums: the activation's 16-value sums). */
@inline function offsetQ6K(isum: v128, wb: usize, bsums: usize): v128 {
  // the scales sit at 192 in both builds' blocks; bsums: the 16 sums (Q8_K's at 260, q8_Ki's at 256)
  const s8 = v128.load(wb + 192);
  const corr = i32x4.add(
    i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(s8), v128.load(bsums)),
    i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(s8), v128.load(bsums, 16)),
  );
  return i32x4.sub(isum, i32x4.shl(corr, 5));
}

// A block is walked in 4 steps of 64 values: step i = (half h, l0) reads ql bytes A (values
// l0..l0+15 of the half) and B (32 further), their 2-bit tops in qh byte H; the four 6-bit
// groups lo(A)|H<<4, lo(B)|H<<2, hi(A)|H, hi(B)|H>>2 are 32 values apart, each with its scale.

/**
 * 6-bit group g (0..3, a constant) of a step: the low or high nibbles of A or B with their 2-bit
 * tops from H; m0f, m30: 0x0f and 0x30 bytes (K_NIB). 16-bit shifts are safe: the byte masks drop
 * whatever crossed a byte boundary.
 */
@inline function q6Group(A: v128, B: v128, H: v128, g: i32, m0f: v128, m30: v128): v128 {
  if (g == 0) return v128.or(v128.and(A, m0f), v128.and(i16x8.shl(H, 4), m30));
  if (g == 1) return v128.or(v128.and(B, m0f), v128.and(i16x8.shl(H, 2), m30));
  if (g == 2) return v128.or(v128.and(i16x8.shr_u(A, 4), m0f), v128.and(H, m30));
  return v128.or(v128.and(i16x8.shr_u(B, 4), m0f), v128.and(i16x8.shr_u(H, 2), m30));
}

/** isum + step i (0..3, a constant) of a Q6_K block: its four 16-value groups. */
@inline function stepQ6K(isum: v128, wb: usize, xb: usize, i: usize, m0f: v128, m30: v128): v128 {
  const h = i >> 1,
    l0 = (i & 1) << 4;
  const ql = wb + (h << 6) + l0,
    qh = wb + 128 + (h << 5) + l0,
    sc = wb + 192 + (h << 3) + (i & 1);
  const xp = xb + 4 + (h << 7) + l0;
  const A = v128.load(ql),
    B = v128.load(ql, 32),
    H = v128.load(qh);
  isum = i32x4.add(isum, groupK(q6Group(A, B, H, 0, m0f, m30), v128.load(xp), i32x4.splat(<i32>load<i8>(sc))));
  isum = i32x4.add(isum, groupK(q6Group(A, B, H, 1, m0f, m30), v128.load(xp, 32), i32x4.splat(<i32>load<i8>(sc, 2))));
  isum = i32x4.add(isum, groupK(q6Group(A, B, H, 2, m0f, m30), v128.load(xp, 64), i32x4.splat(<i32>load<i8>(sc, 4))));
  isum = i32x4.add(isum, groupK(q6Group(A, B, H, 3, m0f, m30), v128.load(xp, 96), i32x4.splat(<i32>load<i8>(sc, 6))));
  // this step's arithmetic before the next step's loads (schedule_pin.ts)
  pin(isum);
  return isum;
}

@inline function dotQ6K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  const m0f = v128.load(K_NIB),
    m30 = v128.load(K_NIB, 16);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6K,
      xb = x + b * Q8K;
    let isum = stepQ6K(i32x4.splat(0), wb, xb, 0, m0f, m30);
    isum = stepQ6K(isum, wb, xb, 1, m0f, m30);
    isum = stepQ6K(isum, wb, xb, 2, m0f, m30);
    isum = stepQ6K(isum, wb, xb, 3, m0f, m30);
    isum = offsetQ6K(isum, wb, xb + 260);
    acc = f32x4.add(
      acc,
      f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(f16ToF32Finite(<u32>load<u16>(wb + 208)) * load<f32>(xb))),
    );
  }
  return hsumPairs(acc);
}

/** One row against two activation rows: each unpacked 6-bit group serves both tokens. */
@inline function dotQ6KTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  const m0f = v128.load(K_NIB),
    m30 = v128.load(K_NIB, 16);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6K,
      xb0 = x0 + b * Q8K,
      xb1 = x1 + b * Q8K;
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    for (let i: usize = 0; i < 4; i++) {
      const h = i >> 1,
        l0 = (i & 1) << 4;
      const ql = wb + (h << 6) + l0,
        qh = wb + 128 + (h << 5) + l0,
        sc = wb + 192 + (h << 3) + (i & 1);
      const xo: usize = 4 + (h << 7) + l0;
      const A = v128.load(ql),
        B = v128.load(ql, 32),
        H = v128.load(qh);
      let q = q6Group(A, B, H, 0, m0f, m30);
      let s = i32x4.splat(<i32>load<i8>(sc));
      is0 = i32x4.add(is0, groupK(q, v128.load(xb0 + xo), s));
      is1 = i32x4.add(is1, groupK(q, v128.load(xb1 + xo), s));
      q = q6Group(A, B, H, 1, m0f, m30);
      s = i32x4.splat(<i32>load<i8>(sc, 2));
      is0 = i32x4.add(is0, groupK(q, v128.load(xb0 + xo, 32), s));
      is1 = i32x4.add(is1, groupK(q, v128.load(xb1 + xo, 32), s));
      q = q6Group(A, B, H, 2, m0f, m30);
      s = i32x4.splat(<i32>load<i8>(sc, 4));
      is0 = i32x4.add(is0, groupK(q, v128.load(xb0 + xo, 64), s));
      is1 = i32x4.add(is1, groupK(q, v128.load(xb1 + xo, 64), s));
      q = q6Group(A, B, H, 3, m0f, m30);
      s = i32x4.splat(<i32>load<i8>(sc, 6));
      is0 = i32x4.add(is0, groupK(q, v128.load(xb0 + xo, 96), s));
      is1 = i32x4.add(is1, groupK(q, v128.load(xb1 + xo, 96), s));
    }
    const d = f16ToF32Finite(<u32>load<u16>(wb + 208));
    acc0 = f32x4.add(
      acc0,
      f32x4.mul(f32x4.convert_i32x4_s(offsetQ6K(is0, wb, xb0 + 260)), f32x4.splat(d * load<f32>(xb0))),
    );
    acc1 = f32x4.add(
      acc1,
      f32x4.mul(f32x4.convert_i32x4_s(offsetQ6K(is1, wb, xb1 + 260)), f32x4.splat(d * load<f32>(xb1))),
    );
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

// The relaxed build's Q6_K (src/runtime/weight-kernels/kquant.ts packs it; "q8_Ki" activations
// as the relaxed Q4_K's): per 256-value block 16 vectors of 6-bit quants, the partners of q8_Ki's
// 16 activation vectors, stored four in three. Quad g (48 bytes at 48 g: A, B, C) holds
//   W0 = A & 0x3f, W1 = B & 0x3f, W2 = C & 0x3f, W3 = (A & 0xc0) >> 6 | (B & 0xc0) >> 4 | (C & 0xc0) >> 2
// (16-bit shifts: the masks clear every bit that would cross into the neighbouring byte): 11
// instructions for 64 values, against about 18 from GGUF's nibbles and 2-bit tops. They meet the
// activation vectors L_2k, H_2k, L_2k+1, H_2k+1 of half h (g = 2h + k), whose bytes 4b..4b+3 are
// all in 16-value sub-block 8h + 2b + k; so a relaxed dot leaves sub-block pairs in i16 lanes
// 2b, 2b + 1, two such dots add up in i16 (a lane is at most 2 * 2 * 63 * 127 = 32004), and one
// dot_i16x8_s with the quad's scales spread as [s, s] pairs gives lane b = s * dot. GGUF's layout
// needs a scale splat for every 16 values. Scales (GGUF's 16 i8) @192, d as f32 @208; the
// offset 32 comes off with the activation's 16-value sums, as in offsetQ6K. Integer sums as
// ggml's; the float lanes differ from the SIMD128 build's, so the builds agree to rounding.

// +16 g: selector spreading scale bytes 8h + k, 8h + 2 + k, 8h + 4 + k, 8h + 6 + k (g = 2h + k)
// into byte pairs (the upper 8 bytes unused); +64: 0x3f bytes, +80: 0xc0 bytes
const Q6KI_SEL = memory.data<u8>(
  [
    0, 0, 2, 2, 4, 4, 6, 6, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 1, 1, 3, 3, 5, 5, 7, 7, 0x80, 0x80, 0x80,
    0x80, 0x80, 0x80, 0x80, 0x80, 8, 8, 10, 10, 12, 12, 14, 14, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 9, 9,
    11, 11, 13, 13, 15, 15, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f,
    0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0x3f, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0,
    0xc0, 0xc0, 0xc0, 0xc0, 0xc0, 0xc0,
  ],
  16,
);
const Q6KI: usize = 212;

/** Quad g's scales as i16 pairs, for dot_i16x8_s (wb: the block). */
@inline function spreadQ6Ki(wb: usize, g: usize): v128 {
  return i16x8.extend_low_i8x16_s(i8x16.relaxed_swizzle(v128.load(wb, 192), v128.load(Q6KI_SEL + (g << 4))));
}

/** The fourth 6-bit vector of a quad, from the top bits of its three bytes vectors. */
@inline function q6Fourth(A: v128, B: v128, C: v128, mc0: v128): v128 {
  return v128.or(
    v128.or(i16x8.shr_u(v128.and(A, mc0), 6), i16x8.shr_u(v128.and(B, mc0), 4)),
    i16x8.shr_u(v128.and(C, mc0), 2),
  );
}

/** isum + the quad's four unpacked vectors against the activation vectors at xq (64 bytes), scales sp. */
@inline function quadQ6KiDots(isum: v128, w0: v128, w1: v128, w2: v128, w3: v128, xq: usize, sp: v128): v128 {
  const s01 = i16x8.add(
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xq), w0),
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xq, 16), w1),
  );
  isum = i32x4.add(isum, i32x4.dot_i16x8_s(s01, sp));
  const s23 = i16x8.add(
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xq, 32), w2),
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xq, 48), w3),
  );
  return i32x4.add(isum, i32x4.dot_i16x8_s(s23, sp));
}

/** isum + quad g of the block at wb against the q8_Ki block at xb; m3f, mc0: 0x3f and 0xc0 bytes. */
@inline function quadQ6Ki(isum: v128, wb: usize, xb: usize, g: usize, m3f: v128, mc0: v128): v128 {
  const wq = wb + g * 48;
  const A = v128.load(wq),
    B = v128.load(wq, 16),
    C = v128.load(wq, 32);
  return quadQ6KiDots(
    isum,
    v128.and(A, m3f),
    v128.and(B, m3f),
    v128.and(C, m3f),
    q6Fourth(A, B, C, mc0),
    xb + (g << 6),
    spreadQ6Ki(wb, g),
  );
}

/** acc + a block's integer sum less its offset 32 (q8_Ki's 16-value sums), times d * dx. */
@inline function finishQ6Ki(acc: v128, isum: v128, wb: usize, xb: usize): v128 {
  return f32x4.add(
    acc,
    f32x4.mul(
      f32x4.convert_i32x4_s(offsetQ6K(isum, wb, xb + 256)),
      f32x4.splat(load<f32>(wb, 208) * load<f32>(xb, 304)),
    ),
  );
}

@inline function dotQ6Ki(w: usize, x: usize, nb: usize): f32 {
  const m3f = v128.load(Q6KI_SEL, 64),
    mc0 = v128.load(Q6KI_SEL, 80);
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6KI,
      xb = x + b * Q8KI;
    // the quads written out (a loop costs V8 a stack check and a branch per iteration)
    let isum = i32x4.splat(0);
    isum = quadQ6Ki(isum, wb, xb, 0, m3f, mc0);
    pin(isum);
    isum = quadQ6Ki(isum, wb, xb, 1, m3f, mc0);
    pin(isum);
    isum = quadQ6Ki(isum, wb, xb, 2, m3f, mc0);
    pin(isum);
    isum = quadQ6Ki(isum, wb, xb, 3, m3f, mc0);
    pin(isum);
    acc = finishQ6Ki(acc, isum, wb, xb);
  }
  return hsumPairs(acc);
}

/** Rows at wa and wc (two weight streams) against one q8_Ki row, quad by quad. */
@inline function dotQ6KiRows2(wa: usize, wc: usize, x: usize, nb: usize, ya: usize, yc: usize): void {
  const m3f = v128.load(Q6KI_SEL, 64),
    mc0 = v128.load(Q6KI_SEL, 80);
  let acca = f32x4.splat(0),
    accc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const ba = wa + b * Q6KI,
      bc = wc + b * Q6KI,
      xb = x + b * Q8KI;
    let isa = i32x4.splat(0),
      isc = i32x4.splat(0);
    // the quads written out (1.02-1.12x over a loop)
    isa = quadQ6Ki(isa, ba, xb, 0, m3f, mc0);
    pin(isa);
    isc = quadQ6Ki(isc, bc, xb, 0, m3f, mc0);
    pin(isc);
    isa = quadQ6Ki(isa, ba, xb, 1, m3f, mc0);
    pin(isa);
    isc = quadQ6Ki(isc, bc, xb, 1, m3f, mc0);
    pin(isc);
    isa = quadQ6Ki(isa, ba, xb, 2, m3f, mc0);
    pin(isa);
    isc = quadQ6Ki(isc, bc, xb, 2, m3f, mc0);
    pin(isc);
    isa = quadQ6Ki(isa, ba, xb, 3, m3f, mc0);
    pin(isa);
    isc = quadQ6Ki(isc, bc, xb, 3, m3f, mc0);
    pin(isc);
    acca = finishQ6Ki(acca, isa, ba, xb);
    accc = finishQ6Ki(accc, isc, bc, xb);
  }
  store<f32>(ya, hsumPairs(acca));
  store<f32>(yc, hsumPairs(accc));
}

/** One row against two q8_Ki rows (x0, x1): each unpacked quad serves both tokens. */
@inline function dotQ6KiTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  const m3f = v128.load(Q6KI_SEL, 64),
    mc0 = v128.load(Q6KI_SEL, 80);
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6KI,
      xa = x0 + b * Q8KI,
      xc = x1 + b * Q8KI;
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    // the quads written out (a loop costs V8 a stack check and a branch per iteration)
    {
      const A = v128.load(wb, 0),
        B = v128.load(wb, 16),
        C = v128.load(wb, 32);
      const w0 = v128.and(A, m3f),
        w1 = v128.and(B, m3f),
        w2 = v128.and(C, m3f),
        w3 = q6Fourth(A, B, C, mc0);
      const sp = spreadQ6Ki(wb, 0);
      is0 = quadQ6KiDots(is0, w0, w1, w2, w3, xa + 0, sp);
      is1 = quadQ6KiDots(is1, w0, w1, w2, w3, xc + 0, sp);
      pin2(is0, is1);
    }
    {
      const A = v128.load(wb, 48),
        B = v128.load(wb, 64),
        C = v128.load(wb, 80);
      const w0 = v128.and(A, m3f),
        w1 = v128.and(B, m3f),
        w2 = v128.and(C, m3f),
        w3 = q6Fourth(A, B, C, mc0);
      const sp = spreadQ6Ki(wb, 1);
      is0 = quadQ6KiDots(is0, w0, w1, w2, w3, xa + 64, sp);
      is1 = quadQ6KiDots(is1, w0, w1, w2, w3, xc + 64, sp);
      pin2(is0, is1);
    }
    {
      const A = v128.load(wb, 96),
        B = v128.load(wb, 112),
        C = v128.load(wb, 128);
      const w0 = v128.and(A, m3f),
        w1 = v128.and(B, m3f),
        w2 = v128.and(C, m3f),
        w3 = q6Fourth(A, B, C, mc0);
      const sp = spreadQ6Ki(wb, 2);
      is0 = quadQ6KiDots(is0, w0, w1, w2, w3, xa + 128, sp);
      is1 = quadQ6KiDots(is1, w0, w1, w2, w3, xc + 128, sp);
      pin2(is0, is1);
    }
    {
      const A = v128.load(wb, 144),
        B = v128.load(wb, 160),
        C = v128.load(wb, 176);
      const w0 = v128.and(A, m3f),
        w1 = v128.and(B, m3f),
        w2 = v128.and(C, m3f),
        w3 = q6Fourth(A, B, C, mc0);
      const sp = spreadQ6Ki(wb, 3);
      is0 = quadQ6KiDots(is0, w0, w1, w2, w3, xa + 192, sp);
      is1 = quadQ6KiDots(is1, w0, w1, w2, w3, xc + 192, sp);
      pin2(is0, is1);
    }
    acc0 = finishQ6Ki(acc0, is0, wb, xa);
    acc1 = finishQ6Ki(acc1, is1, wb, xc);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
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
  // the relaxed build's blocks and activations are its own (above); the loops are the same
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

// ---------------------------------------------------------------------------------------------
// Q5_K

// Chunk c holds sub-blocks 2c (low nibbles, fifth bit = bit 2c of qh[l]) and 2c+1 (high
// nibbles, bit 2c+1). h0/h1 are the qh bytes for l = 0..15 / 16..31, shifted right by 2c with a
// 16-bit shift (bits 0 and 1 of each byte, the only ones used, never come from the neighbour).

// m0f, m10: 0x0f and 0x10 bytes (K_NIB), loaded once by the caller
@inline function k5Lo(q: v128, h: v128, m0f: v128, m10: v128): v128 {
  return v128.or(v128.and(q, m0f), v128.and(i16x8.shl(h, 4), m10));
}
@inline function k5Hi(q: v128, h: v128, m0f: v128, m10: v128): v128 {
  return v128.or(v128.and(i16x8.shr_u(q, 4), m0f), v128.and(i16x8.shl(h, 3), m10));
}

/**
 * s * (dot(a, x0) + dot(b, x1)): one 32-value sub-block, a and b its two 16-byte halves of 5-bit
 * weights, s the sub-block's scale splat into i32 lanes.
 */
@inline function subBlockK5(a: v128, b: v128, x0: v128, x1: v128, s: v128): v128 {
  // each dot is a multiple of 256 below 2^23: divide it out before scaling
  return i32x4.mul(i32x4.shr_s(i32x4.add(dotBytes256(a, x0), dotBytes256(b, x1)), 8), s);
}

/** isum + chunk c (0..3, a constant) of a Q5_K block: sub-blocks 2c and 2c + 1. */
@inline function chunkQ5K(isum: v128, wb: usize, xb: usize, c: usize, sm: v128, m0f: v128, m10: v128): v128 {
  const qp = wb + 48 + (c << 5),
    xp = xb + 4 + (c << 6);
  const q0 = v128.load(qp),
    q1 = v128.load(qp, 16);
  const h0 = i16x8.shr_u(v128.load(wb + 16), <i32>(c << 1)),
    h1 = i16x8.shr_u(v128.load(wb + 32), <i32>(c << 1));
  isum = i32x4.add(
    isum,
    i32x4.add(
      subBlockK5(
        k5Lo(q0, h0, m0f, m10),
        k5Lo(q1, h1, m0f, m10),
        v128.load(xp),
        v128.load(xp, 16),
        subScale(sm, <i32>(c << 1)),
      ),
      subBlockK5(
        k5Hi(q0, h0, m0f, m10),
        k5Hi(q1, h1, m0f, m10),
        v128.load(xp, 32),
        v128.load(xp, 48),
        subScale(sm, <i32>(c << 1) + 1),
      ),
    ),
  );
  // this chunk's arithmetic before the next chunk's loads (schedule_pin.ts)
  pin(isum);
  return isum;
}

@inline function dotQ5K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  const m0f = v128.load(K_NIB),
    m10 = v128.load(K_NIB, 32);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5K,
      xb = x + b * Q8K;
    const sm = scalesMins(wb + 4);
    let isum = chunkQ5K(i32x4.splat(0), wb, xb, 0, sm, m0f, m10);
    isum = chunkQ5K(isum, wb, xb, 1, sm, m0f, m10);
    isum = chunkQ5K(isum, wb, xb, 2, sm, m0f, m10);
    isum = chunkQ5K(isum, wb, xb, 3, sm, m0f, m10);
    acc = finishK(acc, wb, xb, isum, minsDot(sm, xb), 1.0);
  }
  return hsumPairs(acc);
}

/** One row against two activation rows: each 5-bit weight vector serves both tokens. */
@inline function dotQ5KTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  const m0f = v128.load(K_NIB),
    m10 = v128.load(K_NIB, 32);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5K,
      xb0 = x0 + b * Q8K,
      xb1 = x1 + b * Q8K;
    const sm = scalesMins(wb + 4);
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    let sc = sm;
    let h0 = v128.load(wb + 16),
      h1 = v128.load(wb + 32);
    for (let c: usize = 0; c < 4; c++) {
      const qp = wb + 48 + (c << 5),
        xo: usize = 4 + (c << 6);
      const q0 = v128.load(qp),
        q1 = v128.load(qp, 16);
      const l0 = k5Lo(q0, h0, m0f, m10),
        l1 = k5Lo(q1, h1, m0f, m10),
        u0 = k5Hi(q0, h0, m0f, m10),
        u1 = k5Hi(q1, h1, m0f, m10);
      const sl = i32x4.splat(i8x16.extract_lane_u(sc, 0)),
        sh = i32x4.splat(i8x16.extract_lane_u(sc, 1));
      let xp = xb0 + xo;
      is0 = i32x4.add(
        is0,
        i32x4.add(
          subBlockK5(l0, l1, v128.load(xp), v128.load(xp, 16), sl),
          subBlockK5(u0, u1, v128.load(xp, 32), v128.load(xp, 48), sh),
        ),
      );
      xp = xb1 + xo;
      is1 = i32x4.add(
        is1,
        i32x4.add(
          subBlockK5(l0, l1, v128.load(xp), v128.load(xp, 16), sl),
          subBlockK5(u0, u1, v128.load(xp, 32), v128.load(xp, 48), sh),
        ),
      );
      sc = i8x16.shuffle(sc, sc, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
      h0 = i16x8.shr_u(h0, 2);
      h1 = i16x8.shr_u(h1, 2);
    }
    acc0 = finishK(acc0, wb, xb0, is0, minsDot(sm, xb0), 1.0);
    acc1 = finishK(acc1, wb, xb1, is1, minsDot(sm, xb1), 1.0);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
}

// The relaxed build's Q5_K (src/runtime/weight-kernels/kquant.ts packs it; "q8_Ki" activations):
// the relaxed Q4_K's block (the low 4 bits as its nibbles, 8 scale and 8 min bytes, d and dmin
// as f32) plus each half's fifth bits in a 16-byte vector at 128 + 16 h, bit 2j (2j + 1) of byte
// i with the low (high) nibble of byte i of nibble vector j: 184 B per 256 values (GGUF's: 176).
// A quant is the nibble or'ed with its fifth bit moved to 0x10 (q5Lo / q5Hi, as the relaxed
// Q5_0's); quants reach 31, so each step's two dots (at most 2 * 2 * 31 * 127 = 15748 per i16
// lane) meet the half's spread scales at once, into i32 lanes.
const Q5KI: usize = 184;

/** The i16 pair sums of step j (0..3, a constant) of half h of the block at wb against xb's vectors. */
@inline function stepQ5Ki(wb: usize, xb: usize, h: usize, j: i32, m: v128, m10: v128): v128 {
  const w = v128.load(wb + (h << 6) + ((<usize>j) << 4)),
    f = v128.load(wb + 128 + (h << 4));
  const xo = xb + (h << 7) + ((<usize>j) << 5);
  return dotLoHi(q5Lo(w, f, j, m, m10), q5Hi(w, f, j, m, m10), v128.load(xo), v128.load(xo, 16));
}

/** isum + steps j and j + 1 of half h, added in i16 (at most 2 * 15748 per lane), times the half's spread scales sp. */
@inline function twoStepsQ5Ki(
  isum: v128,
  wb: usize,
  xb: usize,
  h: usize,
  j: i32,
  sp: v128,
  m: v128,
  m10: v128,
): v128 {
  const d = i16x8.add(stepQ5Ki(wb, xb, h, j, m, m10), stepQ5Ki(wb, xb, h, j + 1, m, m10));
  return i32x4.add(isum, i32x4.dot_i16x8_s(d, sp));
}

/** Half h's scales spread as [sc, sc] i16 pairs (Q4KI_SEL). */
@inline function spreadQ5Ki(wb: usize, h: usize): v128 {
  return i8x16.relaxed_swizzle(v128.load(wb, 160), v128.load(Q4KI_SEL + (h << 4)));
}

@inline function dotQ5Ki(w: usize, x: usize, nb: usize): f32 {
  const m = v128.load(K_NIB),
    m10 = v128.load(K_NIB, 32);
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5KI,
      xb = x + b * Q8KI;
    // the halves unrolled (1.12-1.29x over a loop)
    let isum = i32x4.splat(0);
    let sp = spreadQ5Ki(wb, 0);
    isum = twoStepsQ5Ki(isum, wb, xb, 0, 0, sp, m, m10);
    pin(isum);
    isum = twoStepsQ5Ki(isum, wb, xb, 0, 2, sp, m, m10);
    pin(isum);
    sp = spreadQ5Ki(wb, 1);
    isum = twoStepsQ5Ki(isum, wb, xb, 1, 0, sp, m, m10);
    pin(isum);
    isum = twoStepsQ5Ki(isum, wb, xb, 1, 2, sp, m, m10);
    pin(isum);
    acc = finishKi(acc, isum, v128.load(wb, 160), wb + 176, xb);
  }
  return hsumPairs(acc);
}

/** is + the dots of one step's unpacked quants (lo, hi) with the activation vectors at xo, times the spread scales sp. */
@inline function dotQ5KiAdd(is: v128, lo: v128, hi: v128, xo: usize, sp: v128): v128 {
  return i32x4.add(is, i32x4.dot_i16x8_s(dotLoHi(lo, hi, v128.load(xo), v128.load(xo, 16)), sp));
}

/** One row against two q8_Ki rows (x0, x1): each step's quants unpacked once for both tokens. */
@inline function dotQ5KiTokens2(w: usize, x0: usize, x1: usize, nb: usize, y0: usize, y1: usize): void {
  const m = v128.load(K_NIB),
    m10 = v128.load(K_NIB, 32);
  let acc0 = f32x4.splat(0),
    acc1 = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5KI;
    let is0 = i32x4.splat(0),
      is1 = i32x4.splat(0);
    {
      // half 0 (the halves unrolled: 1.04-1.12x over a loop)
      const wh = wb,
        f = v128.load(wb, 128),
        sp = spreadQ5Ki(wb, 0);
      const xa = x0 + b * Q8KI,
        xc = x1 + b * Q8KI;
      let w: v128, lo: v128, hi: v128;
      w = v128.load(wh);
      lo = q5Lo(w, f, 0, m, m10);
      hi = q5Hi(w, f, 0, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc, sp);
      pin2(is0, is1);
      w = v128.load(wh, 16);
      lo = q5Lo(w, f, 1, m, m10);
      hi = q5Hi(w, f, 1, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 32, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 32, sp);
      pin2(is0, is1);
      w = v128.load(wh, 32);
      lo = q5Lo(w, f, 2, m, m10);
      hi = q5Hi(w, f, 2, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 64, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 64, sp);
      pin2(is0, is1);
      w = v128.load(wh, 48);
      lo = q5Lo(w, f, 3, m, m10);
      hi = q5Hi(w, f, 3, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 96, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 96, sp);
      pin2(is0, is1);
    }
    {
      // half 1
      const wh = wb + 64,
        f = v128.load(wb, 144),
        sp = spreadQ5Ki(wb, 1);
      const xa = x0 + b * Q8KI + 128,
        xc = x1 + b * Q8KI + 128;
      let w: v128, lo: v128, hi: v128;
      w = v128.load(wh);
      lo = q5Lo(w, f, 0, m, m10);
      hi = q5Hi(w, f, 0, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc, sp);
      pin2(is0, is1);
      w = v128.load(wh, 16);
      lo = q5Lo(w, f, 1, m, m10);
      hi = q5Hi(w, f, 1, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 32, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 32, sp);
      pin2(is0, is1);
      w = v128.load(wh, 32);
      lo = q5Lo(w, f, 2, m, m10);
      hi = q5Hi(w, f, 2, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 64, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 64, sp);
      pin2(is0, is1);
      w = v128.load(wh, 48);
      lo = q5Lo(w, f, 3, m, m10);
      hi = q5Hi(w, f, 3, m, m10);
      is0 = dotQ5KiAdd(is0, lo, hi, xa + 96, sp);
      is1 = dotQ5KiAdd(is1, lo, hi, xc + 96, sp);
      pin2(is0, is1);
    }
    acc0 = finishKi(acc0, is0, v128.load(wb, 160), wb + 176, x0 + b * Q8KI);
    acc1 = finishKi(acc1, is1, v128.load(wb, 160), wb + 176, x1 + b * Q8KI);
  }
  store<f32>(y0, hsumPairs(acc0));
  store<f32>(y1, hsumPairs(acc1));
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
  // the relaxed build's blocks and activations are its own (above); the loops are the same
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
