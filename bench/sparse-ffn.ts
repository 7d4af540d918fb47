/**
 * Speed of the sparse FFN kernels (assembly/sparse_ffn.ts) on one layer of neuron bundles,
 * against the dense matvec kernels on the same shape.
 *
 *   node dist/bench/sparse-ffn.js [--types q4_0,q8_0,q4_1] [--embd 4096] [--ff 11008]
 *                                 [--fractions 0.1,0.3,1] [--threads 1,2] [--time 1]
 *
 * A layer of `ff` bundles (random quants, scales near 0.01) fills a region far larger than the
 * last-level cache. Per fraction, 8 different random neuron subsets (sorted by neuron index, as a
 * predictor lists them) rotate between calls, so each call reads mostly from DRAM, as a decode
 * does. "contiguous": bundle i at base + i * bundleBytes; "shuffled": at a random slot (what a
 * neuron cache looks like after a while). The activation is SiLU, so no selected neuron is
 * skipped and every one costs gate + up + down (3 nEmbd multiply-adds).
 *
 * Reported: effective GMAC/s (3 nEmbd MACs per computed neuron, per second of CPU time at one
 * thread, of wall time at more) and the cost per neuron relative to the dense path, whose cost
 * per neuron is one row of the gate and up matvecs (ff x embd) plus one column of the down matvec
 * (embd x ff), both streamed from DRAM. gate (all neurons, as the gate sparsity mode does) and
 * up/down given the gates (half of them <= 0, skipped: the ReLU case) are reported too.
 */
import { GGMLType, typeFromName, typeName } from "../src/format/ggml-types.js";
import { f32ToF16 } from "../src/format/half.js";
import { rowBytes } from "../src/format/quant.js";
import { Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import { prepareKernel, weightKernel } from "../src/runtime/weights.js";
import { SparseFFN, refSparseFFN } from "../src/runtime/sparse-kernels.js";

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

const types = arg("types", "q4_0,q8_0,q4_1").split(",").map((n) => {
  const t = typeFromName(n);
  if (t === undefined) throw new Error(`unknown type ${n}`);
  return t;
});
const EMBD = Number(arg("embd", "4096"));
const FF = Number(arg("ff", "11008"));
const FRACTIONS = arg("fractions", "0.1,0.3,1").split(",").map(Number);
const THREADS = arg("threads", "1").split(",").map(Number);
const TIME = Number(arg("time", "1"));
const SUBSETS = 8;

let seed = 12345;
const rnd = () => ((seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32);

/** Random GGUF-layout row bytes: random quants, scales near 0.01 (Q4_1 mins near -0.02). */
function fillRows(type: GGMLType, dst: Uint8Array): void {
  if (type === GGMLType.F32) {
    const f = new Float32Array(dst.buffer, dst.byteOffset, dst.length >> 2);
    for (let i = 0; i < f.length; i++) f[i] = rnd() - 0.5;
    return;
  }
  for (let i = 0; i < dst.length; i++) dst[i] = (rnd() * 256) | 0;
  const bs = { [GGMLType.Q8_0]: 34, [GGMLType.Q4_0]: 18, [GGMLType.Q4_1]: 20 }[type as number]!;
  for (let o = 0; o + bs <= dst.length; o += bs) {
    const d = f32ToF16(0.005 + rnd() * 0.01);
    dst[o] = d & 0xff; dst[o + 1] = d >> 8;
    if (type === GGMLType.Q4_1) { const m = f32ToF16(-rnd() * 0.04); dst[o + 2] = m & 0xff; dst[o + 3] = m >> 8; }
  }
}

/** Seconds per call of fn: the best of 5 rounds; CPU time of this process at one thread, wall time at more. */
function timeIt(fn: (i: number) => void, threads: number): number {
  fn(0);
  let best = Infinity, i = 0;
  for (let round = 0; round < 5; round++) {
    let iters = 0;
    const t0 = process.hrtime.bigint();
    const c0 = process.cpuUsage();
    let wall = 0;
    do {
      fn(i++);
      iters++;
      wall = Number(process.hrtime.bigint() - t0) / 1e9;
    } while (wall < TIME / 5);
    const c = process.cpuUsage(c0);
    const sec = threads === 1 ? (c.user + c.system) / 1e6 : wall;
    best = Math.min(best, sec / iters);
  }
  return best;
}

const rb0 = Math.max(...types.map((t) => rowBytes(t, EMBD)));
const maxBundle = Math.ceil((3 * rb0) / 4096) * 4096;
const arena = new Arena(64 << 20);
const REGION = arena.alloc(FF * maxBundle, 4096);
const X = arena.alloc(EMBD * 4, 64);
const Y = arena.alloc(EMBD * 4 * 2, 64);
const GATES = arena.alloc(FF * 4, 64);
const LISTS = arena.alloc(2 * SUBSETS * FF * 4 + 2 * FF * 4, 64);
// dense matrices: gate-shaped (ff x embd) and down-shaped (embd x ff), copies to rotate through
const DENSE_COPIES = 3;
const densePacked = Math.max(...types.map((t) => weightKernel(t).packedBytes(FF, EMBD)), ...types.map((t) => weightKernel(t).packedBytes(EMBD, FF)));
const DENSE = arena.alloc(DENSE_COPIES * Math.ceil(densePacked / 4096) * 4096, 4096);
const DENSE_ACT = arena.alloc(Math.ceil(Math.max(FF, EMBD) / 128) * 304 + 64, 64);
const DENSE_X = arena.alloc(Math.max(FF, EMBD) * 4, 64);
{
  const x = arena.f32(X, EMBD);
  for (let i = 0; i < EMBD; i++) x[i] = Math.sin(i * 0.37) * 2;
}

function denseSeconds(type: GGMLType, rows: number, cols: number): number {
  const wk = weightKernel(type);
  const size = wk.packedBytes(rows, cols), stride = Math.ceil(size / 4096) * 4096;
  const src = new Uint8Array(rows * rowBytes(type, cols));
  fillRows(type, src);
  const mem = arena.u8(DENSE, DENSE_COPIES * stride);
  wk.pack(src, mem.subarray(0, size), 0, rows, rows, cols);
  for (let c = 1; c < DENSE_COPIES; c++) mem.copyWithin(c * stride, 0, size);
  const xs = arena.f32(DENSE_X, cols);
  for (let i = 0; i < cols; i++) xs[i] = Math.cos(i * 0.11);
  const prep = prepareKernel(wk.act);
  if (prep) pool1.kernels[prep](DENSE_X, DENSE_ACT, cols, 1);
  const mv = pool1.kernels[wk.matvec];
  const xa = prep ? DENSE_ACT : DENSE_X;
  return timeIt((i) => mv(DENSE + (i % DENSE_COPIES) * stride, xa, GATES, rows, cols, 0, rows), 1);
}

const pool1 = await ThreadPool.create(arena.memory, 1);
const pools = new Map<number, ThreadPool>();
for (const n of THREADS) pools.set(n, n === 1 ? pool1 : await ThreadPool.create(arena.memory, n));

console.log(`sparse FFN on neuron bundles, ${EMBD} wide, ${FF} neurons; node ${process.version}`);
console.log("GMAC/s: 3 x nEmbd multiply-adds per computed neuron; 'x dense': time per neuron / dense time per neuron (lower is better)");

for (const type of types) {
  const rb = rowBytes(type, EMBD);
  const bundleBytes = Math.ceil((3 * rb) / 4096) * 4096;
  const region = arena.u8(REGION, FF * bundleBytes);
  for (let i = 0; i < FF; i++) {
    fillRows(type, region.subarray(i * bundleBytes, i * bundleBytes + 3 * rb));
    region.fill(0, i * bundleBytes + 3 * rb, (i + 1) * bundleBytes);
  }
  // dense cost per neuron: a gate row + an up row (ff x embd matvec) + a down column (embd x ff)
  const gateDense = denseSeconds(type, FF, EMBD);
  const downDense = denseSeconds(type, EMBD, FF);
  const densePerNeuron = (2 * gateDense + downDense) / FF;
  const denseGmac = (3 * EMBD) / densePerNeuron / 1e9;
  console.log(`\n${typeName(type)}: bundle ${bundleBytes} B; dense matvec ${FF}x${EMBD} ${((FF * EMBD) / gateDense / 1e9).toFixed(1)} GMAC/s, ${EMBD}x${FF} ${((FF * EMBD) / downDense / 1e9).toFixed(1)} GMAC/s; dense FFN ${(densePerNeuron * FF * 1e3).toFixed(2)} ms = ${denseGmac.toFixed(1)} GMAC/s`);

  const perm = Array.from({ length: FF }, (_, i) => i);
  for (let i = FF - 1; i > 0; i--) { const j = Math.floor(rnd() * (i + 1)); [perm[i], perm[j]] = [perm[j], perm[i]]; }
  const addr = {
    contiguous: (i: number) => REGION + i * bundleBytes,
    shuffled: (i: number) => REGION + perm[i] * bundleBytes,
  };

  for (const [threads, pool] of pools) {
    const f = new SparseFFN(pool, arena, type, EMBD);
    f.prepare(X);
    // a check at full width: 37 neurons against the plain-TS reference
    {
      const ids = Array.from({ length: 37 }, (_, i) => (i * 297) % FF);
      const list = arena.i32(LISTS, 37);
      ids.forEach((n, i) => (list[i] = addr.shuffled(n)));
      arena.f32(Y, EMBD).fill(0);
      f.ffn(LISTS, 37, "silu");
      f.finish(Y);
      const want = refSparseFFN(type, new Uint8Array(arena.memory.buffer), Array.from(list), arena.f32(X, EMBD).slice(), EMBD, "silu");
      let err = 0, scale = 0;
      const got = arena.f32(Y, EMBD);
      for (let i = 0; i < EMBD; i++) { err = Math.max(err, Math.abs(got[i] - want.y[i])); scale = Math.max(scale, want.magnitude[i]); }
      // the TS reference quantizes x with ggml's reference rounding, which can differ at exact ties
      if (!(err <= 1e-3 * scale)) throw new Error(`${typeName(type)}: sparse result off by ${err} (scale ${scale})`);
    }
    // gate of all neurons (the gate sparsity mode's first phase)
    for (const layout of ["contiguous", "shuffled"] as const) {
      const list = arena.i32(LISTS, FF);
      for (let i = 0; i < FF; i++) list[i] = addr[layout](i);
      const t = timeIt(() => f.gate(LISTS, FF, GATES), threads);
      console.log(`  ${threads}T gate, all neurons, ${layout.padEnd(10)} ${(t * 1e3).toFixed(2).padStart(7)} ms ${((FF * EMBD) / t / 1e9).toFixed(1).padStart(6)} GMAC/s (dense gate matvec ${((FF * EMBD) / gateDense / 1e9).toFixed(1)})`);
    }
    for (const frac of FRACTIONS) {
      const count = Math.max(1, Math.round(FF * frac));
      for (const layout of ["contiguous", "shuffled"] as const) {
        // SUBSETS lists of `count` neurons, sorted by index
        for (let s = 0; s < SUBSETS; s++) {
          const ids = frac >= 1 ? Array.from({ length: FF }, (_, i) => i) : pickSorted(FF, count);
          const list = arena.i32(LISTS + s * FF * 4, count);
          ids.forEach((n, i) => (list[i] = addr[layout](n)));
        }
        const tFfn = timeIt((i) => {
          f.ffn(LISTS + (i % SUBSETS) * FF * 4, count, "silu");
          f.finish(Y);
        }, threads);
        let line = `  ${threads}T ffn ${(frac * 100).toFixed(0).padStart(3)}% ${layout.padEnd(10)} ${(tFfn * 1e3).toFixed(2).padStart(7)} ms ${((3 * EMBD * count) / tFfn / 1e9).toFixed(1).padStart(6)} GMAC/s  x dense ${(tFfn / count / densePerNeuron).toFixed(2)}`;
        if (frac >= 1 && layout === "contiguous") {
          const tRun = timeIt(() => {
            f.ffnRun(REGION, bundleBytes, count, "silu");
            f.finish(Y);
          }, threads);
          line += `  | as a run (base, stride): ${((3 * EMBD * count) / tRun / 1e9).toFixed(1)} GMAC/s`;
        }
        // up/down given gates, ReLU: the gates of the listed neurons, about half of them <= 0
        const g = arena.f32(GATES, count);
        for (let i = 0; i < count; i++) g[i] = rnd() - 0.5;
        let active = 0;
        for (let i = 0; i < count; i++) if (g[i] > 0) active++;
        const tUd = timeIt((i) => {
          f.upDown(LISTS + (i % SUBSETS) * FF * 4, count, GATES, "relu");
          f.finish(Y);
        }, threads);
        line += `  | updown (relu, ${active} of ${count} fire): ${((2 * EMBD * active) / tUd / 1e9).toFixed(1)} GMAC/s`;
        console.log(line);
      }
    }
  }
}

function pickSorted(n: number, count: number): number[] {
  const chosen = new Uint8Array(n);
  let c = 0;
  while (c < count) {
    const i = Math.floor(rnd() * n);
    if (!chosen[i]) { chosen[i] = 1; c++; }
  }
  const out: number[] = [];
  for (let i = 0; i < n; i++) if (chosen[i]) out.push(i);
  return out;
}

for (const p of pools.values()) await p.dispose();
