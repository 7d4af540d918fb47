// The FFN weight types of the sparse kernels: the codes that select a kernel's type (GGUF's type
// numbers; after inlining a constant, so each exported kernel compiles to one type's code), the
// GGUF block geometry of the quantized ones and the type properties the generic kernels branch on.

const T_F32 = 0;
const T_Q4_0 = 2;
const T_Q4_1 = 3;
const T_Q8_0 = 8;
const T_F16 = 1;
const T_BF16 = 30;
const T_Q5_0 = 6;
const T_Q5_1 = 7;
// gate and up rows MXFP4 (17-byte blocks, as the GGUF ships them), the down column Q8_0 (twice an
// MXFP4 row's bytes): an MXFP4 bundle is [gate | up | down (Q8_0) | pad]
const T_MXFP4 = 39;
const MXFP4_BS: usize = 17;

// weight block geometry (GGUF): bytes per block, offset of the quants
const Q8_0_BS: usize = 34;
const Q4_0_BS: usize = 18;
const Q4_1_BS: usize = 20;
const Q5_0_BS: usize = 22; // d, qh (the 32 fifth bits), 16 bytes of nibbles
const Q5_1_BS: usize = 24; // d, m, qh, nibbles

// Whether rows go two at a time through dot2 (two bundles streamed at once: scattered bundles from
// DRAM are bound by the reads in flight): every type dot2 has, all but F32.
@inline function paired(t: i32): bool {
  return t != T_F32 && t != T_MXFP4;
}
// the type of a bundle's down column: its gate and up rows' type, but Q8_0 for MXFP4 (an MXFP4
// column requantized from rows would round each value to its column block's power-of-two scale)
@inline function downType(t: i32): i32 {
  return t == T_MXFP4 ? T_Q8_0 : t;
}
// bytes of a bundle's three parts (rb: one gate row's bytes); a biased bundle's gate and up
// biases (two f32) follow them
@inline function partsBytes(t: i32, rb: usize): usize {
  return t == T_MXFP4 ? rb << 2 : 3 * rb;
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

export {
  T_F32,
  T_Q4_0,
  T_Q4_1,
  T_Q8_0,
  T_F16,
  T_BF16,
  T_Q5_0,
  T_Q5_1,
  Q8_0_BS,
  Q4_0_BS,
  Q4_1_BS,
  Q5_0_BS,
  Q5_1_BS,
  T_MXFP4,
  MXFP4_BS,
  downType,
  partsBytes,
  paired,
  withMin,
  blockBytes,
};
