/**
 * The converter's WASM quantizers (src/runtime/quant-kernels.ts) against the plain-TS reference
 * they replace, in both kernel builds: the bytes of every type they write (src/format/quant.ts
 * quantizeRow) on rows of many scales, exact rounding ties, every boundary between two halves,
 * and blocks of NaN, infinities, subnormals, zeros of both signs and huge values; the widening of
 * every F16 and BF16 pattern (format/hf/safetensors.ts widenToF32); the measured conversion of a
 * store's rows and Down's columns (offline/convert/row-conversion.ts: the stored bytes, each row's
 * sum of squared errors and the maxima, exactly) and its refusal of a value the type cannot
 * hold; and a GGUF chunk's encoding (rotary regrouping, Gemma's added one) against widening and
 * quantizeRow.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType, typeName } from "../src/format/ggml-types.js";
import { f16ToF32 } from "../src/format/half.js";
import { dequantizeRow, quantizeRow, rowBytes } from "../src/format/quant.js";
import { encodeChunk, ChunkScratch, type EncodeJob } from "../src/format/hf/chunk-encoding.js";
import { widenToF32 } from "../src/format/hf/safetensors.js";
import { ConvertError } from "../src/offline/convert/convert-error.js";
import { ErrorStats, MeasureScratch, RowConverter, type MeasureJob } from "../src/offline/convert/row-conversion.js";
import { QuantKernels } from "../src/runtime/quant-kernels.js";
import { kernelModule, KERNEL_BUILDS, relaxedSimdSupported } from "../src/runtime/wasm.js";
import { closeSync, openSync, writeSync } from "node:fs";
import { join } from "node:path";
import { rng, tempDir } from "./helpers.js";

const TYPES = [
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.F32,
];

/** Each build this runtime can load, its own instance. */
const builds = KERNEL_BUILDS.filter((b) => b === "simd128" || relaxedSimdSupported()).map(
  (b) => [b, new QuantKernels(kernelModule(b))] as const,
);

/** The kernels' bytes for `values` as `type`. */
function kernelBytes(k: QuantKernels, type: GGMLType, values: Float32Array): Uint8Array {
  const out = new Uint8Array(rowBytes(type, values.length));
  k.stage({ values: values.length, out: out.length });
  k.values(values.length).set(values);
  k.quantize(type, values.length, out);
  return out;
}

function sameBytes(got: Uint8Array, want: Uint8Array, what: string, blockBytes: number, values?: Float32Array): void {
  const at = got.findIndex((b, i) => b !== want[i]);
  if (at < 0) return;
  const b = Math.floor(at / blockBytes);
  assert.fail(
    `${what}: byte ${at} (block ${b}) is ${got[at]}, the reference ${want[at]}` +
      (values ? `; the block's values ${Array.from(values.subarray(b * 32, b * 32 + 32)).join(", ")}` : ""),
  );
}

const ODD = [NaN, -NaN, Infinity, -Infinity, 0, -0, 1e-45, -1e-40, 65504, 65520, 70000, -1e38, 3e38, 2 ** -20, 1e-38];

/** Rows of many scales with rare odd values, then whole blocks of edge cases. */
function testValues(seed: number, blocks: number): Float32Array {
  const r = rng(seed);
  const x = new Float32Array(32 * blocks);
  for (let i = 0; i < x.length; i++) {
    const k = r();
    x[i] =
      k < 0.01
        ? ODD[Math.floor(r() * ODD.length)]
        : k < 0.1
          ? (Math.floor(r() * 255) - 127) / 2
          : k < 0.13
            ? (r() - 0.5) * 1e-38
            : (r() - 0.5) * 10 ** (r() * 12 - 8);
  }
  const edge: ((j: number) => number)[] = [
    (j) => (j === 0 ? 127 : j - 16 + 0.5), // Q8_0 at scale 1: every quant a tie
    (j) => (j === 0 ? -127 : (j % 7) - 3.5),
    // just under a half, where x + 0.5 would round up to the next integer
    (j) =>
      j === 0 ? 127 : [0.49999997, -0.49999997, 0.5, -0.5, 1.4999999, -2.5, 0.50000006, 126.5, -126.49999][j % 9],
    (j) => (j === 0 ? 8 : j / 4 - 4), // Q4_0 at scale -1: halves
    (j) => (j - 16) / 2,
    (j) => 1e-40 * j, // subnormal scales
    (j) => 1e-44 * (j - 3),
    (j) => (j % 2 ? -0 : 0),
    (j) => (j % 2 ? 0 : -0),
    (j) => (j === 3 ? NaN : 1),
    (j) => (j % 3 ? NaN : -0),
    () => NaN,
    (j) => (j === 5 ? -0 : j + 1), // a zero min, then a zero max
    (j) => (j === 7 ? 0 : -j - 1),
    (j) => (j % 2 ? Infinity : -Infinity),
    (j) => (j === 9 ? Infinity : j),
    (j) => (j === 9 ? -Infinity : -j),
    () => 3e38,
    (j) => (j % 2 ? 3e38 : -3e38),
    (j) => (j === 31 ? -2 : 1), // the largest magnitude last
    (j) => (j === 4 || j === 20 ? -5 : j === 10 ? 5 : 1), // ties for the largest: the first wins
    (j) => (j === 0 ? 5 : j === 1 ? -5 : 0.5),
    (j) => 65504 + j * 8,
    (j) => 2 ** -14 * (1 + j / 64),
  ];
  edge.forEach((f, k) => {
    for (let j = 0; j < 32; j++) x[32 * k + j] = f(j);
  });
  return x;
}

for (const [build, k] of builds)
  test(`${build}: each type's bytes equal quantizeRow's, over ties, odd values and whole blocks of edge cases`, () => {
    for (const seed of [1, 2, 3]) {
      const x = testValues(seed, 4096);
      for (const type of TYPES) {
        const want = new Uint8Array(rowBytes(type, x.length));
        quantizeRow(type, x, want);
        sameBytes(kernelBytes(k, type, x), want, `${typeName(type)}, seed ${seed}`, rowBytes(type, 32), x);
      }
    }
  });

for (const [build, k] of builds)
  test(`${build}: each type's bytes from F16 and BF16 halves straight (quantizeHalves) equal widening then quantizeRow's`, () => {
    // 4096 blocks and 4096 - 3 blocks: whole steps of the kernel's 2048 values and a part step
    for (const blocks of [4096, 4093]) {
      const x = testValues(blocks, blocks);
      for (const dtype of ["F16", "BF16"] as const) {
        const halves = new Uint8Array(x.length * 2);
        quantizeRow(dtype === "F16" ? GGMLType.F16 : GGMLType.BF16, x, halves);
        const widened = new Float32Array(x.length);
        widenToF32(dtype, halves, widened);
        for (const type of TYPES) {
          const want = new Uint8Array(rowBytes(type, x.length));
          quantizeRow(type, widened, want);
          k.stage({ values: 0, raw: halves.length, out: want.length });
          k.raw(halves.length).set(halves);
          k.quantizeHalves(dtype, type, x.length);
          sameBytes(
            k.output(want.length),
            want,
            `${dtype} -> ${typeName(type)}, ${blocks} blocks`,
            rowBytes(type, 32),
            widened,
          );
        }
      }
    }
  });

for (const [build, k] of builds)
  test(`${build}: F16 and BF16 round every boundary between two halves as the reference does`, () => {
    // each midpoint of two adjacent halves (exact in f32) and the floats either side of it, both signs
    const f32 = new Float32Array(3);
    const u32 = new Uint32Array(f32.buffer);
    const values: number[] = [];
    for (let h = 0; h < 0x7c00; h++)
      for (const sign of [1, -1]) {
        const lo = f16ToF32(h),
          hi = h + 1 === 0x7c00 ? 65536 : f16ToF32(h + 1);
        f32[1] = (lo + hi) / 2;
        u32[0] = u32[1] - 1;
        u32[2] = u32[1] + 1;
        for (let i = 0; i < 3; i++) values.push(sign * f32[i]);
      }
    // the same around every bf16 boundary of a few binades, and past the largest bf16
    for (let e = -130; e < 128; e += 3)
      for (let m = 0; m < 128; m += 5) {
        u32[1] = (((e + 127) & 0xff) << 23) | (m << 16) | 0x8000;
        u32[0] = u32[1] - 1;
        u32[2] = u32[1] + 1;
        for (let i = 0; i < 3; i++) values.push(f32[i], -f32[i]);
      }
    values.push(3.4e38, -3.4e38, 65519.99, 65520, -65520);
    const x = Float32Array.from(values);
    for (const type of [GGMLType.F16, GGMLType.BF16]) {
      const want = new Uint8Array(rowBytes(type, x.length));
      quantizeRow(type, x, want);
      sameBytes(kernelBytes(k, type, x), want, typeName(type), 2);
    }
  });

for (const [build, k] of builds)
  test(`${build}: widening F16 and BF16 gives widenToF32's bits for every pattern, and finds the first non-finite value`, () => {
    for (const dtype of ["F16", "BF16"] as const) {
      const n = 65536 + 5; // and a tail past whole vectors
      const raw = new Uint8Array(2 * n);
      const h = new Uint16Array(raw.buffer);
      for (let i = 0; i < n; i++) h[i] = (i * 40503) & 0xffff;
      const want = new Float32Array(n);
      widenToF32(dtype, raw, want);
      k.stage({ values: n, raw: 2 * n });
      k.raw(2 * n).set(raw);
      const bad = k.widen(dtype, n);
      const got = new Uint32Array(k.values(n).slice().buffer);
      const w = new Uint32Array(want.buffer);
      const at = got.findIndex((b, i) => b !== w[i]);
      assert.equal(
        at,
        -1,
        `${dtype} 0x${h[at]?.toString(16)}: 0x${got[at]?.toString(16)}, want 0x${w[at]?.toString(16)}`,
      );
      assert.equal(
        bad,
        want.findIndex((v) => !Number.isFinite(v)),
        `${dtype}: the first non-finite value`,
      );
      // all finite: none found
      h.fill(0x3c00);
      k.raw(2 * n).set(raw);
      assert.equal(k.widen(dtype, n), -1);
      // only the tail's last
      h[n - 1] = dtype === "F16" ? 0x7c00 : 0x7f80;
      k.raw(2 * n).set(raw);
      assert.equal(k.widen(dtype, n), n - 1);
    }
  });

/** The reference's measurement of `rows` rows of `values`: bytes, per-row sums, maxima. */
function referenceMeasure(type: GGMLType, values: Float32Array, rows: number, n: number) {
  const rb = rowBytes(type, n);
  const dst = new Uint8Array(rows * rb);
  const errors = new Float64Array(rows);
  const rc = new RowConverter(n);
  const row = new ErrorStats();
  let maxAbs = 0,
    maxValue = 0;
  for (let r = 0; r < rows; r++) {
    row.reset();
    rc.quantize("t", values.subarray(r * n, (r + 1) * n), type, dst.subarray(r * rb, (r + 1) * rb), row);
    errors[r] = row.sumSq;
    maxAbs = Math.max(maxAbs, row.maxAbs);
    maxValue = Math.max(maxValue, row.maxValue);
  }
  return { dst, errors, maxAbs, maxValue };
}

/** Rows like weights (sums of three uniforms), a few outliers, a NaN-free row of zeros. */
function weightRows(rows: number, n: number, seed: number): Float32Array {
  const r = rng(seed);
  const x = new Float32Array(rows * n);
  for (let i = 0; i < x.length; i++) x[i] = (r() + r() + r() - 1.5) * 0.05;
  for (let i = 0; i < 20; i++) x[Math.floor(r() * x.length)] = (r() - 0.5) * 40;
  x.fill(0, n, 2 * n);
  x[3 * n + 1] = -0;
  return x;
}

for (const [build, k] of builds)
  test(`${build}: measured rows: the bytes, each row's sum of squared errors and the maxima are the reference's`, () => {
    const n = 256;
    for (const rows of [1, 2, 3, 4, 5, 7, 9]) {
      const x = weightRows(rows, n, rows);
      // odd values where every type keeps them finite, the measure's NaN skips included
      x[5] = 1e-42;
      for (const type of TYPES) {
        const want = referenceMeasure(type, x, rows, n);
        const rb = rowBytes(type, n);
        k.stage({ values: rows * n, out: rows * rb, rowLen: n, rows });
        k.values(rows * n).set(x);
        k.resetMaxima();
        assert.equal(k.measure(type, rows, n), -1);
        const dst = new Uint8Array(rows * rb);
        k.takeOut(dst);
        const e = new Uint8Array(rows * 8);
        k.takeErrors(e, rows);
        const what = `${typeName(type)}, ${rows} rows`;
        sameBytes(dst, want.dst, what, rowBytes(type, 32));
        assert.deepEqual(Array.from(new Float64Array(e.buffer)), Array.from(want.errors), `${what}: sums of squares`);
        assert.equal(k.maxAbs, want.maxAbs, `${what}: max error`);
        assert.equal(k.maxValue, want.maxValue, `${what}: max |value|`);
      }
    }
  });

for (const [build, k] of builds)
  test(`${build}: a row whose stored values are not all finite is reported, the first such row`, () => {
    const n = 64,
      rows = 6;
    for (const [type, big] of [
      [GGMLType.F16, 70000],
      [GGMLType.Q8_0, 1e7], // the f16 scale overflows
      [GGMLType.Q4_1, -1e6],
    ] as const) {
      const x = weightRows(rows, n, 9);
      x[4 * n + 40] = big;
      x[5 * n + 3] = big;
      k.stage({ values: rows * n, out: rows * rowBytes(type, n), rowLen: n, rows });
      k.values(rows * n).set(x);
      k.resetMaxima();
      assert.equal(k.measure(type, rows, n), 4, typeName(type));
    }
  });

/** A MeasureJob over plain buffers (as the inline runner has them). */
function job(
  src: Uint8Array,
  rows: number,
  n: number,
  to: GGMLType,
  columns: boolean,
  from = GGMLType.F32,
): MeasureJob {
  return {
    name: "blk.0.ffn_down.weight",
    src,
    from,
    columns,
    rows,
    n,
    to,
    dst: new Uint8Array(rows * rowBytes(to, n)),
    errors: new Uint8Array(rows * 8),
    maxAbs: 0,
    maxValue: 0,
  };
}

test("MeasureScratch: rows (f32, or a GGUF's Q8_0, F16, BF16) and a band's columns through the kernels equal the reference's bytes and figures", () => {
  const scratch = new MeasureScratch();
  const n = 96,
    cols = 75; // not a multiple of the kernels' strip, nor of 4
  for (const to of [GGMLType.Q8_0, GGMLType.Q4_1, GGMLType.F16, GGMLType.Q5_0]) {
    // a band: n rows of `cols` values, each column a row to store
    const band = weightRows(n, cols, 5);
    const colsAsRows = new Float32Array(cols * n);
    for (let r = 0; r < n; r++) for (let c = 0; c < cols; c++) colsAsRows[c * n + r] = band[r * cols + c];
    const want = referenceMeasure(to, colsAsRows, cols, n);
    const j = job(new Uint8Array(band.buffer), cols, n, to, true);
    scratch.run(j);
    sameBytes(j.dst, want.dst, `${typeName(to)} columns`, rowBytes(to, 32));
    assert.deepEqual(Array.from(new Float64Array(j.errors.buffer)), Array.from(want.errors));
    assert.equal(j.maxAbs, want.maxAbs);
    assert.equal(j.maxValue, want.maxValue);
    // rows from a GGUF's Q8_0, F16 or BF16: dequantized (F16 and BF16 widened by the kernels), then requantized
    const rows = 11;
    const values = weightRows(rows, n, 6);
    for (const from of [GGMLType.Q8_0, GGMLType.F16, GGMLType.BF16]) {
      const stored = new Uint8Array(rows * rowBytes(from, n));
      quantizeRow(from, values, stored);
      const deq = new Float32Array(rows * n);
      dequantizeRow(from, stored, rows * n, deq);
      const want2 = referenceMeasure(to, deq, rows, n);
      const j2 = job(stored, rows, n, to, false, from);
      scratch.run(j2);
      const what = `${typeName(to)} from ${typeName(from)}`;
      sameBytes(j2.dst, want2.dst, what, rowBytes(to, 32));
      assert.deepEqual(Array.from(new Float64Array(j2.errors.buffer)), Array.from(want2.errors), what);
      assert.equal(j2.maxAbs, want2.maxAbs, what);
      assert.equal(j2.maxValue, want2.maxValue, what);
    }
  }
});

test("MeasureScratch: a checkpoint's halves read by the job equal them given, through the kernels and the reference (MXFP4); a NaN among them is refused naming the file, tensor, row and column", (t) => {
  const file = join(tempDir("measure-read"), "shard.bin");
  const fd = openSync(file, "w+");
  t.after(() => closeSync(fd));
  const scratch = new MeasureScratch();
  const n = 64,
    rows = 6;
  const halves = new Uint8Array(rows * n * 2);
  quantizeRow(GGMLType.BF16, weightRows(rows, n, 9), halves);
  writeSync(fd, halves, 0, halves.length, 3);
  const read = { fd, position: 3, file, tensor: "model.layers.0.mlp.up_proj.weight" };
  for (const to of [GGMLType.Q8_0, GGMLType.MXFP4]) {
    const given = job(halves, rows, n, to, false, GGMLType.BF16);
    scratch.run(given);
    const j = { ...job(new Uint8Array(0), rows, n, to, false, GGMLType.BF16), src: undefined, read, sourceRow: 40 };
    scratch.run(j);
    sameBytes(j.dst, given.dst, typeName(to), rowBytes(to, 32));
    assert.deepEqual(Array.from(new Float64Array(j.errors.buffer)), Array.from(new Float64Array(given.errors.buffer)));
    assert.equal(j.maxAbs, given.maxAbs);
    assert.equal(j.maxValue, given.maxValue);
  }
  // row 2, column 5 of the read: the checkpoint's row 42
  writeSync(fd, new Uint8Array([0xc0, 0x7f]), 0, 2, 3 + 2 * (2 * n + 5));
  for (const to of [GGMLType.Q8_0, GGMLType.MXFP4])
    assert.throws(
      () =>
        scratch.run({
          ...job(new Uint8Array(0), rows, n, to, false, GGMLType.BF16),
          src: undefined,
          read,
          sourceRow: 40,
        }),
      /shard\.bin: tensor "model\.layers\.0\.mlp\.up_proj\.weight" holds NaN \(row 42, column 5\)/,
    );
});

test("MeasureScratch: a value the store's type cannot hold is refused with the reference's error, naming the tensor and value", () => {
  const n = 64,
    rows = 8;
  const x = weightRows(rows, n, 3);
  x[6 * n + 17] = 123456;
  const want = (() => {
    try {
      referenceMeasure(GGMLType.F16, x, rows, n);
    } catch (e) {
      return e as Error;
    }
    return undefined;
  })();
  assert.ok(want instanceof ConvertError);
  const j = job(new Uint8Array(x.buffer), rows, n, GGMLType.F16, false);
  j.name = "t";
  assert.throws(
    () => new MeasureScratch().run(j),
    (e: Error) => e instanceof ConvertError && e.message === want.message && /123456/.test(e.message),
  );
  // the same in a band's column
  const band = new Float32Array(n * rows).fill(0.5);
  band[9 * rows + 5] = -99999;
  const jc = job(new Uint8Array(band.buffer), rows, n, GGMLType.F16, true);
  assert.throws(() => new MeasureScratch().run(jc), /blk\.0\.ffn_down\.weight: the value -99999 does not fit in F16/);
});

test("encodeChunk through the kernels: rotary regrouping and Gemma's one, from F32, F16 and BF16, given or read from a file, are widening then quantizeRow", (t) => {
  const file = join(tempDir("encode-read"), "rows.bin");
  const fd = openSync(file, "w+");
  t.after(() => closeSync(fd));
  const rowLen = 64,
    rows = 16,
    heads = 8;
  const r = rng(11);
  const source = new Float32Array(rows * rowLen);
  for (let i = 0; i < source.length; i++) source[i] = (r() - 0.5) * 3;
  source[7] = NaN;
  for (const dtype of ["F32", "F16", "BF16"] as const) {
    const elem = dtype === "F32" ? 4 : 2;
    const src = new Uint8Array(rows * rowLen * elem);
    if (dtype === "F32") new Float32Array(src.buffer).set(source);
    else quantizeRow(dtype === "F16" ? GGMLType.F16 : GGMLType.BF16, source, src);
    for (const type of [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.F16, GGMLType.BF16, GGMLType.F32])
      for (const [ropeHeadRows, addOne] of [
        [undefined, false],
        [heads, false],
        [undefined, true],
      ] as const) {
        // the reference: rows widened in their output order, one added, quantizeRow per row
        const values = new Float32Array(rows * rowLen);
        for (let o = 0; o < rows; o++) {
          const k = ropeHeadRows ? o % ropeHeadRows : 0;
          const s = ropeHeadRows ? o - k + (k & 1) * (ropeHeadRows / 2) + (k >> 1) : o;
          widenToF32(
            dtype,
            src.subarray(s * rowLen * elem, (s + 1) * rowLen * elem),
            values.subarray(o * rowLen, (o + 1) * rowLen),
          );
        }
        if (addOne) for (let i = 0; i < values.length; i++) values[i] = Math.fround(values[i] + 1);
        const rb = rowBytes(type, rowLen);
        const want = new Uint8Array(rows * rb);
        for (let o = 0; o < rows; o++)
          quantizeRow(type, values.subarray(o * rowLen, (o + 1) * rowLen), want.subarray(o * rb, (o + 1) * rb));
        const j: EncodeJob = { src, dtype, rows, rowLen, ropeHeadRows, addOne, type, dst: new Uint8Array(rows * rb) };
        encodeChunk(j, new ChunkScratch());
        const what = `${dtype} -> ${typeName(type)}, rope ${ropeHeadRows}, addOne ${addOne}`;
        sameBytes(j.dst, want, what, rowBytes(type, 32));
        // the same rows read from a file by the thread encoding them, after 5 bytes of something else
        writeSync(fd, src, 0, src.length, 5);
        const read: EncodeJob = { ...j, src: undefined, read: { fd, position: 5, file, tensor: "t" } };
        read.dst = new Uint8Array(rows * rb);
        encodeChunk(read, new ChunkScratch());
        sameBytes(read.dst, want, `${what}, read`, rowBytes(type, 32));
      }
  }
});
