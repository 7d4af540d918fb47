// The non-matmul kernels of a transformer block, batched over tokens.
// Float parameters travel as their i32 bit patterns (the thread pool passes i32 only).
// Each kernel's last two arguments are the range a thread computes (tokens or heads).

import { exp1, exp4, silu, silu4, gelu, swigluOaiGate, swigluOaiUp } from "./activation_math";
import { f16ToF32, f32ToF16, halfLanes } from "./half";
import { ACT_DRELU, ACT_GELU, ACT_RELU, ACT_SILU, ACT_SWIGLU_OAI } from "./activation_codes";

@inline function f32at(p: usize, i: i32): f32 {
  return load<f32>(p + ((<usize>i) << 2));
}
@inline function setf32(p: usize, i: i32, v: f32): void {
  store<f32>(p + ((<usize>i) << 2), v);
}

function sum4(v: v128): f32 {
  return f32x4.extract_lane(v, 0) + f32x4.extract_lane(v, 1) + f32x4.extract_lane(v, 2) + f32x4.extract_lane(v, 3);
}

/** RMSNorm of tokens t0..t1: y[t] = x[t] * w / sqrt(mean(x[t]^2) + eps). y may equal x. */
export function rmsnorm_rows(y: usize, x: usize, w: usize, n: i32, epsBits: i32, t0: i32, t1: i32): void {
  const eps = reinterpret<f32>(epsBits);
  for (let t = t0; t < t1; t++) {
    const xr = x + <usize>t * ((<usize>n) << 2);
    const yr = y + <usize>t * ((<usize>n) << 2);
    let acc = f32x4.splat(0);
    let i = 0;
    for (; i + 4 <= n; i += 4) {
      const v = v128.load(xr + ((<usize>i) << 2));
      acc = f32x4.add(acc, f32x4.mul(v, v));
    }
    let ss = sum4(acc);
    for (; i < n; i++) {
      const v = f32at(xr, i);
      ss += v * v;
    }
    const scale = f32x4.splat(<f32>1.0 / Mathf.sqrt(ss / <f32>n + eps));
    i = 0;
    for (; i + 4 <= n; i += 4) {
      const o = (<usize>i) << 2;
      v128.store(yr + o, f32x4.mul(f32x4.mul(v128.load(xr + o), scale), v128.load(w + o)));
    }
    const s = f32x4.extract_lane(scale, 0);
    for (; i < n; i++) setf32(yr, i, f32at(xr, i) * s * f32at(w, i));
  }
}

/**
 * Rotary position embedding, in place, on tokens t0..t1 of x ([ntok][nHeads*headDim]).
 * `table` holds (cos, sin) for each position and each of the nRot/2 rotated pairs, `pos` the
 * position (i32) of each token. neox = 0 rotates adjacent pairs (x[2i], x[2i+1]) as llama does;
 * neox = 1 rotates (x[i], x[i + nRot/2]) as GPT-NeoX / Qwen2 do.
 */
export function rope(
  x: usize,
  pos: usize,
  table: usize,
  nHeads: i32,
  headDim: i32,
  nRot: i32,
  neox: i32,
  t0: i32,
  t1: i32,
): void {
  const half = nRot >> 1;
  const rowLen = nHeads * headDim;
  for (let t = t0; t < t1; t++) {
    const p = load<i32>(pos + ((<usize>t) << 2));
    const tab = table + <usize>p * ((<usize>half) << 3);
    const row = x + <usize>t * ((<usize>rowLen) << 2);
    for (let h = 0; h < nHeads; h++) {
      const v = row + <usize>(h * headDim) * 4;
      for (let i = 0; i < half; i++) {
        const c = load<f32>(tab + ((<usize>i) << 3));
        const s = load<f32>(tab + ((<usize>i) << 3) + 4);
        const ia = neox ? i : 2 * i;
        const ib = neox ? i + half : 2 * i + 1;
        const a = f32at(v, ia);
        const b = f32at(v, ib);
        setf32(v, ia, a * c - b * s);
        setf32(v, ib, a * s + b * c);
      }
    }
  }
}

// One KV cache element type per instantiation: u16 holds f16 bits, f32 is itself. The branches
// on sizeof<T>() fold at compile time, so each of attention's four (K, V) combinations gets its
// own loops.
@inline function kv4<T>(row: usize, d: i32): v128 {
  if (sizeof<T>() == 2) return halfLanes(i32x4.extend_low_i16x8_s(v128.load64_zero(row + ((<usize>d) << 1))));
  return v128.load(row + ((<usize>d) << 2));
}
@inline function kv1<T>(row: usize, d: i32): f32 {
  if (sizeof<T>() == 2) return f16ToF32(load<u16>(row + ((<usize>d) << 1)));
  return f32at(row, d);
}

/**
 * Causal attention for heads h0..h1 of ntok query tokens at positions pos0 .. pos0+ntok-1,
 * over a KV cache laid out [position][nKVHeads*headDim] with f16 or f32 elements (kvF16: bit 0
 * for keys, bit 1 for values). ring > 0: the cache holds only `ring` rows, position j in row
 * j % ring (a sliding-window layer keeps its window and a batch, no more).
 * Grouped-query: query head h reads KV head h / (nHeads / nKVHeads). `scores` has room for ctx
 * floats per head. out is [ntok][nHeads*headDim] (f32, as q).
 *
 * scaleBits: the f32 bits of the scale of q.k (1/sqrt(headDim) for most models). window > 0: a
 * token at position p sees positions p - window + 1 .. p only (sliding-window layers). sinks, when
 * not 0: one f32 logit per head that joins the softmax's denominator and is then dropped (an
 * attention sink: a head may attend to nothing).
 */
export function attention(
  q: usize,
  kc: usize,
  vc: usize,
  out: usize,
  scores: usize,
  ntok: i32,
  pos0: i32,
  nHeads: i32,
  nKVHeads: i32,
  headDim: i32,
  ctx: i32,
  kvF16: i32,
  scaleBits: i32,
  window: i32,
  ring: i32,
  sinks: usize,
  h0: i32,
  h1: i32,
): void {
  const sc = reinterpret<f32>(scaleBits);
  const n = ntok,
    p = pos0,
    H = nHeads,
    G = nKVHeads,
    d = headDim;
  if (kvF16 & 1) {
    if (kvF16 & 2) attend<u16, u16>(q, kc, vc, out, scores, n, p, H, G, d, ctx, sc, window, ring, sinks, h0, h1);
    else attend<u16, f32>(q, kc, vc, out, scores, n, p, H, G, d, ctx, sc, window, ring, sinks, h0, h1);
  } else if (kvF16 & 2) attend<f32, u16>(q, kc, vc, out, scores, n, p, H, G, d, ctx, sc, window, ring, sinks, h0, h1);
  else attend<f32, f32>(q, kc, vc, out, scores, n, p, H, G, d, ctx, sc, window, ring, sinks, h0, h1);
}

function attend<K, V>(
  q: usize,
  kc: usize,
  vc: usize,
  out: usize,
  scores: usize,
  ntok: i32,
  pos0: i32,
  nHeads: i32,
  nKVHeads: i32,
  headDim: i32,
  ctx: i32,
  scale: f32,
  window: i32,
  ring: i32,
  sinks: usize,
  h0: i32,
  h1: i32,
): void {
  const group = nHeads / nKVHeads;
  const kvDim = nKVHeads * headDim;
  const kStride = <usize>kvDim * sizeof<K>();
  const vStride = <usize>kvDim * sizeof<V>();
  const qDim = nHeads * headDim;
  for (let h = h0; h < h1; h++) {
    const head = <usize>((h / group) * headDim);
    const sc = scores + <usize>h * ((<usize>ctx) << 2);
    const sink: f32 = sinks ? f32at(sinks, h) : -Infinity;
    for (let t = 0; t < ntok; t++) {
      const qv = q + ((<usize>(t * qDim + h * headDim)) << 2);
      const n = pos0 + t + 1;
      const lo = window > 0 && n > window ? n - window : 0;
      let mx: f32 = sink;
      for (let j = lo; j < n; j++) {
        const kv = kc + <usize>(ring > 0 ? j % ring : j) * kStride + head * sizeof<K>();
        let acc = f32x4.splat(0);
        let d = 0;
        for (; d + 4 <= headDim; d += 4)
          acc = f32x4.add(acc, f32x4.mul(v128.load(qv + ((<usize>d) << 2)), kv4<K>(kv, d)));
        let s = sum4(acc);
        for (; d < headDim; d++) s += f32at(qv, d) * kv1<K>(kv, d);
        s *= scale;
        setf32(sc, j, s);
        if (s > mx) mx = s;
      }
      // softmax numerators, four at a time (exp4)
      const M = f32x4.splat(mx);
      let acc4 = f32x4.splat(0);
      let j = lo;
      for (; j + 4 <= n; j += 4) {
        const p = sc + ((<usize>j) << 2);
        const e = exp4(f32x4.sub(v128.load(p), M));
        v128.store(p, e);
        acc4 = f32x4.add(acc4, e);
      }
      let sum = sum4(acc4);
      for (; j < n; j++) {
        const e = exp1(f32at(sc, j) - mx);
        setf32(sc, j, e);
        sum += e;
      }
      if (sinks) sum += exp1(sink - mx);
      const inv: f32 = <f32>1.0 / sum;
      const ov = out + ((<usize>(t * qDim + h * headDim)) << 2);
      let d = 0;
      for (; d + 4 <= headDim; d += 4) v128.store(ov + ((<usize>d) << 2), f32x4.splat(0));
      for (; d < headDim; d++) setf32(ov, d, 0);
      for (let j = lo; j < n; j++) {
        const wj = f32x4.splat(f32at(sc, j) * inv);
        const vv = vc + <usize>(ring > 0 ? j % ring : j) * vStride + head * sizeof<V>();
        d = 0;
        for (; d + 4 <= headDim; d += 4) {
          const o = (<usize>d) << 2;
          v128.store(ov + o, f32x4.add(v128.load(ov + o), f32x4.mul(wj, kv4<V>(vv, d))));
        }
        const w1 = f32x4.extract_lane(wj, 0);
        for (; d < headDim; d++) setf32(ov, d, f32at(ov, d) + w1 * kv1<V>(vv, d));
      }
    }
  }
}

/**
 * Elements i0..i1 of src (f32) into the KV cache at dst: as f16 bits rounded to nearest even
 * (toF16 = 1, as llama.cpp stores them), else copied as f32.
 */
export function kv_store(src: usize, dst: usize, toF16: i32, i0: i32, i1: i32): void {
  if (toF16) {
    for (let i = i0; i < i1; i++) store<u16>(dst + ((<usize>i) << 1), <u16>f32ToF16(f32at(src, i)));
  } else memory.copy(dst + ((<usize>i0) << 2), src + ((<usize>i0) << 2), (<usize>(i1 - i0)) << 2);
}

export { ACT_SILU, ACT_RELU, ACT_DRELU, ACT_GELU, ACT_SWIGLU_OAI };

/** Gated FFN activation, in place on elements i0..i1 of g: g = act(g) * u (dReLU: relu(g) * relu(u)). */
export function ffn_act(g: usize, u: usize, kind: i32, i0: i32, i1: i32): void {
  if (kind == ACT_SILU)
    for (; i0 + 4 <= i1; i0 += 4) {
      const o = (<usize>i0) << 2;
      v128.store(g + o, f32x4.mul(silu4(v128.load(g + o)), v128.load(u + o)));
    }
  for (let i = i0; i < i1; i++) {
    const a = f32at(g, i);
    const b = f32at(u, i);
    let r: f32;
    if (kind == ACT_SILU) r = silu(a) * b;
    else if (kind == ACT_RELU) r = a > 0 ? a * b : 0;
    else if (kind == ACT_DRELU) r = a > 0 && b > 0 ? a * b : 0;
    else if (kind == ACT_SWIGLU_OAI) r = swigluOaiGate(a) * swigluOaiUp(b);
    else r = gelu(a) * b;
    setf32(g, i, r);
  }
}

/**
 * ffn_act with a magnitude cut: an activation with |act(g)| <= cut counts as zero (thresholded
 * sparsity for SiLU models, as CATS/TEAL). cut comes as the bits of an f32.
 */
export function ffn_act_cut(g: usize, u: usize, kind: i32, cutBits: i32, i0: i32, i1: i32): void {
  const cut = reinterpret<f32>(cutBits);
  for (let i = i0; i < i1; i++) {
    const a = f32at(g, i);
    const b = f32at(u, i);
    let r: f32;
    if (kind == ACT_SILU) r = silu(a);
    else if (kind == ACT_RELU) r = a > 0 ? a : 0;
    else if (kind == ACT_DRELU) r = a > 0 && b > 0 ? a : 0;
    else if (kind == ACT_SWIGLU_OAI) r = swigluOaiGate(a);
    else r = gelu(a);
    setf32(g, i, abs(r) > cut ? r * (kind == ACT_SWIGLU_OAI ? swigluOaiUp(b) : b) : 0);
  }
}

/** y[i] += x[i] for i in i0..i1. */
export function add_inplace(y: usize, x: usize, i0: i32, i1: i32): void {
  let i = i0;
  for (; i + 4 <= i1; i += 4) {
    const o = (<usize>i) << 2;
    v128.store(y + o, f32x4.add(v128.load(y + o), v128.load(x + o)));
  }
  for (; i < i1; i++) setf32(y, i, f32at(y, i) + f32at(x, i));
}

/** Add a bias row of n floats to tokens t0..t1 of y ([ntok][n]). */
export function add_bias_rows(y: usize, b: usize, n: i32, t0: i32, t1: i32): void {
  for (let t = t0; t < t1; t++) {
    const yr = y + <usize>t * ((<usize>n) << 2);
    for (let i = 0; i < n; i++) setf32(yr, i, f32at(yr, i) + f32at(b, i));
  }
}

/** x[i] = max(x[i], 0) for i in i0..i1 (the predictor's hidden layer). */
export function relu_inplace(x: usize, i0: i32, i1: i32): void {
  const zero = f32x4.splat(0);
  let i = i0;
  for (; i + 4 <= i1; i += 4) {
    const o = (<usize>i) << 2;
    v128.store(x + o, f32x4.max(v128.load(x + o), zero));
  }
  for (; i < i1; i++) {
    const v = f32at(x, i);
    setf32(x, i, v > 0 ? v : 0);
  }
}
