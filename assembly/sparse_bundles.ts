// The sparse kernels' loops over neuron bundles, generic over the weight type t (a constant after
// inlining; sparse_ffn.ts instantiates them per type): gate dots (gateT), up and down of neurons
// whose gate is known (upDownT), and whole bundles, listed or a strided cluster (ffnBundles).

import { gateFactor, combine } from "./sparse_gate_factor";
import { dot1, dot2 } from "./sparse_row_dots";
import { axpy1, axpy4 } from "./sparse_down_columns";
import { slotBase } from "./sparse_layout";
import { downType, paired, partsBytes } from "./sparse_types";
import { SPARSE_BIASED } from "./activation_codes";

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
    axpy4(downType(t), y, corr, n, DP0, DH0, DP1, DH1, DP2, DH2, p, h);
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
  const dt = downType(t);
  if (DN > 0) axpy1(dt, y, corr, n, DP0, DH0);
  if (DN > 1) axpy1(dt, y, corr, n, DP1, DH1);
  if (DN > 2) axpy1(dt, y, corr, n, DP2, DH2);
  DN = 0;
}

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

// Biased bundles (act | SPARSE_BIASED): the offset of a bundle's gate bias (its up bias 4 bytes
// on), the parts' end rounded up to 4 bytes (src/format/store/ffn-types.ts, bundleParts), 0 when
// unbiased; the kernels add them to the gate and up dots. A gate given to the up/down kernels is
// the gate row's dot alone: its bias is added here, as for a gate computed here.
@inline function biasOffset(t: i32, kind: i32, rb: usize): usize {
  return (kind & SPARSE_BIASED) != 0 ? (partsBytes(t, rb) + 3) & ~(<usize>3) : 0;
}
// v plus the bias at `o` (0: the gate's, 4: the up's) of the bundle at bp; unbiased bundles
// (bo 0) v itself, nothing read or added
@inline function withBias(v: f32, bo: usize, bp: usize, o: usize): f32 {
  return bo != 0 ? v + load<f32>(bp + bo + o) : v;
}
// the given gate of listed neuron k, plus its bundle's gate bias
@inline function gateOf(gate: usize, bundles: usize, k: i32, bo: usize): f32 {
  const g = load<f32>(gate + ((<usize>k) << 2));
  return bo != 0 ? g + load<f32>(<usize>load<i32>(bundles + ((<usize>k) << 2)) + bo) : g;
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
  upDownInto(t, bundles, gate, xAct, slotBase(partials, n, per, k0, k1), n, rowBytes, kind, k0, k1);
}

// upDownT's loop over listed k in [k0, k1), adding into the partial slot at y.
@inline function upDownInto(
  t: i32,
  bundles: usize,
  gate: usize,
  xAct: usize,
  y: usize,
  n: i32,
  rowBytes: i32,
  kind: i32,
  k0: i32,
  k1: i32,
): void {
  const corr = y + ((<usize>n) << 2);
  const rb = <usize>rowBytes;
  const bo = biasOffset(t, kind, rb);
  kind &= ~SPARSE_BIASED;
  DN = 0;
  // the gate factor of neuron k, computed one step ahead so that the next neuron's up and down
  // pages are touched only when they will be read
  let a = k0 < k1 ? gateFactor(kind, gateOf(gate, bundles, k0, bo)) : 0;
  // paired types: neurons that fire go in pairs whose up rows dot2 streams at once (each row's dot exactly
  // dot1's; pushed in list order): the pending first of a pair
  const pairs = paired(t);
  let pend = false,
    pendBp: usize = 0,
    pendA: f32 = 0;
  for (let k = k0; k < k1; k++) {
    const aNext = k + 1 < k1 ? gateFactor(kind, gateOf(gate, bundles, k + 1, bo)) : 0;
    if (aNext != 0) touchPages(<usize>load<i32>(bundles + ((<usize>k) << 2), 4) + rb, partsBytes(t, rb) - rb);
    // a = 0: h = 0 whatever up says, so neither up nor down is read
    if (a != 0) {
      const bp = <usize>load<i32>(bundles + ((<usize>k) << 2));
      if (!pairs) upDown1(t, bp, a, xAct, y, corr, n, rb, kind, bo);
      else if (!pend) {
        pend = true;
        pendBp = bp;
        pendA = a;
      } else {
        upDown2(t, pendBp, pendA, bp, a, xAct, y, corr, n, rb, kind, bo);
        pend = false;
      }
    }
    a = aNext;
  }
  if (pend) upDown1(t, pendBp, pendA, xAct, y, corr, n, rb, kind, bo);
  flushDown(t, y, corr, n);
}

// Gate, then (unless the gate factor is 0: up and down unread) up and down, of the bundle at bp.
@inline function ffnOne(
  t: i32,
  bp: usize,
  xAct: usize,
  y: usize,
  corr: usize,
  n: i32,
  rb: usize,
  kind: i32,
  bo: usize,
): void {
  const a = gateFactor(kind, withBias(dot1(t, bp, xAct, n), bo, bp, 0));
  if (a != 0) upDown1(t, bp, a, xAct, y, corr, n, rb, kind, bo);
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
  bo: usize,
): void {
  const h = combine(kind, a, withBias(dot1(t, bp + rb, xAct, n), bo, bp, 4));
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
  bo: usize,
): void {
  const u = dot2(t, bpA + rb, bpB + rb, xAct, n);
  const hA = combine(kind, aA, withBias(f32x4.extract_lane(u, 0), bo, bpA, 4)),
    hB = combine(kind, aB, withBias(f32x4.extract_lane(u, 1), bo, bpB, 4));
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
  bo: usize,
): void {
  const g = dot2(t, bpA, bpB, xAct, n);
  const aA = gateFactor(kind, withBias(f32x4.extract_lane(g, 0), bo, bpA, 0)),
    aB = gateFactor(kind, withBias(f32x4.extract_lane(g, 1), bo, bpB, 0));
  if (aA != 0 && aB != 0) upDown2(t, bpA, aA, bpB, aB, xAct, y, corr, n, rb, kind, bo);
  else if (aA != 0) upDown1(t, bpA, aA, xAct, y, corr, n, rb, kind, bo);
  else if (aB != 0) upDown1(t, bpB, aB, xAct, y, corr, n, rb, kind, bo);
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
  ffnInto(t, run, list, base, stride, xAct, slotBase(partials, n, per, k0, k1), n, rowBytes, kind, k0, k1);
}

// ffnBundles' loop over k in [k0, k1), adding into the partial slot at y.
@inline function ffnInto(
  t: i32,
  run: bool,
  list: usize,
  base: usize,
  stride: usize,
  xAct: usize,
  y: usize,
  n: i32,
  rowBytes: i32,
  kind: i32,
  k0: i32,
  k1: i32,
): void {
  const corr = y + ((<usize>n) << 2);
  const rb = <usize>rowBytes;
  const bo = biasOffset(t, kind, rb);
  kind &= ~SPARSE_BIASED;
  const parts = partsBytes(t, rb);
  DN = 0;
  let k = k0;
  if (paired(t))
    for (; k + 2 <= k1; k += 2) {
      if (k + 2 < k1) touchPages(bundleAt(run, list, base, stride, k + 2), parts);
      if (k + 3 < k1) touchPages(bundleAt(run, list, base, stride, k + 3), parts);
      const bpA = bundleAt(run, list, base, stride, k),
        bpB = bundleAt(run, list, base, stride, k + 1);
      ffnPair(t, bpA, bpB, xAct, y, corr, n, rb, kind, bo);
    }
  for (; k < k1; k++) {
    if (k + 1 < k1) touchPages(bundleAt(run, list, base, stride, k + 1), parts);
    ffnOne(t, bundleAt(run, list, base, stride, k), xAct, y, corr, n, rb, kind, bo);
  }
  flushDown(t, y, corr, n);
}

export { gateT, upDownT, ffnBundles, upDownInto, ffnInto };
