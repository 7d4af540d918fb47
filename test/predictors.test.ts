/**
 * Predictor training: the training kernels against their plain-TS references on odd sizes.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import {
  TrainKernels, refAdam, refBce, refMmNN, refMmNT, refMmTN, refRelu, refReluGrad,
} from "../src/sparse/train-kernels.js";

/** Deterministic pseudo-random floats in [-1, 1). */
function rand(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13; s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5; s >>>= 0;
    return (s / 2 ** 32) * 2 - 1;
  };
}

function close(got: Float32Array, want: Float32Array, tol: number, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let worst = 0, at = -1;
  for (let i = 0; i < got.length; i++) {
    const d = Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i]));
    if (!(d <= worst)) { worst = d; at = i; }
  }
  assert.ok(worst <= tol, `${what}: element ${at} is ${got[at]}, reference ${want[at]} (relative error ${worst})`);
}

test("training kernels match their references on odd sizes, with 1 and 2 threads", async () => {
  for (const threads of [1, 2]) {
    const arena = new Arena(64 << 20);
    const pool = await ThreadPool.create(arena.memory, threads);
    pool.minParallelWork = 0; // split even small jobs, so the 2-thread run really splits
    const k = new TrainKernels(pool);
    const r = rand(7 + threads);
    const put = (a: Float32Array) => {
      const p = arena.alloc(a.length * 4 + 16, 64);
      arena.f32(p, a.length).set(a);
      return p;
    };
    const fill = (n: number) => Float32Array.from({ length: n }, r);
    try {
      for (const [m, n, kk] of [[1, 1, 1], [3, 5, 7], [7, 19, 13], [17, 33, 65], [6, 16, 4], [9, 37, 130]]) {
        for (const acc of [false, true]) {
          // C = A . B^T
          let A = fill(m * kk), B = fill(n * kk), C0 = fill(m * n);
          let want = C0.slice();
          refMmNT(A, B, want, m, n, kk, acc);
          let pc = put(C0);
          k.mmNT(put(A), put(B), pc, m, n, kk, acc);
          close(arena.f32(pc, m * n).slice(), want, 1e-5, `mmNT ${m}x${n}x${kk} acc=${acc} threads=${threads}`);
          // C = A . B
          A = fill(m * kk); B = fill(kk * n); C0 = fill(m * n);
          want = C0.slice();
          refMmNN(A, B, want, m, n, kk, acc);
          pc = put(C0);
          k.mmNN(put(A), put(B), pc, m, n, kk, acc);
          close(arena.f32(pc, m * n).slice(), want, 1e-5, `mmNN ${m}x${n}x${kk} acc=${acc} threads=${threads}`);
          // C = A^T . B
          A = fill(kk * m); B = fill(kk * n); C0 = fill(m * n);
          want = C0.slice();
          refMmTN(A, B, want, m, n, kk, acc);
          pc = put(C0);
          k.mmTN(put(A), put(B), pc, m, n, kk, acc);
          close(arena.f32(pc, m * n).slice(), want, 1e-5, `mmTN ${m}x${n}x${kk} acc=${acc} threads=${threads}`);
        }
      }
      // elementwise kernels on a length that is not a multiple of 4 (or of the 64-element chunks)
      const len = 1031;
      const x = fill(len);
      const px = put(x);
      k.relu(px, len);
      const wantRelu = x.slice();
      refRelu(wantRelu);
      close(arena.f32(px, len).slice(), wantRelu, 0, "relu");
      const g = fill(len), h = fill(len);
      const pg = put(g);
      k.reluGrad(pg, put(h), len);
      const wantG = g.slice();
      refReluGrad(wantG, h);
      close(arena.f32(pg, len).slice(), wantG, 0, "reluGrad");

      // BCE: 5 rows of 70 outputs (3 words per row), logits up to +-20, both weights
      const rows = 5, nOut = 70, words = 3;
      const s = Float32Array.from({ length: rows * nOut }, () => r() * 20);
      const mask = Uint32Array.from({ length: rows * words }, () => (r() * 2 ** 31) >>> 0);
      const ps = put(s);
      const pm = arena.alloc(mask.length * 4, 64);
      new Uint32Array(arena.memory.buffer, pm, mask.length).set(mask);
      const pds = arena.alloc(rows * nOut * 4, 64), pl = arena.alloc(rows * 4, 64);
      k.bce(ps, pm, pds, rows, nOut, words, 3.5, 0.25, pl);
      const wantDs = new Float32Array(rows * nOut), wantLoss = new Float32Array(rows);
      refBce(s, mask, wantDs, rows, nOut, words, 3.5, 0.25, wantLoss);
      close(arena.f32(pds, rows * nOut).slice(), wantDs, 1e-5, "bce gradient");
      close(arena.f32(pl, rows).slice(), wantLoss, 1e-4, "bce loss");

      // Adam, three steps on 1031 parameters
      const w = fill(len), mo = new Float32Array(len), v = new Float32Array(len);
      const pw = put(w), pmo = put(mo), pv = put(v);
      const ww = w.slice(), mm = mo.slice(), vv = v.slice();
      for (let t = 1; t <= 3; t++) {
        const grad = fill(len);
        const pgr = put(grad);
        k.adam(pw, pgr, pmo, pv, len, t, 0.01);
        refAdam(ww, grad, mm, vv, t, 0.01);
      }
      close(arena.f32(pw, len).slice(), ww, 1e-5, "adam weights");
      close(arena.f32(pv, len).slice(), vv, 1e-5, "adam second moment");
    } finally {
      await pool.dispose();
    }
  }
});
