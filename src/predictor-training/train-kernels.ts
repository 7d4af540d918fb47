/**
 * The training kernels (assembly/train.ts) bound to a thread pool, and a plain-TS reference for
 * each. Matrices are row-major f32 in the pool's wasm memory, addressed by byte offset.
 *
 *   mmNT(a, b, c, m, n, k)   C = A . B^T    A m x k, B n x k   (a layer's forward pass: X . W^T)
 *   mmNN(a, b, c, m, n, k)   C = A . B      A m x k, B k x n   (gradient to a layer's input)
 *   mmTN(a, b, c, m, n, k)   C = A^T . B    A k x m, B k x n   (gradient to a layer's weights)
 *   relu(x, n), reluGrad(g, h, n), bce(...), adam(...)
 *
 * `acc` adds into C instead of overwriting it. Calls allocate nothing.
 */
import { f32Bits } from "../runtime/f32-bits.js";
import type { ThreadPool } from "../runtime/pool.js";

export class TrainKernels {
  private readonly a = new Int32Array(16);
  private readonly fn: Record<"nt" | "nn" | "tn" | "relu" | "reluGrad" | "bce" | "adam", number>;

  constructor(readonly pool: ThreadPool) {
    this.fn = {
      nt: pool.fn("train_mm_nt"),
      nn: pool.fn("train_mm_nn"),
      tn: pool.fn("train_mm_tn"),
      relu: pool.fn("train_relu"),
      reluGrad: pool.fn("train_relu_grad"),
      bce: pool.fn("train_bce"),
      adam: pool.fn("train_adam"),
    };
  }

  private mm(
    fn: number,
    a: number,
    b: number,
    c: number,
    m: number,
    n: number,
    k: number,
    acc: boolean,
    align: number,
  ): void {
    const x = this.a;
    x[0] = a;
    x[1] = b;
    x[2] = c;
    x[3] = m;
    x[4] = n;
    x[5] = k;
    x[6] = acc ? 1 : 0;
    this.pool.run(fn, x, 7, m, align, m * n * k);
  }

  /** C (m x n) = A (m x k) . B (n x k)^T, or += with acc. */
  mmNT(a: number, b: number, c: number, m: number, n: number, k: number, acc = false): void {
    this.mm(this.fn.nt, a, b, c, m, n, k, acc, 2);
  }

  /** C (m x n) = A (m x k) . B (k x n), or += with acc. */
  mmNN(a: number, b: number, c: number, m: number, n: number, k: number, acc = false): void {
    this.mm(this.fn.nn, a, b, c, m, n, k, acc, 4);
  }

  /** C (m x n) = A (k x m)^T . B (k x n), or += with acc. */
  mmTN(a: number, b: number, c: number, m: number, n: number, k: number, acc = false): void {
    this.mm(this.fn.tn, a, b, c, m, n, k, acc, 4);
  }

  /** x = max(x, 0), n elements in place. */
  relu(x: number, n: number): void {
    this.a[0] = x;
    this.pool.run(this.fn.relu, this.a, 1, n, 64, n);
  }

  /** g = h > 0 ? g : 0, n elements. */
  reluGrad(g: number, h: number, n: number): void {
    this.a[0] = g;
    this.a[1] = h;
    this.pool.run(this.fn.reluGrad, this.a, 2, n, 64, n);
  }

  /**
   * Weighted BCE on `rows` rows of nOut logits at s with bit targets (`words` u32 per row):
   * ds = scale * w * (sigmoid(s) - y), loss[r] = the row's weighted loss.
   */
  bce(
    s: number,
    mask: number,
    ds: number,
    rows: number,
    nOut: number,
    words: number,
    wpos: number,
    scale: number,
    loss: number,
  ): void {
    const x = this.a;
    x[0] = s;
    x[1] = mask;
    x[2] = ds;
    x[3] = nOut;
    x[4] = words;
    x[5] = f32Bits(wpos);
    x[6] = f32Bits(scale);
    x[7] = loss;
    this.pool.run(this.fn.bce, x, 8, rows, 1, rows * nOut * 16);
  }

  /** One Adam step over n parameters (t: the step number, from 1). */
  adam(
    w: number,
    g: number,
    m: number,
    v: number,
    n: number,
    t: number,
    lr: number,
    b1 = 0.9,
    b2 = 0.999,
    eps = 1e-8,
  ): void {
    const x = this.a;
    x[0] = w;
    x[1] = g;
    x[2] = m;
    x[3] = v;
    x[4] = f32Bits(lr);
    x[5] = f32Bits(b1);
    x[6] = f32Bits(b2);
    x[7] = f32Bits(eps);
    x[8] = f32Bits(1 - b1 ** t);
    x[9] = f32Bits(1 - b2 ** t);
    this.pool.run(this.fn.adam, x, 10, n, 64, n * 8);
  }
}

// ---------------------------------------------------------------------------------------------
// Plain-TS references (f64 sums; the kernels sum in f32, so compare with a tolerance)

export function refMmNT(
  a: Float32Array,
  b: Float32Array,
  c: Float32Array,
  m: number,
  n: number,
  k: number,
  acc = false,
): void {
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = acc ? c[i * n + j] : 0;
      for (let p = 0; p < k; p++) s += a[i * k + p] * b[j * k + p];
      c[i * n + j] = s;
    }
  }
}

export function refMmNN(
  a: Float32Array,
  b: Float32Array,
  c: Float32Array,
  m: number,
  n: number,
  k: number,
  acc = false,
): void {
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = acc ? c[i * n + j] : 0;
      for (let p = 0; p < k; p++) s += a[i * k + p] * b[p * n + j];
      c[i * n + j] = s;
    }
  }
}

export function refMmTN(
  a: Float32Array,
  b: Float32Array,
  c: Float32Array,
  m: number,
  n: number,
  k: number,
  acc = false,
): void {
  for (let i = 0; i < m; i++) {
    for (let j = 0; j < n; j++) {
      let s = acc ? c[i * n + j] : 0;
      for (let p = 0; p < k; p++) s += a[p * m + i] * b[p * n + j];
      c[i * n + j] = s;
    }
  }
}

export function refRelu(x: Float32Array): void {
  for (let i = 0; i < x.length; i++) if (!(x[i] > 0)) x[i] = 0;
}

export function refReluGrad(g: Float32Array, h: Float32Array): void {
  for (let i = 0; i < g.length; i++) if (!(h[i] > 0)) g[i] = 0;
}

/** Bit j of row r of a packed mask (words u32 per row). */
export function maskBit(mask: Uint32Array, words: number, r: number, j: number): number {
  return (mask[r * words + (j >>> 5)] >>> (j & 31)) & 1;
}

export function refBce(
  s: Float32Array,
  mask: Uint32Array,
  ds: Float32Array,
  rows: number,
  nOut: number,
  words: number,
  wpos: number,
  scale: number,
  loss: Float32Array,
): void {
  for (let r = 0; r < rows; r++) {
    let total = 0;
    for (let j = 0; j < nOut; j++) {
      const x = s[r * nOut + j];
      const y = maskBit(mask, words, r, j);
      const p = 1 / (1 + Math.exp(-x));
      // -log sigmoid(x) = log(1 + e^-x), -log(1 - sigmoid(x)) = log(1 + e^x), written stably
      const soft = Math.log1p(Math.exp(-Math.abs(x)));
      if (y) {
        total += wpos * (soft + Math.max(-x, 0));
        ds[r * nOut + j] = scale * wpos * (p - 1);
      } else {
        total += soft + Math.max(x, 0);
        ds[r * nOut + j] = scale * p;
      }
    }
    loss[r] = total;
  }
}

export function refAdam(
  w: Float32Array,
  g: Float32Array,
  m: Float32Array,
  v: Float32Array,
  t: number,
  lr: number,
  b1 = 0.9,
  b2 = 0.999,
  eps = 1e-8,
): void {
  const bc1 = 1 - b1 ** t,
    bc2 = 1 - b2 ** t;
  for (let i = 0; i < w.length; i++) {
    m[i] = b1 * m[i] + (1 - b1) * g[i];
    v[i] = b2 * v[i] + (1 - b2) * g[i] * g[i];
    w[i] -= ((lr / bc1) * m[i]) / (Math.sqrt(v[i] / bc2) + eps);
  }
}
