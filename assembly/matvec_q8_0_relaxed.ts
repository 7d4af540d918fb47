// The relaxed-SIMD build's Q8_0 kernels' inner steps (compiled only with relaxed SIMD on: see
// matvec_q8_0.ts and matmul_q8_0.ts, which run them in their loops). Its own packed layout and
// activations ("q8_i8s", prepare_q8.ts); the integer dot of each block and the float order are
// the SIMD128 kernels', so both builds give the same bits.
//
// Why it is faster: i16x8.relaxed_dot_i8x16_i7x16_s (one pmaddubsw on x86) multiplies 16 signed
// bytes by 16 bytes that must be 7-bit (0..127; others are implementation-defined) and adds
// neighbouring pairs into i16 lanes. Q8_0 weights are full signed bytes, so the 7-bit side is
// |x|, and x's sign goes onto the weight: w ^ m, with m = 0xff where x < 0, is w where x >= 0 and
// -w - 1 (one's complement: no overflow, even for w = -128) where x < 0. Then
//   sum |x| (w ^ m) = sum x w - sum_{x < 0} |x|,
// and the activation carries that last sum per block (c), which starts each block's integer sum.
// A pair's i16 lane is at most 2 * 127 * 128 = 32512: no saturation. 16 multiply-adds cost an
// xor, the dot, an i32x4.dot_i16x8_s with ones (into i32) and an add: 4 instructions where the
// SIMD128 kernel's widening load, dot and add cost 6. In L2, one thread: 39-40 GMAC/s against
// 27-28 (docs/benchmarks.md).
//
// Layout (src/runtime/weight-kernels/q8.ts packs it): tiles and groups as matvec_q8_0.ts, a
// row's 128 quant bytes of a group being 8 pieces of 16: piece v, bytes 4b..4b+3 hold elements
// 4v..4v+3 of block b. The q8_i8s activation group puts |x| and m of the same elements in the
// same places (2 x 128 B), then c as i32 x4 and d as f32 x4 (288 B).

// i16 ones, loaded rather than written as a constant, which V8 would rebuild inside the loop at
// every use.
const Q8_RELAXED_ONES = memory.data<u32>([0x00010001, 0x00010001, 0x00010001, 0x00010001], 16);

/** i16 ones in a register, for step8. */
@inline function q8Ones(): v128 {
  return v128.load(Q8_RELAXED_ONES);
}

/**
 * s + the block-lane integer dots of one 16-byte weight piece w with the activation piece's |x|
 * (a) and sign masks (m): lane b gains the 4 products of block b, less its negative x's share,
 * which the block's c puts back.
 */
@inline function step8(s: v128, w: v128, a: v128, m: v128, ones: v128): v128 {
  return i32x4.add(s, i32x4.dot_i16x8_s(i16x8.relaxed_dot_i8x16_i7x16_s(v128.xor(w, m), a), ones));
}

export { q8Ones, step8 };
