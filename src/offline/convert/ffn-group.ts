/**
 * One bundle group of the store (a layer's FFN, or one expert's): its neurons' bundles in stored
 * order, each Gate row, Up row and Down column side by side, assembled a few MiB at a time from
 * rows read on demand; then the group's gate rows again, contiguous, so that a dense gate pass
 * reads them in one sweep. Rows are read here, converted by the runner, and the bundles written
 * as their rows come back, in order (chunk-pipeline.ts).
 */
import { GGMLType } from "../../format/ggml-types.js";
import type { BundleParts, StoreConversion, StoreWriter } from "../../format/store/index.js";
import { dequantizeRow } from "../../format/quant.js";
import type { ModelFile } from "../../format/gguf.js";
import type { ConvertWork } from "./convert-runner.js";
import { ErrorStats, measureJob, type MeasureJob } from "./row-conversion.js";
import type { FFNTensors } from "./source-ffn.js";
import { convertedFrom, type StoreSource } from "./store-source.js";
import { transposeDown } from "./transpose-down.js";

/** Lets the event loop run (progress, an abort, the workers' answers) between pieces of a long conversion. */
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

/** Where a group was written, and the error of each part's type change: complete once the pipeline is drained. */
export interface WrittenGroup {
  offset: number;
  gateRows: number;
  stats: Record<BundlePart, ErrorStats>;
}

/** A part's rows of one piece of a group, in the store's type: read as they are, or converted and measured. */
type PartRows = { rows: Uint8Array; job?: MeasureJob };

/**
 * Write group `L` with its neurons in `order` (stored position -> neuron). `changed` records, per
 * part, the source type of a part that had to be converted (left alone when it was copied). The
 * group's pieces go through work.pipeline: what it returns is filled in as they are written.
 */
export async function writeFFNGroup(
  source: StoreSource,
  writer: StoreWriter,
  L: FFNTensors,
  order: Int32Array,
  shape: BundleShape,
  work: ConvertWork,
  changed: Record<BundlePart, GGMLType | null>,
  progress: GroupProgress,
): Promise<WrittenGroup> {
  const { ffnType, nEmbd, rowBytes, parts } = shape;
  const { bundleBytes, downType, downBytes } = parts;
  const { runner, pipeline } = work;
  const n = L.neurons;
  const written: WrittenGroup = {
    offset: -1,
    gateRows: -1,
    stats: { gate: new ErrorStats(), up: new ErrorStats(), down: new ErrorStats() },
  };
  const { stats } = written;

  // Down as one row per neuron, in the store's type (complete before the first bundle is assembled:
  // its bands are consumed first). This group's buffers come from the pipeline and go back to it
  // once the group is written: the next group's, of the same sizes, are these (a few tens of MB
  // made per layer had V8 run a full collection per layer).
  let downT: Uint8Array | undefined;
  if (!L.transposed) {
    downT = pipeline.buffer(n * downBytes);
    await transposeDown(source, L.down, n, nEmbd, downType, downBytes, downT, work, stats.down, progress.check, (b) => {
      progress.addBytes(b);
      progress.report();
    });
    changed.down = convertedFrom(source, L.down);
  }

  /** Part `kind`'s rows `idx` in ffnType: copied when the source holds that type, else converted. */
  const partRows = (kind: BundlePart, idx: Int32Array): Promise<PartRows> => {
    const m = L[kind];
    const g = idx.length;
    const from = source.valuesType(m);
    let src: Uint8Array;
    if (from !== null) {
      // rows read as values (a checkpoint read in place) are quantized once, measured against
      // them: read by the thread converting them where they are stored halves, else here
      if (from !== ffnType) changed[kind] = from;
      const halves = source.rowsRead?.(m, idx);
      if (halves) {
        const { read, dtype, sourceRow } = halves;
        const job = measureJob(pipeline, {
          name: m.t.name,
          read,
          sourceRow,
          from: GGMLType[dtype],
          columns: false,
          rows: g,
          n: nEmbd,
          to: ffnType,
        });
        return runner.measure(job).then((done) => ({ rows: done.dst, job: done }));
      }
      src = pipeline.buffer(g * nEmbd * 4);
      source.readRowValues(m, idx, new Float32Array(src.buffer, 0, g * nEmbd));
    } else {
      src = pipeline.buffer(g * m.rowBytes);
      source.readRows(m, idx, src);
      if (m.t.type === ffnType) return Promise.resolve({ rows: src });
      changed[kind] = m.t.type;
    }
    const job = measureJob(pipeline, {
      name: m.t.name,
      src,
      from: from !== null ? GGMLType.F32 : m.t.type,
      columns: false,
      rows: g,
      n: nEmbd,
      to: ffnType,
    });
    return runner.measure(job).then((done) => ({ rows: done.dst, job: done }));
  };

  const group = Math.max(1, Math.floor((4 << 20) / bundleBytes));
  const out = pipeline.buffer(group * bundleBytes);
  // The layer's gate rows as stored, collected for their contiguous copy after the bundles.
  const gateRows = pipeline.buffer(n * rowBytes);
  const kinds = L.transposed ? (["gate", "up", "down"] as const) : (["gate", "up"] as const);
  // bytes of a bundle its parts write: gate, up, then down (a row of the source's when transposed)
  const partsEnd = parts.down + (L.transposed ? rowBytes : downBytes);
  await pipeline.submit(Promise.resolve(), () => {
    written.offset = writer.position;
  });
  for (let p0 = 0; p0 < n; p0 += group) {
    progress.check();
    const g = Math.min(group, n - p0);
    const idx = order.subarray(p0, p0 + g);
    const pieces = Promise.all(kinds.map((kind) => partRows(kind, idx)));
    const srcBytes = kinds.reduce((a, kind) => a + g * L[kind].rowBytes, 0);
    await pipeline.submit(pieces, async (got) => {
      // the parts fill each bundle from its start: only the rest (biases, padding) is cleared
      for (let k = 0; k < g; k++) out.fill(0, k * bundleBytes + partsEnd, (k + 1) * bundleBytes);
      got.forEach(({ rows, job }, i) => {
        const kind = kinds[i];
        const at = parts[kind];
        for (let k = 0; k < g; k++) out.set(rows.subarray(k * rowBytes, (k + 1) * rowBytes), k * bundleBytes + at);
        if (job) {
          stats[kind].addMeasured(job);
          pipeline.release(...(job.src ? [job.src] : []), job.errors);
        }
        pipeline.release(rows);
      });
      if (!L.transposed)
        for (let k = 0; k < g; k++)
          out.set(downT!.subarray(idx[k] * downBytes, (idx[k] + 1) * downBytes), k * bundleBytes + parts.down);
      if (L.biases) putBiases(source.model, L, idx, parts.biases!, bundleBytes, out);
      for (let k = 0; k < g; k++)
        gateRows.set(out.subarray(k * bundleBytes, k * bundleBytes + rowBytes), (p0 + k) * rowBytes);
      await writer.write(out.subarray(0, g * bundleBytes));
      progress.addBytes(srcBytes);
      progress.report();
    });
    await tick();
  }
  await pipeline.submit(Promise.resolve(), async () => {
    await writer.pad();
    written.gateRows = writer.position;
    await writer.write(gateRows);
    await writer.pad();
    pipeline.release(out, gateRows, ...(downT ? [downT] : []));
  });
  return written;
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
