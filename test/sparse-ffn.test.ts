// The sparse FFN kernels (assembly/sparse_ffn.ts through src/runtime/sparse-kernels.ts) against
// the plain-TS references and the dense kernels: every FFN type, odd widths, odd counts, bundles
// at scattered addresses, 1 and 2 threads, several calls accumulating before one reduction, and
// neurons that must be skipped without their up/down bytes being read.
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { GGMLType, typeName } from "../src/format/ggml-types.js";
import { dequantize, quantizeRow, rowBytes } from "../src/format/quant.js";
import { f16Table } from "../src/format/half.js";
import { Arena } from "../src/runtime/arena.js";
import { kernelBuild } from "../src/runtime/wasm.js";
import { ThreadPool } from "../src/runtime/pool.js";
import { activationBytes, prepareKernel, weightKernel } from "../src/runtime/weight-kernels.js";
import { bundleParts, STORE_FFN_TYPES } from "../src/format/store/index.js";
import {
  SparseFFN,
  hasSparseKernel,
  refSparseFFN,
  refSparseGate,
  sparseKernel,
  sparseActivationBytes,
  partialBytes,
  type SparseActivation,
} from "../src/runtime/sparse-kernels.js";
import { gaussians, rng } from "./helpers.js";

function quantRow(type: GGMLType, f: Float32Array): Uint8Array {
  if (type === GGMLType.F32) return new Uint8Array(f.slice().buffer);
  const out = new Uint8Array(rowBytes(type, f.length));
  quantizeRow(type, f, out);
  return out;
}

const TYPES = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.MXFP4,
];

const arena = new Arena(64 << 20);
const pools = [await ThreadPool.create(arena.memory, 1), await ThreadPool.create(arena.memory, 2)];
after(async () => {
  for (const p of pools) await p.dispose();
});
const k = pools[0].kernels;
const mem = () => new Uint8Array(arena.memory.buffer);

const BUNDLE_REGION = arena.alloc(24 << 20, 4096);
const X = arena.alloc(64 << 10, 64),
  REF_ACT = arena.alloc(64 << 10, 64),
  LIST = arena.alloc(64 << 10, 64);
const GATES = arena.alloc(64 << 10, 64),
  Y = arena.alloc(64 << 10, 64),
  W = arena.alloc(4 << 20, 64),
  A = arena.alloc(64 << 10, 64);

/**
 * A layer of `nFF` neuron bundles at shuffled 4 KiB-aligned addresses, with gaps between them;
 * `biased`: each with its gate and up biases (some gates pushed past swiglu_oai's clamp).
 */
function makeLayer(type: GGMLType, nEmbd: number, nFF: number, seed: number, biased = false) {
  const rb = rowBytes(type, nEmbd);
  const P = bundleParts(type, nEmbd, biased);
  const bundleBytes = P.bundleBytes;
  const slots = nFF * 2 + 3;
  if (slots * bundleBytes > 24 << 20) throw new Error("test layer too large");
  const r = rng(seed);
  const order = Array.from({ length: slots }, (_, i) => i);
  for (let i = slots - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [order[i], order[j]] = [order[j], order[i]];
  }
  const addr = new Int32Array(nFF);
  const m = mem();
  m.fill(0xee, BUNDLE_REGION, BUNDLE_REGION + slots * bundleBytes); // the padding is never read as weights
  const gateRows: Uint8Array[] = [],
    upRows: Uint8Array[] = [];
  for (let i = 0; i < nFF; i++) {
    addr[i] = BUNDLE_REGION + order[i] * bundleBytes;
    const g = gaussians(nEmbd, seed * 1000 + 3 * i),
      u = gaussians(nEmbd, seed * 1000 + 3 * i + 1),
      d = gaussians(nEmbd, seed * 1000 + 3 * i + 2);
    if (i === 1) g.fill(0); // an all-zero row (zero scales)
    if (i === 2) for (let j = 0; j < nEmbd; j++) d[j] *= 300; // a wide-range down column
    const parts = [quantRow(type, g), quantRow(type, u), quantRow(P.downType, d)];
    for (let p = 0; p < 3; p++) m.set(parts[p], addr[i] + [P.gate, P.up, P.down][p]);
    if (biased) {
      const b = gaussians(2, seed * 1000 + 3 * i + 7);
      new DataView(m.buffer).setFloat32(addr[i] + P.biases!, i % 4 === 1 ? 12 : b[0] * 3, true);
      new DataView(m.buffer).setFloat32(addr[i] + P.biases! + 4, b[1] * 3, true);
    }
    gateRows.push(parts[0]);
    upRows.push(parts[1]);
  }
  return { type, nEmbd, nFF, rb, P, addr, gateRows, upRows };
}
type Layer = ReturnType<typeof makeLayer>;

/** Write x and return the ggml activation (Q8_0 / Q8_1 blocks from the wasm kernels) for the references. */
function setX(type: GGMLType, x: Float32Array): Float32Array | Uint8Array {
  arena.f32(X, x.length).set(x);
  if (sparseKernel(type).act !== "q8_sp") return x; // f32 and f32_eo: the references take x as it is
  const fmt = type === GGMLType.Q4_1 || type === GGMLType.Q5_1 ? "q8_1" : "q8_0";
  k[`prepare_${fmt}`](X, REF_ACT, x.length, 1);
  return arena.u8(REF_ACT, activationBytes(fmt, x.length)).slice();
}

function writeList(addrs: ArrayLike<number>): number {
  arena.i32(LIST, addrs.length).set(Array.from(addrs));
  return LIST;
}

/**
 * |got - want| within rel times the largest of `magnitude` (default: of |want|): the scale of the
 * terms summed, which bounds float rounding; a misplaced or missing term is far outside it.
 */
function close(
  got: ArrayLike<number>,
  want: ArrayLike<number>,
  rel: number,
  what: string,
  magnitude: ArrayLike<number> = want,
): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let scale = 1e-30;
  for (let i = 0; i < magnitude.length; i++) scale = Math.max(scale, Math.abs(magnitude[i]));
  for (let i = 0; i < want.length; i++) {
    const err = Math.abs(got[i] - want[i]);
    if (!(err <= rel * scale))
      assert.fail(`${what}: element ${i} is ${got[i]}, want ${want[i]} (error ${err}, bound ${rel * scale})`);
  }
}

const ffnFor = new Map<string, SparseFFN>();
function sparse(pool: ThreadPool, type: GGMLType, nEmbd: number, biased = false): SparseFFN {
  const key = `${pool.threads}/${type}/${nEmbd}/${biased}`;
  let f = ffnFor.get(key);
  if (!f) ffnFor.set(key, (f = new SparseFFN(pool, arena, type, nEmbd, 0, biased)));
  return f;
}

function readY(n: number): Float32Array {
  return arena.f32(Y, n).slice();
}

function subset(n: number, count: number, seed: number): number[] {
  const r = rng(seed),
    all = Array.from({ length: n }, (_, i) => i);
  for (let i = n - 1; i > 0; i--) {
    const j = Math.floor(r() * (i + 1));
    [all[i], all[j]] = [all[j], all[i]];
  }
  return all.slice(0, count);
}

// ---------------------------------------------------------------------------------------------

test("prepare_q8_sp holds prepare_q8_0's quants and scales (and q8_1's sums) in its two arrangements", () => {
  const cols = 32 * 7;
  const x = gaussians(cols, 5);
  x.fill(0, 64, 96); // an all-zero block
  for (let j = 0; j < 32; j++) x[96 + j] = (j - 16) * 0.5; // ties after scaling
  for (let j = 0; j < 32; j++) x[160 + j] *= 1e-5; // f16 subnormal scales
  arena.f32(X, cols).set(x);
  k.prepare_q8_0(X, REF_ACT, cols, 1);
  k.prepare_q8_1(X, REF_ACT + 32768, cols, 1);
  const q0 = arena.u8(REF_ACT, activationBytes("q8_0", cols)).slice(),
    q1 = arena.u8(REF_ACT + 32768, activationBytes("q8_1", cols)).slice();
  for (const mode of [0, 1]) {
    k.prepare_q8_sp(X, A, cols, 1, mode);
    const b8 = arena.u8(A, sparseActivationBytes(mode === 0 ? GGMLType.Q8_0 : GGMLType.Q4_0, cols)).slice();
    const dv = new DataView(b8.buffer);
    for (let b = 0; b < cols / 32; b++) {
      // group of 4 blocks: 4 x (64 B of quants, i32 x4 correction), then f32 dx x4, f32 sx x4
      const o = Math.floor(b / 4) * 352 + (b % 4) * 80,
        lane = Math.floor(b / 4) * 352 + (b % 4) * 4;
      const q = (j: number) => (q0[b * 34 + 2 + j] << 24) >> 24;
      const d = f16Table[q0[b * 34] | (q0[b * 34 + 1] << 8)];
      const i16 = (v: number, l: number) => dv.getInt16(o + 16 * v + 2 * l, true);
      for (let l = 0; l < 8; l++) {
        if (mode === 0) {
          for (let v = 0; v < 4; v++) assert.equal(i16(v, l), q(8 * v + l), `mode 0 block ${b} element ${8 * v + l}`);
        } else if (kernelBuild() === "relaxed") {
          // the relaxed build: the 32 quants as i8 in natural order, then zeros
          for (let j = 0; j < 4; j++)
            assert.equal(dv.getInt8(o + 4 * l + j), q(4 * l + j), `mode 1 (relaxed) block ${b} element ${4 * l + j}`);
          assert.equal(i16(2, l), 0);
          assert.equal(i16(3, l), 0);
        } else {
          assert.equal(i16(0, l), 256 * q(2 * l), `mode 1 block ${b} vector 0 lane ${l}`);
          assert.equal(i16(1, l), 16 * q(2 * l + 16), `mode 1 block ${b} vector 1 lane ${l}`);
          assert.equal(i16(2, l), q(2 * l + 1), `mode 1 block ${b} vector 2 lane ${l}`);
          assert.equal(i16(3, l), 256 * q(2 * l + 17), `mode 1 block ${b} vector 3 lane ${l}`);
        }
      }
      // the relaxed build's Q4 block dots are not scaled by 256 (q4dotRelaxed), nor are its dx and correction
      const unit = mode === 1 && kernelBuild() !== "relaxed" ? 256 : 1;
      assert.equal(dv.getFloat32(lane + 320, true), d / unit, `block ${b} d`);
      if (mode === 1) {
        let sum = 0;
        for (let j = 0; j < 32; j++) sum += q(j);
        for (let l = 0; l < 4; l++)
          assert.equal(dv.getInt32(o + 64 + 4 * l, true), 2 * unit * sum, `block ${b} correction`);
        assert.equal(dv.getFloat32(lane + 336, true), f16Table[q1[b * 36 + 2] | (q1[b * 36 + 3] << 8)], `block ${b} s`);
      }
    }
    // the blocks of the last group past the row are zero
    for (let b = cols / 32; b % 4 !== 0; b++) {
      const o = Math.floor(b / 4) * 352;
      for (let j = 0; j < 80; j++) assert.equal(b8[o + (b % 4) * 80 + j], 0, `padding block ${b}`);
      assert.equal(dv.getFloat32(o + 320 + (b % 4) * 4, true), 0, `padding block ${b} d`);
    }
  }
});

test("sparse_gate: listed gate dots equal the reference and the dense matvec, odd widths and counts, 1 and 2 threads", () => {
  for (const type of TYPES) {
    for (const nEmbd of [32, 96, 288]) {
      const L = makeLayer(type, nEmbd, 40, nEmbd + type);
      const x = gaussians(nEmbd, 99 + nEmbd);
      const xa = setX(type, x);
      // the dense kernel on the same rows: pack the gate rows as a matrix
      const wk = weightKernel(type);
      const dense = new Uint8Array(L.nFF * L.rb);
      L.gateRows.forEach((r, i) => dense.set(r, i * L.rb));
      wk.pack(dense, arena.u8(W, wk.packedBytes(L.nFF, nEmbd)), 0, L.nFF, L.nFF, nEmbd);
      const prep = prepareKernel(wk.act);
      if (prep) k[prep](X, A, nEmbd, 1);
      k[wk.matvec](W, prep ? A : X, GATES + 32768, L.nFF, nEmbd, 0, L.nFF);
      const denseOut = arena.f32(GATES + 32768, L.nFF).slice();
      // sum |w x| per row: the scale of the rounding two float orders of the same sum may differ by
      const xAbs = x.map(Math.abs);
      const rowMagnitude = L.gateRows.map((r) =>
        dequantize(type, r, nEmbd).reduce((s, w, j) => s + Math.abs(w) * xAbs[j], 0),
      );
      // one listed row sits at the very end of the wasm memory: nothing past a row may be read
      const end = arena.memory.buffer.byteLength - L.rb;
      mem().set(L.gateRows[3], end);
      for (const count of [1, 7, 37, 40]) {
        const ids = subset(L.nFF, count, count * 7 + nEmbd);
        const addrs = ids.map((i) => (i === 3 ? end : L.addr[i]));
        const want = refSparseGate(type, mem(), addrs, xa, nEmbd);
        for (const pool of pools) {
          const f = sparse(pool, type, nEmbd);
          f.prepare(X);
          arena.f32(GATES, count).fill(NaN);
          f.gate(writeList(addrs), count, GATES);
          const got = arena.f32(GATES, count).slice();
          const what = `${typeName(type)} nEmbd ${nEmbd} count ${count} threads ${pool.threads}`;
          close(got, want, 2e-6, `gate vs reference, ${what}`);
          close(
            got,
            ids.map((i) => denseOut[i]),
            2e-6,
            `gate vs dense matvec, ${what}`,
            ids.map((i) => rowMagnitude[i]),
          );
        }
      }
    }
  }
});

test("sparse_updown: given the gates, equals the reference for random subsets, skips zero activations unread", () => {
  const acts: SparseActivation[] = ["relu", "drelu", "silu", "gelu"];
  for (const type of TYPES) {
    for (const nEmbd of [32, 96, 288]) {
      const L = makeLayer(type, nEmbd, 45, 3 * nEmbd + type);
      const x = gaussians(nEmbd, 7 + nEmbd);
      const xa = setX(type, x);
      for (const count of [1, 7, 37, 45]) {
        const ids = subset(L.nFF, count, count + nEmbd * 3);
        const addrs = ids.map((i) => L.addr[i]);
        const gates = refSparseGate(type, mem(), addrs, xa, nEmbd);
        // some exact zeros and negatives among the gates
        ids.forEach((_, j) => {
          if (j % 5 === 3) gates[j] = 0;
        });
        for (const act of acts) {
          const want = refSparseFFN(type, mem(), addrs, xa, nEmbd, act, gates);
          for (const pool of pools) {
            const f = sparse(pool, type, nEmbd);
            f.prepare(X);
            arena.f32(GATES, count).set(Array.from(gates));
            arena.f32(Y, nEmbd).fill(0);
            f.upDown(writeList(addrs), count, GATES, act);
            f.finish(Y);
            close(
              readY(nEmbd),
              want.y,
              1e-5,
              `${typeName(type)} ${act} nEmbd ${nEmbd} count ${count} threads ${pool.threads}`,
              want.magnitude,
            );
          }
        }
      }
      // ReLU family: neurons whose gate is <= 0 must not be read at all. Their listed address is
      // the last 8 bytes of the wasm memory, so reading their up row or down column would trap.
      const ids = Array.from({ length: L.nFF }, (_, i) => i);
      const addrs = ids.map((i) => L.addr[i]);
      const gates = refSparseGate(type, mem(), addrs, xa, nEmbd);
      const want = {
        relu: refSparseFFN(type, mem(), addrs, xa, nEmbd, "relu", gates),
        drelu: refSparseFFN(type, mem(), addrs, xa, nEmbd, "drelu", gates),
      };
      let skipped = 0;
      const end = arena.memory.buffer.byteLength - 8;
      ids.forEach((i) => {
        if (gates[i] <= 0) {
          addrs[i] = end;
          skipped++;
        }
      });
      assert.ok(skipped > 5 && skipped < L.nFF - 5, `${skipped} of ${L.nFF} gates are <= 0`);
      for (const act of ["relu", "drelu"] as const) {
        for (const pool of pools) {
          const f = sparse(pool, type, nEmbd);
          f.prepare(X);
          arena.f32(GATES, L.nFF).set(Array.from(gates));
          arena.f32(Y, nEmbd).fill(0);
          f.upDown(writeList(addrs), L.nFF, GATES, act);
          f.finish(Y);
          close(
            readY(nEmbd),
            want[act].y,
            1e-5,
            `${typeName(type)} ${act} with poisoned skipped neurons, nEmbd ${nEmbd}, threads ${pool.threads}`,
            want[act].magnitude,
          );
        }
      }
    }
  }
});

test("biased bundles (gpt-oss's experts): swiglu_oai with each bundle's gate and up biases equals the reference, given gates or whole bundles, in segments too", () => {
  for (const type of TYPES) {
    for (const nEmbd of [32, 96]) {
      const L = makeLayer(type, nEmbd, 24, 11 * nEmbd + type, true);
      const xa = setX(type, gaussians(nEmbd, 9 + nEmbd));
      const addrs = Array.from(L.addr);
      // the gate dots alone: the kernels add each bundle's gate bias
      const gates = refSparseGate(type, mem(), addrs, xa, nEmbd);
      const want = refSparseFFN(type, mem(), addrs, xa, nEmbd, "swiglu_oai", gates, true);
      // without the biases the result is far outside the bound the checks below allow: they can fail
      const unbiased = refSparseFFN(type, mem(), addrs, xa, nEmbd, "swiglu_oai", gates);
      let apart = 0;
      for (let i = 0; i < nEmbd; i++) apart = Math.max(apart, Math.abs(unbiased.y[i] - want.y[i]));
      let scale = 0;
      for (const v of want.magnitude) scale = Math.max(scale, v);
      assert.ok(apart > 100 * 1e-5 * scale, `${typeName(type)}: the biases change the result (${apart} of ${scale})`);
      for (const pool of pools) {
        const f = sparse(pool, type, nEmbd, true);
        const what = `${typeName(type)} nEmbd ${nEmbd} threads ${pool.threads}`;
        f.prepare(X);
        arena.f32(GATES, L.nFF).set(Array.from(gates));
        arena.f32(Y, nEmbd).fill(0);
        f.upDown(writeList(addrs), L.nFF, GATES, "swiglu_oai");
        f.finish(Y);
        close(readY(nEmbd), want.y, 1e-5, `${what} upDown`, want.magnitude);
        arena.f32(Y, nEmbd).fill(0);
        f.ffn(writeList(addrs), L.nFF, "swiglu_oai");
        f.finish(Y);
        close(readY(nEmbd), want.y, 1e-5, `${what} whole bundles`, want.magnitude);
        // two segments' items: [0, 10) into slot 3, [10, 24) into slot 7
        arena.i32(f.items, 6).set([0, 10, 3, 10, L.nFF, 7]);
        arena.i32(f.slotList, 2).set([3, 7]);
        arena.f32(Y, nEmbd).fill(0);
        f.segments(writeList(addrs), GATES, 2, false, "swiglu_oai");
        f.sumSegments(Y, 2);
        close(readY(nEmbd), want.y, 1e-5, `${what} segments`, want.magnitude);
      }
    }
  }
});

test("sparse_ffn and sparse_ffn_run: subsets equal the reference; all neurons equal the dense FFN; calls accumulate", () => {
  for (const type of TYPES) {
    for (const nEmbd of [32, 96, 288]) {
      const L = makeLayer(type, nEmbd, 41, 5 * nEmbd + type);
      const x = gaussians(nEmbd, 11 + nEmbd);
      const xa = setX(type, x);
      for (const act of ["silu", "relu", "drelu"] as const) {
        for (const count of [1, 7, 37]) {
          const ids = subset(L.nFF, count, count * 13 + nEmbd);
          const addrs = ids.map((i) => L.addr[i]);
          const want = refSparseFFN(type, mem(), addrs, xa, nEmbd, act);
          for (const pool of pools) {
            const f = sparse(pool, type, nEmbd);
            f.prepare(X);
            arena.f32(Y, nEmbd).fill(0);
            f.ffn(writeList(addrs), count, act);
            f.finish(Y);
            close(
              readY(nEmbd),
              want.y,
              1e-5,
              `${typeName(type)} ${act} nEmbd ${nEmbd} count ${count} threads ${pool.threads}`,
              want.magnitude,
            );
          }
        }
      }
      // ReLU family in the fused kernel: a neuron whose gate is <= 0 has its up and down unread.
      // One such neuron's gate row is copied to the last bytes of the wasm memory and listed
      // last: reading its up row or down column would trap.
      {
        const gates = refSparseGate(type, mem(), Array.from(L.addr), xa, nEmbd);
        const neg = gates.findIndex((g) => g < 0);
        assert.ok(neg >= 0);
        const end = arena.memory.buffer.byteLength - L.rb;
        mem().copyWithin(end, L.addr[neg], L.addr[neg] + L.rb);
        const addrs = [...Array.from(L.addr.subarray(0, 12)), end];
        for (const act of ["relu", "drelu"] as const) {
          const want = refSparseFFN(type, mem(), addrs.slice(0, 12), xa, nEmbd, act);
          for (const pool of pools) {
            const f = sparse(pool, type, nEmbd);
            f.prepare(X);
            arena.f32(Y, nEmbd).fill(0);
            f.ffn(writeList(addrs), addrs.length, act);
            f.finish(Y);
            close(
              readY(nEmbd),
              want.y,
              1e-5,
              `${typeName(type)} ${act} fused, a gate <= 0 at the end of memory, nEmbd ${nEmbd}, threads ${pool.threads}`,
              want.magnitude,
            );
          }
        }
      }
      // the whole layer (S = all neurons) against the dense computation: dense matvec kernels for
      // gate and up on the same rows, ffn_act, then down in f64; y starts non-zero (y += ...)
      const wk = weightKernel(type);
      const prep = prepareKernel(wk.act);
      const rows = (which: Uint8Array[]) => {
        const dense = new Uint8Array(L.nFF * L.rb);
        which.forEach((r, i) => dense.set(r, i * L.rb));
        wk.pack(dense, arena.u8(W, wk.packedBytes(L.nFF, nEmbd)), 0, L.nFF, L.nFF, nEmbd);
        if (prep) k[prep](X, A, nEmbd, 1);
        k[wk.matvec](W, prep ? A : X, GATES, L.nFF, nEmbd, 0, L.nFF);
        return arena.f32(GATES, L.nFF).slice();
      };
      const g = rows(L.gateRows),
        u = rows(L.upRows);
      arena.f32(GATES, L.nFF).set(g);
      arena.f32(GATES + 16384, L.nFF).set(u);
      k.ffn_act(GATES, GATES + 16384, 2, 0, L.nFF); // dReLU
      const h = arena.f32(GATES, L.nFF).slice();
      const y0 = gaussians(nEmbd, 77);
      const want = new Float64Array(nEmbd),
        mag = new Float64Array(nEmbd);
      for (let i = 0; i < nEmbd; i++) {
        want[i] = y0[i];
        mag[i] = Math.abs(y0[i]);
      }
      for (let n = 0; n < L.nFF; n++) {
        if (h[n] === 0) continue;
        const at = L.addr[n] + L.P.down;
        const col = dequantize(L.P.downType, mem().subarray(at, at + L.P.downBytes), nEmbd);
        for (let i = 0; i < nEmbd; i++) {
          want[i] += h[n] * col[i];
          mag[i] += Math.abs(h[n] * col[i]);
        }
      }
      assert.ok(h.some((v) => v === 0) && h.some((v) => v !== 0));
      const all = Array.from(L.addr);
      for (const pool of pools) {
        const f = sparse(pool, type, nEmbd);
        f.prepare(X);
        arena.f32(Y, nEmbd).set(y0);
        // two calls before one reduction
        const list = writeList(all);
        f.ffn(list, 10, "drelu");
        f.ffn(list + 40, 31, "drelu");
        f.finish(Y);
        close(
          readY(nEmbd),
          want,
          1e-5,
          `${typeName(type)} all neurons vs dense, nEmbd ${nEmbd}, threads ${pool.threads}`,
          mag,
        );
      }
      // a run of bundles at a fixed stride equals the list form over the same bundles
      const stride = L.P.bundleBytes;
      const base = BUNDLE_REGION + 100 * stride;
      for (let i = 0; i < 9; i++) mem().copyWithin(base + i * stride, L.addr[i], L.addr[i] + stride);
      const runWant = refSparseFFN(type, mem(), all.slice(0, 9), xa, nEmbd, "silu");
      for (const pool of pools) {
        const f = sparse(pool, type, nEmbd);
        f.prepare(X);
        arena.f32(Y, nEmbd).fill(0);
        f.ffnRun(base, stride, 9, "silu");
        f.finish(Y);
        close(
          readY(nEmbd),
          runWant.y,
          1e-5,
          `${typeName(type)} run, nEmbd ${nEmbd}, threads ${pool.threads}`,
          runWant.magnitude,
        );
      }
    }
  }
});

test("a row's dot has the same bits computed in a pair (two streams) or alone", () => {
  // the kernels take listed rows two at a time and an odd last one alone: [A, B, A] puts A in
  // both, and which neurons fire must not depend on where a row falls in a list
  for (const type of TYPES) {
    for (const nEmbd of [32, 288]) {
      const L = makeLayer(type, nEmbd, 6, 31 + nEmbd + type);
      const x = gaussians(nEmbd, 5 + nEmbd);
      setX(type, x);
      const f = sparse(pools[0], type, nEmbd);
      f.prepare(X);
      for (const [a, b] of [
        [0, 2],
        [3, 4],
        [5, 1],
      ]) {
        f.gate(writeList([L.addr[a], L.addr[b], L.addr[a]]), 3, GATES);
        const got = arena.f32(GATES, 3);
        assert.ok(
          Object.is(got[0], got[2]),
          `${typeName(type)} nEmbd ${nEmbd} row ${a}: paired ${got[0]}, alone ${got[2]}`,
        );
      }
    }
  }
});

test("each thread adds only into its own partial slot: slot s holds exactly the neurons of thread s", () => {
  const pool = pools[1];
  for (const type of TYPES) {
    const nEmbd = 96;
    const L = makeLayer(type, nEmbd, 21, 17 + type);
    const x = gaussians(nEmbd, 23);
    const xa = setX(type, x);
    const f = sparse(pool, type, nEmbd);
    const addrs = Array.from(L.addr);
    f.prepare(X);
    f.ffn(writeList(addrs), 21, "silu"); // per = 11: thread 0 takes 0..10, thread 1 takes 11..20
    const slotBytes = partialBytes(nEmbd, 1);
    for (const [s, part] of [
      [0, addrs.slice(0, 11)],
      [1, addrs.slice(11)],
    ] as const) {
      arena.f32(Y, nEmbd).fill(0);
      k.sparse_sum_partials(Y, f.partials + s * slotBytes, 1, nEmbd, f.kernel.partialMode, 0, nEmbd);
      const want = refSparseFFN(type, mem(), part, xa, nEmbd, "silu");
      close(readY(nEmbd), want.y, 1e-5, `${typeName(type)} slot ${s}`, want.magnitude);
    }
    // a range that is not one whole share of `per` is refused (two threads could share a slot)
    assert.throws(() => k[f.kernel.ffn](LIST, 21, X, f.partials, nEmbd, L.rb, 0, 11, 1, 12), /unreachable/);
    assert.throws(() => k[f.kernel.ffn](LIST, 21, X, f.partials, nEmbd, L.rb, 0, 11, 0, 12), /unreachable/);
    // the reduction cleared both slots' sums and block corrections (the pending Q4 columns' block
    // scales after them are the kernel's scratch)
    for (let s = 0; s < 2; s++)
      assert.ok(
        arena.f32(f.partials + s * slotBytes, nEmbd + nEmbd / 32).every((v) => v === 0),
        `partial slot ${s} is zero after the reduction`,
      );
    f.finish(Y); // nothing left to add; resets the slot count
  }
});

test("descriptors: unsupported types and widths are refused by name", () => {
  assert.throws(() => sparseKernel(GGMLType.Q6_K), /no sparse FFN kernel for weight type Q6_K/);
  // every type a store can hold has one (convert writes no store that run refuses)
  for (const t of STORE_FFN_TYPES) assert.ok(hasSparseKernel(t), typeName(t));
  assert.throws(() => partialBytes(100, 2), /nEmbd 100 is not a positive multiple of 32/);
  assert.throws(() => new SparseFFN(pools[0], arena, GGMLType.Q4_0, 4100), /nEmbd 4100/);
  const f = new SparseFFN(pools[0], arena, GGMLType.Q4_0, 64);
  assert.throws(() => f.ffn(LIST, 1, "relu"), /prepare\(x\) must come before/);
});

test("segment calls: a segment computed in one call or in pieces gives the same bits, at 1 and 2 threads; within the reference's bounds", () => {
  // Each listed neuron goes into its segment's slot in list order; pieces of a segment computed
  // in several calls (as their bundles land) must add exactly what one call adds, whatever the
  // pieces' sizes (four down columns at once add what four single ones add), and the segments'
  // slots go into y one after the other.
  for (const type of TYPES) {
    const nEmbd = 96;
    const L = makeLayer(type, nEmbd, 40, 500 + type);
    const x = gaussians(nEmbd, 77);
    const xa = setX(type, x);
    const gateVals = gaussians(L.nFF, 78);
    for (const whole of [false, true]) {
      const ids = subset(L.nFF, 29, 31 + type);
      // three segments: 0 gets ids[0..13), 3 gets ids[13..20), 9 the rest
      const segs: [number, number, number][] = [
        [0, 13, 0],
        [13, 20, 3],
        [20, ids.length, 9],
      ];
      const addrs = ids.map((i) => L.addr[i]);
      const results: Uint8Array[] = [];
      for (const pool of pools) {
        const f = sparse(pool, type, nEmbd);
        for (const pieces of [[1000], [1, 2, 3, 5, 1000], [4, 1, 1000], [3, 1000]]) {
          f.prepare(X);
          arena.i32(LIST, addrs.length).set(addrs);
          arena.f32(GATES, ids.length).set(ids.map((i) => gateVals[i]));
          // call c computes the next pieces[c] neurons of every segment (one item per segment)
          const done = segs.map(([from]) => from);
          for (let c = 0; c < pieces.length; c++) {
            const items: number[] = [];
            segs.forEach(([, to, seg], s) => {
              const from = done[s];
              const end = Math.min(to, from + pieces[c]);
              if (end > from) items.push(from, end, seg);
              done[s] = end;
            });
            arena.i32(f.items, items.length).set(items);
            f.segments(LIST, GATES, items.length / 3, whole, "relu");
          }
          arena.f32(Y, nEmbd).set(x);
          arena.i32(f.slotList, 3).set([0, 3, 9]);
          f.sumSegments(Y, 3);
          results.push(new Uint8Array(readY(nEmbd).buffer));
          for (const seg of [0, 3, 9])
            assert.ok(
              arena.f32(f.segPartials + seg * partialBytes(nEmbd, 1), nEmbd + nEmbd / 32).every((v) => v === 0),
              `slot ${seg} is cleared`,
            );
        }
      }
      const what = `${typeName(type)} ${whole ? "whole bundles" : "up/down given gates"}`;
      for (let i = 1; i < results.length; i++)
        assert.deepEqual(results[i], results[0], `${what}: run ${i} (pieces, threads) against run 0`);
      const ref = refSparseFFN(type, mem(), addrs, xa, nEmbd, "relu", whole ? undefined : ids.map((i) => gateVals[i]));
      const got = new Float32Array(results[0].buffer);
      close(
        got.map((v, i) => v - x[i]),
        ref.y,
        2e-5,
        `${what} vs reference`,
        ref.magnitude,
      );
    }
  }
});
