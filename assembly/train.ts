// Kernels for training small f32 models (the activation predictors of train-predictors):
// three matrix products over row-major f32, the ReLU and its gradient, a weighted
// binary cross-entropy on bit-packed targets, and an Adam step.
// Float parameters travel as their i32 bit patterns (the thread pool passes i32 only).
// Every kernel's last two arguments are the range a thread computes (output rows or elements).

import { dots2x4 } from "./f32_tile";
import { fma4, hsum } from "./lanes";

@inline function at(p: usize, i: i32): usize {
  return p + ((<usize>i) << 2);
}

@inline function dot(a: usize, b: usize, k: i32): f32 {
  let s0 = f32x4.splat(0),
    s1 = f32x4.splat(0);
  let p = 0;
  for (; p + 8 <= k; p += 8) {
    const o = (<usize>p) << 2;
    s0 = fma4(s0, v128.load(a + o), v128.load(b + o));
    s1 = fma4(s1, v128.load(a + o, 16), v128.load(b + o, 16));
  }
  for (; p + 4 <= k; p += 4) s0 = fma4(s0, v128.load(at(a, p)), v128.load(at(b, p)));
  let s = hsum(f32x4.add(s0, s1));
  for (; p < k; p++) s += load<f32>(at(a, p)) * load<f32>(at(b, p));
  return s;
}

/**
 * C = A . B^T (acc != 0: C += A . B^T). A is m x k, B is n x k, C is m x n, all row-major.
 * Rows i of C in [r0, r1). Tiles of 2 rows of A x 4 rows of B (f32_tile.ts, matmul_f32's too).
 */
export function train_mm_nt(a: usize, b: usize, c: usize, m: i32, n: i32, k: i32, acc: i32, r0: i32, r1: i32): void {
  const ks = (<usize>k) << 2;
  let i = r0;
  for (; i + 2 <= r1; i += 2) {
    const a0 = a + <usize>i * ks,
      a1 = a0 + ks;
    const c0 = c + <usize>i * ((<usize>n) << 2),
      c1 = c0 + ((<usize>n) << 2);
    let j = 0;
    for (; j + 4 <= n; j += 4) dots2x4(a0, a1, b + <usize>j * ks, ks, k, at(c0, j), at(c1, j), acc != 0);
    for (; j < n; j++) {
      const bj = b + <usize>j * ks;
      let s0 = dot(a0, bj, k),
        s1 = dot(a1, bj, k);
      if (acc) {
        s0 += load<f32>(at(c0, j));
        s1 += load<f32>(at(c1, j));
      }
      store<f32>(at(c0, j), s0);
      store<f32>(at(c1, j), s1);
    }
  }
  for (; i < r1; i++) {
    const ai = a + <usize>i * ks;
    const ci = c + <usize>i * ((<usize>n) << 2);
    for (let j = 0; j < n; j++) {
      let s = dot(ai, b + <usize>j * ks, k);
      if (acc) s += load<f32>(at(ci, j));
      store<f32>(at(ci, j), s);
    }
  }
}

/**
 * C (+)= A' . B where A' is m x k with element (i, p) at a + 4 * (i * si + p * sp), B is k x n
 * and C m x n row-major; rows i in [r0, r1). Blocks of 4 rows x 16 columns of C stay in 16
 * registers for the whole sum over p: per p, 4 loads of B, 4 broadcasts of A, 16 multiply-adds.
 */
@inline function mmStrided(
  a: usize,
  si: i32,
  sp: i32,
  b: usize,
  c: usize,
  n: i32,
  k: i32,
  acc: i32,
  r0: i32,
  r1: i32,
): void {
  const ns = (<usize>n) << 2;
  const sps = (<usize>sp) << 2;
  let i = r0;
  for (; i + 4 <= r1; i += 4) {
    const a0 = a + ((<usize>(i * si)) << 2),
      a1 = a0 + ((<usize>si) << 2),
      a2 = a1 + ((<usize>si) << 2),
      a3 = a2 + ((<usize>si) << 2);
    const c0 = c + <usize>i * ns,
      c1 = c0 + ns,
      c2 = c1 + ns,
      c3 = c2 + ns;
    let j = 0;
    for (; j + 16 <= n; j += 16) {
      const o = (<usize>j) << 2;
      let x0 = f32x4.splat(0),
        x1 = f32x4.splat(0),
        x2 = f32x4.splat(0),
        x3 = f32x4.splat(0);
      let y0 = f32x4.splat(0),
        y1 = f32x4.splat(0),
        y2 = f32x4.splat(0),
        y3 = f32x4.splat(0);
      let z0 = f32x4.splat(0),
        z1 = f32x4.splat(0),
        z2 = f32x4.splat(0),
        z3 = f32x4.splat(0);
      let w0 = f32x4.splat(0),
        w1 = f32x4.splat(0),
        w2 = f32x4.splat(0),
        w3 = f32x4.splat(0);
      if (acc) {
        x0 = v128.load(c0 + o);
        x1 = v128.load(c0 + o, 16);
        x2 = v128.load(c0 + o, 32);
        x3 = v128.load(c0 + o, 48);
        y0 = v128.load(c1 + o);
        y1 = v128.load(c1 + o, 16);
        y2 = v128.load(c1 + o, 32);
        y3 = v128.load(c1 + o, 48);
        z0 = v128.load(c2 + o);
        z1 = v128.load(c2 + o, 16);
        z2 = v128.load(c2 + o, 32);
        z3 = v128.load(c2 + o, 48);
        w0 = v128.load(c3 + o);
        w1 = v128.load(c3 + o, 16);
        w2 = v128.load(c3 + o, 32);
        w3 = v128.load(c3 + o, 48);
      }
      let bp = b + o;
      let ap = <usize>0;
      for (let p = 0; p < k; p++) {
        const b0 = v128.load(bp),
          b1 = v128.load(bp, 16),
          b2 = v128.load(bp, 32),
          b3 = v128.load(bp, 48);
        const u0 = v128.load32_splat(a0 + ap),
          u1 = v128.load32_splat(a1 + ap),
          u2 = v128.load32_splat(a2 + ap),
          u3 = v128.load32_splat(a3 + ap);
        x0 = fma4(x0, u0, b0);
        x1 = fma4(x1, u0, b1);
        x2 = fma4(x2, u0, b2);
        x3 = fma4(x3, u0, b3);
        y0 = fma4(y0, u1, b0);
        y1 = fma4(y1, u1, b1);
        y2 = fma4(y2, u1, b2);
        y3 = fma4(y3, u1, b3);
        z0 = fma4(z0, u2, b0);
        z1 = fma4(z1, u2, b1);
        z2 = fma4(z2, u2, b2);
        z3 = fma4(z3, u2, b3);
        w0 = fma4(w0, u3, b0);
        w1 = fma4(w1, u3, b1);
        w2 = fma4(w2, u3, b2);
        w3 = fma4(w3, u3, b3);
        bp += ns;
        ap += sps;
      }
      v128.store(c0 + o, x0);
      v128.store(c0 + o, x1, 16);
      v128.store(c0 + o, x2, 32);
      v128.store(c0 + o, x3, 48);
      v128.store(c1 + o, y0);
      v128.store(c1 + o, y1, 16);
      v128.store(c1 + o, y2, 32);
      v128.store(c1 + o, y3, 48);
      v128.store(c2 + o, z0);
      v128.store(c2 + o, z1, 16);
      v128.store(c2 + o, z2, 32);
      v128.store(c2 + o, z3, 48);
      v128.store(c3 + o, w0);
      v128.store(c3 + o, w1, 16);
      v128.store(c3 + o, w2, 32);
      v128.store(c3 + o, w3, 48);
    }
    // column tail: 4 at a time, then one
    for (; j + 4 <= n; j += 4) {
      const o = (<usize>j) << 2;
      let x = f32x4.splat(0),
        y = f32x4.splat(0),
        z = f32x4.splat(0),
        w = f32x4.splat(0);
      if (acc) {
        x = v128.load(c0 + o);
        y = v128.load(c1 + o);
        z = v128.load(c2 + o);
        w = v128.load(c3 + o);
      }
      let bp = b + o;
      let ap = <usize>0;
      for (let p = 0; p < k; p++) {
        const bv = v128.load(bp);
        x = fma4(x, v128.load32_splat(a0 + ap), bv);
        y = fma4(y, v128.load32_splat(a1 + ap), bv);
        z = fma4(z, v128.load32_splat(a2 + ap), bv);
        w = fma4(w, v128.load32_splat(a3 + ap), bv);
        bp += ns;
        ap += sps;
      }
      v128.store(c0 + o, x);
      v128.store(c1 + o, y);
      v128.store(c2 + o, z);
      v128.store(c3 + o, w);
    }
    for (; j < n; j++) {
      let x: f32 = 0,
        y: f32 = 0,
        z: f32 = 0,
        w: f32 = 0;
      for (let p = 0; p < k; p++) {
        const bv = load<f32>(b + <usize>p * ns + ((<usize>j) << 2));
        const ap = <usize>p * sps;
        x += load<f32>(a0 + ap) * bv;
        y += load<f32>(a1 + ap) * bv;
        z += load<f32>(a2 + ap) * bv;
        w += load<f32>(a3 + ap) * bv;
      }
      if (acc) {
        x += load<f32>(at(c0, j));
        y += load<f32>(at(c1, j));
        z += load<f32>(at(c2, j));
        w += load<f32>(at(c3, j));
      }
      store<f32>(at(c0, j), x);
      store<f32>(at(c1, j), y);
      store<f32>(at(c2, j), z);
      store<f32>(at(c3, j), w);
    }
  }
  // row tail: one row at a time, 4 columns per step
  for (; i < r1; i++) {
    const ai = a + ((<usize>(i * si)) << 2);
    const ci = c + <usize>i * ns;
    let j = 0;
    for (; j + 4 <= n; j += 4) {
      const o = (<usize>j) << 2;
      let x = acc ? v128.load(ci + o) : f32x4.splat(0);
      for (let p = 0; p < k; p++) x = fma4(x, v128.load32_splat(ai + <usize>p * sps), v128.load(b + <usize>p * ns + o));
      v128.store(ci + o, x);
    }
    for (; j < n; j++) {
      let x: f32 = acc ? load<f32>(at(ci, j)) : 0;
      for (let p = 0; p < k; p++)
        x += load<f32>(ai + <usize>p * sps) * load<f32>(b + <usize>p * ns + ((<usize>j) << 2));
      store<f32>(at(ci, j), x);
    }
  }
}

/** C = A . B (acc != 0: C += A . B). A is m x k, B is k x n, C is m x n, row-major; rows of C in [r0, r1). */
export function train_mm_nn(a: usize, b: usize, c: usize, m: i32, n: i32, k: i32, acc: i32, r0: i32, r1: i32): void {
  mmStrided(a, k, 1, b, c, n, k, acc, r0, r1);
}

/** C = A^T . B (acc != 0: C += A^T . B). A is k x m, B is k x n, C is m x n, row-major; rows of C in [r0, r1). */
export function train_mm_tn(a: usize, b: usize, c: usize, m: i32, n: i32, k: i32, acc: i32, r0: i32, r1: i32): void {
  mmStrided(a, 1, m, b, c, n, k, acc, r0, r1);
}

/** x = max(x, 0) over elements [r0, r1). */
export function train_relu(x: usize, r0: i32, r1: i32): void {
  const zero = f32x4.splat(0);
  let i = r0;
  for (; i + 4 <= r1; i += 4) v128.store(at(x, i), f32x4.max(v128.load(at(x, i)), zero));
  for (; i < r1; i++) store<f32>(at(x, i), max(load<f32>(at(x, i)), 0));
}

/** The ReLU's backward step: g = h > 0 ? g : 0 over elements [r0, r1) (h: the ReLU's output or input). */
export function train_relu_grad(g: usize, h: usize, r0: i32, r1: i32): void {
  const zero = f32x4.splat(0);
  let i = r0;
  for (; i + 4 <= r1; i += 4) v128.store(at(g, i), v128.and(v128.load(at(g, i)), f32x4.gt(v128.load(at(h, i)), zero)));
  for (; i < r1; i++) if (!(load<f32>(at(h, i)) > 0)) store<f32>(at(g, i), 0);
}

/**
 * Weighted binary cross-entropy on logits, rows [r0, r1) of s (nOut logits per row). Targets are
 * bits: row r's bit j is bit (j & 31) of u32 word (r * words + (j >> 5)) of `mask`. A positive's
 * loss is weighted by wpos. Writes the gradient ds = scale * w * (sigmoid(s) - y) (ds may be s)
 * and each row's summed loss (unscaled) to loss[r].
 */
export function train_bce(
  s: usize,
  mask: usize,
  ds: usize,
  nOut: i32,
  words: i32,
  wposBits: i32,
  scaleBits: i32,
  loss: usize,
  r0: i32,
  r1: i32,
): void {
  const wpos = reinterpret<f32>(wposBits);
  const scale = reinterpret<f32>(scaleBits);
  for (let r = r0; r < r1; r++) {
    const sr = s + <usize>r * ((<usize>nOut) << 2);
    const dr = ds + <usize>r * ((<usize>nOut) << 2);
    const mr = mask + <usize>r * ((<usize>words) << 2);
    let total: f32 = 0;
    for (let j = 0; j < nOut; j++) {
      const x = load<f32>(at(sr, j));
      const y = (load<u32>(mr + ((<usize>(j >> 5)) << 2)) >>> ((<u32>j) & 31)) & 1;
      // log(1 + e^-|x|) is the stable core of both log sigmoid(x) and log(1 - sigmoid(x))
      const e = Mathf.exp(-Mathf.abs(x));
      const soft = Mathf.log(<f32>1 + e);
      const p: f32 = x >= 0 ? <f32>1 / (<f32>1 + e) : e / (<f32>1 + e);
      if (y) {
        total += wpos * (soft + max(-x, <f32>0));
        store<f32>(at(dr, j), scale * wpos * (p - 1));
      } else {
        total += soft + max(x, <f32>0);
        store<f32>(at(dr, j), scale * p);
      }
    }
    store<f32>(at(loss, r), total);
  }
}

/**
 * One Adam step over elements [r0, r1): m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
 * w -= lr * (m / bc1) / (sqrt(v / bc2) + eps), where bc1 = 1 - b1^t and bc2 = 1 - b2^t.
 */
export function train_adam(
  w: usize,
  g: usize,
  m: usize,
  v: usize,
  lrBits: i32,
  b1Bits: i32,
  b2Bits: i32,
  epsBits: i32,
  bc1Bits: i32,
  bc2Bits: i32,
  r0: i32,
  r1: i32,
): void {
  const lr = reinterpret<f32>(lrBits),
    b1 = reinterpret<f32>(b1Bits),
    b2 = reinterpret<f32>(b2Bits);
  const eps = reinterpret<f32>(epsBits),
    bc1 = reinterpret<f32>(bc1Bits),
    bc2 = reinterpret<f32>(bc2Bits);
  const vb1 = f32x4.splat(b1),
    vc1 = f32x4.splat(1 - b1),
    vb2 = f32x4.splat(b2),
    vc2 = f32x4.splat(1 - b2);
  const vstep = f32x4.splat(lr / bc1),
    vbc2 = f32x4.splat(<f32>1 / bc2),
    veps = f32x4.splat(eps);
  let i = r0;
  for (; i + 4 <= r1; i += 4) {
    const gv = v128.load(at(g, i));
    const mv = f32x4.add(f32x4.mul(vb1, v128.load(at(m, i))), f32x4.mul(vc1, gv));
    const vv = f32x4.add(f32x4.mul(vb2, v128.load(at(v, i))), f32x4.mul(vc2, f32x4.mul(gv, gv)));
    v128.store(at(m, i), mv);
    v128.store(at(v, i), vv);
    const den = f32x4.add(f32x4.sqrt(f32x4.mul(vv, vbc2)), veps);
    v128.store(at(w, i), f32x4.sub(v128.load(at(w, i)), f32x4.div(f32x4.mul(vstep, mv), den)));
  }
  for (; i < r1; i++) {
    const gi = load<f32>(at(g, i));
    const mi = b1 * load<f32>(at(m, i)) + (1 - b1) * gi;
    const vi = b2 * load<f32>(at(v, i)) + (1 - b2) * gi * gi;
    store<f32>(at(m, i), mi);
    store<f32>(at(v, i), vi);
    store<f32>(at(w, i), load<f32>(at(w, i)) - ((lr / bc1) * mi) / (Mathf.sqrt(vi / bc2) + eps));
  }
}
