/**
 * The probe's dense matvec rates: one real matrix of the store per weight type of its dense
 * matrices (capped to ~16 MiB of rows), packed for its kernel, in copies that together exceed the
 * caches (decode streams weights from DRAM); plus the FFN's gate rows (the resident gate
 * matrix's kernel).
 */
import { type GGMLType } from "../format/ggml-types.js";
import type { NeuronStore } from "../format/store/index.js";
import type { Arena } from "../runtime/arena.js";
import type { ThreadPool } from "../runtime/pool.js";
import { activationBytes, hasWeightKernel, prepareKernel, weightKernel } from "../runtime/weight-kernels.js";
import { STREAM_BYTES, timeCalls } from "./probe-timing.js";

// The probe

/**
 * The weight types of the store's dense matrices (those kept in memory) that read nEmbd inputs,
 * with the smallest such tensor of each (the probe measures the rate on it; a type without one,
 * e.g. only in a differently shaped wo, borrows the FFN type's rate).
 */
export function denseMatrixTypes(store: NeuronStore): Map<GGMLType, string> {
  const out = new Map<GGMLType, string>();
  const nEmbd = store.ffn.nEmbd;
  const consider = (name: string) => {
    const t = store.tensor(name);
    if (t.dims.length !== 2 || t.dims[0] !== nEmbd || !hasWeightKernel(t.type)) return;
    if (!out.has(t.type) || t.elements < store.tensor(out.get(t.type)!).elements) out.set(t.type, name);
  };
  for (const t of store.tensors.values()) if (t.name !== "token_embd.weight") consider(t.name);
  // Tied embeddings: the output matrix is token_embd itself.
  if (!store.tensors.has("output.weight")) consider("token_embd.weight");
  return out;
}

/** A matrix packed for its kernel, in `copies` copies `stride` bytes apart, with its activation buffer. */
export interface DenseMatrix {
  type: GGMLType;
  ptr: number;
  stride: number;
  copies: number;
  rows: number;
  cols: number;
  act: number;
}

/** The matrices whose rates the probe measures: one per type of `types` (denseMatrixTypes), and the FFN's gate rows when their type is not among them. */
export function loadDenseMatrices(store: NeuronStore, arena: Arena, types: Map<GGMLType, string>): DenseMatrix[] {
  const ffn = store.ffn;
  const nEmbd = ffn.nEmbd;
  const nFF = store.layer(0).neurons;
  const dense: DenseMatrix[] = [];
  const loadDense = (type: GGMLType, rows: number, cols: number, fill: (dst: Uint8Array, rows: number) => void) => {
    const k = weightKernel(type);
    const size = k.packedBytes(rows, cols);
    const stride = Math.ceil(size / 4096) * 4096;
    const copies = Math.max(2, Math.min(16, Math.ceil(STREAM_BYTES / stride)));
    const ptr = arena.alloc(stride * copies, 4096);
    const raw = new Uint8Array(rows * (typeRowBytes(store, type, cols) ?? 0));
    fill(raw, rows);
    const first = arena.u8(ptr, size);
    k.pack(raw, first, 0, rows, rows, cols);
    for (let c = 1; c < copies; c++) arena.u8(ptr + c * stride, size).set(arena.u8(ptr, size));
    const act = arena.alloc(activationBytes(k.act, cols) + 64, 64);
    dense.push({ type, ptr, stride, copies, rows, cols, act });
  };
  for (const [type, name] of types) {
    const t = store.tensor(name);
    const cols = t.dims[0];
    const rowBytes = t.bytes / t.dims[1];
    const rows = Math.max(1, Math.min(t.dims[1], Math.floor((16 << 20) / rowBytes)));
    loadDense(type, rows, cols, (dst, n) => store.readTensor(t, dst, 0, n * rowBytes));
  }
  if (hasWeightKernel(ffn.type) && !dense.some((d) => d.type === ffn.type)) {
    const rows = Math.max(1, Math.min(nFF, Math.floor((16 << 20) / ffn.rowBytes)));
    const per = Math.max(1, Math.floor((2 << 20) / ffn.bundleBytes));
    const buf = new Uint8Array(per * ffn.bundleBytes);
    loadDense(ffn.type, rows, nEmbd, (dst, n) => {
      for (let p = 0; p < n; p += per) {
        const c = Math.min(per, n - p);
        store.readBundles(0, p, c, buf.subarray(0, c * ffn.bundleBytes));
        for (let i = 0; i < c; i++)
          dst.set(
            buf.subarray(i * ffn.bundleBytes + ffn.parts.gate, i * ffn.bundleBytes + ffn.parts.gate + ffn.rowBytes),
            (p + i) * ffn.rowBytes,
          );
      }
    });
  }

  return dense;
}

/**
 * Multiply-adds per second of a decode matvec of `m` at the pool's thread count, from input x into
 * `out`, the copies taken in turn; `dispatch` (seconds per pool.run) is taken out: the rate is of
 * the kernel itself.
 */
export function measureMatvec(
  pool: ThreadPool,
  m: DenseMatrix,
  x: number,
  out: number,
  dispatch: number,
  seconds: number,
): number {
  const args = new Int32Array(16);
  const k = weightKernel(m.type);
  const prep = prepareKernel(k.act);
  if (prep) pool.kernels[prep](x, m.act, m.cols, 1);
  const mv = pool.fn(k.matvec);
  const sec = timeCalls((i) => {
    args[0] = m.ptr + (i % m.copies) * m.stride;
    args[1] = prep ? m.act : x;
    args[2] = out;
    args[3] = m.rows;
    args[4] = m.cols;
    pool.run(mv, args, 5, m.rows, 16);
  }, seconds);
  return (m.rows * m.cols) / Math.max(1e-9, sec - dispatch);
}

/** Row bytes of a `type` row of `cols` values, from the store's own tensors (null when none has that type). */
function typeRowBytes(store: NeuronStore, type: GGMLType, cols: number): number | null {
  if (type === store.ffn.type && cols === store.ffn.nEmbd) return store.ffn.rowBytes;
  for (const t of store.tensors.values())
    if (t.type === type && t.dims.length === 2 && t.dims[0] === cols) return t.bytes / t.dims[1];
  return null;
}
