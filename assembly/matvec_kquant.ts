// K-quant weights (Q4_K, Q5_K, Q6_K) times activations prepared as Q8_K (prepare_q8k.ts), with
// ggml's numerics: exact integer dots per sub-block, times the sub-block's integer scale, summed
// per 256-block and scaled by the f32 product of the two block scales; Q4_K/Q5_K subtract
// dmin * sum(min_j * bsum_j) from the activation's 16-value sums, as ggml does.
//
// Weights stay in GGUF's layout (packing is a copy), so rows read from flash need no conversion:
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

const Q4K: usize = 144;
const Q5K: usize = 176;
const Q6K: usize = 210;
const Q8K: usize = 292;

/** f16 bits -> f32, exact for every finite half (subnormals included), inf and NaN kept. */
@inline function f16(h: u32): f32 {
  const b = (h & 0x7fff) << 13;
  let f = reinterpret<f32>(b) * reinterpret<f32>(0x77800000); // * 2^112 re-biases the exponent
  if ((h & 0x7c00) == 0x7c00) f = reinterpret<f32>(b | 0x7f800000);
  return h & 0x8000 ? -f : f;
}

@inline function hsum(v: v128): f32 {
  const a = f32x4.add(v, i32x4.shuffle(v, v, 2, 3, 0, 1));
  return f32x4.extract_lane(f32x4.add(a, i32x4.shuffle(a, a, 1, 0, 3, 2)), 0);
}

/**
 * The 12 scale bytes of a Q4_K/Q5_K block (at p; 16 bytes are read) -> u8 lanes
 * [sc0..sc7, m0..m7]. Sub-blocks 0..3 keep 6 bits in bytes 0..3 (scales) and 4..7 (mins);
 * sub-blocks 4..7 keep 4 low bits in bytes 8..11 and their 2 high bits in the top bits of
 * bytes 0..7.
 */
@inline function scalesMins(p: usize): v128 {
  const v = v128.load(p);
  const z = i64x2.splat(0);
  const low = i8x16.shuffle(v, v, 0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 8, 9, 10, 11);
  const top = i8x16.shuffle(v, z, 16, 16, 16, 16, 0, 1, 2, 3, 16, 16, 16, 16, 4, 5, 6, 7);
  const m1 = v128(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0);
  const m2 = v128(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15);
  // 16-bit shifts are safe here: the masks drop every bit that crossed a byte boundary
  const lo = v128.or(v128.and(low, m1), v128.and(i16x8.shr_u(low, 4), m2));
  return v128.or(lo, v128.and(i16x8.shr_u(top, 2), i8x16.splat(0x30)));
}

/** sum_j min_j * (bsums[2j] + bsums[2j+1]) of a Q8_K block at xb, as i32 lanes to be added. */
@inline function minsDot(sm: v128, xb: usize): v128 {
  const z = i64x2.splat(0);
  const md0 = i8x16.shuffle(sm, z, 8, 16, 8, 16, 9, 16, 9, 16, 10, 16, 10, 16, 11, 16, 11, 16);
  const md1 = i8x16.shuffle(sm, z, 12, 16, 12, 16, 13, 16, 13, 16, 14, 16, 14, 16, 15, 16, 15, 16);
  return i32x4.add(i32x4.dot_i16x8_s(v128.load(xb, 260), md0), i32x4.dot_i16x8_s(v128.load(xb, 276), md1));
}

// ---------------------------------------------------------------------------------------------
// Q4_K

/**
 * 256 * the integer dot of 32 weights (16 quant bytes q: low nibbles meet xl, high nibbles
 * meet xh, 16 activation bytes each) -> [low-nibble sub-block i32x4, high-nibble i32x4] summed
 * into lo and hi.
 */
@inline function q4Lo(q: v128, xl: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x000f)), i16x8.shl(xl, 8)),
    i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x0f00)), i16x8.shr_s(xl, 8)));
}
@inline function q4Hi(q: v128, xh: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00f0)), i16x8.shr_s(i16x8.shl(xh, 8), 4)),
    i32x4.dot_i16x8_s(i16x8.shr_u(q, 12), v128.and(xh, i16x8.splat(<i16>0xff00))));
}

/** 256 * (sc_lo * dot(sub-block 2c) + sc_hi * dot(sub-block 2c+1)) for the chunk at qp / xp. */
@inline function chunkQ4K(qp: usize, xp: usize, scLo: i32, scHi: i32): v128 {
  const q0 = v128.load(qp), q1 = v128.load(qp, 16);
  const lo = i32x4.add(q4Lo(q0, v128.load(xp)), q4Lo(q1, v128.load(xp, 16)));
  const hi = i32x4.add(q4Hi(q0, v128.load(xp, 32)), q4Hi(q1, v128.load(xp, 48)));
  return i32x4.add(i32x4.mul(lo, i32x4.splat(scLo)), i32x4.mul(hi, i32x4.splat(scHi)));
}

@inline function dotQ4K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q4K, xb = x + b * Q8K;
    const sm = scalesMins(wb + 4);
    // chunk c: 32 quant bytes; low nibbles are sub-block 2c, high nibbles sub-block 2c+1.
    // A loop (not unrolled) keeps one chunk's values live at a time: unrolled, V8 hoisted
    // every load and spilled most vectors to the stack.
    let isum = i32x4.splat(0);
    let sc = sm;
    for (let c: usize = 0; c < 4; c++) {
      isum = i32x4.add(isum, chunkQ4K(wb + 16 + (c << 5), xb + 4 + (c << 6), i8x16.extract_lane_u(sc, 0), i8x16.extract_lane_u(sc, 1)));
      sc = i8x16.shuffle(sc, sc, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
    }
    const mi = minsDot(sm, xb);
    const dd = load<u32>(wb);
    const dx = load<f32>(xb);
    const dw = f16(dd & 0xffff) * dx * (<f32>1.0 / 256.0);
    const dm = f16(dd >> 16) * dx;
    acc = f32x4.add(acc, f32x4.sub(
      f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(dw)),
      f32x4.mul(f32x4.convert_i32x4_s(mi), f32x4.splat(dm))));
  }
  return hsum(acc);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q4_K (GGUF layout), x one Q8_K row. */
export function matvec_q4_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  const rb = nb * Q4K;
  for (let r = r0; r < r1; r++) store<f32>(y + (<usize>r << 2), dotQ4K(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q4_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  const rb = nb * Q4K, xb = nb * Q8K;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb;
    for (let t = 0; t < ntok; t++) {
      store<f32>(y + ((<usize>t * <usize>rows + <usize>r) << 2), dotQ4K(wr, x + <usize>t * xb, nb));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q6_K

/** 256 * dot(16 weight bytes q (values 0..63), 16 activation bytes x): i32x4 to be summed. */
@inline function dotBytes256(q: v128, x: v128): v128 {
  return i32x4.add(
    i32x4.dot_i16x8_s(v128.and(q, i16x8.splat(0x00ff)), i16x8.shl(x, 8)),
    i32x4.dot_i16x8_s(i16x8.shr_u(q, 8), v128.and(x, i16x8.splat(<i16>0xff00))));
}

/** sc * dot(q, x) for one 16-weight group of a Q6_K block (the 256 divided out exactly). */
@inline function groupQ6K(q: v128, x: v128, sc: i32): v128 {
  return i32x4.mul(i32x4.shr_s(dotBytes256(q, x), 8), i32x4.splat(sc));
}

@inline function dotQ6K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  const m0f = i8x16.splat(0x0f), m30 = i8x16.splat(0x30);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q6K, xb = x + b * Q8K;
    let isum = i32x4.splat(0);
    // iteration i covers 64 values: ql bytes A (values l) and B (values l + 32) of half h, their
    // 2-bit tops in qh byte H; q1 = lo(A), q2 = lo(B), q3 = hi(A), q4 = hi(B) are 32 values apart
    for (let i: usize = 0; i < 4; i++) {
      const h = i >> 1, l0 = (i & 1) << 4;
      const ql = wb + (h << 6) + l0, qh = wb + 128 + (h << 5) + l0, sc = wb + 192 + (h << 3) + (i & 1);
      const xp = xb + 4 + (h << 7) + l0;
      const A = v128.load(ql), B = v128.load(ql, 32), H = v128.load(qh);
      // 16-bit shifts are safe: the byte masks drop whatever crossed a byte boundary
      const q1 = v128.or(v128.and(A, m0f), v128.and(i16x8.shl(H, 4), m30));
      const q2 = v128.or(v128.and(B, m0f), v128.and(i16x8.shl(H, 2), m30));
      const q3 = v128.or(v128.and(i16x8.shr_u(A, 4), m0f), v128.and(H, m30));
      const q4 = v128.or(v128.and(i16x8.shr_u(B, 4), m0f), v128.and(i16x8.shr_u(H, 2), m30));
      isum = i32x4.add(isum, i32x4.add(
        i32x4.add(groupQ6K(q1, v128.load(xp), <i32>load<i8>(sc)), groupQ6K(q2, v128.load(xp, 32), <i32>load<i8>(sc, 2))),
        i32x4.add(groupQ6K(q3, v128.load(xp, 64), <i32>load<i8>(sc, 4)), groupQ6K(q4, v128.load(xp, 96), <i32>load<i8>(sc, 6)))));
    }
    // the quants are stored as q + 32: subtract 32 * sum_g sc_g * bsum_g
    const s8 = v128.load(wb + 192);
    const corr = i32x4.add(
      i32x4.dot_i16x8_s(i16x8.extend_low_i8x16_s(s8), v128.load(xb, 260)),
      i32x4.dot_i16x8_s(i16x8.extend_high_i8x16_s(s8), v128.load(xb, 276)));
    isum = i32x4.sub(isum, i32x4.shl(corr, 5));
    const dw = f16(<u32>load<u16>(wb + 208)) * load<f32>(xb);
    acc = f32x4.add(acc, f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(dw)));
  }
  return hsum(acc);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q6_K (GGUF layout), x one Q8_K row. */
export function matvec_q6_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  const rb = nb * Q6K;
  for (let r = r0; r < r1; r++) store<f32>(y + (<usize>r << 2), dotQ6K(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q6_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  const rb = nb * Q6K, xb = nb * Q8K;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb;
    for (let t = 0; t < ntok; t++) {
      store<f32>(y + ((<usize>t * <usize>rows + <usize>r) << 2), dotQ6K(wr, x + <usize>t * xb, nb));
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Q5_K

/** sc_lo * dot(sub-block 2c) + sc_hi * dot(sub-block 2c+1) for the chunk at qp / xp; h0/h1 are qh >> 2c. */
@inline function chunkQ5K(qp: usize, xp: usize, h0: v128, h1: v128, scLo: i32, scHi: i32): v128 {
  const m0f = i8x16.splat(0x0f), m10 = i8x16.splat(0x10);
  const q0 = v128.load(qp), q1 = v128.load(qp, 16);
  // 5-bit quants as bytes: the nibble plus bit 2c (low half) or 2c+1 (high half) of qh, at bit 4
  const l0 = v128.or(v128.and(q0, m0f), v128.and(i16x8.shl(h0, 4), m10));
  const l1 = v128.or(v128.and(q1, m0f), v128.and(i16x8.shl(h1, 4), m10));
  const u0 = v128.or(v128.and(i16x8.shr_u(q0, 4), m0f), v128.and(i16x8.shl(h0, 3), m10));
  const u1 = v128.or(v128.and(i16x8.shr_u(q1, 4), m0f), v128.and(i16x8.shl(h1, 3), m10));
  // each sub-block dot is a multiple of 256 below 2^23: divide it out before scaling
  const lo = i32x4.shr_s(i32x4.add(dotBytes256(l0, v128.load(xp)), dotBytes256(l1, v128.load(xp, 16))), 8);
  const hi = i32x4.shr_s(i32x4.add(dotBytes256(u0, v128.load(xp, 32)), dotBytes256(u1, v128.load(xp, 48))), 8);
  return i32x4.add(i32x4.mul(lo, i32x4.splat(scLo)), i32x4.mul(hi, i32x4.splat(scHi)));
}

@inline function dotQ5K(w: usize, x: usize, nb: usize): f32 {
  let acc = f32x4.splat(0);
  for (let b: usize = 0; b < nb; b++) {
    const wb = w + b * Q5K, xb = x + b * Q8K;
    const sm = scalesMins(wb + 4);
    let isum = i32x4.splat(0);
    let sc = sm;
    // qh bytes for values l = 0..15 and 16..31; shifted right by 2 per chunk (a 16-bit shift:
    // bits 0 and 1 of each byte, the only ones used, never come from the neighbour byte)
    let h0 = v128.load(wb + 16), h1 = v128.load(wb + 32);
    for (let c: usize = 0; c < 4; c++) {
      isum = i32x4.add(isum, chunkQ5K(wb + 48 + (c << 5), xb + 4 + (c << 6), h0, h1, i8x16.extract_lane_u(sc, 0), i8x16.extract_lane_u(sc, 1)));
      sc = i8x16.shuffle(sc, sc, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 0, 1);
      h0 = i16x8.shr_u(h0, 2);
      h1 = i16x8.shr_u(h1, 2);
    }
    const mi = minsDot(sm, xb);
    const dd = load<u32>(wb);
    const dx = load<f32>(xb);
    acc = f32x4.add(acc, f32x4.sub(
      f32x4.mul(f32x4.convert_i32x4_s(isum), f32x4.splat(f16(dd & 0xffff) * dx)),
      f32x4.mul(f32x4.convert_i32x4_s(mi), f32x4.splat(f16(dd >> 16) * dx))));
  }
  return hsum(acc);
}

/** y[r] = W[r,:] . x for r in [r0, r1); W Q5_K (GGUF layout), x one Q8_K row. */
export function matvec_q5_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  const rb = nb * Q5K;
  for (let r = r0; r < r1; r++) store<f32>(y + (<usize>r << 2), dotQ5K(w + <usize>r * rb, x, nb));
}

/** y[t*rows + r] = W[r,:] . x_t for t < ntok, r in [r0, r1): each weight row is read once for all tokens. */
export function matmul_q5_K(w: usize, x: usize, y: usize, rows: i32, cols: i32, ntok: i32, r0: i32, r1: i32): void {
  const nb = <usize>(cols >> 8);
  const rb = nb * Q5K, xb = nb * Q8K;
  for (let r = r0; r < r1; r++) {
    const wr = w + <usize>r * rb;
    for (let t = 0; t < ntok; t++) {
      store<f32>(y + ((<usize>t * <usize>rows + <usize>r) << 2), dotQ5K(wr, x + <usize>t * xb, nb));
    }
  }
}
