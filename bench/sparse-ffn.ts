/**
 * Speed of the sparse FFN kernels (assembly/sparse_ffn.ts) on one layer of neuron bundles,
 * against the dense matvec kernels on the same shape, measured side by side.
 *
 *   node dist/bench/sparse-ffn.js [--types q4_0,q8_0,q4_1,q5_0,q5_1,f16,bf16,mxfp4] [--embd 4096] [--ff 11008]
 *                                 [--fractions 0.1,0.3,1] [--threads 1,2] [--rounds 6] [--slice 0.08]
 *
 * A layer of `ff` bundles (random quants, scales near 0.01) fills a region far larger than the
 * last-level cache. Per fraction, 8 different random neuron subsets (sorted by neuron index, as a
 * predictor lists them) rotate between calls, so each call reads mostly from DRAM, as a decode
 * does. "contiguous": bundle i at base + i * bundleBytes; "shuffled": at a random slot (what a
 * neuron cache looks like after a while). The activation is SiLU, so no selected neuron is
 * skipped and each costs gate + up + down: 3 nEmbd multiply-adds.
 *
 * The dense reference per neuron is a row of the gate and of the up matvec (ff x embd) and a
 * column of the down matvec (embd x ff), each matrix rotating over copies so it streams from
 * DRAM. Every measurement is interleaved with the dense ones, round after round, and each keeps
 * its best round: on a shared machine only ratios taken this way mean anything. One thread: CPU
 * time of this process; more: wall time (noisy when other processes share the cores).
 *
 * Columns: ms per call, effective GMAC/s, and "x dense" = time per computed neuron / dense time
 * per neuron (1.0 = as fast per neuron as the dense FFN; lower is better). Also: gate of all
 * neurons (the gate mode's first phase) against the dense gate matvec, and up/down given gates
 * with ReLU (about half the listed neurons fire; GMAC/s over the ones that fire).
 */
import { GGMLType, typeFromName, typeName } from "../src/format/ggml-types.js";
import { bundleParts } from "../src/format/store/ffn-types.js";
import { f32ToF16 } from "../src/format/half.js";
import { rowBytes } from "../src/format/quant.js";
import { Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import { prepareKernel, weightKernel } from "../src/runtime/weight-kernels.js";
import { SparseFFN, refSparseFFN } from "../src/runtime/sparse-kernels.js";

function arg(name: string, def: string): string {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

const types = arg("types", "q4_0,q8_0,q4_1")
  .split(",")
  .map((n) => {
    const t = typeFromName(n);
    if (t === undefined) throw new Error(`unknown type ${n}`);
    return t;
  });
const EMBD = Number(arg("embd", "4096"));
const FF = Number(arg("ff", "11008"));
const FRACTIONS = arg("fractions", "0.1,0.3,1").split(",").map(Number);
const THREADS = arg("threads", "1,2").split(",").map(Number);
const ROUNDS = Number(arg("rounds", "6"));
const SLICE = Number(arg("slice", "0.08"));
const SUBSETS = 8;
const COPIES = 2;

let seed = 12345;
const rnd = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32;

/** Random GGUF-layout row bytes: random quants, scales near 0.01 (Q4_1 mins near -0.02); halves within +-0.02. */
function fillRows(type: GGMLType, dst: Uint8Array): void {
  if (type === GGMLType.F32) {
    const f = new Float32Array(dst.buffer, dst.byteOffset, dst.length >> 2);
    for (let i = 0; i < f.length; i++) f[i] = rnd() - 0.5;
    return;
  }
  if (type === GGMLType.F16 || type === GGMLType.BF16) {
    const bf = new Float32Array(1);
    const bits = new Uint32Array(bf.buffer);
    for (let o = 0; o + 2 <= dst.length; o += 2) {
      const v = (rnd() - 0.5) * 0.04;
      bf[0] = v;
      const h = type === GGMLType.F16 ? f32ToF16(v) : bits[0] >>> 16;
      dst[o] = h & 0xff;
      dst[o + 1] = h >> 8;
    }
    return;
  }
  for (let i = 0; i < dst.length; i++) dst[i] = (rnd() * 256) | 0;
  // MXFP4: random codes, a block scale byte near 2^-8 (E8M0: 2^(e - 127))
  if (type === GGMLType.MXFP4) {
    for (let o = 0; o + 17 <= dst.length; o += 17) dst[o] = 117 + ((rnd() * 4) | 0);
    return;
  }
  const bs = {
    [GGMLType.Q8_0]: 34,
    [GGMLType.Q4_0]: 18,
    [GGMLType.Q4_1]: 20,
    [GGMLType.Q5_0]: 22,
    [GGMLType.Q5_1]: 24,
  }[type as number]!;
  for (let o = 0; o + bs <= dst.length; o += bs) {
    const d = f32ToF16(0.005 + rnd() * 0.01);
    dst[o] = d & 0xff;
    dst[o + 1] = d >> 8;
    if (type === GGMLType.Q4_1 || type === GGMLType.Q5_1) {
      const m = f32ToF16(-rnd() * 0.04);
      dst[o + 2] = m & 0xff;
      dst[o + 3] = m >> 8;
    }
  }
}

/**
 * Seconds per call of each function: ROUNDS rounds, each running every function in turn for
 * SLICE seconds; the best round of each. CPU time at one thread, wall time at more.
 */
function compare(fns: ((i: number) => void)[], threads: number): number[] {
  const clock =
    threads === 1
      ? () => {
          const c = process.cpuUsage();
          return (c.user + c.system) / 1e6;
        }
      : () => performance.now() / 1e3;
  const best = fns.map(() => Infinity);
  let i = 0;
  for (const f of fns) f(i++);
  for (let r = 0; r < ROUNDS; r++) {
    fns.forEach((f, k) => {
      let iters = 0;
      const t0 = clock();
      let t = 0;
      do {
        f(i++);
        iters++;
        t = clock() - t0;
      } while (t < SLICE);
      best[k] = Math.min(best[k], t / iters);
    });
  }
  return best;
}

const arena = new Arena(64 << 20);
const REGION = arena.alloc(FF * Math.max(...types.map((t) => bundleParts(t, EMBD, false).bundleBytes)), 4096);
const X = arena.alloc(EMBD * 4, 64);
const Y = arena.alloc(EMBD * 4 * 2, 64);
const GATES = arena.alloc(FF * 4, 64);
const OUT = arena.alloc(Math.max(FF, EMBD) * 4, 64); // the gate matvec writes FF values, the down matvec EMBD
const LISTS = arena.alloc(SUBSETS * FF * 4, 64);
// dense matrices, gate-shaped (ff x embd) and down-shaped (embd x ff), COPIES of each
const packedMax = Math.max(
  ...types.map((t) => weightKernel(t).packedBytes(FF, EMBD)),
  ...types.map((t) => weightKernel(t).packedBytes(EMBD, FF)),
);
const packedStride = Math.ceil(packedMax / 4096) * 4096;
const DENSE_GATE = arena.alloc(COPIES * packedStride, 4096);
const DENSE_DOWN = arena.alloc(COPIES * packedStride, 4096);
const ACT_E = arena.alloc(Math.ceil(EMBD / 128) * 304 + 64, 64);
const ACT_F = arena.alloc(Math.ceil(FF / 128) * 304 + 64, 64);
const XF = arena.alloc(FF * 4, 64);
{
  const x = arena.f32(X, EMBD);
  for (let i = 0; i < EMBD; i++) x[i] = Math.sin(i * 0.37) * 2;
  const xf = arena.f32(XF, FF);
  for (let i = 0; i < FF; i++) xf[i] = Math.cos(i * 0.11);
}

const pools = new Map<number, ThreadPool>();
for (const n of THREADS) pools.set(n, await ThreadPool.create(arena.memory, n));

console.log(
  `sparse FFN on neuron bundles, ${EMBD} wide, ${FF} neurons; node ${process.version}; best of ${ROUNDS} interleaved rounds`,
);
console.log(
  "'x dense' = time per computed neuron / time per neuron of the dense FFN (gate + up + down matvecs) measured alongside",
);

for (const type of types) {
  const rb = rowBytes(type, EMBD);
  // gate and up rows, then the down column (MXFP4's is Q8_0: bundleParts)
  const parts = bundleParts(type, EMBD, false);
  const bundleBytes = parts.bundleBytes;
  const region = arena.u8(REGION, FF * bundleBytes);
  for (let i = 0; i < FF; i++) {
    fillRows(type, region.subarray(i * bundleBytes, i * bundleBytes + 2 * rb));
    fillRows(parts.downType, region.subarray(i * bundleBytes + parts.down, i * bundleBytes + parts.dataBytes));
    region.fill(0, i * bundleBytes + parts.dataBytes, (i + 1) * bundleBytes);
  }
  const wk = weightKernel(type);
  for (const [ptr, rows, cols] of [
    [DENSE_GATE, FF, EMBD],
    [DENSE_DOWN, EMBD, FF],
  ] as const) {
    const src = new Uint8Array(rows * rowBytes(type, cols));
    fillRows(type, src);
    const size = wk.packedBytes(rows, cols);
    const mem = arena.u8(ptr, COPIES * packedStride);
    wk.pack(src, mem.subarray(0, size), 0, rows, rows, cols);
    for (let c = 1; c < COPIES; c++) mem.copyWithin(c * packedStride, 0, size);
  }
  const prep = prepareKernel(wk.act);
  const k0 = pools.get(THREADS[0])!.kernels;
  if (prep) {
    k0[prep](X, ACT_E, EMBD, 1);
    k0[prep](XF, ACT_F, FF, 1);
  }
  const xe = prep ? ACT_E : X,
    xf = prep ? ACT_F : XF;

  const perm = Array.from({ length: FF }, (_, i) => i);
  for (let i = FF - 1; i > 0; i--) {
    const j = Math.floor(rnd() * (i + 1));
    [perm[i], perm[j]] = [perm[j], perm[i]];
  }
  const addr = {
    contiguous: (i: number) => REGION + i * bundleBytes,
    shuffled: (i: number) => REGION + perm[i] * bundleBytes,
  };
  console.log(`\n${typeName(type)}: bundle ${bundleBytes} B`);

  for (const [threads, pool] of pools) {
    const f = new SparseFFN(pool, arena, type, EMBD);
    f.prepare(X);
    const mv = pool.fn(wk.matvec);
    const dargs = new Int32Array(8);
    const dense = (w: number, x: number, rows: number, cols: number) => (i: number) => {
      dargs[0] = w + (i % COPIES) * packedStride;
      dargs[1] = x;
      dargs[2] = OUT;
      dargs[3] = rows;
      dargs[4] = cols;
      pool.run(mv, dargs, 5, rows, 16);
    };
    const denseGate = dense(DENSE_GATE, xe, FF, EMBD),
      denseDown = dense(DENSE_DOWN, xf, EMBD, FF);
    const perNeuron = (t: number[]) => (2 * t[0] + t[1]) / FF; // dense seconds per neuron

    // a check at full width: 37 neurons against the plain-TS reference
    {
      const ids = Array.from({ length: 37 }, (_, i) => (i * 297) % FF);
      const list = arena.i32(LISTS, 37);
      ids.forEach((n, i) => (list[i] = addr.shuffled(n)));
      arena.f32(Y, EMBD).fill(0);
      f.ffn(LISTS, 37, "silu");
      f.finish(Y);
      const want = refSparseFFN(
        type,
        new Uint8Array(arena.memory.buffer),
        Array.from(list),
        arena.f32(X, EMBD).slice(),
        EMBD,
        "silu",
      );
      let err = 0,
        scale = 0;
      const got = arena.f32(Y, EMBD);
      for (let i = 0; i < EMBD; i++) {
        err = Math.max(err, Math.abs(got[i] - want.y[i]));
        scale = Math.max(scale, want.magnitude[i]);
      }
      // the TS reference quantizes x with ggml's reference rounding, which can differ at exact ties
      if (!(err <= 1e-3 * scale)) throw new Error(`${typeName(type)}: sparse result off by ${err} (scale ${scale})`);
    }

    // gate of all neurons (the gate sparsity mode's first phase)
    for (const layout of ["contiguous", "shuffled"] as const) {
      const list = arena.i32(LISTS, FF);
      for (let i = 0; i < FF; i++) list[i] = addr[layout](i);
      const t = compare([denseGate, () => f.gate(LISTS, FF, GATES)], threads);
      console.log(
        `  ${threads}T gate, all neurons, ${layout.padEnd(10)} ${(t[1] * 1e3).toFixed(2).padStart(7)} ms ${((FF * EMBD) / t[1] / 1e9).toFixed(1).padStart(5)} GMAC/s  x dense gate matvec ${(t[1] / t[0]).toFixed(2)} (${((FF * EMBD) / t[0] / 1e9).toFixed(1)} GMAC/s)`,
      );
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
        // gates for up/down with ReLU: about half of them > 0
        const g = arena.f32(GATES, count);
        for (let i = 0; i < count; i++) g[i] = rnd() - 0.5;
        let active = 0;
        for (let i = 0; i < count; i++) if (g[i] > 0) active++;
        const fns = [
          denseGate,
          denseDown,
          (i: number) => {
            f.ffn(LISTS + (i % SUBSETS) * FF * 4, count, "silu");
            f.finish(Y);
          },
          (i: number) => {
            f.upDown(LISTS + (i % SUBSETS) * FF * 4, count, GATES, "relu");
            f.finish(Y);
          },
        ];
        const run = frac >= 1 && layout === "contiguous";
        if (run)
          fns.push(() => {
            f.ffnRun(REGION, bundleBytes, count, "silu");
            f.finish(Y);
          });
        const t = compare(fns, threads);
        const dn = perNeuron(t);
        let line = `  ${threads}T ffn ${(frac * 100).toFixed(0).padStart(3)}% ${layout.padEnd(10)} ${(t[2] * 1e3).toFixed(2).padStart(7)} ms ${((3 * EMBD * count) / t[2] / 1e9).toFixed(1).padStart(5)} GMAC/s  x dense ${(t[2] / count / dn).toFixed(2)} (dense FFN ${((3 * EMBD) / dn / 1e9).toFixed(1)} GMAC/s)`;
        line += `  | updown, ${active} of ${count} fire: ${((2 * EMBD * active) / t[3] / 1e9).toFixed(1)} GMAC/s, x dense ${(t[3] / active / ((t[0] + t[1]) / FF)).toFixed(2)}`;
        if (run) line += `  | as a run (base, stride): ${((3 * EMBD * count) / t[4] / 1e9).toFixed(1)} GMAC/s`;
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
    if (!chosen[i]) {
      chosen[i] = 1;
      c++;
    }
  }
  const out: number[] = [];
  for (let i = 0; i < n; i++) if (chosen[i]) out.push(i);
  return out;
}

for (const p of pools.values()) await p.dispose();
