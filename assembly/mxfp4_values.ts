// MXFP4's numbers, shared by the dense kernel (matvec_mxfp4.ts) and the sparse bundle kernels
// (sparse_row_dots.ts): the FP4 codes' values and the E8M0 block scale (src/format/mxfp4.ts is
// the plain-TS side).

// the FP4 codes' values, doubled, as i8 lanes (code 8 is -0)
const FP4 = memory.data<i8>([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], 16);

/** Half the E8M0 scale of exponent byte e: 2^(e - 128), subnormal for e < 2 (ggml's GGML_E8M0_TO_FP32_HALF). */
@inline function e8m0Half(e: u32): f32 {
  return reinterpret<f32>(e < 2 ? (<u32>0x00200000) << e : (e - 1) << 23);
}

export { FP4, e8m0Half };
