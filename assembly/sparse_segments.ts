// The sparse kernels over segments of a layer's neurons, for a summation order that does not
// depend on which neurons were in memory, on when reads landed or on the thread count
// (src/model/offload/fixed-order.ts). A call computes `items`: i32 triples [from, to, slot], each
// listed neurons [from, to) of the call's list added, in list order, into partial slot `slot`
// (its segment's); the pool splits [0, nItems) among threads, so one item is one thread's and no
// two items of a call share a slot. A segment may be computed in several calls, its neurons in
// the same order: the down columns then give the same bits as one call (four columns at once
// add exactly what four single columns add, sparse_down_columns.ts).
//   sparse_updown_seg_T(list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1)
//   sparse_ffn_seg_T(list, items, xAct, partials, nEmbd, rowBytes, act, i0, i1)

import { ffnInto, upDownInto } from "./sparse_bundles";
import { slotFloats } from "./sparse_layout";
import { T_BF16, T_F16, T_F32, T_Q4_0, T_Q4_1, T_Q5_0, T_Q5_1, T_Q8_0, T_MXFP4 } from "./sparse_types";

@inline function slotAt(partials: usize, n: i32, items: usize, i: i32): usize {
  return partials + <usize>load<i32>(items + 12 * <usize>i, 8) * ((<usize>slotFloats(n)) << 2);
}

// The items [i0, i1): up and down given the gates (`whole` false), or whole bundles (true; `gate`
// unused), each item's neurons into its segment's slot.
@inline function segmentItems(
  t: i32,
  whole: bool,
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  n: i32,
  rowBytes: i32,
  kind: i32,
  i0: i32,
  i1: i32,
): void {
  for (let i = i0; i < i1; i++) {
    const it = items + 12 * <usize>i;
    const y = slotAt(partials, n, items, i);
    if (whole) ffnInto(t, false, list, 0, 0, xAct, y, n, rowBytes, kind, load<i32>(it), load<i32>(it, 4));
    else upDownInto(t, list, gate, xAct, y, n, rowBytes, kind, load<i32>(it), load<i32>(it, 4));
  }
}

export function sparse_updown_seg_f32(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_F32, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_f32(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_F32, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}

export function sparse_updown_seg_f16(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_F16, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_f16(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_F16, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}

export function sparse_updown_seg_bf16(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_BF16, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_bf16(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_BF16, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}

export function sparse_updown_seg_q8_0(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q8_0, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_q8_0(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q8_0, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}

export function sparse_updown_seg_q4_0(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q4_0, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_q4_0(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q4_0, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}

export function sparse_updown_seg_q4_1(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q4_1, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_q4_1(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q4_1, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}

export function sparse_updown_seg_q5_0(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q5_0, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_q5_0(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q5_0, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}

export function sparse_updown_seg_q5_1(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q5_1, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_q5_1(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_Q5_1, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}

// MXFP4 bundles (gate and up rows MXFP4, the down column Q8_0; x prepared q8_sp mode 0)
export function sparse_updown_seg_mxfp4(
  list: usize,
  gate: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_MXFP4, false, list, gate, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
export function sparse_ffn_seg_mxfp4(
  list: usize,
  items: usize,
  xAct: usize,
  partials: usize,
  nEmbd: i32,
  rowBytes: i32,
  act: i32,
  i0: i32,
  i1: i32,
): void {
  segmentItems(T_MXFP4, true, list, 0, items, xAct, partials, nEmbd, rowBytes, act, i0, i1);
}
