// The WASM kernels for F16, BF16, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4 (and prepare_q8_K, prepare_q8_Ki) against the
// plain-TypeScript reference in src/format/quant.ts, on odd shapes, row sub-ranges and 1..5 tokens.
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGMLType, typeName } from "../src/format/ggml-types.js";
import { dequantize, prepareActivation, quantizeRow, rowBytes, vecDot, vecDotType } from "../src/format/quant.js";
import { f32ToBF16, f32ToF16 } from "../src/format/half.js";
import { Arena } from "../src/runtime/arena.js";
import { instantiateKernels, kernelBuild } from "../src/runtime/wasm.js";
import { activationBytes, prepareKernel, weightKernel } from "../src/runtime/weight-kernels.js";
import { Q8KI_BYTES, q8KiFromQ8K } from "../src/runtime/weight-kernels/kquant.js";
import { rng } from "./helpers.js";

/** Random but valid weight bytes: random quants and scale bytes, sane f16 block scales. */
function randomWeights(type: GGMLType, rows: number, cols: number, seed: number): Uint8Array {
  const r = rng(seed);
  const b = new Uint8Array(rows * rowBytes(type, cols));
  for (let i = 0; i < b.length; i++) b[i] = Math.floor(r() * 256);
  const setF16 = (o: number, v: number) => {
    const h = f32ToF16(v);
    b[o] = h & 0xff;
    b[o + 1] = h >> 8;
  };
  switch (type) {
    case GGMLType.F16:
    case GGMLType.BF16:
      for (let i = 0; i < rows * cols; i++) {
        const v = (r() - 0.5) * 2;
        const h = type === GGMLType.F16 ? f32ToF16(v) : f32ToBF16(v);
        b[2 * i] = h & 0xff;
        b[2 * i + 1] = h >> 8;
      }
      break;
    case GGMLType.Q5_0:
      for (let o = 0; o < b.length; o += 22) setF16(o, (r() - 0.5) * 0.1);
      break;
    case GGMLType.Q5_1:
      for (let o = 0; o < b.length; o += 24) {
        setF16(o, r() * 0.05);
        setF16(o + 2, (r() - 0.5) * 0.5);
      }
      break;
    case GGMLType.Q4_K:
    case GGMLType.Q5_K: {
      const bs = type === GGMLType.Q4_K ? 144 : 176;
      for (let o = 0; o < b.length; o += bs) {
        setF16(o, r() * 0.01);
        setF16(o + 2, r() * 0.01);
      }
      break;
    }
    case GGMLType.Q6_K:
      for (let o = 0; o < b.length; o += 210) setF16(o + 208, (r() - 0.5) * 0.01);
      break;
    case GGMLType.MXFP4:
      // exponent bytes for half scales 2^-10 .. 2^-2, and the two subnormal ones
      for (let o = 0, i = 0; o < b.length; o += 17, i++) b[o] = i % 11 === 5 ? i & 1 : 118 + Math.floor(r() * 9);
      break;
    default:
      throw new Error(`randomWeights: ${typeName(type)}`);
  }
  return b;
}

function gaussians(n: number, seed: number): Float32Array {
  const r = rng(seed),
    out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = Math.sqrt(-2 * Math.log(r() + 1e-12)) * Math.cos(2 * Math.PI * r());
  return out;
}

const arena = new Arena(64 << 20);
const K = instantiateKernels(arena.memory);

/** Copy bytes into a fresh arena buffer; returns its offset. */
function put(bytes: Uint8Array, align = 64): number {
  const p = arena.alloc(Math.max(bytes.length, 16), align);
  arena.u8(p, bytes.length).set(bytes);
  return p;
}

interface Case {
  type: GGMLType;
  cols: number[];
}
const CASES: Case[] = [
  { type: GGMLType.F16, cols: [8, 37, 264] },
  { type: GGMLType.BF16, cols: [8, 37, 264] },
  { type: GGMLType.Q5_0, cols: [32, 96, 544] },
  { type: GGMLType.Q5_1, cols: [32, 96, 544] },
  { type: GGMLType.Q4_K, cols: [256, 768] },
  { type: GGMLType.Q5_K, cols: [256, 768] },
  { type: GGMLType.Q6_K, cols: [256, 768] },
  { type: GGMLType.MXFP4, cols: [32, 96, 544] },
];
const ROWS = [1, 7, 13];
const RANGES = (rows: number): [number, number][] => [
  [0, rows],
  [Math.min(1, rows), Math.max(Math.min(1, rows), rows - 2)],
  [rows - 1, rows],
];

/** Reference for one row and one prepared activation; also a magnitude for the tolerance. */
function reference(
  type: GGMLType,
  w: Uint8Array,
  act: Uint8Array | Float32Array,
  cols: number,
): { v: number; mag: number } {
  const v = vecDot(type, w, act, cols);
  const wf = dequantize(type, w, cols);
  const at = vecDotType(type);
  const xf = act instanceof Float32Array ? act : dequantize(at, act, cols);
  let mag = 0;
  for (let i = 0; i < cols; i++) mag += Math.abs(wf[i] * xf[i]);
  return { v, mag };
}

for (const { type, cols: colList } of CASES) {
  test(`${typeName(type)} matvec and matmul equal the reference dot (odd rows, sub-ranges, 1..5 tokens)`, () => {
    const wk = weightKernel(type);
    // the relaxed build packs the K-quants its own way and takes "q8_Ki" (weight-kernels/kquant.ts)
    const interleaved =
      (type === GGMLType.Q4_K || type === GGMLType.Q5_K || type === GGMLType.Q6_K) && kernelBuild() === "relaxed";
    // Q5_0 / Q5_1 are packed as Q4 tiles with fifth bits and take Q4's activations (weight-kernels/q4.ts)
    const q4Act = kernelBuild() === "relaxed" ? "q8_i8n" : "q8_i16n";
    const tiledQ5 = type === GGMLType.Q5_0 || type === GGMLType.Q5_1;
    assert.equal(
      wk.act,
      {
        [GGMLType.F16]: "f32_eo",
        [GGMLType.BF16]: "f32_eo",
        [GGMLType.Q5_0]: q4Act,
        [GGMLType.Q5_1]: q4Act,
        [GGMLType.MXFP4]: "q8_0",
      }[type as number] ?? (interleaved ? "q8_Ki" : "q8_K"),
    );
    const matvec = K[wk.matvec],
      matmul = K[wk.matmul];
    assert.ok(
      typeof matvec === "function" && typeof matmul === "function",
      `kernels ${wk.matvec} / ${wk.matmul} are exported`,
    );
    let seed = 100 * type;
    for (const cols of colList) {
      for (const rows of ROWS) {
        const rb = rowBytes(type, cols);
        const gguf = randomWeights(type, rows, cols, ++seed);
        // pack in two calls (rows split) as a streaming loader would
        const ownBlock = type === GGMLType.Q4_K ? 152 : type === GGMLType.Q5_K ? 184 : 212;
        const tileGroup = type === GGMLType.Q5_0 ? 176 : 192; // 2 rows x 128 columns (Q5_1: f16 d and m, as Q5_0 its d)
        assert.equal(
          wk.packedBytes(rows, cols),
          interleaved
            ? rows * (cols / 256) * ownBlock
            : tiledQ5
              ? Math.ceil(rows / 2) * Math.ceil(cols / 128) * tileGroup
              : rows * rb,
        );
        const packed = new Uint8Array(wk.packedBytes(rows, cols));
        const split = rows >> 1;
        wk.pack(gguf.subarray(0, split * rb), packed, 0, split, rows, cols);
        wk.pack(gguf.subarray(split * rb), packed, split, rows - split, rows, cols);
        const wp = put(packed);
        const ntokMax = 5;
        const acts: (Uint8Array | Float32Array)[] = [];
        const ab = activationBytes(wk.act, cols);
        const xall = new Uint8Array(ab * ntokMax);
        for (let t = 0; t < ntokMax; t++) {
          const x = gaussians(cols, ++seed);
          if (t === 2) x.fill(0, 0, Math.min(cols, 40)); // a block of zeros (Q8 scale 0)
          const a = prepareActivation(type, x);
          acts.push(a);
          // the bytes the kernel takes: Q8_K blocks reordered for the relaxed K-quants
          let k = interleaved ? q8KiFromQ8K(a as Uint8Array, cols) : a;
          // for Q5 what prepare_q8_i8n / _i16n makes (the same quants; kernels.test.ts checks it);
          // for F16 / BF16 the values reordered by prepare_f32_eo (checked against the rule below)
          const eoAct = wk.act === "f32_eo";
          if (tiledQ5 || eoAct) {
            const xp = put(new Uint8Array(x.buffer, x.byteOffset, x.byteLength)),
              dp = arena.alloc(ab, 64);
            K[prepareKernel(wk.act)!](xp, dp, cols, 1);
            k = arena.u8(dp, ab).slice();
            if (eoAct) {
              const eo = new Float32Array(k.buffer, k.byteOffset, cols);
              for (let i = 0; i < cols; i++) {
                const want = i < (cols & ~7) ? x[(i & ~7) + ((i & 7) < 4 ? 2 * (i & 3) : 2 * (i & 3) + 1)] : x[i];
                assert.ok(Object.is(eo[i], want), `f32_eo of ${cols} values, at ${i}: ${eo[i]}, want ${want}`);
              }
            }
          }
          assert.equal(k.byteLength, ab);
          xall.set(k instanceof Float32Array ? new Uint8Array(k.buffer, k.byteOffset, k.byteLength) : k, t * ab);
        }
        const xp = put(xall);
        const refs: { v: number; mag: number }[][] = [];
        for (let t = 0; t < ntokMax; t++) {
          refs.push([]);
          for (let r = 0; r < rows; r++)
            refs[t].push(reference(type, gguf.subarray(r * rb, (r + 1) * rb), acts[t], cols));
        }
        const yp = arena.alloc(rows * ntokMax * 4);
        const check = (got: number, ref: { v: number; mag: number }, what: string) => {
          const tol = 3e-6 * ref.mag + 1e-6;
          assert.ok(
            Math.abs(got - ref.v) <= tol,
            `${typeName(type)} ${rows}x${cols} ${what}: kernel ${got}, reference ${ref.v} (tolerance ${tol})`,
          );
        };
        // F16/BF16 rows are computed in one float order whatever rows they are grouped with
        // (matvec_half.ts): any range, and any token of a matmul, gives the full matvec's bits
        const half = type === GGMLType.F16 || type === GGMLType.BF16;
        matvec(wp, xp, yp, rows, cols, 0, rows);
        const full = Float32Array.from(arena.f32(yp, rows));
        const sameBits = (got: number, r: number, what: string) => {
          if (half)
            assert.ok(Object.is(got, full[r]), `${typeName(type)} ${what}: ${got}, full-range matvec ${full[r]}`);
        };
        for (const [r0, r1] of RANGES(rows)) {
          const y = arena.f32(yp, rows * ntokMax);
          y.fill(NaN);
          matvec(wp, xp, yp, rows, cols, r0, r1);
          for (let r = 0; r < rows; r++) {
            if (r >= r0 && r < r1) {
              check(y[r], refs[0][r], `matvec row ${r} of [${r0}, ${r1})`);
              sameBits(y[r], r, `matvec row ${r} of [${r0}, ${r1})`);
            } else assert.ok(Number.isNaN(y[r]), `matvec [${r0}, ${r1}) wrote row ${r}`);
          }
          for (let ntok = 1; ntok <= ntokMax; ntok++) {
            y.fill(NaN);
            matmul(wp, xp, yp, rows, cols, ntok, r0, r1);
            for (let t = 0; t < ntokMax; t++) {
              for (let r = 0; r < rows; r++) {
                const v = y[t * rows + r];
                if (t < ntok && r >= r0 && r < r1) {
                  check(v, refs[t][r], `matmul ntok ${ntok} token ${t} row ${r} of [${r0}, ${r1})`);
                  if (t === 0) sameBits(v, r, `matmul ntok ${ntok} token 0 row ${r} of [${r0}, ${r1})`);
                } else assert.ok(Number.isNaN(v), `matmul ntok ${ntok} [${r0}, ${r1}) wrote token ${t} row ${r}`);
              }
            }
          }
        }
      }
    }
  });
}

/** got equals want byte for byte; a difference names its block (of `block` bytes) and offset. */
function sameBytes(got: Uint8Array, want: Uint8Array, block: number, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  for (let i = 0; i < want.length; i++)
    if (got[i] !== want[i])
      assert.fail(
        `${what}: byte ${i} (block ${Math.floor(i / block)}, offset ${i % block}) is ${got[i]}, reference ${want[i]}`,
      );
}

test("prepare_q8_K writes the reference Q8_K bytes exactly (several blocks, tokens, zeros, +v/-v ties), and prepare_q8_Ki the same quants interleaved", () => {
  const prep = prepareKernel("q8_K");
  assert.equal(prep, "prepare_q8_K");
  const cols = 768,
    ntok = 4;
  const x = new Float32Array(cols * ntok);
  x.set(gaussians(cols * ntok, 5));
  x.fill(0, cols, cols + 256); // token 1, block 0: all zeros
  // token 2, block 1: -3 comes before +3 (the reference keeps the first); block 2: +3 first
  x.fill(0.5, 2 * cols + 256, 2 * cols + 512);
  x[2 * cols + 300] = -3;
  x[2 * cols + 400] = 3;
  x.fill(-0.25, 2 * cols + 512, 3 * cols);
  x[2 * cols + 600] = 3;
  x[2 * cols + 700] = -3;
  // token 3: values that land exactly on .5 after scaling (round half to even)
  for (let i = 0; i < cols; i++) x[3 * cols + i] = ((i % 41) - 20) * (127 / 254);
  x[3 * cols] = 127;
  x[3 * cols + 256] = -127;
  x[3 * cols + 512] = 127;
  const xp = put(new Uint8Array(x.buffer));
  const ab = activationBytes("q8_K", cols);
  const dp = arena.alloc(ab * ntok);
  arena.u8(dp, ab * ntok).fill(0xcc);
  K.prepare_q8_K(xp, dp, cols, ntok);
  const got = arena.u8(dp, ab * ntok);
  for (let t = 0; t < ntok; t++) {
    const want = new Uint8Array(ab);
    quantizeRow(GGMLType.Q8_K, x.subarray(t * cols, (t + 1) * cols), want);
    sameBytes(got.subarray(t * ab, (t + 1) * ab), want, 292, `q8_K token ${t}`);
  }
  // the tie rows really produced opposite signs (so the test can tell first from last)
  const dv = new DataView(got.buffer, got.byteOffset);
  assert.ok(dv.getFloat32(2 * ab + 292, true) > 0, "block with -3 first: d = 1 / (-127 / -3) > 0");
  assert.ok(dv.getFloat32(2 * ab + 584, true) < 0, "block with +3 first: d < 0");
  // q8_Ki (the relaxed build's Q4_K and Q6_K activations): the same quants and d, interleaved, with both sums
  const ib = activationBytes("q8_Ki", cols);
  const ip = arena.alloc(ib * ntok);
  arena.u8(ip, ib * ntok).fill(0xcc);
  K.prepare_q8_Ki(xp, ip, cols, ntok);
  const gotI = arena.u8(ip, ib * ntok);
  for (let t = 0; t < ntok; t++)
    sameBytes(
      gotI.subarray(t * ib, (t + 1) * ib),
      q8KiFromQ8K(got.subarray(t * ab, (t + 1) * ab), cols),
      Q8KI_BYTES,
      `q8_Ki token ${t}`,
    );
});

test("F16 kernels are exact on subnormal, zero, negative-zero and extreme halves", () => {
  const cols = 16;
  const halves = [
    0x0001, 0x03ff, 0x0400, 0x8001, 0x0000, 0x8000, 0x7bff, 0xfbff, 0x3c00, 0xbc00, 0x3555, 0x0200, 0x8200, 0x1234,
    0x9234, 0x7800,
  ];
  const w = new Uint8Array(cols * 2);
  halves.forEach((h, i) => {
    w[2 * i] = h & 0xff;
    w[2 * i + 1] = h >> 8;
  });
  const wf = dequantize(GGMLType.F16, w, cols);
  for (let probe = 0; probe < cols; probe++) {
    // one-hot activations: the kernel must return the weight itself
    const x = new Float32Array(cols);
    x[probe] = 1;
    const wp = put(w),
      xp = put(new Uint8Array(x.buffer)),
      yp = arena.alloc(16);
    const eo = arena.alloc(cols * 4, 64);
    K.prepare_f32_eo(xp, eo, cols, 1);
    K.matvec_f16(wp, eo, yp, 1, cols, 0, 1);
    const got = arena.f32(yp, 1)[0];
    assert.ok(got === wf[probe], `half 0x${halves[probe].toString(16)}: kernel ${got}, exact ${wf[probe]}`);
    K.matvec_bf16(wp, eo, yp, 1, cols, 0, 1);
    const bf = dequantize(GGMLType.BF16, w, cols)[probe];
    // a dot product that starts from +0 turns a -0 weight into +0: compare with ===
    assert.ok(
      arena.f32(yp, 1)[0] === bf,
      `bf16 0x${halves[probe].toString(16)}: kernel ${arena.f32(yp, 1)[0]}, exact ${bf}`,
    );
  }
});

test("F16 packing rejects inf and NaN weights; packing checks its arguments", () => {
  const wk = weightKernel(GGMLType.F16);
  const good = new Uint8Array(2 * 64);
  const dst = new Uint8Array(wk.packedBytes(2, 32));
  wk.pack(good, dst, 0, 2, 2, 32);
  const bad = good.slice();
  bad[2 * 45 + 1] = 0x7c; // row 1, column 13: +inf
  assert.throws(() => wk.pack(bad, dst, 0, 2, 2, 32), /inf or NaN weight at row 1, column 13/);
  const k4 = weightKernel(GGMLType.Q4_K);
  assert.throws(() => k4.packedBytes(2, 300), /not a whole number of 256-value blocks/);
  assert.throws(() => k4.pack(new Uint8Array(144), new Uint8Array(288), 1, 2, 2, 256), /outside/);
  assert.throws(() => k4.pack(new Uint8Array(100), new Uint8Array(288), 0, 1, 2, 256), /need 144 bytes/);
});

// A predictor's read-ahead computes only the rows past the hot region (Predictor.scores' `from`,
// weight-loader.ts rowTail): rows [from, rows) of a packed matrix, run as a matrix of their own at
// tailOffset, must give the whole matrix's results for those rows to the bit, for every type;
// a layout that cannot start there (inside a tile, or columns in several chunks) says -1.
test("tailOffset: the rows from there on, run as a matrix of their own, equal the whole matrix's rows (every type)", () => {
  const types = [GGMLType.F32, GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1, ...CASES.map((c) => c.type)];
  let seed = 7;
  for (const type of types) {
    const wk = weightKernel(type);
    const tile =
      type === GGMLType.Q8_0 ? 4 : [GGMLType.Q4_0, GGMLType.Q4_1, GGMLType.Q5_0, GGMLType.Q5_1].includes(type) ? 2 : 1;
    const kquant = type === GGMLType.Q4_K || type === GGMLType.Q5_K || type === GGMLType.Q6_K;
    for (const cols of kquant ? [256, 4096 + 256] : [160, 4096 + 128]) {
      const rows = 37;
      let gguf: Uint8Array;
      if (CASES.some((c) => c.type === type)) gguf = randomWeights(type, rows, cols, ++seed);
      else {
        const rb = rowBytes(type, cols);
        gguf = new Uint8Array(rows * rb);
        const f = gaussians(rows * cols, ++seed);
        for (let r = 0; r < rows; r++)
          quantizeRow(type, f.subarray(r * cols, (r + 1) * cols), gguf.subarray(r * rb, (r + 1) * rb));
      }
      const packed = new Uint8Array(wk.packedBytes(rows, cols));
      wk.pack(gguf, packed, 0, rows, rows, cols);
      const wp = put(packed);
      const x = gaussians(cols, ++seed);
      let xp = put(new Uint8Array(x.buffer, x.byteOffset, x.byteLength));
      const prep = prepareKernel(wk.act);
      if (prep) {
        const dp = arena.alloc(activationBytes(wk.act, cols), 64);
        K[prep](xp, dp, cols, 1);
        xp = dp;
      }
      const y = arena.alloc(rows * 4, 64),
        yt = arena.alloc(rows * 4, 64);
      K[wk.matvec](wp, xp, y, rows, cols, 0, rows);
      const whole = arena.f32(y, rows).slice();
      for (const from of [1, 2, 4, 5, 12, 36]) {
        const at = wk.tailOffset(rows, cols, from);
        const chunks = tile > 1 && Math.ceil(cols / 128) > 32;
        const name = `${typeName(type)} ${rows}x${cols} from ${from}`;
        if (from % tile !== 0 || chunks) {
          assert.equal(at, -1, `${name}: cannot start there`);
          continue;
        }
        assert.ok(at > 0 && at < packed.length, `${name}: offset ${at}`);
        arena.f32(yt, rows).fill(NaN);
        K[wk.matvec](wp + at, xp, yt, rows - from, cols, 0, rows - from);
        const tail = arena.f32(yt, rows - from);
        for (let r = from; r < rows; r++)
          assert.ok(Object.is(tail[r - from], whole[r]), `${name}: row ${r} ${tail[r - from]} vs ${whole[r]}`);
      }
    }
  }
});
