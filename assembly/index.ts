// The kernel module: one file per family of kernels, re-exported here.
// Conventions: every pointer is a byte offset into the one shared memory; every kernel that a
// thread pool splits takes its range as its last two arguments (r0, r1: rows, heads, tokens).
export * from "./matvec_f32";
export * from "./model_ops";
export * from "./matmul_f32";
export * from "./matvec_q8_0";
export * from "./matvec_q8_0_rows";
export * from "./matvec_q4";
export * from "./matmul_q8_0";
export * from "./matmul_q4";
export * from "./prepare_q8";
export * from "./matvec_half";
export * from "./matvec_kquant";
export * from "./matvec_mxfp4";
export * from "./prepare_q8k";
export * from "./sparse_prepare";
export * from "./sparse_ffn";
export * from "./sparse_sum_partials";
export * from "./sparse_segments";
export * from "./train";
export * from "./stream_probe";
export { schedule_pins } from "./schedule_pin";
export * from "./quantize_rows";
export * from "./quant_measure";
export * from "./transpose_f32";
