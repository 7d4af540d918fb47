// Sparse FFN kernels: the gated FFN computed neuron by neuron on neuron bundles (see
// docs/store-format.md). A bundle is [gate row | up row | down column | pad], each part nEmbd
// values of the FFN weight type in GGUF block layout (rowBytes each), the bundle anywhere in
// memory: kernels take an i32 array of bundle addresses, so bundles can sit in cache slots.
//
// Kernels (every argument i32; pointers are byte offsets into the shared memory; the range a
// thread computes comes last). T is f32, f16, bf16, q8_0, q4_0, q4_1, q5_0 or q5_1.
//   prepare_q8_sp(x, dst, cols, ntok, mode)           the "q8_sp" activation (below)
//   sparse_gate_T(bundles, count, xAct, out, nEmbd, rowBytes, k0, k1)
//       out[k] = gate_k . x                                             for listed k in [k0, k1)
//   sparse_updown_T(bundles, count, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1)
//       for listed k in [k0, k1) with act(gate[k], .) not identically 0: u = up_k . x,
//       h = act(gate[k], u); P += h * down_k  into this thread's partial slot
//   sparse_ffn_T(bundles, count, xAct, partials, nEmbd, rowBytes, act, per, k0, k1)
//       the same with g = gate_k . x computed in the same pass (the predictor path)
//   sparse_ffn_run_T(base, stride, count, xAct, partials, nEmbd, rowBytes, act, per, k0, k1)
//       sparse_ffn_T over the bundles base + k * stride (a dense cluster)
//   sparse_sum_partials(y, partials, nSlots, nEmbd, mode, i0, i1)
//       y[i] += sum of the nSlots partial slots at i, and clears them, for i in [i0, i1)
//
// Threads. Two threads never add into the same memory: the pool splits [0, count) with its
// alignment set to `per` = ceil(count / threads), so each thread gets at most one run of `per`
// listed neurons and writes only partial slot k0 / per (a range that breaks this traps). A slot is
// slotFloats(nEmbd) f32: the down accumulator (nEmbd values, in a permuted order for the
// quantized types), per-block corrections (Q4 / Q5 offsets and mins), then 16 floats of scratch (the
// Q4 down columns' block scales). Slots start zeroed; sparse_sum_partials adds them into y in
// natural order and zeroes them again, so several kernel calls (clusters computed as they land)
// can accumulate into one layer's slots before the one reduction.
//
// Activations: F32, F16 and BF16 rows meet x itself (f32). "q8_sp" (quantized types): ggml's Q8_0 quants of x (llama.cpp's x86 rounding, as
// prepare_q8_0 makes them) in groups of 4 blocks (128 values), 352 bytes a group: per block 80
// bytes (4 i16x8 vectors of quants, then an i32x4 offset correction), then f32x4 dx and f32x4 sx
// (lane = block). Blocks past the row in the last group are zero. Three arrangements, by `mode`:
//   mode 0 (Q8_0 weights): natural order, x[8v .. 8v+7] in vector v; dx = d; no correction.
//   mode 1 (Q4_0 / Q4_1 weights): vector 0 lane l = 256 x[2l], 1: 16 x[2l+16], 2: x[2l+1],
//     3: 256 x[2l+17]; dx = d / 256; correction lanes = 512 * sum q (8 * 256 * sum q over the
//     4 lanes: Q4_0's -8 offset, taken off in integer); sx = f16(d * sum q) as ggml's Q8_1
//     stores it (the Q4_1 min term). The relaxed-SIMD build stores the 32 quants as i8 in
//     natural order in the first 32 bytes instead (zeros after), for q4dotRelaxed, whose block
//     dots are not scaled by 256: there dx = d and the correction lanes 2 * sum q.
//   mode 2 (Q5_0 / Q5_1 weights): the relaxed build's mode 1; in the SIMD128 build mode 0's
//     natural-order i16 vectors with mode 1's correction and sx in the relaxed build's units.
// Why not ggml's q8_0 / q8_1 blocks: a GGUF Q4 block read as 8 u16 lanes holds in lane l the
// nibbles of elements 2l, 2l+16, 2l+1, 2l+17; three masks and a shift give four i16x8 vectors
// scaled by 1, 16, 256, 1, and activations arranged and scaled to match make every product
// 256 q_w q_x, so i32x4.dot_i16x8_s does the work in one instruction (the trick of
// matvec_q4.ts, on the GGUF layout). With i8 activations each block needs four extmuls and an
// extadd (about twice the x86 instructions). Q8_0 weights widen with v128.load8x8_s and meet
// natural-order i16 activations. The f32 scales in groups of 4 meet the weights' f16 scales
// gathered four at a time. Prepared once per token: 11 KiB for 4096 values.
//
// Down accumulation order ("permuted" slots). The down column of a quantized type is dequantized
// on the fly into an f32 axpy. A Q4 block read as 4 u32 lanes holds in nibble j of lane l the
// element 16 (j & 1) + 4 l + (j >> 1); masking nibble j (q & 0xF << 4j) and converting gives those
// elements times 16^j in 2 instructions, against ~3 to widen bytes through i16. So within each
// 32-block the partial slot keeps vector j = elements {16 (j & 1) + 4 l + (j >> 1)}, for Q4 scaled
// by 16^j (j < 7; nibble 7 is shifted down, not masked, so it stays unscaled and non-negative),
// and the per-block constant (Q4_0: -8 d h, Q4_1: m h) goes to the block's correction instead of
// 32 adds. Q8_0 uses the same order (byte k of u32 lane l of half h, sign-extended by two
// shifts, is vector 2k + h), unscaled; Q5 too, from its quants built as unsigned bytes, masked in
// place (vector 2k + h times 256^k, k < 3) with the block constant (Q5_0: -16 d h, Q5_1: m h) in
// the correction. F16 and BF16 columns add in natural order. sparse_sum_partials undoes all this
// (mode: 0 natural, 1 Q8_0, 2 Q4, 3 Q5). Four active neurons go through each block together, so
// the slot's vectors are loaded and stored once per four columns.

import { gelu, silu } from "./activation_math";
import {
  bf16Hi,
  bf16Lo,
  f16BitsHi,
  f16BitsLo,
  f16Fields,
  f16FieldsWide,
  f16Rebias,
  f16ToF32Finite,
  f32ToF16,
  F16_SUM_UP,
  F16_X_UP,
  halfEoMask,
  halfEven,
  halfOdd,
} from "./half";
import { Q4_RELAXED_CONSTS } from "./matvec_q4_relaxed";
import { hsum, hsumi } from "./lanes";
import { Q4_MASKS } from "./packed_layout";
import { pin, pin2 } from "./schedule_pin";

// ---------------------------------------------------------------------------------------------
// Shared pieces

const XG: usize = 352; // q8_sp bytes per group of 4 blocks
const XBK: usize = 80; // q8_sp bytes per block inside a group (quants, correction)

// weight block geometry (GGUF): bytes per block, offset of the quants
const Q8_0_BS: usize = 34;
const Q4_0_BS: usize = 18;
const Q4_1_BS: usize = 20;
const Q5_0_BS: usize = 22; // d, qh (the 32 fifth bits), 16 bytes of nibbles
const Q5_1_BS: usize = 24; // d, m, qh, nibbles

// v128 constants live in memory: V8 rematerializes a v128.const at every use inside a loop, a
// loaded value stays in a register. The nibble masks are the packed Q4 kernels' (Q4_MASKS), the
// f16 -> f32 bit moves' masks and re-bias half.ts's.
// nibble j of each u32 lane (j = 0..6)
const NIB = memory.data<u32>(
  [
    0x0000000f, 0x0000000f, 0x0000000f, 0x0000000f, 0x000000f0, 0x000000f0, 0x000000f0, 0x000000f0, 0x00000f00,
    0x00000f00, 0x00000f00, 0x00000f00, 0x0000f000, 0x0000f000, 0x0000f000, 0x0000f000, 0x000f0000, 0x000f0000,
    0x000f0000, 0x000f0000, 0x00f00000, 0x00f00000, 0x00f00000, 0x00f00000, 0x0f000000, 0x0f000000, 0x0f000000,
    0x0f000000,
  ],
  16,
);

// f16 at p -> f32 (half.ts's branch-free conversion: f16 infinities and NaNs come out finite).
@inline function f16(p: usize): f32 {
  return f16ToF32Finite(<u32>load<u16>(p));
}

// ---------------------------------------------------------------------------------------------
// Activation preparation

/**
 * "q8_sp" rows: ntok rows of `cols` f32 at x (cols a multiple of 32) -> ntok * ceil(cols / 128)
 * groups of 352 bytes at dst. mode 0: for Q8_0 weights, 1: for Q4_0 / Q4_1 weights, 2: for Q5_0 /
 * Q5_1 weights (see the top).
 */
export function prepare_q8_sp(x: usize, dst: usize, cols: i32, ntok: i32, mode: i32): void {
  const nb = cols >> 5;
  const ng = (nb + 3) >> 2;
  for (let t = 0; t < ntok; t++) {
    const p0 = x + <usize>t * ((<usize>cols) << 2);
    const g0 = dst + <usize>t * <usize>ng * XG;
    for (let b = 0; b < ng << 2; b++) {
      const o = g0 + <usize>(b >> 2) * XG + <usize>(b & 3) * XBK; // this block's quants and correction
      const lane = g0 + <usize>(b >> 2) * XG + ((<usize>(b & 3)) << 2); // + 320 / 336: its dx, sx
      if (b >= nb) {
        for (let v: usize = 0; v < 80; v += 16) v128.store(o + v, i32x4.splat(0));
        store<f32>(lane, 0, 320);
        store<f32>(lane, 0, 336);
        continue;
      }
      const p = p0 + ((<usize>b) << 7);
      let m = f32x4.abs(v128.load(p));
      for (let k: usize = 16; k < 128; k += 16) m = f32x4.max(m, f32x4.abs(v128.load(p + k)));
      const amax = max(
        max(f32x4.extract_lane(m, 0), f32x4.extract_lane(m, 1)),
        max(f32x4.extract_lane(m, 2), f32x4.extract_lane(m, 3)),
      );
      const d = amax / <f32>127.0;
      const id = f32x4.splat(amax != 0 ? <f32>127.0 / amax : <f32>0);
      // the 32 quants as i32x4 q[4v .. 4v+3], rounded as prepare_q8_0 rounds them
      const q0 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p), id)));
      const q1 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 16), id)));
      const q2 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 32), id)));
      const q3 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 48), id)));
      const q4 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 64), id)));
      const q5 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 80), id)));
      const q6 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 96), id)));
      const q7 = i32x4.trunc_sat_f32x4_s(f32x4.nearest(f32x4.mul(v128.load(p, 112), id)));
      const n0 = i16x8.narrow_i32x4_s(q0, q1); // x[0..7]
      const n1 = i16x8.narrow_i32x4_s(q2, q3); // x[8..15]
      const n2 = i16x8.narrow_i32x4_s(q4, q5); // x[16..23]
      const n3 = i16x8.narrow_i32x4_s(q6, q7); // x[24..31]
      const sum = hsumi(
        i32x4.add(i32x4.add(i32x4.add(q0, q1), i32x4.add(q2, q3)), i32x4.add(i32x4.add(q4, q5), i32x4.add(q6, q7))),
      );
      const dh = f16ToF32Finite(f32ToF16(d));
      if (mode == 0 || (mode == 2 && !ASC_FEATURE_RELAXED_SIMD)) {
        // natural order as i16 (mode 2: Q5's widened bytes meet them)
        v128.store(o, n0);
        v128.store(o, n1, 16);
        v128.store(o, n2, 32);
        v128.store(o, n3, 48);
        if (mode == 0) {
          v128.store(o, i32x4.splat(0), 64);
          store<f32>(lane, dh, 320);
          store<f32>(lane, 0, 336);
        } else {
          // Q5's unscaled block dots, as the relaxed build's mode 1
          v128.store(o, i32x4.splat(sum << 1), 64);
          store<f32>(lane, dh, 320);
          store<f32>(lane, f16ToF32Finite(f32ToF16(d * <f32>sum)), 336);
        }
      } else {
        if (ASC_FEATURE_RELAXED_SIMD) {
          // the relaxed build's Q4 dot (q4dotRelaxed): the quants as i8 in natural order
          v128.store(o, i8x16.narrow_i16x8_s(n0, n1));
          v128.store(o, i8x16.narrow_i16x8_s(n2, n3), 16);
          v128.store(o, i32x4.splat(0), 32);
          v128.store(o, i32x4.splat(0), 48);
        } else {
          // even / odd elements of x[0..15] and x[16..31]
          const e0 = v128.shuffle<i16>(n0, n1, 0, 2, 4, 6, 8, 10, 12, 14);
          const o0 = v128.shuffle<i16>(n0, n1, 1, 3, 5, 7, 9, 11, 13, 15);
          const e1 = v128.shuffle<i16>(n2, n3, 0, 2, 4, 6, 8, 10, 12, 14);
          const o1 = v128.shuffle<i16>(n2, n3, 1, 3, 5, 7, 9, 11, 13, 15);
          v128.store(o, i16x8.shl(e0, 8));
          v128.store(o, i16x8.shl(e1, 4), 16);
          v128.store(o, o0, 32);
          v128.store(o, i16x8.shl(o1, 8), 48);
        }
        // 4 lanes: 8 * sum q over the 4 lanes (the Q4_0 offset) and dx, in the units of the build's
        // block dots (x 256 in the SIMD128 build's, unscaled in the relaxed build's)
        v128.store(o, i32x4.splat(ASC_FEATURE_RELAXED_SIMD ? sum << 1 : sum << 9), 64);
        store<f32>(lane, ASC_FEATURE_RELAXED_SIMD ? dh : dh * <f32>(1.0 / 256.0), 320);
        store<f32>(lane, f16ToF32Finite(f32ToF16(d * <f32>sum)), 336);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Dot products of weight rows with the prepared activation

const T_F32 = 0;
const T_Q4_0 = 2;
const T_Q4_1 = 3;
const T_Q8_0 = 8;
const T_F16 = 1;
const T_BF16 = 30;
const T_Q5_0 = 6;
const T_Q5_1 = 7;

// Whether rows go two at a time through dot2 (two bundles streamed at once: scattered bundles from
// DRAM are bound by the reads in flight): every type dot2 has, all but F32.
@inline function paired(t: i32): bool {
  return t != T_F32;
}
// blocks with a min (d, m at the block's start) rather than an offset
@inline function withMin(t: i32): bool {
  return t == T_Q4_1 || t == T_Q5_1;
}
@inline function blockBytes(t: i32): usize {
  if (t == T_Q8_0) return Q8_0_BS;
  if (t == T_Q4_1) return Q4_1_BS;
  if (t == T_Q5_0) return Q5_0_BS;
  if (t == T_Q5_1) return Q5_1_BS;
  return Q4_0_BS;
}

// q4dot in the relaxed-SIMD build, whose mode-1 activation block holds its 32 quants as i8 in
// natural order (prepare_q8_sp). Byte i of the block's quants holds element i (low nibble) and
// i + 16 (high nibble): `w & 0x0f` and `(w >> 4) & 0x0f` are 7-bit bytes that meet x[0..15] and
// x[16..31] in one relaxed dot each (pmaddubsw on x86; a lane is at most 4 * 127 * 15). Folding
// the i16 lanes in pairs with a dot against ones puts elements 4l..4l+3 and 16+4l..16+4l+3 in i32
// lane l, the same sets as q4dot's lanes but without its factor of 256, which this build's
// activation leaves out of its correction and puts into dx instead (d, not d / 256): the block's
// integer dot converts exactly either way and meets a scale 256 times larger, the same product,
// so both builds give the same bits (a shift per block fewer).
@inline function q4dotRelaxed(w: v128, xb: usize, m: v128, ones: v128): v128 {
  const h = i16x8.add(
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xb), v128.and(w, m)),
    i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xb, 16), v128.and(i16x8.shr_u(w, 4), m)),
  );
  return i32x4.dot_i16x8_s(h, ones);
}

// Q5 blocks (GGUF layout: nibble bytes as Q4's, the fifth bits in a u32 qh, bit i for element i)
// come out as their 32 quants (0..31) in natural order, bytes 0..15 (lo) and 16..31 (hi): the
// nibbles as the relaxed Q4 dot splits them, or'ed with 0x10 where qh's bit is set (qh's bytes
// spread 8 to a half, tested against each byte's bit). About 12 instructions a block; both the
// dots and the down columns start from these bytes.
// each byte's bit of qh, as u32 lanes (the 0x0f and 0x10 bytes and the i16 ones are the relaxed
// Q4 kernels', Q4_RELAXED_CONSTS at 0, 32 and 16)
const Q5_BITS = memory.data<u32>([0x08040201, 0x80402010, 0x08040201, 0x80402010], 16);
@inline function fifthBits(h: v128): v128 {
  const bit = v128.load(Q5_BITS);
  return v128.and(i8x16.eq(v128.and(h, bit), bit), v128.load(Q4_RELAXED_CONSTS, 32));
}
@inline function q5lo(qs: v128, H: v128): v128 {
  return v128.or(
    v128.and(qs, v128.load(Q4_RELAXED_CONSTS)),
    fifthBits(i8x16.shuffle(H, H, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1)),
  );
}
@inline function q5hi(qs: v128, H: v128): v128 {
  return v128.or(i8x16.shr_u(qs, 4), fifthBits(i8x16.shuffle(H, H, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3)));
}

// The integer dot of one Q5 block (at a) with the mode-2 activation block at xb, in i32x4 partial
// lanes: the relaxed build meets its i8 quants with relaxed dots (a lane of i16 at most 4 * 127 *
// 31), the SIMD128 build widens the bytes to meet its i16 quants. Either way the exact integer dot,
// so the two builds' gate dots have the same bits. Q5_0's offset 16 is twice the correction's 8.
@inline function q5dot(one: bool, a: usize, xb: usize): v128 {
  const qh = a + (one ? 4 : 2);
  const H = v128.load32_splat(qh);
  const qs = v128.load(qh, 4);
  const lo = q5lo(qs, H),
    hi = q5hi(qs, H);
  let d: v128;
  if (ASC_FEATURE_RELAXED_SIMD) {
    const h = i16x8.add(
      i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xb), lo),
      i16x8.relaxed_dot_i8x16_i7x16_s(v128.load(xb, 16), hi),
    );
    d = i32x4.dot_i16x8_s(h, v128.load(Q4_RELAXED_CONSTS, 16));
  } else {
    d = i32x4.add(
      i32x4.add(
        i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_u(lo), v128.load(xb)),
        i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_u(lo), v128.load(xb, 16)),
      ),
      i32x4.add(
        i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_u(hi), v128.load(xb, 32)),
        i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_u(hi), v128.load(xb, 48)),
      ),
    );
  }
  return one ? d : i32x4.sub(d, i32x4.shl(v128.load(xb, 64), 1));
}

// 256 x the integer dot of one GGUF Q4 block's 16 quant bytes with the mode-1 activation block.
@inline function q4dot(w: v128, x0: v128, x1: v128, x2: v128, x3: v128, m0: v128, m1: v128, m2: v128): v128 {
  const a = i32x4.add(i32x4.dot_i16x8_s(v128.and(w, m0), x0), i32x4.dot_i16x8_s(v128.and(w, m1), x1));
  const b = i32x4.add(i32x4.dot_i16x8_s(v128.and(w, m2), x2), i32x4.dot_i16x8_s(i16x8.shr_u(w, 12), x3));
  return i32x4.add(a, b);
}

// The integer dot of one GGUF Q8_0 block's quants (at q) with the mode-0 activation block.
@inline function q8dot(q: usize, x0: v128, x1: v128, x2: v128, x3: v128): v128 {
  const a = i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(q), x0), i32x4.dot_i16x8_s(v128.load8x8_s(q, 8), x1));
  const b = i32x4.add(i32x4.dot_i16x8_s(v128.load8x8_s(q, 16), x2), i32x4.dot_i16x8_s(v128.load8x8_s(q, 24), x3));
  return i32x4.add(a, b);
}

// f16 values at p, p + bs, p + 2 bs, p + 3 bs -> f32x4 (the same bit moves as f16()); only the
// first n (1..4) are read, the other lanes are 0
@inline function f16x4(p: usize, bs: usize, n: i32): v128 {
  let v = i32x4.splat(0);
  v = v128.load16_lane(p, v, 1); // into the high half of each i32 lane: h << 16
  if (n == 4) {
    v = v128.load16_lane(p + bs, v, 3);
    v = v128.load16_lane(p + 2 * bs, v, 5);
    v = v128.load16_lane(p + 3 * bs, v, 7);
  } else {
    if (n > 1) v = v128.load16_lane(p + bs, v, 3);
    if (n > 2) v = v128.load16_lane(p + 2 * bs, v, 5);
  }
  return highHalves(v, false);
}

// f16 values in the high halves of the u32 lanes of v -> f32x4: sign kept, exponent and mantissa
// shifted into place (the mask clears what the arithmetic shift spread, and with `clearLow` the
// low half's bits too: pairM's lanes hold one there), re-biased by 2^112
@inline function highHalves(v: v128, clearLow: bool): v128 {
  return f32x4.mul(v128.and(i32x4.shr_s(v, 3), clearLow ? f16Fields() : f16FieldsWide()), f16Rebias());
}

// The f16 pairs (d, m) that start each of n (1..4) Q4_1 blocks at p, p + bs, ... in u32 lanes (d
// in the low half), one load each; pairD / pairM convert them (highHalves).
@inline function f16pairs(p: usize, bs: usize, n: i32): v128 {
  let v = i32x4.splat(0);
  v = v128.load32_lane(p, v, 0);
  if (n > 1) v = v128.load32_lane(p + bs, v, 1);
  if (n > 2) v = v128.load32_lane(p + 2 * bs, v, 2);
  if (n > 3) v = v128.load32_lane(p + 3 * bs, v, 3);
  return v;
}
@inline function pairD(v: v128): v128 {
  return highHalves(i32x4.shl(v, 16), false);
}
@inline function pairM(v: v128): v128 {
  return highHalves(v, true);
}

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

// F16 / BF16 rows (GGUF: nEmbd 16-bit values) against x as f32 ("f32_eo": each 8 values' even
// ones, then its odd ones), 16 weights per step into two accumulators. A half converts as the
// dense kernels convert it (matvec_half.ts; half.ts for the down columns): BF16 is the top
// half of an f32; F16's sign, exponent and mantissa are moved into f32's fields, which is its
// value times 2^-112 (exact for finite halves; inf and NaN come out finite, and convert refuses
// to write them). The 2^112 goes onto x instead (times 2^96 as loaded, shared by the two rows of
// dotHalf2; the sum times 2^16): powers of two change no rounding, and it saves a multiply per 4
// weights. The products are added unfused in both builds, so the gate and up dots, whose signs
// decide what is computed, have the same bits in both; dotHalf2 gives each row dotHalf's bits.
@inline function halfLo(bf: bool, w: v128, mask: v128): v128 {
  return bf ? bf16Lo(w) : f16BitsLo(w, mask);
}
@inline function halfHi(bf: bool, w: v128, mask: v128): v128 {
  return bf ? bf16Hi(w) : f16BitsHi(w, mask);
}
// The gate and up dots take each 8 values as their even and odd 4 (half.ts's halfEven /
// halfOdd, as matvec_half.ts), against x prepared in that order ("f32_eo"): fewer instructions
// than halfLo/halfHi, which the down columns keep (their sums land in y in the natural order).
// halfLo/halfHi's F16 lanes times 2^112: the weights' values (for the down columns, whose
// multiplier h is not shared: moving 2^112 onto it could overflow)
@inline function halfW(bf: bool, v: v128, bias: v128): v128 {
  return bf ? v : f32x4.mul(v, bias);
}
// 4 values of x at p, scaled for halfLo/halfHi's F16 weights
@inline function halfX(bf: bool, p: usize, up: v128): v128 {
  return bf ? v128.load(p) : f32x4.mul(v128.load(p), up);
}

@inline function dotHalf(bf: bool, a: usize, x: usize, n: i32): f32 {
  const mask = halfEoMask(bf),
    up = f32x4.splat(F16_X_UP);
  let s0 = f32x4.splat(0),
    s1 = f32x4.splat(0);
  const end = x + ((<usize>n) << 2);
  for (; x < end; x += 64) {
    const w0 = v128.load(a),
      w1 = v128.load(a, 16);
    s0 = f32x4.add(s0, f32x4.mul(halfEven(w0, bf, mask), halfX(bf, x, up)));
    s1 = f32x4.add(s1, f32x4.mul(halfOdd(w0, bf, mask), halfX(bf, x + 16, up)));
    s0 = f32x4.add(s0, f32x4.mul(halfEven(w1, bf, mask), halfX(bf, x + 32, up)));
    s1 = f32x4.add(s1, f32x4.mul(halfOdd(w1, bf, mask), halfX(bf, x + 48, up)));
    a += 32;
  }
  const s = hsum(f32x4.add(s0, s1));
  return bf ? s : s * F16_SUM_UP;
}

// dotHalf of the rows at a and b (lanes 0 and 1), streamed at once: two reads in flight.
@inline function dotHalf2(bf: bool, a: usize, b: usize, x: usize, n: i32): v128 {
  const mask = halfEoMask(bf),
    up = f32x4.splat(F16_X_UP);
  let a0 = f32x4.splat(0),
    a1 = f32x4.splat(0),
    b0 = f32x4.splat(0),
    b1 = f32x4.splat(0);
  const end = x + ((<usize>n) << 2);
  for (; x < end; x += 64) {
    const wa0 = v128.load(a),
      wb0 = v128.load(b);
    const x0 = halfX(bf, x, up),
      x1 = halfX(bf, x + 16, up);
    a0 = f32x4.add(a0, f32x4.mul(halfEven(wa0, bf, mask), x0));
    b0 = f32x4.add(b0, f32x4.mul(halfEven(wb0, bf, mask), x0));
    a1 = f32x4.add(a1, f32x4.mul(halfOdd(wa0, bf, mask), x1));
    b1 = f32x4.add(b1, f32x4.mul(halfOdd(wb0, bf, mask), x1));
    const wa1 = v128.load(a, 16),
      wb1 = v128.load(b, 16);
    const x2 = halfX(bf, x + 32, up),
      x3 = halfX(bf, x + 48, up);
    a0 = f32x4.add(a0, f32x4.mul(halfEven(wa1, bf, mask), x2));
    b0 = f32x4.add(b0, f32x4.mul(halfEven(wb1, bf, mask), x2));
    a1 = f32x4.add(a1, f32x4.mul(halfOdd(wa1, bf, mask), x3));
    b1 = f32x4.add(b1, f32x4.mul(halfOdd(wb1, bf, mask), x3));
    a += 32;
    b += 32;
  }
  let sa = hsum(f32x4.add(a0, a1)),
    sb = hsum(f32x4.add(b0, b1));
  if (!bf) {
    sa *= F16_SUM_UP;
    sb *= F16_SUM_UP;
  }
  return f32x4.replace_lane(f32x4.splat(sa), 1, sb);
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

// The second half of dot1's transpose-add: t01 from blocks 0 and 1, then blocks 2 and 3.
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

// the integer dot of the block at a with the activation block at xb (Q4: x256, Q4_0 offset taken off)
@inline function blockDot(t: i32, a: usize, xb: usize, m0: v128, m1: v128, m2: v128): v128 {
  if (t == T_Q5_0 || t == T_Q5_1) return q5dot(t == T_Q5_1, a, xb);
  if (t == T_Q8_0) return q8dot(a + 2, v128.load(xb), v128.load(xb, 16), v128.load(xb, 32), v128.load(xb, 48));
  if (ASC_FEATURE_RELAXED_SIMD) {
    if (t == T_Q4_1) return q4dotRelaxed(v128.load(a + 4), xb, m0, m1);
    return i32x4.sub(q4dotRelaxed(v128.load(a + 2), xb, m0, m1), v128.load(xb, 64));
  }
  if (t == T_Q4_1)
    return q4dot(v128.load(a + 4), v128.load(xb), v128.load(xb, 16), v128.load(xb, 32), v128.load(xb, 48), m0, m1, m2);
  return i32x4.sub(
    q4dot(v128.load(a + 2), v128.load(xb), v128.load(xb, 16), v128.load(xb, 32), v128.load(xb, 48), m0, m1, m2),
    v128.load(xb, 64),
  );
}

// ---------------------------------------------------------------------------------------------
// Activation functions (the formulas of model_ops.ts ffn_act)

const ACT_SILU = 0;
const ACT_RELU = 1;
const ACT_DRELU = 2;
const ACT_GELU = 3;

// The gate's factor a(g): h = a(g) * u (dReLU: a(g) * relu(u)). h is 0 for every u exactly
// when this is 0, so up and down need not be read.
@inline function gateFactor(kind: i32, g: f32): f32 {
  if (kind == ACT_SILU) return silu(g);
  if (kind == ACT_GELU) return gelu(g);
  return g > 0 ? g : 0;
}

// h = act(g, u) from a = gateFactor(kind, g): the same products ffn_act computes
@inline function combine(kind: i32, a: f32, u: f32): f32 {
  if (kind == ACT_DRELU) return u > 0 ? a * u : 0;
  return a * u;
}

// ---------------------------------------------------------------------------------------------
// Down columns: y (a partial slot, in the slot order above) += h * column, four columns at once.

// acc + v * s. The relaxed build fuses it (one FMA where the CPU has one: the down column's
// mask, convert, multiply, add per four elements and column become mask, convert, FMA; +9% whole
// neurons in cache, +2-6% from DRAM, docs/benchmarks.md), so its down sums differ from the SIMD128
// build's in the last bits; the tests hold both to the reference, and the gate and up dots (whose
// signs decide what is computed) keep the same bits in both.
@inline function madd(acc: v128, v: v128, s: v128): v128 {
  if (ASC_FEATURE_RELAXED_SIMD) return f32x4.relaxed_madd(v, s, acc);
  return f32x4.add(acc, f32x4.mul(v, s));
}

/**
 * f32 values per partial slot: nEmbd accumulators, nEmbd / 32 block corrections (to a multiple of
 * 4), 16 of scratch (groupScales), padded to 64 bytes.
 */
@inline function slotFloats(n: i32): i32 {
  return (((n + (n >> 5) + 3) & ~3) + 16 + 15) & ~15;
}

// The slot's scratch, given where its corrections start.
@inline function scratchOf(corr: usize, n: i32): usize {
  return corr + ((<usize>(((n >> 5) + 3) & ~3)) << 2);
}

const NEG8 = memory.data<f32>([-8, -8, -8, -8], 16);

// Q4 down columns, per group of je (1..4) blocks: each column's block scales times its h,
// gathered and converted four blocks at a time (f16x4 / f16pairs), go to scratch vector k (block
// jj in lane jj) for the blocks to splat with one load each; the block constants (Q4_0: -8 h d,
// Q4_1: h m), summed over the columns in order, go into the group's corrections as one vector.
// Per column and block that replaces two scalar f16 conversions, two multiplies and a splat
// (whole neurons: Q4_1 ~+7%, Q4_0 +2-3%, docs/benchmarks.md; the same values, the same order of
// sums, so the same bits as before). Q8_0 columns keep their scalar scales: the same change there
// measured 0.89-0.99x.
@inline function groupScales(
  one: bool,
  sc: usize,
  corr: usize,
  je: i32,
  cols: i32,
  p0: usize,
  H0: v128,
  p1: usize,
  H1: v128,
  p2: usize,
  H2: v128,
  p3: usize,
  H3: v128,
): void {
  const BS: usize = one ? Q4_1_BS : Q4_0_BS;
  let c: v128;
  if (one) {
    const v0 = f16pairs(p0, BS, je);
    v128.store(sc, f32x4.mul(pairD(v0), H0));
    c = f32x4.mul(pairM(v0), H0);
    if (cols == 4) {
      const v1 = f16pairs(p1, BS, je),
        v2 = f16pairs(p2, BS, je),
        v3 = f16pairs(p3, BS, je);
      v128.store(sc, f32x4.mul(pairD(v1), H1), 16);
      v128.store(sc, f32x4.mul(pairD(v2), H2), 32);
      v128.store(sc, f32x4.mul(pairD(v3), H3), 48);
      c = f32x4.add(
        f32x4.add(f32x4.add(c, f32x4.mul(pairM(v1), H1)), f32x4.mul(pairM(v2), H2)),
        f32x4.mul(pairM(v3), H3),
      );
    }
  } else {
    let s = f32x4.mul(f16x4(p0, BS, je), H0);
    v128.store(sc, s);
    if (cols == 4) {
      const s1 = f32x4.mul(f16x4(p1, BS, je), H1),
        s2 = f32x4.mul(f16x4(p2, BS, je), H2),
        s3 = f32x4.mul(f16x4(p3, BS, je), H3);
      v128.store(sc, s1, 16);
      v128.store(sc, s2, 32);
      v128.store(sc, s3, 48);
      s = f32x4.add(f32x4.add(f32x4.add(s, s1), s2), s3);
    }
    c = f32x4.mul(s, v128.load(NEG8));
  }
  if (je == 4) v128.store(corr, f32x4.add(v128.load(corr), c));
  else {
    store<f32>(corr, load<f32>(corr) + f32x4.extract_lane(c, 0));
    if (je > 1) store<f32>(corr, load<f32>(corr, 4) + f32x4.extract_lane(c, 1), 4);
    if (je > 2) store<f32>(corr, load<f32>(corr, 8) + f32x4.extract_lane(c, 2), 8);
  }
}

@inline function axpy4(
  t: i32,
  y: usize,
  corr: usize,
  n: i32,
  p0: usize,
  h0: f32,
  p1: usize,
  h1: f32,
  p2: usize,
  h2: f32,
  p3: usize,
  h3: f32,
): void {
  if (t == T_F16 || t == T_BF16) {
    // 8 elements of each of the 4 columns per step, natural order (partial mode 0)
    const bf = t == T_BF16;
    const mask = f16Fields(),
      bias = f16Rebias();
    const H0 = f32x4.splat(h0),
      H1 = f32x4.splat(h1),
      H2 = f32x4.splat(h2),
      H3 = f32x4.splat(h3);
    const end = y + ((<usize>n) << 2);
    for (; y < end; y += 32) {
      const w0 = v128.load(p0),
        w1 = v128.load(p1),
        w2 = v128.load(p2),
        w3 = v128.load(p3);
      let lo = v128.load(y),
        hi = v128.load(y, 16);
      lo = madd(lo, halfW(bf, halfLo(bf, w0, mask), bias), H0);
      hi = madd(hi, halfW(bf, halfHi(bf, w0, mask), bias), H0);
      lo = madd(lo, halfW(bf, halfLo(bf, w1, mask), bias), H1);
      hi = madd(hi, halfW(bf, halfHi(bf, w1, mask), bias), H1);
      lo = madd(lo, halfW(bf, halfLo(bf, w2, mask), bias), H2);
      hi = madd(hi, halfW(bf, halfHi(bf, w2, mask), bias), H2);
      lo = madd(lo, halfW(bf, halfLo(bf, w3, mask), bias), H3);
      hi = madd(hi, halfW(bf, halfHi(bf, w3, mask), bias), H3);
      v128.store(y, lo);
      v128.store(y, hi, 16);
      p0 += 16;
      p1 += 16;
      p2 += 16;
      p3 += 16;
    }
    return;
  }
  if (t == T_F32) {
    const H0 = f32x4.splat(h0),
      H1 = f32x4.splat(h1),
      H2 = f32x4.splat(h2),
      H3 = f32x4.splat(h3);
    const end = y + ((<usize>n) << 2);
    for (; y < end; y += 16) {
      let acc = v128.load(y);
      acc = madd(acc, v128.load(p0), H0);
      acc = madd(acc, v128.load(p1), H1);
      acc = madd(acc, v128.load(p2), H2);
      acc = madd(acc, v128.load(p3), H3);
      v128.store(y, acc);
      p0 += 16;
      p1 += 16;
      p2 += 16;
      p3 += 16;
    }
    return;
  }
  const nb = n >> 5;
  if (t == T_Q8_0) {
    for (let b = 0; b < nb; b++) {
      const S0 = f32x4.splat(h0 * f16(p0)),
        S1 = f32x4.splat(h1 * f16(p1));
      const S2 = f32x4.splat(h2 * f16(p2)),
        S3 = f32x4.splat(h3 * f16(p3));
      for (let hh: usize = 0; hh < 32; hh += 16) {
        const q0 = v128.load(p0 + 2 + hh),
          q1 = v128.load(p1 + 2 + hh),
          q2 = v128.load(p2 + 2 + hh),
          q3 = v128.load(p3 + 2 + hh);
        const yh = y + (hh & 16); // half 0 -> vectors 0, 2, 4, 6; half 1 -> 1, 3, 5, 7 (16 bytes apart)
        // byte k of each lane: shl (24 - 8k) then arithmetic shr 24
        axpySlot(
          yh,
          0,
          i32x4.shr_s(i32x4.shl(q0, 24), 24),
          i32x4.shr_s(i32x4.shl(q1, 24), 24),
          i32x4.shr_s(i32x4.shl(q2, 24), 24),
          i32x4.shr_s(i32x4.shl(q3, 24), 24),
          S0,
          S1,
          S2,
          S3,
        );
        axpySlot(
          yh,
          32,
          i32x4.shr_s(i32x4.shl(q0, 16), 24),
          i32x4.shr_s(i32x4.shl(q1, 16), 24),
          i32x4.shr_s(i32x4.shl(q2, 16), 24),
          i32x4.shr_s(i32x4.shl(q3, 16), 24),
          S0,
          S1,
          S2,
          S3,
        );
        axpySlot(
          yh,
          64,
          i32x4.shr_s(i32x4.shl(q0, 8), 24),
          i32x4.shr_s(i32x4.shl(q1, 8), 24),
          i32x4.shr_s(i32x4.shl(q2, 8), 24),
          i32x4.shr_s(i32x4.shl(q3, 8), 24),
          S0,
          S1,
          S2,
          S3,
        );
        axpySlot(
          yh,
          96,
          i32x4.shr_s(q0, 24),
          i32x4.shr_s(q1, 24),
          i32x4.shr_s(q2, 24),
          i32x4.shr_s(q3, 24),
          S0,
          S1,
          S2,
          S3,
        );
      }
      y += 128;
      p0 += Q8_0_BS;
      p1 += Q8_0_BS;
      p2 += Q8_0_BS;
      p3 += Q8_0_BS;
    }
    return;
  }
  if (t == T_Q5_0 || t == T_Q5_1) {
    q5axpy4(t == T_Q5_1, y, corr, nb, p0, h0, p1, h1, p2, h2, p3, h3);
    return;
  }
  const one = t == T_Q4_1;
  const BS = one ? Q4_1_BS : Q4_0_BS;
  const QO: usize = one ? 4 : 2;
  const sc = scratchOf(corr, n);
  const H0 = f32x4.splat(h0),
    H1 = f32x4.splat(h1),
    H2 = f32x4.splat(h2),
    H3 = f32x4.splat(h3);
  for (let b = 0; b < nb; b++) {
    const jj = b & 3;
    if (jj == 0) {
      groupScales(one, sc, corr, min(4, nb - b), 4, p0, H0, p1, H1, p2, H2, p3, H3);
      corr += 16;
    }
    const o = sc + ((<usize>jj) << 2);
    const S0 = v128.load32_splat(o),
      S1 = v128.load32_splat(o, 16),
      S2 = v128.load32_splat(o, 32),
      S3 = v128.load32_splat(o, 48);
    const q0 = v128.load(p0 + QO),
      q1 = v128.load(p1 + QO),
      q2 = v128.load(p2 + QO),
      q3 = v128.load(p3 + QO);
    nibSlot(y, 0, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 1, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 2, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 3, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 4, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 5, q0, q1, q2, q3, S0, S1, S2, S3);
    nibSlot(y, 6, q0, q1, q2, q3, S0, S1, S2, S3);
    axpySlot(
      y,
      112,
      i32x4.shr_u(q0, 28),
      i32x4.shr_u(q1, 28),
      i32x4.shr_u(q2, 28),
      i32x4.shr_u(q3, 28),
      S0,
      S1,
      S2,
      S3,
    );
    y += 128;
    p0 += BS;
    p1 += BS;
    p2 += BS;
    p3 += BS;
  }
}

// Q5 down columns (partial mode 3): each block's quants as q5lo / q5hi bytes, in Q8_0's slot order
// (byte k of u32 lane l of half h is slot vector 2k + h) but unsigned and masked in place, so
// vector 2k + h is kept x 256^k for k < 3 and byte 3 is shifted down (two instructions a vector
// where Q8_0's signed bytes take three); the block's constant (Q5_0: -16 d h, Q5_1: m h) goes to
// its correction, summed over the columns in order.
const Q5_BYTE = memory.data<u32>(
  [0xff, 0xff, 0xff, 0xff, 0xff00, 0xff00, 0xff00, 0xff00, 0xff0000, 0xff0000, 0xff0000, 0xff0000],
  16,
);

// the 4 slot vectors of one half of a block (h: 0 -> 0, 2, 4, 6; 1 -> 1, 3, 5, 7) for four columns
@inline function q5half(
  yh: usize,
  q0: v128,
  q1: v128,
  q2: v128,
  q3: v128,
  S0: v128,
  S1: v128,
  S2: v128,
  S3: v128,
): void {
  for (let k: usize = 0; k < 3; k++) maskSlot(yh, k << 5, Q5_BYTE + (k << 4), q0, q1, q2, q3, S0, S1, S2, S3);
  axpySlot(yh, 96, i32x4.shr_u(q0, 24), i32x4.shr_u(q1, 24), i32x4.shr_u(q2, 24), i32x4.shr_u(q3, 24), S0, S1, S2, S3);
}

// the block constant of a Q5 block at p for a column with multiplier h, d its scale
@inline function q5const(one: bool, p: usize, d: f32, h: f32): f32 {
  return one ? h * f16(p + 2) : <f32>-16 * d * h;
}

@inline function q5axpy4(
  one: bool,
  y: usize,
  corr: usize,
  nb: i32,
  p0: usize,
  h0: f32,
  p1: usize,
  h1: f32,
  p2: usize,
  h2: f32,
  p3: usize,
  h3: f32,
): void {
  const BS: usize = one ? Q5_1_BS : Q5_0_BS;
  const QH: usize = one ? 4 : 2;
  for (let b = 0; b < nb; b++) {
    const d0 = f16(p0),
      d1 = f16(p1),
      d2 = f16(p2),
      d3 = f16(p3);
    const S0 = f32x4.splat(h0 * d0),
      S1 = f32x4.splat(h1 * d1),
      S2 = f32x4.splat(h2 * d2),
      S3 = f32x4.splat(h3 * d3);
    store<f32>(
      corr,
      load<f32>(corr) +
        q5const(one, p0, d0, h0) +
        q5const(one, p1, d1, h1) +
        q5const(one, p2, d2, h2) +
        q5const(one, p3, d3, h3),
    );
    const H0 = v128.load32_splat(p0 + QH),
      H1 = v128.load32_splat(p1 + QH),
      H2 = v128.load32_splat(p2 + QH),
      H3 = v128.load32_splat(p3 + QH);
    const w0 = v128.load(p0 + QH, 4),
      w1 = v128.load(p1 + QH, 4),
      w2 = v128.load(p2 + QH, 4),
      w3 = v128.load(p3 + QH, 4);
    q5half(y, q5lo(w0, H0), q5lo(w1, H1), q5lo(w2, H2), q5lo(w3, H3), S0, S1, S2, S3);
    q5half(y + 16, q5hi(w0, H0), q5hi(w1, H1), q5hi(w2, H2), q5hi(w3, H3), S0, S1, S2, S3);
    y += 128;
    corr += 4;
    p0 += BS;
    p1 += BS;
    p2 += BS;
    p3 += BS;
  }
}

@inline function q5axpy1(one: bool, y: usize, corr: usize, nb: i32, p: usize, h: f32): void {
  const BS: usize = one ? Q5_1_BS : Q5_0_BS;
  const QH: usize = one ? 4 : 2;
  for (let b = 0; b < nb; b++) {
    const d = f16(p);
    const S = f32x4.splat(h * d);
    store<f32>(corr, load<f32>(corr) + q5const(one, p, d, h));
    const H = v128.load32_splat(p + QH);
    const w = v128.load(p + QH, 4);
    const lo = q5lo(w, H),
      hi = q5hi(w, H);
    for (let k: usize = 0; k < 3; k++) {
      const m = v128.load(Q5_BYTE + (k << 4));
      axpyOne(y, k << 5, v128.and(lo, m), S);
      axpyOne(y + 16, k << 5, v128.and(hi, m), S);
    }
    axpyOne(y, 96, i32x4.shr_u(lo, 24), S);
    axpyOne(y + 16, 96, i32x4.shr_u(hi, 24), S);
    y += 128;
    corr += 4;
    p += BS;
  }
}

// slot vector o of four columns: each column's lanes q and'ed with the mask vector at m (masked
// in place: a Q4 nibble j x 16^j, a Q5 byte k x 256^k), times its S
@inline function maskSlot(
  y: usize,
  o: usize,
  m: usize,
  q0: v128,
  q1: v128,
  q2: v128,
  q3: v128,
  S0: v128,
  S1: v128,
  S2: v128,
  S3: v128,
): void {
  const v = v128.load(m);
  axpySlot(y, o, v128.and(q0, v), v128.and(q1, v), v128.and(q2, v), v128.and(q3, v), S0, S1, S2, S3);
}

// slot j (< 7) of a Q4 block: nibble j of each lane, masked in place (x 16^j)
@inline function nibSlot(
  y: usize,
  j: usize,
  q0: v128,
  q1: v128,
  q2: v128,
  q3: v128,
  S0: v128,
  S1: v128,
  S2: v128,
  S3: v128,
): void {
  maskSlot(y, j << 4, NIB + (j << 4), q0, q1, q2, q3, S0, S1, S2, S3);
}

// one slot vector: y[o] += v0 * S0 + ... + v3 * S3 (v as i32 lanes)
@inline function axpySlot(
  y: usize,
  o: usize,
  v0: v128,
  v1: v128,
  v2: v128,
  v3: v128,
  S0: v128,
  S1: v128,
  S2: v128,
  S3: v128,
): void {
  let acc = v128.load(y + o);
  acc = madd(acc, f32x4.convert_i32x4_s(v0), S0);
  acc = madd(acc, f32x4.convert_i32x4_s(v1), S1);
  acc = madd(acc, f32x4.convert_i32x4_s(v2), S2);
  acc = madd(acc, f32x4.convert_i32x4_s(v3), S3);
  v128.store(y + o, acc);
}

@inline function axpy1(t: i32, y: usize, corr: usize, n: i32, p: usize, h: f32): void {
  if (t == T_F16 || t == T_BF16) {
    const bf = t == T_BF16;
    const mask = f16Fields(),
      bias = f16Rebias();
    const H = f32x4.splat(h);
    const end = y + ((<usize>n) << 2);
    for (; y < end; y += 32) {
      const w = v128.load(p);
      v128.store(y, madd(v128.load(y), halfW(bf, halfLo(bf, w, mask), bias), H));
      v128.store(y, madd(v128.load(y, 16), halfW(bf, halfHi(bf, w, mask), bias), H), 16);
      p += 16;
    }
    return;
  }
  if (t == T_F32) {
    const H = f32x4.splat(h);
    const end = y + ((<usize>n) << 2);
    for (; y < end; y += 16) {
      v128.store(y, madd(v128.load(y), v128.load(p), H));
      p += 16;
    }
    return;
  }
  const nb = n >> 5;
  if (t == T_Q8_0) {
    for (let b = 0; b < nb; b++) {
      const S = f32x4.splat(h * f16(p));
      for (let hh: usize = 0; hh < 32; hh += 16) {
        const q = v128.load(p + 2 + hh);
        const yh = y + (hh & 16);
        axpyOne(yh, 0, i32x4.shr_s(i32x4.shl(q, 24), 24), S);
        axpyOne(yh, 32, i32x4.shr_s(i32x4.shl(q, 16), 24), S);
        axpyOne(yh, 64, i32x4.shr_s(i32x4.shl(q, 8), 24), S);
        axpyOne(yh, 96, i32x4.shr_s(q, 24), S);
      }
      y += 128;
      p += Q8_0_BS;
    }
    return;
  }
  if (t == T_Q5_0 || t == T_Q5_1) {
    q5axpy1(t == T_Q5_1, y, corr, nb, p, h);
    return;
  }
  const one = t == T_Q4_1;
  const BS = one ? Q4_1_BS : Q4_0_BS;
  const QO: usize = one ? 4 : 2;
  const sc = scratchOf(corr, n);
  const H = f32x4.splat(h);
  for (let b = 0; b < nb; b++) {
    const jj = b & 3;
    if (jj == 0) {
      groupScales(one, sc, corr, min(4, nb - b), 1, p, H, 0, H, 0, H, 0, H);
      corr += 16;
    }
    const S = v128.load32_splat(sc + ((<usize>jj) << 2));
    const q = v128.load(p + QO);
    axpyOne(y, 0, v128.and(q, v128.load(NIB)), S);
    axpyOne(y, 16, v128.and(q, v128.load(NIB, 16)), S);
    axpyOne(y, 32, v128.and(q, v128.load(NIB, 32)), S);
    axpyOne(y, 48, v128.and(q, v128.load(NIB, 48)), S);
    axpyOne(y, 64, v128.and(q, v128.load(NIB, 64)), S);
    axpyOne(y, 80, v128.and(q, v128.load(NIB, 80)), S);
    axpyOne(y, 96, v128.and(q, v128.load(NIB, 96)), S);
    axpyOne(y, 112, i32x4.shr_u(q, 28), S);
    y += 128;
    p += BS;
  }
}

@inline function axpyOne(y: usize, o: usize, v: v128, S: v128): void {
  v128.store(y + o, madd(v128.load(y + o), f32x4.convert_i32x4_s(v), S));
}

// Pending down columns of this thread (instance globals, so thread-local): flushed four at a time.
let DN: i32 = 0;
let DP0: usize = 0,
  DP1: usize = 0,
  DP2: usize = 0;
let DH0: f32 = 0,
  DH1: f32 = 0,
  DH2: f32 = 0;

@inline function pushDown(t: i32, y: usize, corr: usize, n: i32, p: usize, h: f32): void {
  if (DN == 3) {
    axpy4(t, y, corr, n, DP0, DH0, DP1, DH1, DP2, DH2, p, h);
    DN = 0;
  } else if (DN == 2) {
    DP2 = p;
    DH2 = h;
    DN = 3;
  } else if (DN == 1) {
    DP1 = p;
    DH1 = h;
    DN = 2;
  } else {
    DP0 = p;
    DH0 = h;
    DN = 1;
  }
}

@inline function flushDown(t: i32, y: usize, corr: usize, n: i32): void {
  if (DN > 0) axpy1(t, y, corr, n, DP0, DH0);
  if (DN > 1) axpy1(t, y, corr, n, DP1, DH1);
  if (DN > 2) axpy1(t, y, corr, n, DP2, DH2);
  DN = 0;
}

// This thread's partial slot. A range that does not start at a multiple of `per` or is longer
// than `per` means the pool was not run with align = per: two threads could then share a slot,
// so the kernel traps (the pool reports it) rather than race.
@inline function slotBase(partials: usize, n: i32, per: i32, k0: i32, k1: i32): usize {
  if (per <= 0 || k0 % per != 0 || k1 - k0 > per) unreachable();
  return partials + <usize>(k0 / per) * ((<usize>slotFloats(n)) << 2);
}

// ---------------------------------------------------------------------------------------------
// The kernels, generic over the type t (a constant after inlining)

// Touching ahead: wasm has no prefetch instruction. Loading the first line of each 4 KiB page of
// the next bundle before computing the current one (the page walk and the first miss then overlap
// with compute) gained ~5-10% on bundles streamed from DRAM; touching every line of the next
// bundle, or the first 4 lines of each part, lost (the loads stall retirement). SINK keeps the
// loads from being optimized away.
let SINK: u32 = 0;

@inline function touchPages(p: usize, bytes: usize): void {
  let acc: u32 = 0;
  for (let o: usize = 0; o < bytes; o += 4096) acc ^= load<u32>(p + o);
  SINK ^= acc;
}

@inline function gateT(
  t: i32,
  bundles: usize,
  xAct: usize,
  out: usize,
  n: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  let k = k0;
  // two rows at a time through dot2 (each row's dot exactly dot1's), the next pair's pages touched
  if (paired(t))
    for (; k + 2 <= k1; k += 2) {
      const l = bundles + ((<usize>k) << 2);
      if (k + 2 < k1) touchPages(<usize>load<i32>(l, 8), <usize>rowBytes);
      if (k + 3 < k1) touchPages(<usize>load<i32>(l, 12), <usize>rowBytes);
      const g = dot2(t, <usize>load<i32>(l), <usize>load<i32>(l, 4), xAct, n);
      store<f32>(out + ((<usize>k) << 2), f32x4.extract_lane(g, 0));
      store<f32>(out + ((<usize>k) << 2), f32x4.extract_lane(g, 1), 4);
    }
  for (; k < k1; k++) {
    if (k + 2 < k1) touchPages(<usize>load<i32>(bundles + ((<usize>k) << 2), 8), <usize>rowBytes);
    store<f32>(out + ((<usize>k) << 2), dot1(t, <usize>load<i32>(bundles + ((<usize>k) << 2)), xAct, n));
  }
}

@inline function upDownT(
  t: i32,
  bundles: usize,
  gate: usize,
  xAct: usize,
  partials: usize,
  n: i32,
  rowBytes: i32,
  kind: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  const y = slotBase(partials, n, per, k0, k1);
  const corr = y + ((<usize>n) << 2);
  const rb = <usize>rowBytes;
  DN = 0;
  // the gate factor of neuron k, computed one step ahead so that the next neuron's up and down
  // pages are touched only when they will be read
  let a = k0 < k1 ? gateFactor(kind, load<f32>(gate + ((<usize>k0) << 2))) : 0;
  // paired types: neurons that fire go in pairs whose up rows dot2 streams at once (each row's dot exactly
  // dot1's; pushed in list order): the pending first of a pair
  const pairs = paired(t);
  let pend = false,
    pendBp: usize = 0,
    pendA: f32 = 0;
  for (let k = k0; k < k1; k++) {
    const aNext = k + 1 < k1 ? gateFactor(kind, load<f32>(gate + ((<usize>k) << 2), 4)) : 0;
    if (aNext != 0) touchPages(<usize>load<i32>(bundles + ((<usize>k) << 2), 4) + rb, 2 * rb);
    // a = 0: h = 0 whatever up says, so neither up nor down is read
    if (a != 0) {
      const bp = <usize>load<i32>(bundles + ((<usize>k) << 2));
      if (!pairs) upDown1(t, bp, a, xAct, y, corr, n, rb, kind);
      else if (!pend) {
        pend = true;
        pendBp = bp;
        pendA = a;
      } else {
        upDown2(t, pendBp, pendA, bp, a, xAct, y, corr, n, rb, kind);
        pend = false;
      }
    }
    a = aNext;
  }
  if (pend) upDown1(t, pendBp, pendA, xAct, y, corr, n, rb, kind);
  flushDown(t, y, corr, n);
}

// Gate, then (unless the gate factor is 0: up and down unread) up and down, of the bundle at bp.
@inline function ffnOne(t: i32, bp: usize, xAct: usize, y: usize, corr: usize, n: i32, rb: usize, kind: i32): void {
  const a = gateFactor(kind, dot1(t, bp, xAct, n));
  if (a != 0) upDown1(t, bp, a, xAct, y, corr, n, rb, kind);
}

// Up and down of the bundle at bp whose gate factor a is not 0.
@inline function upDown1(
  t: i32,
  bp: usize,
  a: f32,
  xAct: usize,
  y: usize,
  corr: usize,
  n: i32,
  rb: usize,
  kind: i32,
): void {
  const h = combine(kind, a, dot1(t, bp + rb, xAct, n));
  if (h != 0) pushDown(t, y, corr, n, bp + 2 * rb, h);
}

// upDown1 for two bundles (every type but F32): dot2 streams both up rows (each row's dot exactly dot1's), A's
// column pushed first.
@inline function upDown2(
  t: i32,
  bpA: usize,
  aA: f32,
  bpB: usize,
  aB: f32,
  xAct: usize,
  y: usize,
  corr: usize,
  n: i32,
  rb: usize,
  kind: i32,
): void {
  const u = dot2(t, bpA + rb, bpB + rb, xAct, n);
  const hA = combine(kind, aA, f32x4.extract_lane(u, 0)),
    hB = combine(kind, aB, f32x4.extract_lane(u, 1));
  if (hA != 0) pushDown(t, y, corr, n, bpA + 2 * rb, hA);
  if (hB != 0) pushDown(t, y, corr, n, bpB + 2 * rb, hB);
}

// ffnOne for two bundles at once (every type but F32: dot2 streams both); the same results, pushed in the same
// order, as ffnOne on A then B.
@inline function ffnPair(
  t: i32,
  bpA: usize,
  bpB: usize,
  xAct: usize,
  y: usize,
  corr: usize,
  n: i32,
  rb: usize,
  kind: i32,
): void {
  const g = dot2(t, bpA, bpB, xAct, n);
  const aA = gateFactor(kind, f32x4.extract_lane(g, 0)),
    aB = gateFactor(kind, f32x4.extract_lane(g, 1));
  if (aA != 0 && aB != 0) upDown2(t, bpA, aA, bpB, aB, xAct, y, corr, n, rb, kind);
  else if (aA != 0) upDown1(t, bpA, aA, xAct, y, corr, n, rb, kind);
  else if (aB != 0) upDown1(t, bpB, aB, xAct, y, corr, n, rb, kind);
}

// Bundle k of a call: the listed address (sparse_ffn_T) or base + k * stride (a dense cluster,
// sparse_ffn_run_T; `run` is a constant after inlining).
@inline function bundleAt(run: bool, list: usize, base: usize, stride: usize, k: i32): usize {
  return run ? base + <usize>k * stride : <usize>load<i32>(list + ((<usize>k) << 2));
}

// The bundles k in [k0, k1) through ffnOne, all types but F32 two at a time through ffnPair; the next
// bundles' pages touched one step ahead. sparse_ffn_T runs it over a list, sparse_ffn_run_T
// over a strided cluster.
@inline function ffnBundles(
  t: i32,
  run: bool,
  list: usize,
  base: usize,
  stride: usize,
  xAct: usize,
  partials: usize,
  n: i32,
  rowBytes: i32,
  kind: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  const y = slotBase(partials, n, per, k0, k1);
  const corr = y + ((<usize>n) << 2);
  const rb = <usize>rowBytes;
  DN = 0;
  let k = k0;
  if (paired(t))
    for (; k + 2 <= k1; k += 2) {
      if (k + 2 < k1) touchPages(bundleAt(run, list, base, stride, k + 2), 3 * rb);
      if (k + 3 < k1) touchPages(bundleAt(run, list, base, stride, k + 3), 3 * rb);
      const bpA = bundleAt(run, list, base, stride, k),
        bpB = bundleAt(run, list, base, stride, k + 1);
      ffnPair(t, bpA, bpB, xAct, y, corr, n, rb, kind);
    }
  for (; k < k1; k++) {
    if (k + 1 < k1) touchPages(bundleAt(run, list, base, stride, k + 1), 3 * rb);
    ffnOne(t, bundleAt(run, list, base, stride, k), xAct, y, corr, n, rb, kind);
  }
  flushDown(t, y, corr, n);
}

// ---------------------------------------------------------------------------------------------
// Exports

/** out[k] = gate_k . x for listed k in [k0, k1); F32 (F16, BF16) bundles, f32 x. */
export function sparse_gate_f32(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_F32, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}
export function sparse_gate_f16(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_F16, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}
export function sparse_gate_bf16(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_BF16, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}
/** out[k] = gate_k . x; Q8_0 bundles, x prepared q8_sp mode 0. */
export function sparse_gate_q8_0(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_Q8_0, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}
/** out[k] = gate_k . x; Q4_0 bundles, x prepared q8_sp mode 1. */
export function sparse_gate_q4_0(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_Q4_0, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}
/** out[k] = gate_k . x; Q4_1 bundles, x prepared q8_sp mode 1. */
export function sparse_gate_q4_1(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_Q4_1, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}
export function sparse_gate_q5_0(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_Q5_0, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}
export function sparse_gate_q5_1(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_Q5_1, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}

/** Up, activation and down for listed k in [k0, k1) given gate[k]; adds into partial slot k0 / per. */
export function sparse_updown_f32(
  bundles: usize,
  count: i32,
  gate: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  upDownT(T_F32, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_updown_f16(
  bundles: usize,
  count: i32,
  gate: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  upDownT(T_F16, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_updown_bf16(
  bundles: usize,
  count: i32,
  gate: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  upDownT(T_BF16, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_updown_q8_0(
  bundles: usize,
  count: i32,
  gate: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  upDownT(T_Q8_0, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_updown_q4_0(
  bundles: usize,
  count: i32,
  gate: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  upDownT(T_Q4_0, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_updown_q4_1(
  bundles: usize,
  count: i32,
  gate: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  upDownT(T_Q4_1, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_updown_q5_0(
  bundles: usize,
  count: i32,
  gate: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  upDownT(T_Q5_0, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_updown_q5_1(
  bundles: usize,
  count: i32,
  gate: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  upDownT(T_Q5_1, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}

/** Gate, up, activation and down for listed k in [k0, k1); adds into partial slot k0 / per. */
export function sparse_ffn_f32(
  bundles: usize,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_F32, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_f16(
  bundles: usize,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_F16, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_bf16(
  bundles: usize,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_BF16, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_q8_0(
  bundles: usize,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q8_0, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_q4_0(
  bundles: usize,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q4_0, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_q4_1(
  bundles: usize,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q4_1, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_q5_0(
  bundles: usize,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q5_0, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_q5_1(
  bundles: usize,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q5_1, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}

/** sparse_ffn over the bundles base + k * stride, k in [k0, k1) (a dense cluster). */
export function sparse_ffn_run_f32(
  base: usize,
  stride: i32,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_F32, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_run_f16(
  base: usize,
  stride: i32,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_F16, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_run_bf16(
  base: usize,
  stride: i32,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_BF16, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_run_q8_0(
  base: usize,
  stride: i32,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q8_0, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_run_q4_0(
  base: usize,
  stride: i32,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q4_0, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_run_q4_1(
  base: usize,
  stride: i32,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q4_1, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_run_q5_0(
  base: usize,
  stride: i32,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q5_0, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_run_q5_1(
  base: usize,
  stride: i32,
  count: i32,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  per: i32,
  k0: i32,
  k1: i32,
): void {
  ffnBundles(T_Q5_1, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}

// the 4x4 transpose of f32 vectors a..d added to the 4 vectors at p
@inline function addT(p: usize, a: v128, b: v128, c: v128, d: v128): void {
  const ab0 = v128.shuffle<f32>(a, b, 0, 4, 1, 5),
    ab1 = v128.shuffle<f32>(a, b, 2, 6, 3, 7);
  const cd0 = v128.shuffle<f32>(c, d, 0, 4, 1, 5),
    cd1 = v128.shuffle<f32>(c, d, 2, 6, 3, 7);
  v128.store(p, f32x4.add(v128.load(p), v128.shuffle<f32>(ab0, cd0, 0, 1, 4, 5)));
  v128.store(p, f32x4.add(v128.load(p, 16), v128.shuffle<f32>(ab0, cd0, 2, 3, 6, 7)), 16);
  v128.store(p, f32x4.add(v128.load(p, 32), v128.shuffle<f32>(ab1, cd1, 0, 1, 4, 5)), 32);
  v128.store(p, f32x4.add(v128.load(p, 48), v128.shuffle<f32>(ab1, cd1, 2, 3, 6, 7)), 48);
}

/**
 * y[i] += the sum over nSlots partial slots at i, for i in [i0, i1) (multiples of 32), and the
 * slots' parts there cleared. mode: 0 natural order (F32, F16, BF16), 1 permuted (Q8_0), 2 permuted
 * and scaled with block corrections (Q4_0, Q4_1), 3 Q8_0's order scaled by bytes, with block
 * corrections (Q5_0, Q5_1); see the top of this file and q5axpy4.
 */
export function sparse_sum_partials(
  y: usize,
  partials: usize,
  nSlots: i32,
  nEmbd: i32,
  mode: i32,
  i0: i32,
  i1: i32,
): void {
  const stride = (<usize>slotFloats(nEmbd)) << 2;
  const zero = f32x4.splat(0);
  for (let b = i0 >> 5; b < (i1 + 31) >> 5; b++) {
    const o = (<usize>b) << 7;
    const yb = y + o;
    if (mode == 0) {
      for (let v: usize = 0; v < 128; v += 16) {
        let acc = v128.load(yb + v);
        for (let s = 0; s < nSlots; s++) {
          const p = partials + <usize>s * stride + o + v;
          acc = f32x4.add(acc, v128.load(p));
          v128.store(p, zero);
        }
        v128.store(yb + v, acc);
      }
      continue;
    }
    let a0 = zero,
      a1 = zero,
      a2 = zero,
      a3 = zero,
      a4 = zero,
      a5 = zero,
      a6 = zero,
      a7 = zero;
    let c: f32 = 0;
    for (let s = 0; s < nSlots; s++) {
      const p = partials + <usize>s * stride + o;
      a0 = f32x4.add(a0, v128.load(p));
      a1 = f32x4.add(a1, v128.load(p, 16));
      a2 = f32x4.add(a2, v128.load(p, 32));
      a3 = f32x4.add(a3, v128.load(p, 48));
      a4 = f32x4.add(a4, v128.load(p, 64));
      a5 = f32x4.add(a5, v128.load(p, 80));
      a6 = f32x4.add(a6, v128.load(p, 96));
      a7 = f32x4.add(a7, v128.load(p, 112));
      for (let v: usize = 0; v < 128; v += 16) v128.store(p + v, zero);
      if (mode >= 2) {
        const cp = partials + <usize>s * stride + ((<usize>nEmbd) << 2) + ((<usize>b) << 2);
        c += load<f32>(cp);
        store<f32>(cp, 0);
      }
    }
    if (mode == 2) {
      // vector j was accumulated in units of 16^-j (j < 7)
      a1 = f32x4.mul(a1, f32x4.splat(<f32>(1.0 / 16.0)));
      a2 = f32x4.mul(a2, f32x4.splat(<f32>(1.0 / 256.0)));
      a3 = f32x4.mul(a3, f32x4.splat(<f32>(1.0 / 4096.0)));
      a4 = f32x4.mul(a4, f32x4.splat(<f32>(1.0 / 65536.0)));
      a5 = f32x4.mul(a5, f32x4.splat(<f32>(1.0 / 1048576.0)));
      a6 = f32x4.mul(a6, f32x4.splat(<f32>(1.0 / 16777216.0)));
      const C = f32x4.splat(c);
      a0 = f32x4.add(a0, C);
      a1 = f32x4.add(a1, C);
      a2 = f32x4.add(a2, C);
      a3 = f32x4.add(a3, C);
      a4 = f32x4.add(a4, C);
      a5 = f32x4.add(a5, C);
      a6 = f32x4.add(a6, C);
      a7 = f32x4.add(a7, C);
    } else if (mode == 3) {
      // vector 2k + h was accumulated in units of 256^-k (k < 3)
      const C = f32x4.splat(c);
      a0 = f32x4.add(a0, C);
      a1 = f32x4.add(a1, C);
      a2 = f32x4.add(f32x4.mul(a2, f32x4.splat(<f32>(1.0 / 256.0))), C);
      a3 = f32x4.add(f32x4.mul(a3, f32x4.splat(<f32>(1.0 / 256.0))), C);
      a4 = f32x4.add(f32x4.mul(a4, f32x4.splat(<f32>(1.0 / 65536.0))), C);
      a5 = f32x4.add(f32x4.mul(a5, f32x4.splat(<f32>(1.0 / 65536.0))), C);
      a6 = f32x4.add(a6, C);
      a7 = f32x4.add(a7, C);
    }
    // vector j lane l is element 16 (j & 1) + 4 l + (j >> 1): even vectors hold elements 0..15,
    // odd ones 16..31, each group a 4x4 transpose away from natural order
    addT(yb, a0, a2, a4, a6);
    addT(yb + 64, a1, a3, a5, a7);
  }
}
