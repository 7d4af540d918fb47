/**
 * The transformer-block kernels (assembly/model_ops.ts) against plain-TypeScript references on odd
 * sizes, run through the thread pool at 1 and 2 threads; and every weight kernel split across
 * 2 threads giving exactly what 1 thread gives.
 */
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import { GGMLType, typeName } from "../src/format/ggml-types.js";
import { quantizeRow, rowBytes, vecDot, prepareActivation } from "../src/format/quant.js";
import { f16ToF32, f32ToF16 } from "../src/format/half.js";
import { activationBytes, prepareKernel, weightKernel } from "../src/runtime/weight-kernels.js";

const arena = new Arena(64 << 20);
const pools = [await ThreadPool.create(arena.memory, 1), await ThreadPool.create(arena.memory, 2)];
after(() => Promise.all(pools.map((p) => p.dispose())));

let seed = 12345;
function rand(n: number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    a[i] = ((seed / 2 ** 32) * 2 - 1) * scale;
  }
  return a;
}
function put(a: Float32Array): number {
  const p = arena.alloc(a.length * 4);
  arena.f32(p, a.length).set(a);
  return p;
}
const f32Bits = (v: number) => new Int32Array(new Float32Array([v]).buffer)[0];
function close(actual: Float32Array, expected: ArrayLike<number>, tol: number, what: string): void {
  assert.equal(actual.length, expected.length);
  for (let i = 0; i < actual.length; i++) {
    const e = expected[i];
    assert.ok(Math.abs(actual[i] - e) <= tol * Math.max(1, Math.abs(e)), `${what}[${i}]: ${actual[i]} vs ${e}`);
  }
}

for (const pool of pools) {
  const T = `${pool.threads} thread(s)`;

  test(`rmsnorm_rows on odd widths (${T})`, () => {
    for (const [n, ntok] of [
      [7, 3],
      [64, 1],
      [257, 5],
    ]) {
      const x = rand(n * ntok, 3),
        w = rand(n);
      const px = put(x),
        pw = put(w),
        py = arena.alloc(n * ntok * 4);
      pool.run(pool.fn("rmsnorm_rows"), [py, px, pw, n, f32Bits(1e-5)], 5, ntok);
      const want = new Float32Array(n * ntok);
      for (let t = 0; t < ntok; t++) {
        let ss = 0;
        for (let i = 0; i < n; i++) ss += x[t * n + i] ** 2;
        const s = 1 / Math.sqrt(ss / n + 1e-5);
        for (let i = 0; i < n; i++) want[t * n + i] = x[t * n + i] * s * w[i];
      }
      close(arena.f32(py, n * ntok), want, 1e-5, `rmsnorm n=${n}`);
    }
  });

  test(`rope, normal and NeoX pairing, partial rotation (${T})`, () => {
    for (const neox of [0, 1]) {
      const nHeads = 3,
        headDim = 12,
        nRot = 8,
        ntok = 5,
        maxPos = 40;
      const x = rand(ntok * nHeads * headDim);
      const positions = [0, 1, 7, 20, 39];
      const half = nRot / 2;
      const table = new Float32Array(maxPos * half * 2);
      for (let p = 0; p < maxPos; p++)
        for (let i = 0; i < half; i++) {
          const th = p * Math.pow(10000, (-2 * i) / nRot);
          table[(p * half + i) * 2] = Math.cos(th);
          table[(p * half + i) * 2 + 1] = Math.sin(th);
        }
      const px = put(x),
        pt = put(table),
        pp = arena.alloc(ntok * 4);
      arena.i32(pp, ntok).set(positions);
      pool.run(pool.fn("rope"), [px, pp, pt, nHeads, headDim, nRot, neox], 7, ntok);
      const want = Float32Array.from(x);
      for (let t = 0; t < ntok; t++)
        for (let h = 0; h < nHeads; h++)
          for (let i = 0; i < half; i++) {
            const th = positions[t] * Math.pow(10000, (-2 * i) / nRot);
            const base = (t * nHeads + h) * headDim;
            const a = base + (neox ? i : 2 * i),
              b = base + (neox ? i + half : 2 * i + 1);
            want[a] = x[a] * Math.cos(th) - x[b] * Math.sin(th);
            want[b] = x[a] * Math.sin(th) + x[b] * Math.cos(th);
          }
      close(arena.f32(px, x.length), want, 1e-5, `rope neox=${neox}`);
    }
  });

  test(`KV cache store: f32 -> f16 bits as format/half.ts rounds them (nearest even, subnormals, overflow), or an f32 copy (${T})`, () => {
    const special = [0, -0, 65504, 65520, 1e6, -1e6, 6e-8, 3e-8, 1e-9, 2.98e-8, 1 + 2 ** -11, 1 + 3 * 2 ** -11, NaN];
    const x = Float32Array.from([...special, ...rand(3001, 100)]);
    const px = put(x);
    const dst = arena.alloc(x.length * 4);
    pool.run(pool.fn("kv_store"), [px, dst, 1], 3, x.length, 1024);
    const bits = new Uint16Array(arena.memory.buffer, dst, x.length);
    for (let i = 0; i < x.length; i++)
      if (!Number.isNaN(x[i])) assert.equal(bits[i], f32ToF16(x[i]), `f16 of ${x[i]} at ${i}`);
      else assert.ok((bits[i] & 0x7c00) === 0x7c00 && (bits[i] & 0x3ff) !== 0, "NaN stays NaN");
    pool.run(pool.fn("kv_store"), [px, dst, 0], 3, x.length, 1024);
    assert.deepEqual(new Uint32Array(arena.memory.buffer, dst, x.length), new Uint32Array(x.buffer));
  });

  for (const [kType, vType, window, sinks, scale, ring] of [
    ["f32", "f32", 0, false, 0, 0],
    ["f16", "f16", 0, false, 0, 0],
    ["f16", "f32", 0, false, 0, 0],
    ["f32", "f16", 0, false, 0, 0],
    // a sliding window shorter than the positions, sinks, and a scale of q.k other than 1/sqrt(headDim)
    ["f16", "f16", 5, true, 0.3, 0],
    ["f32", "f32", 3, false, 0, 0],
    ["f32", "f32", 0, true, 0, 0],
    // the window's rows in a ring of window + batch - 1 rows, position j in row j % ring
    ["f16", "f16", 5, false, 0, 8],
    ["f32", "f16", 3, true, 0, 6],
  ] as const)
    test(`causal grouped-query attention on odd sizes, K ${kType}, V ${vType}${window ? `, window ${window}` : ""}${ring ? `, a ring of ${ring}` : ""}${sinks ? ", sinks" : ""}${scale ? `, scale ${scale}` : ""} (${T})`, () => {
      const nHeads = 6,
        nKV = 2,
        headDim = 10,
        ctx = 23,
        ntok = 4,
        pos0 = 9;
      const kvDim = nKV * headDim,
        qDim = nHeads * headDim;
      const q = rand(ntok * qDim),
        k = rand(ctx * kvDim, 3),
        v = rand(ctx * kvDim, 3);
      // the cache as the kernel holds it, and the values it stands for
      const cache = (x: Float32Array, type: "f16" | "f32"): [number, Float32Array] => {
        if (type === "f32") return [put(x), x];
        const h = Uint16Array.from(x, (e) => f32ToF16(e));
        const p = arena.alloc(h.length * 2);
        new Uint16Array(arena.memory.buffer, p, h.length).set(h);
        return [p, Float32Array.from(h, (b) => f16ToF32(b))];
      };
      // a ring holds position j in row j % ring: lay the positions the window needs out that way
      const ringed = (x: Float32Array) => {
        if (!ring) return x;
        const r = new Float32Array(ring * kvDim);
        for (let j = Math.max(0, pos0 + ntok - ring); j < pos0 + ntok; j++)
          r.set(x.subarray(j * kvDim, (j + 1) * kvDim), (j % ring) * kvDim);
        return r;
      };
      const [pk] = cache(ringed(k), kType);
      const [pv] = cache(ringed(v), vType);
      const [, kv] = cache(k, kType);
      const [, vv] = cache(v, vType);
      const pq = put(q),
        po = arena.alloc(ntok * qDim * 4),
        ps = arena.alloc(nHeads * ctx * 4);
      const sinkLogits = sinks ? rand(nHeads, 2) : null;
      const kqScale = scale || Math.fround(1 / Math.fround(Math.sqrt(headDim)));
      const kvF16 = (kType === "f16" ? 1 : 0) | (vType === "f16" ? 2 : 0);
      const sinksAt = sinkLogits ? put(sinkLogits) : 0;
      const args = [pq, pk, pv, po, ps, ntok, pos0, nHeads, nKV, headDim, ctx, kvF16, f32Bits(kqScale), window, ring];
      pool.run(pool.fn("attention"), [...args, sinksAt], 16, nHeads);
      const want = new Float32Array(ntok * qDim);
      for (let t = 0; t < ntok; t++)
        for (let h = 0; h < nHeads; h++) {
          const g = Math.floor(h / (nHeads / nKV));
          const n = pos0 + t + 1;
          const lo = window > 0 ? Math.max(0, n - window) : 0;
          const s = new Float64Array(n).fill(-Infinity);
          for (let j = lo; j < n; j++) {
            s[j] = 0;
            for (let d = 0; d < headDim; d++) s[j] += q[t * qDim + h * headDim + d] * kv[j * kvDim + g * headDim + d];
            s[j] *= kqScale;
          }
          const sink = sinkLogits ? sinkLogits[h] : -Infinity;
          const mx = Math.max(sink, ...s);
          let sum = Math.exp(sink - mx);
          for (let j = lo; j < n; j++) sum += s[j] = Math.exp(s[j] - mx);
          for (let j = lo; j < n; j++)
            for (let d = 0; d < headDim; d++)
              want[t * qDim + h * headDim + d] += (s[j] / sum) * vv[j * kvDim + g * headDim + d];
        }
      close(arena.f32(po, want.length), want, 1e-5, "attention");
    });

  test(`gpt-oss's clamped SwiGLU: the gate capped at 7, the up clamped to +-7 plus 1, through both limits (${T})`, () => {
    const n = 301;
    // values spread over +-12: every limit is crossed
    const g = Float32Array.from(rand(n, 4), (x) => x * 3),
      u = Float32Array.from(rand(n, 4).reverse(), (x) => x * 3);
    assert.ok(g.some((x) => x > 7) && u.some((x) => x < -7) && u.some((x) => x > 7));
    const pg = put(g),
      pu = put(u);
    pool.run(pool.fn("ffn_act"), [pg, pu, 4], 3, n, 64);
    const want = Array.from(g, (x, i) => {
      const c = Math.min(x, 7);
      return (c / (1 + Math.exp(-1.702 * c))) * (Math.min(7, Math.max(-7, u[i])) + 1);
    });
    close(arena.f32(pg, n), want, 1e-5, "swiglu_oai");
  });

  test(`gated FFN activations: silu, relu, drelu, gelu (${T})`, () => {
    const n = 301;
    const acts: [number, (g: number, u: number) => number][] = [
      [0, (g, u) => (g / (1 + Math.exp(-g))) * u],
      [1, (g, u) => Math.max(0, g) * u],
      [2, (g, u) => Math.max(0, g) * Math.max(0, u)],
      [3, (g, u) => 0.5 * g * (1 + Math.tanh(0.7978845608028654 * (g + 0.044715 * g ** 3))) * u],
    ];
    for (const [kind, f] of acts) {
      const g = rand(n, 4),
        u = rand(n, 4);
      const pg = put(g),
        pu = put(u);
      pool.run(pool.fn("ffn_act"), [pg, pu, kind], 3, n, 64);
      close(
        arena.f32(pg, n),
        Array.from(g, (x, i) => f(x, u[i])),
        1e-5,
        `act ${kind}`,
      );
    }
  });

  test(`SiLU over its whole range: within a few ulp to -87, its limits beyond (${T})`, () => {
    // the kernels' e^x (activation_math.ts exp4) is a polynomial with a clamped input: check it
    // where decode meets it, not only near 0
    const xs: number[] = [0, -0, 1e-30, -1e-30, 87, -87, 88.7, -88.7, 100, -100, 1e4, -1e4, 3.4e38, -3.4e38];
    for (let i = 0; i < 4093; i++) xs.push(-90 + (i * 190) / 4093, Math.tan(((i + 0.5) / 4093 - 0.5) * 3.1) * 10);
    const n = xs.length;
    const g = Float32Array.from(xs);
    const pg = put(g),
      pu = put(new Float32Array(n).fill(1));
    pool.run(pool.fn("ffn_act"), [pg, pu, 0], 3, n, 64);
    const got = arena.f32(pg, n);
    for (let i = 0; i < n; i++) {
      const x = g[i],
        want = Math.fround(x / (1 + Math.exp(-x)));
      if (x < -87) {
        // true value below 1e-35: only its size and sign matter
        assert.ok(Math.abs(got[i]) < 1e-30 && !(got[i] > 0), `silu(${x}) = ${got[i]}`);
        continue;
      }
      const ulp = Math.max(Math.abs(want) * 2 ** -23, 2 ** -149);
      assert.ok(
        Math.abs(got[i] - want) <= 2 * ulp,
        `silu(${x}) = ${got[i]}, want ${want} (${(Math.abs(got[i] - want) / ulp).toFixed(2)} ulp)`,
      );
    }
  });

  test(`residual add and bias rows (${T})`, () => {
    const y = rand(203),
      x = rand(203);
    const py = put(y),
      px = put(x);
    pool.run(pool.fn("add_inplace"), [py, px], 2, 203, 64);
    close(
      arena.f32(py, 203),
      Array.from(y, (v, i) => v + x[i]),
      1e-6,
      "add",
    );
    const rows = rand(3 * 13),
      b = rand(13);
    const pr = put(rows),
      pb = put(b);
    pool.run(pool.fn("add_bias_rows"), [pr, pb, 13], 3, 3);
    close(
      arena.f32(pr, 39),
      Array.from(rows, (v, i) => v + b[i % 13]),
      1e-6,
      "bias",
    );
  });
}

/** K-quants have no quantizer here: random bytes, with the f16 super-block scales set sane. */
const K_SCALE_OFFSETS: Partial<Record<GGMLType, number[]>> = {
  [GGMLType.Q4_K]: [0, 2],
  [GGMLType.Q5_K]: [0, 2],
  [GGMLType.Q6_K]: [208],
};
const K_BLOCK_BYTES: Partial<Record<GGMLType, number>> = {
  [GGMLType.Q4_K]: 144,
  [GGMLType.Q5_K]: 176,
  [GGMLType.Q6_K]: 210,
};
function randomKQuantRow(row: Uint8Array, scaleOffsets: number[], blockBytes: number): void {
  const bytes = rand(row.length);
  for (let i = 0; i < row.length; i++) row[i] = Math.floor((bytes[i] + 1) * 127.99);
  for (let b = 0; b < row.length; b += blockBytes)
    for (const o of scaleOffsets) {
      const h = f32ToF16(0.001 + Math.abs(bytes[b + o]) * 0.01);
      row[b + o] = h & 0xff;
      row[b + o + 1] = h >> 8;
    }
}

const WEIGHT_TYPES = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q4_K,
  GGMLType.Q5_K,
  GGMLType.Q6_K,
];

test("every weight type: 2 threads give exactly the 1-thread result, and match the reference vecDot", () => {
  for (const type of WEIGHT_TYPES) {
    const k = weightKernel(type);
    const rows = 37;
    const cols = type >= GGMLType.Q4_K && type <= GGMLType.Q6_K ? 512 : 96;
    const ntok = 3;
    const rb = rowBytes(type, cols);
    const src = new Uint8Array(rows * rb);
    const wf = rand(rows * cols, 0.5);
    for (let r = 0; r < rows; r++) {
      const row = src.subarray(r * rb, (r + 1) * rb);
      if (K_SCALE_OFFSETS[type]) randomKQuantRow(row, K_SCALE_OFFSETS[type]!, K_BLOCK_BYTES[type]!);
      else quantizeRow(type, wf.subarray(r * cols, (r + 1) * cols), row);
    }
    const pw = arena.alloc(k.packedBytes(rows, cols));
    k.pack(src, arena.u8(pw, k.packedBytes(rows, cols)), 0, rows, rows, cols);
    const x = rand(ntok * cols, 2);
    const px = put(x);
    let pa = px;
    if (k.act !== "f32") {
      pa = arena.alloc(ntok * activationBytes(k.act, cols));
      pools[0].kernels[prepareKernel(k.act)!](px, pa, cols, ntok);
    }
    const results: Float32Array[] = [];
    for (const pool of pools) {
      const py = arena.alloc(rows * 4),
        pm = arena.alloc(ntok * rows * 4);
      pool.run(pool.fn(k.matvec), [pw, pa, py, rows, cols], 5, rows, 16);
      pool.run(pool.fn(k.matmul), [pw, pa, pm, rows, cols, ntok], 6, rows, 16);
      results.push(Float32Array.from(arena.f32(py, rows)), Float32Array.from(arena.f32(pm, ntok * rows)));
    }
    const name = typeName(type);
    assert.deepEqual(results[2], results[0], `${name} matvec: 2 threads vs 1`);
    assert.deepEqual(results[3], results[1], `${name} matmul: 2 threads vs 1`);
    const want = new Float32Array(ntok * rows);
    for (let t = 0; t < ntok; t++) {
      const act = prepareActivation(type, x.subarray(t * cols, (t + 1) * cols));
      for (let r = 0; r < rows; r++) want[t * rows + r] = vecDot(type, src.subarray(r * rb, (r + 1) * rb), act, cols);
    }
    close(results[0], want.subarray(0, rows), 1e-4, `${name} matvec vs reference`);
    close(results[1], want, 1e-4, `${name} matmul vs reference`);
  }
});

test("the Q8_0, Q4_0 and Q4_1 prefill GEMMs: 2 threads give exactly the 1-thread result (odd rows, 2 chunks, 1..13 tokens)", () => {
  for (const type of [GGMLType.Q8_0, GGMLType.Q4_0, GGMLType.Q4_1]) {
    const k = weightKernel(type);
    const rows = 45,
      cols = 4096 + 160;
    const rb = rowBytes(type, cols);
    const src = new Uint8Array(rows * rb);
    const wf = rand(rows * cols, 0.5);
    for (let r = 0; r < rows; r++)
      quantizeRow(type, wf.subarray(r * cols, (r + 1) * cols), src.subarray(r * rb, (r + 1) * rb));
    const pw = arena.alloc(k.packedBytes(rows, cols));
    k.pack(src, arena.u8(pw, k.packedBytes(rows, cols)), 0, rows, rows, cols);
    const ntokMax = 13;
    const x = rand(ntokMax * cols, 2);
    const px = put(x);
    const pa = arena.alloc(ntokMax * activationBytes(k.act, cols));
    pools[0].kernels[prepareKernel(k.act)!](px, pa, cols, ntokMax);
    for (const ntok of [1, 3, 5, 9, 13]) {
      const results: Float32Array[] = [];
      for (const pool of pools) {
        const pm = arena.alloc(ntok * rows * 4);
        pool.run(pool.fn(k.matmul), [pw, pa, pm, rows, cols, ntok], 6, rows, 16);
        results.push(Float32Array.from(arena.f32(pm, ntok * rows)));
      }
      assert.deepEqual(results[1], results[0], `${typeName(type)} matmul ntok ${ntok}: 2 threads vs 1`);
      const want = new Float32Array(ntok * rows);
      for (let t = 0; t < ntok; t++) {
        const act = prepareActivation(type, x.subarray(t * cols, (t + 1) * cols));
        for (let r = 0; r < rows; r++) want[t * rows + r] = vecDot(type, src.subarray(r * rb, (r + 1) * rb), act, cols);
      }
      close(results[0], want, 1e-4, `${typeName(type)} matmul ntok ${ntok} vs reference`);
    }
  }
});
