// The relaxed-SIMD build's Q4_0 / Q4_1 decode kernel (compiled only with relaxed SIMD on: see
// matvecQ4 in matvec_q4.ts, which hands over to it). Same packed weights, same numerics, same float
// order as the SIMD128 kernel, so both builds give the same bits; activations come prepared as
// "q8_i8n" (see prepare_q8.ts) instead of "q8_i16n".
//
// Why it is faster: i16x8.relaxed_dot_i8x16_i7x16_s multiplies 16 signed activation bytes by 16
// bytes that must be 7-bit (0..127; others are implementation-defined) and adds neighbouring pairs
// into i16 lanes. Nibbles (0..15) qualify as they come out of the packed bytes, so 32 weights cost
// one load, an and, a shift, an and and two of these dots, which V8 lowers to one pmaddubsw each
// on x86 (no VNNI in Node 20 or 22; the i32 "dot_add" form costs 5 instructions there, since V8
// rebuilds its constant of ones every time, and was no faster than SIMD128). A pair's i16 lane is
// at most 2 * 127 * 15 = 3810, so the 8 dots of a 128-column group add up in i16 without
// overflow (30480 < 32767), and one i32x4.dot_i16x8_s with ones per group and row folds the two
// lanes of each block into that block's i32 lane.
//
// Nibble order: packed vector W_j (matvec_q4.ts) holds in u16 lane 2b + p the quants of elements
// 2(4j + k) + p of block b, k = 0..3 in bits 4k. Byte-wise, `W_j & 0x0f` puts elements 8j + 0, 4,
// 1, 5 of block b in bytes 4b..4b+3 and `(W_j >> 4) & 0x0f` elements 8j + 2, 6, 3, 7: the order
// prepare_q8_i8n writes the activation bytes in.

import { q4ActC, q4ActD, q4RowGroup } from "./q4_group";
import { q4GroupBytes, Q8_I8N_GB, storePair } from "./packed_layout";
import { pin2 } from "./schedule_pin";

// 0x0f bytes, then i16 ones, then 0x10 bytes: loaded rather than written as constants, which V8
// would rebuild inside the loop at every use.
const Q4_RELAXED_CONSTS = memory.data<u32>(
  [
    0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, 0x0f0f0f0f, 0x00010001, 0x00010001, 0x00010001, 0x00010001, 0x10101010,
    0x10101010, 0x10101010, 0x10101010,
  ],
  16,
);

// The i16 lanes of one packed row vector w against its two activation vectors.
@inline function dotw(w: v128, xl: v128, xh: v128, m: v128): v128 {
  return dotLoHi(v128.and(w, m), v128.and(i16x8.shr_u(w, 4), m), xl, xh);
}

// The same for a vector already unpacked into its low (lo) and high (hi) nibbles.
@inline function dotLoHi(lo: v128, hi: v128, xl: v128, xh: v128): v128 {
  return i16x8.add(i16x8.relaxed_dot_i8x16_i7x16_s(xl, lo), i16x8.relaxed_dot_i8x16_i7x16_s(xh, hi));
}

// Q5_0 / Q5_1 (the SIMD128 build reads the same layout: matvec_q4.ts dotw5): a row-pair
// group is Q4_0's / Q4_1's, the low 4 bits of each quant as the nibbles above, then each row's
// fifth bits in a 16-byte vector F: bit t of byte i belongs to the element that nibble vector
// j = t >> 1 holds in byte i, in its low (t even) or high (t odd) nibble. A quant is the nibble
// or'ed with bit t moved to 0x10 (two instructions: a 16-bit shift, whose spill-over into the
// neighbouring byte the mask drops, and an and). Quants reach 31, so a step's two dots give at
// most 2 * 2 * 31 * 127 = 15748 per i16 lane and two steps could overflow: each step is folded
// into the i32 block lanes at once (a dot with ones) instead of once per group. The integer sums
// are ggml's; Q5_0's offset 16 is twice Q4_0's correction.

/** f with bit t (0..7, a constant) of each byte moved to bit 4 (the other bits not cleared). */
@inline function bitTo4(f: v128, t: i32): v128 {
  if (t < 4) return i16x8.shl(f, 4 - t);
  if (t == 4) return f;
  return i16x8.shr_u(f, t - 4);
}

/** Step j (0..3, a constant) of a Q5 row, unpacked: its low (lo) and high (hi) quants, from nibble vector w and fifth bits f. */
@inline function q5Lo(w: v128, f: v128, j: i32, m: v128, m10: v128): v128 {
  return v128.or(v128.and(w, m), v128.and(bitTo4(f, j << 1), m10));
}
@inline function q5Hi(w: v128, f: v128, j: i32, m: v128, m10: v128): v128 {
  return v128.or(v128.and(i16x8.shr_u(w, 4), m), v128.and(bitTo4(f, (j << 1) + 1), m10));
}

/**
 * h + step j (0..3, a constant) of a row, nibble vector w, against the activation vectors xl, xh:
 * i16 lanes, or for Q5 (five; fifth bits at f) folded into the i32 block lanes at once. Q4's
 * first step is h itself (zero).
 */
@inline function stepRow(
  h: v128,
  w: v128,
  f: usize,
  j: i32,
  xl: v128,
  xh: v128,
  m: v128,
  m10: v128,
  ones: v128,
  five: bool,
): v128 {
  if (!five) return j == 0 ? dotw(w, xl, xh, m) : i16x8.add(h, dotw(w, xl, xh, m));
  const q = v128.load(f);
  return i32x4.add(h, i32x4.dot_i16x8_s(dotLoHi(q5Lo(w, q, j, m, m10), q5Hi(w, q, j, m, m10), xl, xh), ones));
}

// A group's integer sums of four rows (quadSteps), left in instance globals (each pool thread's
// own) because a function returns one value; written once per group and row, which also pins the
// group's arithmetic before the next group's loads (schedule_pin.ts).
let H0: v128 = i64x2.splat(0),
  H1: v128 = i64x2.splat(0),
  H2: v128 = i64x2.splat(0),
  H3: v128 = i64x2.splat(0);

/**
 * One 128-column group of rows r, r + 1 (pair at wp) and q, q + 1 (pair at wq) against the
 * activation group at xp: each row's block sums (i32 lane b: block b's integer dot) into H0..H3,
 * each activation vector loaded once for the four rows.
 */
@inline function quadSteps(wp: usize, wq: usize, xp: usize, m: v128, five: bool, FO: usize): void {
  // Q5's constants (Q4 needs ones only after the steps: one register less during them)
  const ones = five ? v128.load(Q4_RELAXED_CONSTS, 16) : m,
    m10 = five ? v128.load(Q4_RELAXED_CONSTS, 32) : m;
  let h0 = i16x8.splat(0),
    h1 = i16x8.splat(0),
    h2 = i16x8.splat(0),
    h3 = i16x8.splat(0);
  // unrolled by hand (a rolled loop costs V8 a branch and a stack check per step), each step
  // pinned so that V8 does not issue the whole group's loads first (schedule_pin.ts)
  let xl = v128.load(xp),
    xh = v128.load(xp, 16);
  h0 = stepRow(h0, v128.load(wp), wp + FO, 0, xl, xh, m, m10, ones, five);
  h1 = stepRow(h1, v128.load(wp, 64), wp + FO + 16, 0, xl, xh, m, m10, ones, five);
  pin2(h0, h1);
  h2 = stepRow(h2, v128.load(wq), wq + FO, 0, xl, xh, m, m10, ones, five);
  h3 = stepRow(h3, v128.load(wq, 64), wq + FO + 16, 0, xl, xh, m, m10, ones, five);
  pin2(h2, h3);
  xl = v128.load(xp, 32);
  xh = v128.load(xp, 48);
  h0 = stepRow(h0, v128.load(wp, 16), wp + FO, 1, xl, xh, m, m10, ones, five);
  h1 = stepRow(h1, v128.load(wp, 80), wp + FO + 16, 1, xl, xh, m, m10, ones, five);
  pin2(h0, h1);
  h2 = stepRow(h2, v128.load(wq, 16), wq + FO, 1, xl, xh, m, m10, ones, five);
  h3 = stepRow(h3, v128.load(wq, 80), wq + FO + 16, 1, xl, xh, m, m10, ones, five);
  pin2(h2, h3);
  xl = v128.load(xp, 64);
  xh = v128.load(xp, 80);
  h0 = stepRow(h0, v128.load(wp, 32), wp + FO, 2, xl, xh, m, m10, ones, five);
  h1 = stepRow(h1, v128.load(wp, 96), wp + FO + 16, 2, xl, xh, m, m10, ones, five);
  pin2(h0, h1);
  h2 = stepRow(h2, v128.load(wq, 32), wq + FO, 2, xl, xh, m, m10, ones, five);
  h3 = stepRow(h3, v128.load(wq, 96), wq + FO + 16, 2, xl, xh, m, m10, ones, five);
  pin2(h2, h3);
  xl = v128.load(xp, 96);
  xh = v128.load(xp, 112);
  h0 = stepRow(h0, v128.load(wp, 48), wp + FO, 3, xl, xh, m, m10, ones, five);
  h1 = stepRow(h1, v128.load(wp, 112), wp + FO + 16, 3, xl, xh, m, m10, ones, five);
  pin2(h0, h1);
  h2 = stepRow(h2, v128.load(wq, 48), wq + FO, 3, xl, xh, m, m10, ones, five);
  h3 = stepRow(h3, v128.load(wq, 112), wq + FO + 16, 3, xl, xh, m, m10, ones, five);
  if (!five) {
    // the i16 lanes folded into block lanes (Q5's steps were folded as they went)
    const ones4 = v128.load(Q4_RELAXED_CONSTS, 16);
    h0 = i32x4.dot_i16x8_s(h0, ones4);
    h1 = i32x4.dot_i16x8_s(h1, ones4);
    h2 = i32x4.dot_i16x8_s(h2, ones4);
    h3 = i32x4.dot_i16x8_s(h3, ones4);
  }
  H0 = h0;
  H1 = h1;
  H2 = h2;
  H3 = h3;
}

/**
 * The relaxed build's pairQ4 (matvec_q4.ts), for four row pairs at once: rows r, r + 1 at wp, q,
 * q + 1 at wq, u, u + 1 at wu and v, v + 1 at wv (four places in memory: four weight streams;
 * against two, 0.96-1.12x cold in one-process A/Bs, docs/benchmarks.md), over gc groups of one
 * chunk, each group's pairs two at a time (quadSteps). Each row's integer sums and float order are
 * the SIMD128 pair kernel's, so the builds give the same bits. A pair given twice goes in with a
 * row index < 0 for its copy: computed and not stored. `five`: Q5_0 / Q5_1 groups (above), whose
 * steps fold into i32 lanes each.
 */
@inline function octQ4Relaxed(
  wp: usize,
  wq: usize,
  wu: usize,
  wv: usize,
  xp: usize,
  y: usize,
  gc: i32,
  r: i32,
  q: i32,
  u: i32,
  v: i32,
  r0: i32,
  r1: i32,
  first: bool,
  one: bool,
  five: bool,
): void {
  const m = v128.load(Q4_RELAXED_CONSTS);
  const GB = q4GroupBytes(one, five);
  // the fifth bits of a pair's rows at +FO, +FO + 16
  const FO = q4GroupBytes(one, false);
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0),
    a2 = f32x4.splat(0),
    a3 = f32x4.splat(0),
    b0 = f32x4.splat(0),
    b1 = f32x4.splat(0),
    b2 = f32x4.splat(0),
    b3 = f32x4.splat(0);
  for (let g = 0; g < gc; g++) {
    quadSteps(wp, wq, xp, m, five, FO);
    // the activation's scales after the steps (two registers fewer during them)
    const dxu = q4ActD(xp + 128),
      c = q4ActC(xp + 128, one, five);
    a0 = q4RowGroup(a0, H0, wp, 0, dxu, c, one);
    a1 = q4RowGroup(a1, H1, wp, 1, dxu, c, one);
    a2 = q4RowGroup(a2, H2, wq, 0, dxu, c, one);
    a3 = q4RowGroup(a3, H3, wq, 1, dxu, c, one);
    quadSteps(wu, wv, xp, m, five, FO);
    b0 = q4RowGroup(b0, H0, wu, 0, dxu, c, one);
    b1 = q4RowGroup(b1, H1, wu, 1, dxu, c, one);
    b2 = q4RowGroup(b2, H2, wv, 0, dxu, c, one);
    b3 = q4RowGroup(b3, H3, wv, 1, dxu, c, one);
    wp += GB;
    wq += GB;
    wu += GB;
    wv += GB;
    xp += Q8_I8N_GB;
  }
  storePair(y, r, a0, a1, r0, r1, first);
  storePair(y, q, a2, a3, r0, r1, first);
  storePair(y, u, b0, b1, r0, r1, first);
  storePair(y, v, b2, b3, r0, r1, first);
}

export { dotLoHi, dotw, q5Hi, q5Lo, octQ4Relaxed, Q4_RELAXED_CONSTS };
