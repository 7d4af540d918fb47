// Where the sparse FFN kernels' data sits: the "q8_sp" activation's groups (sparse_prepare.ts
// explains their contents) and the partial slots the down columns add into (sparse_ffn.ts says how
// threads own them), with the order the quantized types' down columns keep their sums in.
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

const XG: usize = 352; // q8_sp bytes per group of 4 blocks
const XBK: usize = 80; // q8_sp bytes per block inside a group (quants, correction)

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

// This thread's partial slot. A range that does not start at a multiple of `per` or is longer
// than `per` means the pool was not run with align = per: two threads could then share a slot,
// so the kernel traps (the pool reports it) rather than race.
@inline function slotBase(partials: usize, n: i32, per: i32, k0: i32, k1: i32): usize {
  if (per <= 0 || k0 % per != 0 || k1 - k0 > per) unreachable();
  return partials + <usize>(k0 / per) * ((<usize>slotFloats(n)) << 2);
}

export { XG, XBK, NIB, slotFloats, scratchOf, slotBase };
