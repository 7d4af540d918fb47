// Whole weight rows (a bundle's gate or up row) times the prepared activation: dot1 one row, dot2
// two rows streamed at once with each row's bits as dot1's. F16 / BF16 rows go to
// sparse_half_dots.ts, the blocks of the quantized types to sparse_block_dots.ts.

import { hsum, hsumi } from "./lanes";
import { Q4_RELAXED_CONSTS } from "./matvec_q4_relaxed";
import { Q4_MASKS } from "./packed_layout";
import { pin, pin2 } from "./schedule_pin";
import { blockDot, mxfp4dot, q8dot } from "./sparse_block_dots";
import { f16pairs, f16x4, pairD, pairM } from "./sparse_block_scales";
import { dotHalf, dotHalf2 } from "./sparse_half_dots";
import { XBK, XG } from "./sparse_layout";
import { blockBytes, MXFP4_BS, Q8_0_BS, T_BF16, T_F16, T_F32, T_MXFP4, T_Q8_0, withMin } from "./sparse_types";
import { e8m0Half, FP4 } from "./mxfp4_values";

// One row times x.
//
// Q4 (groupQ4): a group of 4 blocks per iteration. Each block's integer dot comes out as 4 i32
// partial lanes; a transpose-add turns the 4 blocks' lanes into one i32x4 holding block j's
// exact dot in lane j, which meets the 4 block scales (the row's f16 scales gathered with
// load16_lane and converted in SIMD, times the activation's) in one multiply-add: per block that
// is ggml's sum of d * isum, its float adds spread over 4 lanes. Each block's dot is pinned
// (schedule_pin.ts), so its arithmetic is done before the next block's loads are issued (without
// it V8 hoisted every load of the 4 blocks to the top and spilled; that variant, and one block
// per iteration with its scale splat from a rotated vector, measured slower: docs/benchmarks.md,
// "Kernel variants measured"). Q8_0 keeps the block loop. Nothing past the row is read (a row
// may end at the end of memory): a partial last group takes zeros for its missing blocks, whose
// scales f16x4 leaves 0.
@inline function dot1(t: i32, a: usize, x: usize, n: i32): f32 {
  if (t == T_F16 || t == T_BF16) return dotHalf(t == T_BF16, a, x, n);
  if (t == T_MXFP4) return dotMxfp4(a, x, n);
  if (t == T_F32) {
    let s0 = f32x4.splat(0),
      s1 = f32x4.splat(0);
    const end = x + ((<usize>n) << 2);
    for (; x < end; x += 32) {
      s0 = f32x4.add(s0, f32x4.mul(v128.load(a), v128.load(x)));
      s1 = f32x4.add(s1, f32x4.mul(v128.load(a, 16), v128.load(x, 16)));
      a += 32;
    }
    return hsum(f32x4.add(s0, s1));
  }
  const nb = n >> 5;
  const q8 = t == T_Q8_0;
  const BS = blockBytes(t);
  // the relaxed build's Q4 blocks take the byte mask and the i16 ones in m0, m1
  const relaxedQ4 = ASC_FEATURE_RELAXED_SIMD && !q8;
  const m0 = relaxedQ4 ? v128.load(Q4_RELAXED_CONSTS) : v128.load(Q4_MASKS),
    m1 = relaxedQ4 ? v128.load(Q4_RELAXED_CONSTS, 16) : v128.load(Q4_MASKS, 16),
    m2 = v128.load(Q4_MASKS, 32);
  let acc = f32x4.splat(0);
  if (q8) {
    // Q8_0: one block per iteration, its scale splat from a vector rotated each block (the
    // transpose-add below measured 6% slower for these blocks)
    for (let i = 0; i < nb; i += 4) {
      const je = min(4, nb - i);
      let sc = f32x4.mul(f16x4(a, BS, je), v128.load(x, 320));
      let xb = x;
      for (let j = 0; j < je; j++) {
        acc = f32x4.add(
          acc,
          f32x4.mul(f32x4.convert_i32x4_s(blockDot(t, a, xb, m0, m1, m2)), i32x4.shuffle(sc, sc, 0, 0, 0, 0)),
        );
        sc = i32x4.shuffle(sc, sc, 1, 2, 3, 0);
        a += BS;
        xb += XBK;
      }
      x += XG;
    }
    return hsum(acc);
  }
  for (let i = 0; i < nb; i += 4) {
    const je = min(4, nb - i);
    acc = groupQ4(t, acc, a, x, je, m0, m1, m2);
    a += BS * <usize>je;
    x += XG;
  }
  return hsum(acc);
}

// An MXFP4 row (17-byte blocks: the exponent byte, 16 bytes of nibbles) times the mode-0 q8_sp
// activation, as the dense kernel (matvec_mxfp4.ts) and ggml compute it: per block the exact
// integer dot (mxfp4dot) times the activation's scale times half the block's E8M0 scale, the
// blocks summed in turn.
@inline function dotMxfp4(a: usize, x: usize, n: i32): f32 {
  const nb = n >> 5;
  const table = v128.load(FP4);
  let sum: f32 = 0;
  for (let i = 0; i < nb; i += 4) {
    const je = min(4, nb - i);
    let xb = x;
    for (let j = 0; j < je; j++) {
      const d = load<f32>(x + ((<usize>j) << 2), 320) * e8m0Half(<u32>load<u8>(a));
      sum += <f32>hsumi(mxfp4dot(a, xb, table)) * d;
      a += MXFP4_BS;
      xb += XBK;
    }
    x += XG;
  }
  return sum;
}

// Two Q4 rows (at a and b) times x, each exactly as dot1 computes it (the same operations per
// row, interleaved): two bundles streamed at once from two places keep twice the reads in flight,
// which is what scattered bundles from DRAM are bound by. The results come back in lanes 0 and 1
// (not through memory: static data is shared by the pool's threads).
@inline function dot2(t: i32, a: usize, b: usize, x: usize, n: i32): v128 {
  if (t == T_F16 || t == T_BF16) return dotHalf2(t == T_BF16, a, b, x, n);
  if (t == T_Q8_0) return dotQ8x2(a, b, x, n);
  const nb = n >> 5;
  const one = withMin(t);
  const BS = blockBytes(t);
  // as dot1's Q4 masks
  const m0 = ASC_FEATURE_RELAXED_SIMD ? v128.load(Q4_RELAXED_CONSTS) : v128.load(Q4_MASKS),
    m1 = ASC_FEATURE_RELAXED_SIMD ? v128.load(Q4_RELAXED_CONSTS, 16) : v128.load(Q4_MASKS, 16),
    m2 = v128.load(Q4_MASKS, 32);
  let accA = f32x4.splat(0),
    accB = f32x4.splat(0);
  for (let i = 0; i < nb; i += 4) {
    const je = min(4, nb - i);
    if (je < 4) {
      // the partial last group: one row at a time, as dot1's tail
      accA = groupQ4(t, accA, a, x, je, m0, m1, m2);
      accB = groupQ4(t, accB, b, x, je, m0, m1, m2);
      break;
    }
    let scA: v128, scB: v128;
    if (one) {
      const pA = f16pairs(a, BS, 4),
        pB = f16pairs(b, BS, 4);
      scA = f32x4.mul(pairD(pA), v128.load(x, 320));
      scB = f32x4.mul(pairD(pB), v128.load(x, 320));
      accA = f32x4.add(accA, f32x4.mul(pairM(pA), v128.load(x, 336)));
      accB = f32x4.add(accB, f32x4.mul(pairM(pB), v128.load(x, 336)));
    } else {
      scA = f32x4.mul(f16x4(a, BS, 4), v128.load(x, 320));
      scB = f32x4.mul(f16x4(b, BS, 4), v128.load(x, 320));
    }
    const a0 = blockDot(t, a, x, m0, m1, m2),
      b0 = blockDot(t, b, x, m0, m1, m2);
    pin2(a0, b0);
    const a1 = blockDot(t, a + BS, x + XBK, m0, m1, m2),
      b1 = blockDot(t, b + BS, x + XBK, m0, m1, m2);
    pin2(a1, b1);
    const tA01 = i32x4.add(i32x4.shuffle(a0, a1, 0, 4, 1, 5), i32x4.shuffle(a0, a1, 2, 6, 3, 7)),
      tB01 = i32x4.add(i32x4.shuffle(b0, b1, 0, 4, 1, 5), i32x4.shuffle(b0, b1, 2, 6, 3, 7));
    pin2(tA01, tB01);
    const a2 = blockDot(t, a + 2 * BS, x + 2 * XBK, m0, m1, m2),
      b2 = blockDot(t, b + 2 * BS, x + 2 * XBK, m0, m1, m2);
    pin2(a2, b2);
    const a3 = blockDot(t, a + 3 * BS, x + 3 * XBK, m0, m1, m2),
      b3 = blockDot(t, b + 3 * BS, x + 3 * XBK, m0, m1, m2);
    accA = f32x4.add(accA, f32x4.mul(f32x4.convert_i32x4_s(transposeRest(tA01, a2, a3)), scA));
    accB = f32x4.add(accB, f32x4.mul(f32x4.convert_i32x4_s(transposeRest(tB01, b2, b3)), scB));
    a += BS << 2;
    b += BS << 2;
    x += XG;
  }
  return f32x4.replace_lane(f32x4.splat(hsum(accA)), 1, hsum(accB));
}

// dot1's Q8_0 loop for the rows at a and b at once (each row's operations in dot1's order, so
// its bits; the activation's vectors loaded once for both), results in lanes 0 and 1.
@inline function dotQ8x2(a: usize, b: usize, x: usize, n: i32): v128 {
  const nb = n >> 5;
  const BS = Q8_0_BS;
  let accA = f32x4.splat(0),
    accB = f32x4.splat(0);
  for (let i = 0; i < nb; i += 4) {
    const je = min(4, nb - i);
    let scA = f32x4.mul(f16x4(a, BS, je), v128.load(x, 320)),
      scB = f32x4.mul(f16x4(b, BS, je), v128.load(x, 320));
    let xb = x;
    for (let j = 0; j < je; j++) {
      const x0 = v128.load(xb),
        x1 = v128.load(xb, 16),
        x2 = v128.load(xb, 32),
        x3 = v128.load(xb, 48);
      const dA = q8dot(a + 2, x0, x1, x2, x3),
        dB = q8dot(b + 2, x0, x1, x2, x3);
      accA = f32x4.add(accA, f32x4.mul(f32x4.convert_i32x4_s(dA), i32x4.shuffle(scA, scA, 0, 0, 0, 0)));
      accB = f32x4.add(accB, f32x4.mul(f32x4.convert_i32x4_s(dB), i32x4.shuffle(scB, scB, 0, 0, 0, 0)));
      scA = i32x4.shuffle(scA, scA, 1, 2, 3, 0);
      scB = i32x4.shuffle(scB, scB, 1, 2, 3, 0);
      a += BS;
      b += BS;
      xb += XBK;
    }
    x += XG;
  }
  return f32x4.replace_lane(f32x4.splat(hsum(accA)), 1, hsum(accB));
}

// The second half of dot1's transpose-add: t01 from blocks 0 and 1, then blocks 2 and 3 (also
// matvec_q8_0_rows.ts's, over four rows' dots of one block).
@inline function transposeRest(t01: v128, d2: v128, d3: v128): v128 {
  const t23 = i32x4.add(i32x4.shuffle(d2, d3, 0, 4, 1, 5), i32x4.shuffle(d2, d3, 2, 6, 3, 7));
  return i32x4.add(i32x4.shuffle(t01, t23, 0, 1, 4, 5), i32x4.shuffle(t01, t23, 2, 3, 6, 7));
}

// acc + one group of je (1..4) Q4 blocks of the row at a, as dot1 adds it.
@inline function groupQ4(t: i32, acc: v128, a: usize, x: usize, je: i32, m0: v128, m1: v128, m2: v128): v128 {
  const one = withMin(t);
  const BS = blockBytes(t);
  let sc: v128;
  if (one) {
    const dm = f16pairs(a, BS, je);
    sc = f32x4.mul(pairD(dm), v128.load(x, 320));
    acc = f32x4.add(acc, f32x4.mul(pairM(dm), v128.load(x, 336)));
  } else sc = f32x4.mul(f16x4(a, BS, je), v128.load(x, 320));
  const d0 = blockDot(t, a, x, m0, m1, m2);
  pin(d0);
  let d1 = i32x4.splat(0),
    d2 = i32x4.splat(0),
    d3 = i32x4.splat(0);
  if (je == 4) {
    d1 = blockDot(t, a + BS, x + XBK, m0, m1, m2);
    pin(d1);
    d2 = blockDot(t, a + 2 * BS, x + 2 * XBK, m0, m1, m2);
    pin(d2);
    d3 = blockDot(t, a + 3 * BS, x + 3 * XBK, m0, m1, m2);
  } else {
    if (je > 1) d1 = blockDot(t, a + BS, x + XBK, m0, m1, m2);
    if (je > 2) d2 = blockDot(t, a + 2 * BS, x + 2 * XBK, m0, m1, m2);
  }
  const t01 = i32x4.add(i32x4.shuffle(d0, d1, 0, 4, 1, 5), i32x4.shuffle(d0, d1, 2, 6, 3, 7));
  return f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(transposeRest(t01, d2, d3)), sc));
}

export { dot1, dot2, transposeRest };
