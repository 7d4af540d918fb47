/**
 * Micro-benchmark of the weight kernels: GMAC/s of matvec (decode) and matmul (prefill) per weight
 * type and matrix shape, on one thread, with random weights packed as the engine packs them.
 *
 *   node dist/bench/kernels.js [--types q4_0,q8_0] [--shapes 2048x2048,5632x2048] [--ntok 16] [--time 0.4]
 *
 * Shapes are rows x cols (outputs x inputs). A type may name a layout beside its own
 * (weight-kernels.ts layoutKernel) after a slash: `--types f16,q8_0/rows --shapes 768x32` (an
 * activation predictor's fc2). Each cold matvec is also given in GB/s of packed
 * weights and as a share of the streaming limit: what `stream_probe` (assembly/stream_probe.ts)
 * reads per CPU second from the same cold region doing nothing but loads (the best of 1, 2 and 4
 * interleaved streams). The last lines estimate the kernel-only decode and
 * prefill speed of a TinyLlama-1.1B-shaped model (22 layers, dim 2048, FFN 5632, 4 KV heads of 64,
 * vocabulary 32000), which is what llama.cpp's tok/s figures (LLAMA_CPP, below) compare against.
 * Where this runtime validates relaxed SIMD (Node 21+; Node 20 with the V8 flag wasm.ts sets)
 * every line is measured with both kernel builds, interleaved (src/runtime/wasm.ts), else with the
 * SIMD128 build. KERNELS_WASM=path overrides the module (for trying kernel variants: it is taken as
 * the build POWERINFER_KERNELS names, SIMD128 by default).
 *
 * A/B of two kernel modules with the same packed layouts (a variant against the one it replaces):
 * KERNELS_WASM=A.wasm KERNELS_WASM_B=B.wasm [POWERINFER_KERNELS=relaxed] node dist/bench/kernels.js
 * --types q8_0 --shapes 4096x4096 [--rounds 9] times the matvec of A and B in turn on the same
 * weights, cold then hot, and prints the median of the rounds' B/A ratios and whether the two give
 * the same bits: on a noisy host, alternating within one process is what makes a few percent
 * visible.
 */
import { readFileSync } from "node:fs";
import { availableParallelism } from "node:os";
import { GGMLType, typeFromName, typeName, tensorBytes } from "../src/format/ggml-types.js";
import { ACTIVATIONS } from "../src/format/activations.js";
import { f32ToF16 } from "../src/format/half.js";
import { Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import {
  instantiateKernels,
  kernelBuild,
  kernelModule,
  relaxedSimdSupported,
  type KernelBuild,
  type KernelExports,
} from "../src/runtime/wasm.js";
import { layoutKernel, layoutName, prepareKernel, type WeightLayout } from "../src/runtime/weight-kernels.js";
import {
  hasSparseKernel,
  partialBytes,
  sparseActivationBytes,
  sparseKernel,
  sparseRowBytes,
} from "../src/runtime/sparse-kernels.js";
import { bundleParts } from "../src/format/store/ffn-types.js";

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

/** The types benched, each in its own layout (null) or the one named after a slash. */
const types = arg("types", "f32,q8_0,q4_0,q4_1")
  .split(",")
  .map((n) => {
    const [name, layout = null] = n.split("/");
    const t = typeFromName(name);
    if (t === undefined) throw new Error(`unknown type ${name}`);
    if (layout !== null) layoutKernel(t, layout as WeightLayout); // throws for a layout the type has not
    return { type: t, layout: layout as WeightLayout | null };
  });
type Kind = (typeof types)[number];
const shapes = arg("shapes", "2048x2048,5632x2048,2048x5632,4096x11008")
  .split(",")
  .map((s) => s.split("x").map(Number) as [number, number]);
const NTOK = Number(arg("ntok", "16"));
const TIME = Number(arg("time", "1"));
const TINY = arg("tiny", "1") !== "0";

// (relaxedSimdSupported first: on Node 20 it turns on the V8 flag an overriding module may need)
const builds: KernelBuild[] = process.env.KERNELS_WASM
  ? [relaxedSimdSupported() && process.env.POWERINFER_KERNELS === "relaxed" ? "relaxed" : "simd128"]
  : process.env.POWERINFER_KERNELS
    ? [kernelBuild()]
    : relaxedSimdSupported()
      ? ["simd128", "relaxed"]
      : ["simd128"];
const moduleOf = (b: KernelBuild) =>
  process.env.KERNELS_WASM ? new WebAssembly.Module(readFileSync(process.env.KERNELS_WASM)) : kernelModule(b);

/** Random GGUF-layout bytes of a rows x cols matrix: random quants, scales near 0.01 (mins within -0.05). */
function randomMatrix(type: GGMLType, rows: number, cols: number, seed: number): Uint8Array {
  const bytes = new Uint8Array(tensorBytes(type, rows * cols));
  let s = seed >>> 0;
  const rnd = () => (s = (Math.imul(s, 1664525) + 1013904223) >>> 0) / 2 ** 32;
  if (type === GGMLType.F32) {
    const f = new Float32Array(bytes.buffer);
    for (let i = 0; i < f.length; i++) f[i] = rnd() - 0.5;
    return bytes;
  }
  if (type === GGMLType.F16 || type === GGMLType.BF16) {
    // random bytes would hold infinities and NaNs, which the loader refuses
    const h = new Uint16Array(bytes.buffer);
    const f = new Float32Array(1);
    const u = new Uint32Array(f.buffer);
    for (let i = 0; i < h.length; i++) {
      f[0] = rnd() - 0.5;
      h[i] = type === GGMLType.F16 ? f32ToF16(f[0]) : u[0] >>> 16;
    }
    return bytes;
  }
  for (let i = 0; i < bytes.length; i++) bytes[i] = (rnd() * 256) | 0;
  // each block's f16 scale (and min) where the type keeps it: random bytes there would be
  // NaNs, infinities and subnormals (x86 slows down on subnormal floats), not a real model's
  const blocks: Partial<Record<GGMLType, [number, number, boolean]>> = {
    // block bytes, offset of d, whether a min follows d
    [GGMLType.Q8_0]: [34, 0, false],
    [GGMLType.Q4_0]: [18, 0, false],
    [GGMLType.Q4_1]: [20, 0, true],
    [GGMLType.Q5_0]: [22, 0, false],
    [GGMLType.Q5_1]: [24, 0, true],
    [GGMLType.Q4_K]: [144, 0, true],
    [GGMLType.Q5_K]: [176, 0, true],
    [GGMLType.Q6_K]: [210, 208, false],
  };
  const spec = blocks[type];
  if (!spec) return bytes;
  const [bs, at, withMin] = spec;
  for (let o = 0; o < bytes.length; o += bs) {
    const d = f32ToF16(0.005 + rnd() * 0.01);
    bytes[o + at] = d & 0xff;
    bytes[o + at + 1] = d >> 8;
    if (withMin) {
      const m = f32ToF16(-rnd() * 0.05);
      bytes[o + at + 2] = m & 0xff;
      bytes[o + at + 3] = m >> 8;
    }
  }
  return bytes;
}

interface Result {
  build: KernelBuild;
  type: string;
  rows: number;
  cols: number;
  hot: number;
  cold: number;
  /** cold matvec in GB/s of packed weights */
  coldGBs: number;
  matmul: number;
}

/**
 * GMAC/s of fn: the best of 5 rounds, each timed in CPU time of this process (user + system),
 * which other processes sharing the cores do not inflate the way they inflate wall time.
 */
function timeIt(fn: (i: number) => void, macs: number): number {
  fn(0);
  let best = 0,
    i = 0;
  for (let round = 0; round < 5; round++) {
    let iters = 0;
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    do {
      fn(i++);
      iters++;
    } while (Number(process.hrtime.bigint() - t0) / 1e9 < TIME / 5);
    const c = process.cpuUsage(c0);
    best = Math.max(best, (macs * iters) / ((c.user + c.system) / 1e6) / 1e9);
  }
  return best;
}

/**
 * llama.cpp at one thread on this machine, TinyLlama-shaped random-weight models, [prefill,
 * decode] tok/s, measured once on a quiet machine. Whole-model figures: the kernel-only estimates
 * here leave out attention, norms and sampling, so they flatter this engine a little.
 */
const LLAMA_CPP: Record<string, [number, number]> = { Q4_0: [144, 36], Q8_0: [75, 24], Q4_1: [33, 26] };

/** Weights rotate over copies spanning this many bytes, so "cold" runs stream them from DRAM. */
const COLD_BYTES = 160 << 20;
const arena = new Arena(64 << 20);
const kernels = new Map<KernelBuild, KernelExports>(
  builds.map((b) => [b, instantiateKernels(arena.memory, moduleOf(b))]),
);
const maxRows = Math.max(32000, ...shapes.map((s) => s[0]));
const maxCols = Math.max(...shapes.map((s) => s[1]), 2048);
const REGION = COLD_BYTES + (256 << 20);
const ACT_BYTES = NTOK * Math.ceil(maxCols / 128) * 304 + 64; // the widest format
/** The bench's buffers in `ar`, at the same addresses in any fresh arena: x, its prepared form, y, the weights. */
function buffers(ar: Arena) {
  const p = {
    xPtr: ar.alloc(NTOK * maxCols * 4),
    actPtr: ar.alloc(ACT_BYTES),
    yPtr: ar.alloc(NTOK * maxRows * 4),
    wPtr: ar.alloc(REGION, 4096),
  };
  ar.u8(p.wPtr, REGION).fill(1); // fault every page in now, not inside a timed round
  return p;
}
const { xPtr, actPtr, yPtr, wPtr } = buffers(arena);
{
  const x = arena.f32(xPtr, NTOK * maxCols);
  for (let i = 0; i < x.length; i++) x[i] = Math.sin(i * 0.37) * 2;
}

/**
 * Random weights of `type` packed as `build` packs them at wPtr, copied over the cold region
 * (`copies` of them, `stride` bytes apart), and the activation of `ntok` tokens prepared for them
 * (at `xa`) by kernel module k.
 */
function packedCopies(
  { type, layout }: Kind,
  rows: number,
  cols: number,
  build: KernelBuild,
  k: KernelExports,
  ntok: number,
) {
  const wk = layoutKernel(type, layout, build);
  const size = wk.packedBytes(rows, cols);
  const stride = Math.ceil(size / 4096) * 4096;
  const copies = Math.max(1, Math.min(Math.ceil(COLD_BYTES / stride), Math.floor(REGION / stride)));
  const mem = arena.u8(wPtr, copies * stride);
  wk.pack(randomMatrix(type, rows, cols, rows * 31 + cols), mem.subarray(0, size), 0, rows, rows, cols);
  for (let c = 1; c < copies; c++) mem.copyWithin(c * stride, 0, size);
  const prep = prepareKernel(wk.act);
  if (prep) k[prep](xPtr, actPtr, cols, ntok);
  return { wk, size, stride, copies, xa: prep ? actPtr : xPtr };
}

function bench(kind: Kind, rows: number, cols: number, build: KernelBuild): Result {
  const k = kernels.get(build)!;
  const { wk, size, stride, copies, xa } = packedCopies(kind, rows, cols, build, k, NTOK);
  const mv = k[wk.matvec],
    mm = k[wk.matmul];
  const hot = timeIt(() => mv(wPtr, xa, yPtr, rows, cols, 0, rows), rows * cols);
  const cold = timeIt((i) => mv(wPtr + (i % copies) * stride, xa, yPtr, rows, cols, 0, rows), rows * cols);
  const matmul = mm
    ? timeIt((i) => mm(wPtr + (i % copies) * stride, xa, yPtr, rows, cols, NTOK, 0, rows), rows * cols * NTOK)
    : NaN;
  const type = layoutName(kind.type, kind.layout);
  return { build, type, rows, cols, hot, cold, coldGBs: (cold * size) / (rows * cols), matmul };
}

/** GB/s of the streaming probe over the cold region with `streams` interleaved walks (best of 5 rounds). */
function probe(streams: number): number {
  const part = 64 << 20; // bytes per call: well past the caches
  const parts = Math.floor(REGION / part);
  const probeFn = kernels.get(builds[0])!.stream_probe;
  // timeIt counts "MACs": here bytes, so its figure is GB/s
  return timeIt((i) => probeFn(wPtr + (i % parts) * part, part, streams), part);
}

/**
 * GB/s of `threads` threads reading the cold region at once (4 streams each; wall time, best of 5
 * rounds of the whole region split into 64 MiB parts among the threads).
 */
async function probeThreads(threads: number): Promise<number> {
  const pool = await ThreadPool.create(arena.memory, threads);
  try {
    const part = 64 << 20;
    const parts = Math.floor(REGION / part);
    const fn = pool.fn("stream_probe_parts");
    const run = () => pool.run(fn, [wPtr, part, 4], 3, parts, 1);
    run();
    let best = 0;
    for (let round = 0; round < 5; round++) {
      const t0 = process.hrtime.bigint();
      run();
      best = Math.max(best, (parts * part) / (Number(process.hrtime.bigint() - t0) / 1e9) / 1e9);
    }
    return best;
  } finally {
    await pool.dispose();
  }
}

/**
 * A/B mode (KERNELS_WASM_B): the median over `rounds` of B's GMAC/s over A's, cold and hot; whether
 * their outputs have the same bits. B runs in bArena, laid out as A's (buffers()).
 */
function abRounds(
  kind: Kind,
  rows: number,
  cols: number,
  build: KernelBuild,
  b: KernelExports,
  bArena: Arena,
  rounds: number,
): void {
  const a = kernels.get(build)!;
  const { wk, stride, copies, xa } = packedCopies(kind, rows, cols, build, a, 1);
  // B's memory gets the same weights and activation at the same addresses
  bArena.u8(wPtr, copies * stride).set(arena.u8(wPtr, copies * stride));
  bArena.u8(actPtr, ACT_BYTES).set(arena.u8(actPtr, ACT_BYTES));
  bArena.u8(xPtr, cols * 4).set(arena.u8(xPtr, cols * 4));
  const out = (k: KernelExports) => {
    k[wk.matvec](wPtr, xa, yPtr, rows, cols, 0, rows);
    return (k === b ? bArena : arena).f32(yPtr, rows).slice();
  };
  const ya = out(a),
    yb = out(b);
  const same = ya.every((v, i) => Object.is(v, yb[i]));
  const median = (v: number[]) => v.slice().sort((p, q) => p - q)[v.length >> 1];
  for (const cold of [true, false]) {
    const time = (k: KernelExports) =>
      timeIt(
        (i) => k[wk.matvec](wPtr + (cold ? (i % copies) * stride : 0), xa, yPtr, rows, cols, 0, rows),
        rows * cols,
      );
    const ga: number[] = [],
      gb: number[] = [],
      ratio: number[] = [];
    for (let r = 0; r < rounds; r++) {
      ga.push(time(a));
      gb.push(time(b));
      ratio.push(gb[r] / ga[r]);
    }
    console.log(
      `${layoutName(kind.type, kind.layout).padEnd(6)} ${build.padEnd(8)} ${`${rows}x${cols}`.padEnd(12)} ${cold ? "cold" : "hot "} A ${median(ga).toFixed(2)} B ${median(gb).toFixed(2)} GMAC/s, B/A median ${median(ratio).toFixed(3)} (${Math.min(...ratio).toFixed(3)}-${Math.max(...ratio).toFixed(3)}), same bits: ${same ? "yes" : "NO"}`,
    );
  }
}

if (process.env.KERNELS_WASM_B) {
  const build = builds[0];
  // B in a memory of its own: a module's constants are data it places at fixed addresses when
  // instantiated, so B in A's memory would overwrite A's with its own wherever their layouts differ
  const bArena = new Arena(64 << 20);
  const bPtrs = buffers(bArena);
  for (const [name, p] of Object.entries({ xPtr, actPtr, yPtr, wPtr }))
    if (bPtrs[name as keyof typeof bPtrs] !== p) throw new Error(`A/B: B's ${name} is not A's`);
  const b = instantiateKernels(bArena.memory, new WebAssembly.Module(readFileSync(process.env.KERNELS_WASM_B)));
  const rounds = Number(arg("rounds", "9"));
  console.log(
    `A/B, one thread, node ${process.version}: A ${process.env.KERNELS_WASM}, B ${process.env.KERNELS_WASM_B}; GMAC/s per CPU second, ${rounds} rounds in turn`,
  );
  for (const kind of types) for (const [rows, cols] of shapes) abRounds(kind, rows, cols, build, b, bArena, rounds);
  process.exit(0);
}

console.log(`one thread, node ${process.version}; GMAC/s per CPU second, best of 5 (matmul: ${NTOK} tokens per call)`);
const probes = [1, 2, 4].map((n) => [n, probe(n)] as const);
const limit = Math.max(...probes.map(([, g]) => g));
console.log(
  `streaming limit (loads only, cold): ${probes.map(([n, g]) => `${n} stream${n > 1 ? "s" : ""} ${g.toFixed(1)} GB/s`).join(", ")}`,
);
if (availableParallelism() >= 2) {
  const g = await probeThreads(2);
  console.log(
    `streaming limit of 2 threads at once (4 streams each, wall time): ${g.toFixed(1)} GB/s, ${(g / probes[2][1]).toFixed(2)}x one thread: what a memory-bound decode's 2-thread speedup can reach`,
  );
}
console.log("matvec hot: weights in cache (L2/L3); cold: streamed from DRAM, as in a real decode; matmul: cold");
console.log(`kernel builds: ${builds.join(", ")}`);
console.log("type   build    shape        matvec-hot matvec-cold  cold GB/s  of limit   matmul");
for (const kind of types) {
  const res: Result[] = [];
  for (const [rows, cols] of shapes) {
    for (const build of builds) {
      const r = bench(kind, rows, cols, build);
      res.push(r);
      console.log(
        `${r.type.padEnd(6)} ${build.padEnd(8)} ${`${rows}x${cols}`.padEnd(12)} ${r.hot.toFixed(2).padStart(10)} ${r.cold.toFixed(2).padStart(11)} ${r.coldGBs.toFixed(1).padStart(10)} ${`${((100 * r.coldGBs) / limit).toFixed(0)}%`.padStart(9)} ${r.matmul.toFixed(2).padStart(8)}`,
      );
    }
  }
  if (TINY)
    for (const build of builds) {
      // kernel-only time of one TinyLlama token: per layer q, o (2048x2048), k, v (256x2048),
      // gate, up (5632x2048), down (2048x5632); then the 32000x2048 output matrix.
      const mats: [number, number, number][] = [
        [2048, 2048, 44],
        [256, 2048, 44],
        [5632, 2048, 44],
        [2048, 5632, 22],
        [32000, 2048, 1],
      ];
      let tv = 0,
        tm = 0;
      for (const [rows, cols, count] of mats) {
        const r =
          res.find((x) => x.rows === rows && x.cols === cols && x.build === build) ?? bench(kind, rows, cols, build);
        tv += (count * rows * cols) / (r.cold * 1e9);
        tm += (count * rows * cols) / (r.matmul * 1e9);
      }
      const name = layoutName(kind.type, kind.layout);
      const peer = LLAMA_CPP[name];
      const vs = peer
        ? ` (llama.cpp, whole model: ${peer[1]} and ${peer[0]}: ${(1 / tv / peer[1]).toFixed(2)}x and ${(1 / tm / peer[0]).toFixed(2)}x)`
        : "";
      console.log(
        `${name.padEnd(6)} ${build.padEnd(8)} TinyLlama-1.1B kernels only: decode ${(1 / tv).toFixed(1)} tok/s, prefill ${(1 / tm).toFixed(1)} tok/s${vs}`,
      );
    }
}

// The sparse FFN kernels on neuron bundles (sparse_ffn.ts), 4096 wide as in a 7B model: the gate
// dots alone (sparse_gate_T over a list of bundle addresses, the predictor-free gate pass) and the
// whole neuron (sparse_ffn_run_T: gate, up and down, SiLU so that every neuron is computed), over
// bundles hot (1024 of them, in L2/L3) and cold (rotating over the cold region).
const SPARSE_EMBD = 4096,
  SPARSE_COUNT = 1024;
const sparseTypes = types
  .filter((k) => k.layout === null && hasSparseKernel(k.type) && k.type !== GGMLType.F32)
  .map((k) => k.type);
if (sparseTypes.length) {
  console.log(
    `sparse FFN bundles, ${SPARSE_EMBD} wide, ${SPARSE_COUNT} per call; GMAC/s (gate: 1 row per neuron, ffn: 3)`,
  );
  console.log("type   build    gate-hot  gate-cold   ffn-hot  ffn-cold");
  const listPtr = arena.alloc(SPARSE_COUNT * 4, 64);
  const outPtr = arena.alloc(SPARSE_COUNT * 4, 64);
  const partPtr = arena.alloc(partialBytes(SPARSE_EMBD, 1), 64);
  for (const type of sparseTypes) {
    const sk = sparseKernel(type);
    const rb = sparseRowBytes(type, SPARSE_EMBD);
    // gate and up rows, then the down column (MXFP4's is Q8_0: bundleParts)
    const parts = bundleParts(type, SPARSE_EMBD, false);
    const stride = Math.ceil(parts.dataBytes / 64) * 64;
    const setBytes = SPARSE_COUNT * stride;
    const sets = Math.max(1, Math.floor(COLD_BYTES / setBytes));
    const src = randomMatrix(type, 2 * SPARSE_COUNT, SPARSE_EMBD, 7 + type);
    const down = randomMatrix(parts.downType, SPARSE_COUNT, SPARSE_EMBD, 8 + type);
    const mem = arena.u8(wPtr, sets * setBytes);
    for (let n = 0; n < SPARSE_COUNT; n++) {
      mem.set(src.subarray(2 * n * rb, 2 * (n + 1) * rb), n * stride);
      mem.set(down.subarray(n * parts.downBytes, (n + 1) * parts.downBytes), n * stride + parts.down);
    }
    for (let c = 1; c < sets; c++) mem.copyWithin(c * setBytes, 0, setBytes);
    const list = new Int32Array(arena.memory.buffer, listPtr, SPARSE_COUNT);
    for (const build of builds) {
      const k = kernels.get(build)!;
      // an f32 activation is x itself
      const act = sk.prepare ? actPtr : xPtr;
      if (sk.prepare) k[sk.prepare](xPtr, actPtr, SPARSE_EMBD, 1, sk.prepareMode);
      const gate = (set: number) => {
        for (let n = 0; n < SPARSE_COUNT; n++) list[n] = wPtr + set * setBytes + n * stride;
        k[sk.gate](listPtr, SPARSE_COUNT, act, outPtr, SPARSE_EMBD, rb, 0, SPARSE_COUNT);
      };
      const ffn = (set: number) => {
        k[sk.ffnRun](
          wPtr + set * setBytes,
          stride,
          SPARSE_COUNT,
          act,
          partPtr,
          SPARSE_EMBD,
          rb,
          ACTIVATIONS.silu.code,
          SPARSE_COUNT,
          0,
          SPARSE_COUNT,
        );
        k.sparse_sum_partials(yPtr, partPtr, 1, SPARSE_EMBD, sk.partialMode, 0, SPARSE_EMBD);
      };
      const macs = SPARSE_COUNT * SPARSE_EMBD;
      const r = [
        timeIt(() => gate(0), macs),
        timeIt((i) => gate(i % sets), macs),
        timeIt(() => ffn(0), 3 * macs),
        timeIt((i) => ffn(i % sets), 3 * macs),
      ];
      console.log(`${typeName(type).padEnd(6)} ${build.padEnd(8)} ${r.map((v) => v.toFixed(2).padStart(9)).join(" ")}`);
    }
  }
}
