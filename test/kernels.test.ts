// The F32, Q8_0, Q4_0 and Q4_1 weight kernels (packing, activation preparation, matvec, matmul)
// against the plain-TypeScript reference in src/format/quant.ts, on odd shapes, row sub-ranges,
// several pack calls per matrix, matrices wider than one column chunk, and 1..7 tokens.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType, typeName } from "../src/format/ggml-types.js";
import { dequantize, quantizeRow, rowBytes, vecDot } from "../src/format/quant.js";
import { f16Table, f32ToF16 } from "../src/format/half.js";
import { Arena } from "../src/runtime/arena.js";
import { instantiateKernels } from "../src/runtime/wasm.js";
import { activationBytes, prepareKernel, weightKernel, type WeightKernel } from "../src/runtime/weight-kernels.js";
import { gaussians, rng } from "./helpers.js";

/** Weights as llama.cpp's quantizer would write them (F32: raw floats). */
function makeWeights(type: GGMLType, rows: number, cols: number, seed: number): Uint8Array {
  const f = gaussians(rows * cols, seed);
  // a few rows with a wide dynamic range and one all-zero row exercise scale corner cases
  for (let c = 0; c < cols; c++) {
    if (rows > 2) f[1 * cols + c] *= 40;
    if (rows > 5) f[5 * cols + c] = 0;
  }
  if (type === GGMLType.F32) return new Uint8Array(f.buffer);
  const rb = rowBytes(type, cols),
    out = new Uint8Array(rows * rb);
  for (let r = 0; r < rows; r++)
    quantizeRow(type, f.subarray(r * cols, (r + 1) * cols), out.subarray(r * rb, (r + 1) * rb));
  return out;
}

const arena = new Arena(32 << 20);
const k = instantiateKernels(arena.memory);
/** Scratch regions reused by every test (the arena never frees). */
const W = arena.alloc(8 << 20, 64),
  X = arena.alloc(2 << 20, 64),
  A = arena.alloc(2 << 20, 64),
  Y = arena.alloc(1 << 20, 64);

function pack(wk: WeightKernel, src: Uint8Array, rows: number, cols: number, pieces = 1): number {
  const size = wk.packedBytes(rows, cols);
  const dst = arena.u8(W, size);
  dst.fill(0xa5); // packing must overwrite everything the kernels read, padding included
  const rb = src.length / rows;
  const step = Math.max(1, Math.ceil(rows / pieces));
  for (let r = 0; r < rows; r += step) {
    const n = Math.min(step, rows - r);
    wk.pack(src.subarray(r * rb, (r + n) * rb), dst, r, n, rows, cols);
  }
  return W;
}

/** Prepare ntok activation rows; returns the kernel's input pointer. */
function prepare(wk: WeightKernel, x: Float32Array, cols: number, ntok: number): number {
  arena.f32(X, ntok * cols).set(x);
  const p = prepareKernel(wk.act);
  if (!p) return X;
  arena.u8(A, ntok * activationBytes(wk.act, cols)).fill(0x5a);
  k[p](X, A, cols, ntok);
  return A;
}

/** The ggml-layout activation (Q8_0 / Q8_1 blocks, from the wasm prepare kernels) that vecDot takes for this type. */
function refActivation(type: GGMLType, x: Float32Array, cols: number): Uint8Array | Float32Array {
  if (type === GGMLType.F32) return x;
  const fmt = type === GGMLType.Q4_1 ? "q8_1" : "q8_0";
  const bytes = activationBytes(fmt, cols);
  arena.f32(X, cols).set(x);
  k[`prepare_${fmt}`](X, A + (1 << 20), cols, 1);
  return arena.u8(A + (1 << 20), bytes).slice();
}

/** Bound on float rounding: a small multiple of sum |w_i x_i|. */
function magnitude(type: GGMLType, wRow: Uint8Array, x: Float32Array, cols: number): number {
  const w = dequantize(type, wRow, cols);
  let s = 0;
  for (let i = 0; i < cols; i++) s += Math.abs(w[i] * x[i]);
  return s;
}

const TYPES = [GGMLType.F32, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1];

// ---------------------------------------------------------------------------------------------
// Activation preparation

/** llama.cpp's x86 activation quantizer (AVX2 quantize_row_q8_0), in f32 arithmetic. */
function x86Q8(x: Float32Array): { d: number[]; q: number[]; s: number[] } {
  const fr = Math.fround;
  const d: number[] = [],
    q: number[] = [],
    s: number[] = [];
  for (let b = 0; b < x.length; b += 32) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[b + j]));
    const dd = fr(amax / 127),
      id = amax !== 0 ? fr(127 / amax) : 0;
    let sum = 0;
    for (let j = 0; j < 32; j++) {
      const v = fr(x[b + j] * id);
      const f = Math.floor(v),
        frac = v - f;
      const r = frac > 0.5 || (frac === 0.5 && f % 2 !== 0) ? f + 1 : f; // round half to even
      q.push(r);
      sum += r;
    }
    d.push(f16Table[f32ToF16(dd)]);
    s.push(f16Table[f32ToF16(fr(dd * sum))]);
  }
  return { d, q, s };
}

test("prepare_q8_0 / prepare_q8_1 write ggml blocks with llama.cpp's x86 rounding", () => {
  const cols = 32 * 9;
  const x = gaussians(cols * 2, 7);
  x[3] = 0;
  x.fill(0, 64, 96); // an all-zero block
  for (let j = 0; j < 32; j++) x[96 + j] = (j - 16) * 0.5; // exact ties after scaling (amax 8 -> id 127/8)
  // d = amax / 127 exactly halfway between two f16 values: rounds to the even one (down, then up)
  x[128] = 127 * (1 + 2 ** -11);
  x[160] = -127 * (1 + 3 * 2 ** -11);
  for (let j = 0; j < 32; j++) x[192 + j] *= 1e-4; // d and s are f16 subnormals
  const ntok = 2;
  arena.f32(X, cols * ntok).set(x);
  k.prepare_q8_0(X, A, cols, ntok);
  k.prepare_q8_1(X, A + 65536, cols, ntok);
  const q0 = arena.u8(A, ntok * activationBytes("q8_0", cols));
  const q1 = arena.u8(A + 65536, ntok * activationBytes("q8_1", cols));
  assert.equal(f16Table[q0[4 * 34] | (q0[4 * 34 + 1] << 8)], 1);
  assert.equal(f16Table[q0[5 * 34] | (q0[5 * 34 + 1] << 8)], 1 + 2 ** -9);
  for (let t = 0; t < ntok; t++) {
    const ref = x86Q8(x.subarray(t * cols, (t + 1) * cols));
    for (let b = 0; b < cols / 32; b++) {
      const o0 = ((t * cols) / 32 + b) * 34,
        o1 = ((t * cols) / 32 + b) * 36;
      assert.equal(f16Table[q0[o0] | (q0[o0 + 1] << 8)], ref.d[b], `q8_0 d of block ${b}`);
      assert.equal(f16Table[q1[o1] | (q1[o1 + 1] << 8)], ref.d[b], `q8_1 d of block ${b}`);
      assert.equal(f16Table[q1[o1 + 2] | (q1[o1 + 3] << 8)], ref.s[b], `q8_1 s of block ${b}`);
      for (let j = 0; j < 32; j++) {
        assert.equal((q0[o0 + 2 + j] << 24) >> 24, ref.q[b * 32 + j], `q8_0 quant ${j} of block ${b}`);
        assert.equal((q1[o1 + 4 + j] << 24) >> 24, ref.q[b * 32 + j], `q8_1 quant ${j} of block ${b}`);
      }
    }
  }
  // against src/format/quant.ts (ggml's reference rule: 1/d and halves away from zero): the same
  // scales, and quants that differ by at most 1 where the two rules round differently
  const ggmlRef = new Uint8Array(rowBytes(GGMLType.Q8_0, cols));
  quantizeRow(GGMLType.Q8_0, x.subarray(0, cols), ggmlRef);
  let differ = 0;
  for (let b = 0; b < cols / 32; b++) {
    assert.equal(ggmlRef[b * 34] | (ggmlRef[b * 34 + 1] << 8), q0[b * 34] | (q0[b * 34 + 1] << 8));
    for (let j = 0; j < 32; j++) {
      const a = (ggmlRef[b * 34 + 2 + j] << 24) >> 24,
        c = (q0[b * 34 + 2 + j] << 24) >> 24;
      assert.ok(Math.abs(a - c) <= 1);
      if (a !== c) differ++;
    }
  }
  assert.ok(differ <= 16, `${differ} quants differ from the reference rule`);
});

test("q8_i16 / q8_i16n / q8_i8n / q8_i8s hold the same quants and scales as ggml's Q8_0 / Q8_1 blocks", () => {
  for (const cols of [32, 96, 128, 352]) {
    const ntok = 3;
    const x = gaussians(cols * ntok, cols);
    arena.f32(X, cols * ntok).set(x);
    k.prepare_q8_1(X, A + (1 << 20), cols, ntok);
    const ref = arena.u8(A + (1 << 20), ntok * activationBytes("q8_1", cols)).slice();
    for (const fmt of ["q8_i16", "q8_i16n"] as const) {
      const gb = fmt === "q8_i16" ? 272 : 304;
      const bytes = activationBytes(fmt, cols);
      arena.u8(A, ntok * bytes).fill(0x77);
      k[`prepare_${fmt}`](X, A, cols, ntok);
      const i16 = new Int16Array(arena.memory.buffer, A, (ntok * bytes) / 2);
      const f32 = new Float32Array(arena.memory.buffer, A, (ntok * bytes) / 4);
      const i32 = new Int32Array(arena.memory.buffer, A, (ntok * bytes) / 4);
      const ng = Math.ceil(cols / 128);
      for (let t = 0; t < ntok; t++) {
        for (let b = 0; b < ng * 4; b++) {
          const g = t * bytes + (b >> 2) * gb,
            bi = b & 3;
          const real = b < cols / 32;
          const o = (t * (cols / 32) + b) * 36;
          const d = real ? f16Table[ref[o] | (ref[o + 1] << 8)] : 0;
          const s = real ? f16Table[ref[o + 2] | (ref[o + 3] << 8)] : 0;
          let sum = 0;
          for (let e = 0; e < 32; e++) {
            const q = real ? (ref[o + 4 + e] << 24) >> 24 : 0;
            sum += q;
            const v = e >> 1,
              factor = fmt === "q8_i16" ? 1 : [256, 16, 1, 256][v & 3];
            assert.equal(
              i16[(g >> 1) + v * 8 + 2 * bi + (e & 1)],
              q * factor,
              `${fmt} cols ${cols} token ${t} block ${b} element ${e}`,
            );
          }
          if (fmt === "q8_i16") {
            assert.equal(f32[(g + 256) / 4 + bi], d);
          } else {
            assert.equal(f32[(g + 256) / 4 + bi], d / 256);
            assert.equal(i32[(g + 272) / 4 + bi], 2048 * sum);
            assert.equal(f32[(g + 288) / 4 + bi], s);
          }
        }
      }
    }
    // q8_i8n (the relaxed build's Q4 activations): i8 quants in the packed nibbles' order
    const bytes = activationBytes("q8_i8n", cols);
    arena.u8(A, ntok * bytes).fill(0x77);
    k.prepare_q8_i8n(X, A, cols, ntok);
    const i8 = new Int8Array(arena.memory.buffer, A, ntok * bytes);
    const f32 = new Float32Array(arena.memory.buffer, A, (ntok * bytes) / 4);
    const i32 = new Int32Array(arena.memory.buffer, A, (ntok * bytes) / 4);
    for (let t = 0; t < ntok; t++) {
      for (let b = 0; b < Math.ceil(cols / 128) * 4; b++) {
        const g = t * bytes + (b >> 2) * 176,
          bi = b & 3;
        const real = b < cols / 32;
        const o = (t * (cols / 32) + b) * 36;
        let sum = 0;
        for (let e = 0; e < 32; e++) {
          const q = real ? (ref[o + 4 + e] << 24) >> 24 : 0;
          sum += q;
          // element 8j + r: vector L_j (r & 2 = 0) or H_j, byte ((r >> 2) & 1) | ((r & 1) << 1) of the block's lane
          const j = e >> 3,
            r = e & 7;
          const at = g + 16 * (2 * j + ((r >> 1) & 1)) + 4 * bi + (((r >> 2) & 1) | ((r & 1) << 1));
          assert.equal(i8[at], q, `q8_i8n cols ${cols} token ${t} block ${b} element ${e}`);
        }
        assert.equal(f32[(g + 128) / 4 + bi], real ? f16Table[ref[o] | (ref[o + 1] << 8)] : 0);
        assert.equal(i32[(g + 144) / 4 + bi], 8 * sum);
        assert.equal(f32[(g + 160) / 4 + bi], real ? f16Table[ref[o + 2] | (ref[o + 3] << 8)] : 0);
      }
    }
    // q8_i8s (the relaxed build's Q8_0 activations): |q| and sign masks in 16-byte pieces, the
    // magnitudes of the negative quants summed per block, d
    const sBytes = activationBytes("q8_i8s", cols);
    arena.u8(A, ntok * sBytes).fill(0x77);
    k.prepare_q8_i8s(X, A, cols, ntok);
    const u8s = arena.u8(A, ntok * sBytes);
    const f32s = new Float32Array(arena.memory.buffer, A, (ntok * sBytes) / 4);
    const i32s = new Int32Array(arena.memory.buffer, A, (ntok * sBytes) / 4);
    for (let t = 0; t < ntok; t++) {
      for (let b = 0; b < Math.ceil(cols / 128) * 4; b++) {
        const g = t * sBytes + (b >> 2) * 288,
          bi = b & 3;
        const real = b < cols / 32;
        const o = (t * (cols / 32) + b) * 36;
        let negative = 0;
        for (let e = 0; e < 32; e++) {
          const q = real ? (ref[o + 4 + e] << 24) >> 24 : 0;
          if (q < 0) negative -= q;
          const at = g + 16 * (e >> 2) + 4 * bi + (e & 3);
          assert.equal(u8s[at], Math.abs(q), `q8_i8s |q| cols ${cols} token ${t} block ${b} element ${e}`);
          assert.equal(u8s[at + 128], q < 0 ? 0xff : 0, `q8_i8s sign cols ${cols} token ${t} block ${b} element ${e}`);
        }
        assert.equal(i32s[(g + 256) / 4 + bi], negative);
        assert.equal(f32s[(g + 272) / 4 + bi], real ? f16Table[ref[o] | (ref[o + 1] << 8)] : 0);
      }
    }
  }
});

// ---------------------------------------------------------------------------------------------
// Packing

test("pack rejects what it cannot lay out", () => {
  const wk = weightKernel(GGMLType.Q4_0);
  const dst = arena.u8(W, wk.packedBytes(4, 64));
  assert.throws(() => wk.pack(new Uint8Array(4 * 36), dst, 0, 4, 4, 48), /not a whole number of 32-value blocks/);
  assert.throws(() => wk.pack(new Uint8Array(10), dst, 0, 4, 4, 64), /source holds 10 bytes/);
  assert.throws(() => wk.pack(new Uint8Array(4 * 36), dst, 2, 4, 4, 64), /outside a matrix of 4 rows/);
  assert.throws(() => wk.pack(new Uint8Array(4 * 36), dst.subarray(0, 8), 0, 4, 4, 64), /destination holds 8 bytes/);
});

test("packing in several pieces gives the same bytes as packing at once", () => {
  for (const type of TYPES) {
    const wk = weightKernel(type);
    const rows = 37,
      cols = 4096 + 160;
    const src = makeWeights(type, rows, cols, 11);
    pack(wk, src, rows, cols, 1);
    const once = arena.u8(W, wk.packedBytes(rows, cols)).slice();
    pack(wk, src, rows, cols, 5);
    assert.deepEqual(arena.u8(W, wk.packedBytes(rows, cols)), once, typeName(type));
  }
});

// ---------------------------------------------------------------------------------------------
// matvec / matmul against vecDot

function checkMatvec(type: GGMLType, rows: number, cols: number, seed: number): void {
  const wk = weightKernel(type);
  const src = makeWeights(type, rows, cols, seed);
  const rb = src.length / rows;
  const w = pack(wk, src, rows, cols, 3);
  const x = gaussians(cols, seed + 1);
  const xa = prepare(wk, x, cols, 1);
  const xr = refActivation(type, x, cols);
  const ranges: [number, number][] = [
    [0, rows],
    [0, Math.min(rows, 1)],
    [Math.floor(rows / 3), rows],
    [1, Math.max(1, rows - 1)],
    [Math.floor(rows / 2), Math.floor(rows / 2) + 3],
  ];
  for (const [r0, r1] of ranges) {
    if (r1 > rows || r0 >= r1) continue;
    const y = arena.f32(Y, rows);
    y.fill(12345);
    k[wk.matvec](w, xa, Y, rows, cols, r0, r1);
    for (let r = 0; r < rows; r++) {
      const got = y[r];
      if (r < r0 || r >= r1) {
        assert.equal(got, 12345, `${typeName(type)} ${rows}x${cols} [${r0},${r1}) wrote row ${r}`);
        continue;
      }
      const row = src.subarray(r * rb, (r + 1) * rb);
      const want = vecDot(type, row, xr, cols);
      const tol = 2e-5 * magnitude(type, row, x, cols) + 1e-6;
      assert.ok(
        Math.abs(got - want) <= tol,
        `${typeName(type)} ${rows}x${cols} [${r0},${r1}) row ${r}: ${got} vs ${want} (tolerance ${tol})`,
      );
    }
  }
}

for (const type of TYPES) {
  test(`matvec ${typeName(type)} matches the reference on odd shapes and sub-ranges`, () => {
    for (const rows of [1, 7, 37]) {
      for (const cols of [32, 96, 512, 4096 + 96]) checkMatvec(type, rows, cols, rows * 1000 + cols);
    }
    // F32 takes any width (stories260K's FFN is 172 wide)
    if (type === GGMLType.F32) for (const cols of [1, 13, 172]) checkMatvec(type, 6, cols, cols);
  });
}

function checkMatmul(type: GGMLType, rows: number, cols: number, ntok: number, seed: number): void {
  const wk = weightKernel(type);
  const src = makeWeights(type, rows, cols, seed);
  const rb = src.length / rows;
  const w = pack(wk, src, rows, cols, 2);
  const x = gaussians(cols * ntok, seed + 1);
  const xa = prepare(wk, x, cols, ntok);
  const r0 = rows > 4 ? 3 : 0,
    r1 = rows;
  const y = arena.f32(Y, rows * ntok);
  y.fill(12345);
  k[wk.matmul](w, xa, Y, rows, cols, ntok, r0, r1);
  for (let t = 0; t < ntok; t++) {
    const xt = x.subarray(t * cols, (t + 1) * cols);
    const xr = refActivation(type, xt, cols);
    for (let r = 0; r < rows; r++) {
      const got = y[t * rows + r];
      if (r < r0) {
        assert.equal(got, 12345, `${typeName(type)} matmul wrote row ${r} outside its range`);
        continue;
      }
      const row = src.subarray(r * rb, (r + 1) * rb);
      const want = vecDot(type, row, xr, cols);
      const tol = 2e-5 * magnitude(type, row, xt, cols) + 1e-6;
      assert.ok(
        Math.abs(got - want) <= tol,
        `${typeName(type)} matmul ${rows}x${cols} ntok ${ntok} token ${t} row ${r}: ${got} vs ${want}`,
      );
    }
  }
  // a one-token matmul and the matvec agree to the bit: same arithmetic, same order
  if (ntok === 1) {
    const y2 = arena.f32(Y + rows * 4 * 8, rows);
    k[wk.matvec](w, xa, Y + rows * 4 * 8, rows, cols, r0, r1);
    for (let r = r0; r < r1; r++)
      assert.ok(
        Math.abs(y2[r] - y[r]) <= 1e-6 * Math.abs(y[r]) + 1e-6,
        `${typeName(type)} matmul(1) vs matvec row ${r}`,
      );
  }
}

for (const type of TYPES) {
  test(`matmul ${typeName(type)} matches the reference for 1..7 tokens`, () => {
    for (let ntok = 1; ntok <= 7; ntok++) checkMatmul(type, 7 + 2 * ntok, ntok % 2 ? 96 : 512, ntok, 77 * ntok);
    checkMatmul(type, 37, 4096 + 32, 5, 5);
    if (type === GGMLType.F32) for (const cols of [1, 13, 172]) checkMatmul(type, 11, cols, 3, cols);
  });
}

// The prefill GEMMs (assembly/matmul_q8_0.ts, matmul_q4.ts) work on tiles of several tokens with
// a tail for the rest: every token of a batch must come out bit for bit as the matvec gives it
// alone (same integer block dots, same f32 order), on odd row counts, widths of one and several
// 4096-column chunks, sub-ranges that cut a row tile, and token counts that leave each tail size.
test("matmul of Q8_0, Q4_0, Q4_1 equals the per-token matvec to the bit (odd rows, ranges, 1..13 tokens)", () => {
  for (const type of [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1]) {
    const wk = weightKernel(type);
    for (const [rows, cols] of [
      [1, 32],
      [7, 96],
      [19, 4096 + 160],
      [37, 640],
    ]) {
      const src = makeWeights(type, rows, cols, rows * 7 + cols);
      const rb = src.length / rows;
      const w = pack(wk, src, rows, cols, 2);
      const ntokMax = 13;
      const x = gaussians(cols * ntokMax, rows + cols);
      x.fill(0, cols, cols + Math.min(cols, 40)); // token 1 starts with a block of zeros
      const xa = prepare(wk, x, cols, ntokMax);
      const ab = activationBytes(wk.act, cols);
      // the matvec of each token alone
      const want = new Float32Array(ntokMax * rows);
      for (let t = 0; t < ntokMax; t++) {
        k[wk.matvec](w, xa + t * ab, Y, rows, cols, 0, rows);
        want.set(arena.f32(Y, rows), t * rows);
      }
      const ranges: [number, number][] = [
        [0, rows],
        [Math.min(3, rows - 1), rows],
        [1, Math.max(2, rows - 2)],
      ];
      for (const ntok of [1, 2, 3, 4, 5, 9, 13]) {
        for (const [r0, r1] of ranges) {
          if (r1 > rows || r0 >= r1) continue;
          const y = arena.f32(Y, rows * ntok);
          y.fill(12345);
          k[wk.matmul](w, xa, Y, rows, cols, ntok, r0, r1);
          for (let t = 0; t < ntok; t++)
            for (let r = 0; r < rows; r++) {
              const got = y[t * rows + r];
              const what = `${typeName(type)} ${rows}x${cols} ntok ${ntok} [${r0},${r1}) token ${t} row ${r}`;
              if (r < r0 || r >= r1) assert.equal(got, 12345, `${what}: written outside the range`);
              else assert.equal(got, want[t * rows + r], what);
            }
        }
      }
      // and the matvec itself against the reference dot, for a token of the batch
      const t = ntokMax - 1;
      const xr = refActivation(type, x.subarray(t * cols, (t + 1) * cols), cols);
      for (let r = 0; r < rows; r++) {
        const row = src.subarray(r * rb, (r + 1) * rb);
        const ref = vecDot(type, row, xr, cols);
        const tol = 2e-5 * magnitude(type, row, x.subarray(t * cols, (t + 1) * cols), cols) + 1e-6;
        assert.ok(
          Math.abs(want[t * rows + r] - ref) <= tol,
          `${typeName(type)} row ${r}: ${want[t * rows + r]} vs ${ref}`,
        );
      }
    }
  }
});

test("with unit scales and small integers the quantized kernels are exact", () => {
  // x = integers with amax 127: activation scale 1, quants = x; weights with scale 1: every block
  // dot is an integer and every partial sum is far below 2^24, so f32 arithmetic is exact
  const rows = 9,
    cols = 384,
    ntok = 3;
  const r = rng(5);
  const x = new Float32Array(cols * ntok);
  for (let i = 0; i < x.length; i++) x[i] = Math.floor(r() * 31) - 15;
  for (let b = 0; b < x.length; b += 32) x[b + 7] = b % 64 ? 127 : -127;
  for (const type of [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1]) {
    const wk = weightKernel(type);
    const bs = type === GGMLType.Q8_0 ? 34 : type === GGMLType.Q4_0 ? 18 : 20;
    const src = new Uint8Array(rows * (cols / 32) * bs);
    for (let i = 0; i < src.length; i++) src[i] = Math.floor(r() * 256);
    const one = f32ToF16(1);
    for (let o = 0; o < src.length; o += bs) {
      src[o] = one & 0xff;
      src[o + 1] = one >> 8;
      if (type === GGMLType.Q4_1) {
        src[o + 2] = 0;
        src[o + 3] = 0xbc;
      } // m = -1
      if (type === GGMLType.Q8_0) {
        for (let j = 2; j < 34; j++) src[o + j] = (Math.floor(r() * 17) - 8) & 0xff;
        // the extremes, against x's +-127 at element 7: -128 (which the relaxed build's kernels
        // meet as one's complement, matvec_q8_0_relaxed.ts) and 127, in every row
        const blk = o / bs;
        if (blk % 3 === 0) src[o + 2 + 7] = 0x80;
        if (blk % 3 === 1) src[o + 2 + 7] = 127;
        if (blk % 5 === 0) src[o + 2 + 20] = 0x80;
      }
    }
    const w = pack(wk, src, rows, cols);
    const xa = prepare(wk, x, cols, ntok);
    const y = arena.f32(Y, rows * ntok);
    k[wk.matmul](w, xa, Y, rows, cols, ntok, 0, rows);
    const rb = src.length / rows;
    for (let t = 0; t < ntok; t++) {
      const xr = refActivation(type, x.subarray(t * cols, (t + 1) * cols), cols);
      for (let i = 0; i < rows; i++) {
        const want = vecDot(type, src.subarray(i * rb, (i + 1) * rb), xr, cols);
        assert.ok(Number.isInteger(want));
        assert.equal(y[t * rows + i], want, `${typeName(type)} token ${t} row ${i}`);
      }
    }
    k[wk.matvec](w, xa, Y, rows, cols, 0, rows);
    const xr = refActivation(type, x.subarray(0, cols), cols);
    for (let i = 0; i < rows; i++)
      assert.equal(
        y[i],
        vecDot(type, src.subarray(i * rb, (i + 1) * rb), xr, cols),
        `${typeName(type)} matvec row ${i}`,
      );
  }
});

// Q4_1's packed groups keep GGUF's f16 scales and mins, which the kernels convert in SIMD
// (packed_layout.ts q4Halves / q4PairScales, over half.ts f16BitsLo / f16BitsHi): every class of
// finite half (subnormals, zeros of both signs, negatives, the largest) must come out as its
// value, in the decode and the prefill kernels alike. Each special value is a row's d (with m = 0) and another row's m (with d = 0),
// so that no larger term hides an error in a small one.
test("Q4_1 scales and mins that are f16 subnormals, signed zeros, negatives or the largest half convert exactly", () => {
  const specials = [0x0001, 0x03ff, 0x8001, 0x83ff, 0x0400, 0x3c00, 0xbc00, 0x3555, 0x7bff, 0xfbff, 0x0000, 0x8000];
  const type = GGMLType.Q4_1,
    wk = weightKernel(type);
  const rows = 2 * specials.length,
    cols = 256 + 32,
    bs = 20,
    rb = (cols / 32) * bs;
  const r = rng(11);
  const src = new Uint8Array(rows * rb);
  for (let row = 0; row < rows; row++) {
    const v = specials[row >> 1];
    for (let b = 0; b < cols / 32; b++) {
      const o = row * rb + b * bs;
      const d = row & 1 ? 0 : v,
        m = row & 1 ? v : 0;
      src[o] = d & 0xff;
      src[o + 1] = d >> 8;
      src[o + 2] = m & 0xff;
      src[o + 3] = m >> 8;
      for (let j = 4; j < bs; j++) src[o + j] = Math.floor(r() * 256);
    }
  }
  const ntok = 3;
  const x = gaussians(cols * ntok, 12);
  const w = pack(wk, src, rows, cols, 2);
  const xa = prepare(wk, x, cols, ntok);
  const yv = arena.f32(Y, rows);
  k[wk.matvec](w, xa, Y, rows, cols, 0, rows);
  const got = yv.slice();
  k[wk.matmul](w, xa, Y, rows, cols, ntok, 0, rows);
  const ym = arena.f32(Y, rows * ntok).slice();
  for (let t = 0; t < ntok; t++) {
    const xt = x.subarray(t * cols, (t + 1) * cols);
    const xr = refActivation(type, xt, cols);
    for (let row = 0; row < rows; row++) {
      const wRow = src.subarray(row * rb, (row + 1) * rb);
      const want = vecDot(type, wRow, xr, cols);
      const tol = 2e-5 * magnitude(type, wRow, xt, cols) + 1e-40;
      const what = `${row & 1 ? "m" : "d"} = half 0x${specials[row >> 1].toString(16)}`;
      assert.ok(
        Math.abs(ym[t * rows + row] - want) <= tol,
        `matmul token ${t}, ${what}: ${ym[t * rows + row]} vs ${want}`,
      );
      if (t === 0) assert.ok(Math.abs(got[row] - want) <= tol, `matvec, ${what}: ${got[row]} vs ${want}`);
    }
  }
});
