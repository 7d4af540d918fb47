// The Q8_0 "rows" kernel (src/runtime/weight-kernels/q8-rows.ts, assembly/matvec_q8_0_rows.ts):
// GGUF's own Q8_0 rows times "q16_0" activations (prepare_q16_0), for matrices a few blocks wide
// (the predictors' fc2). Against its plain-TS references beside it: prepare_q16_0 must write
// q16Reference's bytes, and the kernel meet dotQ8Q16Reference within f32 rounding on random narrow
// matrices (32..128 columns, row counts no multiple of the kernel's 4), run through the pool at 1
// and 2 threads (row splits that start and end anywhere), each row's bits the same whatever the
// split, matmul or rowTail; and the table's Q8_0 must stay the tiled one.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType } from "../src/format/ggml-types.js";
import { dequantize, quantizeRow, rowBytes } from "../src/format/quant.js";
import { f32ToF16 } from "../src/format/half.js";
import { Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import { activationBytes, layoutKernel, layoutName, weightKernel } from "../src/runtime/weight-kernels.js";
import { dotQ8Q16Reference, q16Reference } from "../src/runtime/weight-kernels/q8-rows.js";
import { rowTail, type Matrix } from "../src/model/weight-loader.js";
import { gaussians, rng } from "./helpers.js";

const K = layoutKernel(GGMLType.Q8_0, "rows");

/**
 * GGUF Q8_0 rows: most quantized from gaussians by ggml's rule (one with a wide range, one all
 * zero), every fourth random bytes (quants over all of i8, -128 included) with a random scale.
 */
function narrowWeights(rows: number, cols: number, seed: number): Uint8Array {
  const rb = rowBytes(GGMLType.Q8_0, cols);
  const out = new Uint8Array(rows * rb);
  const f = gaussians(rows * cols, seed);
  const r = rng(seed + 1);
  for (let i = 0; i < rows; i++) {
    const row = out.subarray(i * rb, (i + 1) * rb);
    if (i % 4 === 3) {
      for (let o = 0; o < rb; o += 34) {
        const h = f32ToF16((r() - 0.3) * 0.02);
        row[o] = h & 0xff;
        row[o + 1] = h >> 8;
        for (let j = 2; j < 34; j++) row[o + j] = Math.floor(r() * 256);
      }
      continue;
    }
    const v = f.subarray(i * cols, (i + 1) * cols);
    if (i === 1) v.forEach((x, j) => (v[j] = x * 40));
    if (i === 5) v.fill(0);
    quantizeRow(GGMLType.Q8_0, v, row);
  }
  return out;
}

test("Q8_0 rows: GGUF's rows packed by a copy, no padding; the table's Q8_0 stays the tiled layout", () => {
  assert.deepEqual(
    [K.type, K.layout, K.act, K.matvec, K.matmul],
    [GGMLType.Q8_0, "rows", "q16_0", "matvec_q8_0_rows", "matmul_q8_0_rows"],
  );
  assert.equal(layoutName(K.type, K.layout), "Q8_0 rows");
  for (const cols of [32, 64, 96, 128]) assert.equal(K.packedBytes(768, cols), 768 * (cols / 32) * 34);
  assert.equal(K.tailOffset(768, 32, 100), 100 * 34);
  assert.equal(weightKernel(GGMLType.Q8_0).layout, undefined);
  assert.equal(weightKernel(GGMLType.Q8_0).packedBytes(768, 32), 768 * 144, "tiled: each row padded to 128 columns");
  assert.equal(layoutKernel(GGMLType.Q8_0, null), weightKernel(GGMLType.Q8_0));
  assert.throws(() => layoutKernel(GGMLType.F16, "rows"), /no kernel for weight type F16 in layout "rows"/);
  const src = narrowWeights(7, 64, 3);
  const dst = new Uint8Array(K.packedBytes(7, 64));
  K.pack(src.subarray(0, 3 * 68), dst, 0, 3, 7, 64);
  K.pack(src.subarray(3 * 68), dst, 3, 4, 7, 64);
  assert.deepEqual(dst, src);
});

test("Q8_0 rows matvec and matmul meet ggml's dot within f32 rounding at 1 and 2 threads; a row's bits do not depend on the split", async () => {
  const arena = new Arena(16 << 20);
  const W = arena.alloc(1 << 20, 64),
    X = arena.alloc(64 << 10, 64),
    A = arena.alloc(64 << 10, 64),
    Y = arena.alloc(256 << 10, 64);
  const pools = [await ThreadPool.create(arena.memory, 1), await ThreadPool.create(arena.memory, 2)];
  try {
    const k = pools[0].kernels;
    for (const cols of [32, 64, 96, 128]) {
      for (const rows of [1, 3, 37, 770]) {
        const seed = rows * 131 + cols;
        const src = narrowWeights(rows, cols, seed);
        const rb = src.length / rows;
        K.pack(src, arena.u8(W, K.packedBytes(rows, cols)), 0, rows, rows, cols);
        const ntok = 5;
        const x = gaussians(ntok * cols, seed + 2);
        x.fill(0, cols, cols + 32); // token 1 starts with a block of zeros
        arena.f32(X, ntok * cols).set(x);
        k.prepare_q16_0(X, A, cols, ntok);
        const ab = activationBytes(K.act, cols);
        assert.equal(ab, (cols / 32) * 68);
        const act = (t: number) => arena.u8(A + t * ab, ab).slice();
        for (let t = 0; t < ntok; t++)
          assert.deepEqual(act(t), q16Reference(x.subarray(t * cols, (t + 1) * cols)), `q16_0 of token ${t}`);
        const y = arena.f32(Y, ntok * rows);

        // the reference, token 0, and the bound on its float rounding: a small multiple of sum |w x|
        const want = new Float64Array(rows),
          tol = new Float64Array(rows);
        for (let r = 0; r < rows; r++) {
          const row = src.subarray(r * rb, (r + 1) * rb);
          want[r] = dotQ8Q16Reference(row, act(0), cols);
          const w = dequantize(GGMLType.Q8_0, row, cols);
          tol[r] = 2e-6 * w.reduce((s, v, i) => s + Math.abs(v * x[i]), 0) + 1e-30;
        }
        let first: Float32Array | undefined;
        for (const pool of pools)
          for (const align of [1, 16]) {
            const what = `${rows}x${cols}, ${pool.threads} threads, align ${align}`;
            y.fill(12345);
            pool.run(pool.fn(K.matvec), [W, A, Y, rows, cols], 5, rows, align);
            for (let r = 0; r < rows; r++)
              assert.ok(Math.abs(y[r] - want[r]) <= tol[r], `${what} row ${r}: ${y[r]} vs ${want[r]} (${tol[r]})`);
            first ??= y.slice(0, rows);
            for (let r = 0; r < rows; r++) assert.ok(Object.is(y[r], first[r]), `${what} row ${r}: other bits`);
          }

        // sub-ranges leave the rest alone and give the same bits
        for (const [r0, r1] of [
          [1, rows],
          [Math.floor(rows / 3), Math.floor(rows / 3) + 5],
        ]) {
          const end = Math.min(r1, rows);
          if (r0 >= end) continue;
          y.fill(12345);
          k[K.matvec](W, A, Y, rows, cols, r0, end);
          for (let r = 0; r < rows; r++)
            if (r < r0 || r >= end) assert.equal(y[r], 12345, `${rows}x${cols} [${r0},${end}) wrote row ${r}`);
            else assert.ok(Object.is(y[r], first![r]), `${rows}x${cols} [${r0},${end}) row ${r}`);
        }

        // matmul: each token the matvec's bits, in [r0, rows) only
        const each = new Float32Array(ntok * rows);
        for (let t = 0; t < ntok; t++) {
          k[K.matvec](W, A + t * ab, Y, rows, cols, 0, rows);
          each.set(y.subarray(0, rows), t * rows);
        }
        const r0 = rows > 4 ? 3 : 0;
        for (const pool of pools) {
          y.fill(12345);
          pool.run(pool.fn(K.matmul), [W, A, Y, rows, cols, ntok], 6, rows);
          for (let t = 0; t < ntok; t++)
            for (let r = 0; r < rows; r++)
              assert.ok(Object.is(y[t * rows + r], each[t * rows + r]), `${rows}x${cols} matmul token ${t} row ${r}`);
          y.fill(12345);
          k[K.matmul](W, A, Y, rows, cols, ntok, r0, rows);
          for (let t = 0; t < ntok; t++)
            for (let r = 0; r < rows; r++) {
              const i = t * rows + r;
              if (r < r0) assert.equal(y[i], 12345, `${rows}x${cols} matmul [${r0},${rows}) wrote row ${r}`);
              else assert.ok(Object.is(y[i], each[i]), `${rows}x${cols} matmul [${r0},${rows}) token ${t} row ${r}`);
            }
        }

        // rowTail: the rows from `from` on as a matrix of their own, the whole matrix's bits
        const m: Matrix = { name: "w", ptr: W, rows, cols, kernel: K, matvecFn: 0, matmulFn: 0 };
        for (const from of [1, 2, Math.floor(rows / 2) + 1]) {
          const tail = rowTail(m, from);
          if (from >= rows) {
            assert.equal(tail, null);
            continue;
          }
          assert.ok(tail && tail.from === from, `${rows}x${cols}: a tail from any row (${from})`);
          y.fill(12345);
          k[K.matvec](tail.matrix.ptr, A, Y + 4 * from, tail.matrix.rows, cols, 0, tail.matrix.rows);
          for (let r = 0; r < rows; r++)
            if (r < from) assert.equal(y[r], 12345);
            else assert.ok(Object.is(y[r], first![r]), `${rows}x${cols} tail from ${from} row ${r}`);
        }
      }
    }
  } finally {
    for (const p of pools) await p.dispose();
  }
});
