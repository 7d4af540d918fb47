// Q5 blocks (GGUF layout: nibble bytes as Q4's, the fifth bits in a u32 qh, bit i for element i)
// come out as their 32 quants (0..31) in natural order, bytes 0..15 (lo) and 16..31 (hi): the
// nibbles as the relaxed Q4 dot splits them, or'ed with 0x10 where qh's bit is set (qh's bytes
// spread 8 to a half, tested against each byte's bit). About 12 instructions a block; both the
// dots and the down columns start from these bytes.
// each byte's bit of qh, as u32 lanes (the 0x0f and 0x10 bytes and the i16 ones are the relaxed
// Q4 kernels', Q4_RELAXED_CONSTS at 0, 32 and 16)

import { Q4_RELAXED_CONSTS } from "./matvec_q4_relaxed";

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

export { q5lo, q5hi };
