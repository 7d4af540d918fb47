// Sparse FFN kernels: the gated FFN computed neuron by neuron on neuron bundles (see
// docs/store-format.md). A bundle is [gate row | up row | down column | pad], each part nEmbd
// values of the FFN weight type in GGUF block layout (rowBytes each), the bundle anywhere in
// memory: kernels take an i32 array of bundle addresses, so bundles can sit in cache slots.
//
// Kernels (every argument i32; pointers are byte offsets into the shared memory; the range a
// thread computes comes last). T is f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1 or mxfp4 (gate
// and up MXFP4, the down column Q8_0). `act` | SPARSE_BIASED: each bundle carries its gate and up
// biases (two f32 after its parts), added to the gate and up dots (a given gate is the dot alone).
//   prepare_q8_sp(x, dst, cols, ntok, mode)           the "q8_sp" activation (sparse_prepare.ts)
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
// The exported kernels below are the generic loops of sparse_bundles.ts instantiated per type (an
// exported wasm function needs a declaration of its own; the type is a constant there, so each
// compiles to that type's code). prepare_q8_sp is in sparse_prepare.ts, sparse_sum_partials in
// sparse_sum_partials.ts; the pieces: sparse_types.ts, sparse_layout.ts, sparse_row_dots.ts (with
// sparse_block_dots.ts, sparse_half_dots.ts, sparse_block_scales.ts, sparse_q5_bytes.ts),
// sparse_gate_factor.ts, sparse_down_columns.ts (with sparse_down_q8.ts, sparse_down_q4.ts,
// sparse_down_q5.ts, sparse_down_slot.ts).

import { ffnBundles, gateT, upDownT } from "./sparse_bundles";
import { T_BF16, T_F16, T_F32, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_MXFP4 } from "./sparse_types";

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

// MXFP4 bundles (gate and up rows MXFP4, the down column Q8_0; x prepared q8_sp mode 0)
export function sparse_gate_mxfp4(
  bundles: usize,
  count: i32,
  xAct: usize,
  out: usize,
  nEmbd: i32,
  rowBytes: i32,
  k0: i32,
  k1: i32,
): void {
  gateT(T_MXFP4, bundles, xAct, out, nEmbd, rowBytes, k0, k1);
}
export function sparse_updown_mxfp4(
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
  upDownT(T_MXFP4, bundles, gate, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_mxfp4(
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
  ffnBundles(T_MXFP4, false, bundles, 0, 0, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export function sparse_ffn_run_mxfp4(
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
  ffnBundles(T_MXFP4, true, 0, base, <usize>stride, xAct, partials, nEmbd, rowBytes, act, per, k0, k1);
}
export { SPARSE_BIASED } from "./activation_codes";
