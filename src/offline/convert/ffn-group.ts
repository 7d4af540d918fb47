/**
 * One bundle group of the store (a layer's FFN, or one expert's): its neurons' bundles in stored
 * order, each Gate row, Up row and Down column side by side, assembled a few MiB at a time from
 * rows read on demand; then the group's gate rows again, contiguous, so that a dense gate pass
 * reads them in one sweep.
 */
import type { GGMLType } from "../../format/ggml-types.js";
import type { BundleParts, StoreConversion, StoreWriter } from "../../format/store/index.js";
import { dequantizeRow } from "../../format/quant.js";
import type { ModelFile } from "../../format/gguf.js";
import { ErrorStats, type RowConverter } from "./row-conversion.js";
import type { FFNTensors } from "./source-ffn.js";
import { convertedFrom, type StoreSource } from "./store-source.js";
import { transposeDown } from "./transpose-down.js";

/** Lets the event loop run (progress, an abort) between pieces of a long conversion. */
const tick = () => new Promise<void>((r) => setImmediate(r));

export type BundlePart = "gate" | "up" | "down";

/** The shape every bundle of a store shares. */
export interface BundleShape {
  /** the store's FFN type */
  ffnType: GGMLType;
  nEmbd: number;
  /** bytes of one gate or up row in ffnType */
  rowBytes: number;
  /** where each part sits, the down column's type and bytes, the bundle's bytes (whole pages) */
  parts: BundleParts;
}

/** How a group's writing reports: abort checks, source bytes processed, and when to tell the progress callback. */
export interface GroupProgress {
  check(): void;
  addBytes(bytes: number): void;
  report(): void;
}

/** Where a group was written, and the error of each part's type change. */
export interface WrittenGroup {
  offset: number;
  gateRows: number;
  stats: Record<BundlePart, ErrorStats>;
}

/**
 * Write group `L` with its neurons in `order` (stored position -> neuron). `changed` records, per
 * part, the source type of a part that had to be converted (left alone when it was copied).
 */
export async function writeFFNGroup(
  source: StoreSource,
  writer: StoreWriter,
  L: FFNTensors,
  order: Int32Array,
  shape: BundleShape,
  rc: RowConverter,
  changed: Record<BundlePart, GGMLType | null>,
  progress: GroupProgress,
): Promise<WrittenGroup> {
  const { ffnType, nEmbd, rowBytes, parts } = shape;
  const { bundleBytes, downType, downBytes } = parts;
  const n = L.neurons;
  const stats = { gate: new ErrorStats(), up: new ErrorStats(), down: new ErrorStats() };

  // Down as one row per neuron, in the store's type
  let downT: Uint8Array | undefined;
  if (!L.transposed) {
    downT = new Uint8Array(n * downBytes);
    await transposeDown(source, L.down, n, nEmbd, downType, downBytes, downT, rc, stats.down, progress.check, (b) => {
      progress.addBytes(b);
      progress.report();
    });
    changed.down = convertedFrom(source, L.down);
  }

  const offset = writer.position;
  const group = Math.max(1, Math.floor((4 << 20) / bundleBytes));
  const out = new Uint8Array(group * bundleBytes);
  const srcRb = { gate: L.gate.rowBytes, up: L.up.rowBytes, down: L.down.rowBytes };
  const scratch = {
    gate: new Uint8Array(group * srcRb.gate),
    up: new Uint8Array(group * srcRb.up),
    down: new Uint8Array(L.transposed ? group * srcRb.down : 0),
  };
  // rows read as values (a checkpoint read in place) are quantized once, measured against them
  const values = source.valuesType(L.gate) !== null ? new Float32Array(group * nEmbd) : undefined;
  // The layer's gate rows as stored, collected for their contiguous copy after the bundles.
  const gateRows = new Uint8Array(n * rowBytes);
  for (let p0 = 0; p0 < n; p0 += group) {
    progress.check();
    const g = Math.min(group, n - p0);
    const idx = order.subarray(p0, p0 + g);
    out.fill(0);
    for (const kind of ["gate", "up", "down"] as const) {
      if (kind === "down" && !L.transposed) {
        for (let k = 0; k < g; k++)
          out.set(downT!.subarray(idx[k] * downBytes, (idx[k] + 1) * downBytes), k * bundleBytes + parts.down);
        continue;
      }
      const m = L[kind];
      const type = m.t.type;
      const at = parts[kind];
      const from = source.valuesType(m);
      if (from !== null) {
        source.readRowValues(m, idx, values!);
        for (let k = 0; k < g; k++)
          rc.quantize(
            m.t.name,
            values!.subarray(k * nEmbd, (k + 1) * nEmbd),
            ffnType,
            out.subarray(k * bundleBytes + at, k * bundleBytes + at + rowBytes),
            stats[kind],
          );
        if (from !== ffnType) changed[kind] = from;
        progress.addBytes(g * srcRb[kind]);
        continue;
      }
      source.readRows(m, idx, scratch[kind]);
      const rb = srcRb[kind];
      for (let k = 0; k < g; k++) {
        const src = scratch[kind].subarray(k * rb, (k + 1) * rb);
        const dst = out.subarray(k * bundleBytes + at, k * bundleBytes + at + rowBytes);
        if (type === ffnType) dst.set(src);
        else rc.convert(m.t.name, type, src, ffnType, dst, stats[kind]);
      }
      if (type !== ffnType) changed[kind] = type;
      progress.addBytes(g * rb);
    }
    if (L.biases) putBiases(source.model, L, idx, parts.biases!, bundleBytes, out);
    for (let k = 0; k < g; k++)
      gateRows.set(out.subarray(k * bundleBytes, k * bundleBytes + rowBytes), (p0 + k) * rowBytes);
    await writer.write(out.subarray(0, g * bundleBytes));
    progress.report();
    await tick();
  }
  await writer.pad();
  const gateRowsOffset = writer.position;
  await writer.write(gateRows);
  await writer.pad();
  return { offset, gateRows: gateRowsOffset, stats };
}

/**
 * Each listed neuron's gate and up biases (f32: F32, F16 and BF16 values exactly) into its bundle at `at` (bundles of `bundleBytes` in `out`, in the order of `idx`).
 */
function putBiases(
  file: ModelFile,
  L: FFNTensors,
  idx: Int32Array,
  at: number,
  bundleBytes: number,
  out: Uint8Array,
): void {
  const n = L.neurons;
  const f32 = new Float32Array(out.buffer, out.byteOffset, out.byteLength >>> 2);
  for (const [j, b] of [L.biases!.gate, L.biases!.up].entries()) {
    const raw = new Uint8Array(b.bytes);
    file.readTensor(b.t, raw, b.base, b.bytes);
    const v = new Float32Array(n);
    dequantizeRow(b.t.type, raw, n, v);
    for (let k = 0; k < idx.length; k++) f32[(k * bundleBytes + at) / 4 + j] = v[idx[k]];
  }
}

/** A part's conversion record for the manifest: null when its rows were copied bit for bit. */
export function partConversion(
  source: StoreSource,
  kind: BundlePart,
  L: FFNTensors,
  ffnType: GGMLType,
  stats: Record<BundlePart, ErrorStats>,
): StoreConversion | null {
  const m = L[kind];
  if (kind === "down" && !L.transposed) return stats.down.report(convertedFrom(source, m));
  const from = convertedFrom(source, m);
  return from === ffnType ? null : stats[kind].report(from);
}
