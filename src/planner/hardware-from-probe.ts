/**
 * The cost model's view of a probe (Hardware) at one thread count: the probe's tables read at the
 * model's shapes, a measurement the probe lacks an error that says to probe again.
 */
import { typeName, type GGMLType } from "../format/ggml-types.js";
import { aio } from "../io/aio.js";
import type { Hardware } from "./hardware.js";
import type { ModelShape } from "./model-shape.js";
import {
  ioKey,
  matvecKey,
  predictorKey,
  sparseKey,
  streamKey,
  type IoTable,
  type ProbeResult,
} from "./probe-results.js";
import { DEFAULT_MAX_READ_BYTES } from "../io/flash-reader.js";
import type { RuntimeBase } from "./runtime-base.js";
import { batchSecondsAt, chunkReads, iopsAt, sizedBatchSecondsAt, submitAt } from "./read-table.js";

/** The cost model's view of the probe at one thread count. */
export function hardwareFromProbe(
  probe: ProbeResult,
  shape: ModelShape,
  threads: number,
  { base, memories }: RuntimeBase,
): Hardware {
  const dev = probe.fingerprint.device;
  const need = <T>(v: T | undefined, what: string): T => {
    if (v === undefined) throw new Error(`the probe has no ${what}: probe again (powerinfer plan --reprobe)`);
    return v;
  };
  const sparse = need(
    probe.sparse[sparseKey(shape.ffnType, shape.nEmbd, threads)],
    `sparse kernel speed for ${typeName(shape.ffnType)} at ${threads} thread(s)`,
  );
  const tables = new Map<number, IoTable>();
  for (const bytes of new Set([shape.bundleBytes, shape.gateReadBytes]))
    tables.set(
      bytes,
      need(
        probe.io[ioKey(dev, bytes, threads)],
        `read table for ${bytes}-byte reads on ${dev} at ${threads} thread(s)`,
      ),
    );
  const table = (bytes: number) => tables.get(bytes) ?? tables.get(shape.bundleBytes)!;
  const stream = shape.gateStream
    ? need(
        probe.io[streamKey(dev, shape.gateStream.bytes, threads)],
        `read table for gate-row chunks on ${dev} at ${threads} thread(s)`,
      )
    : null;
  // every size measured, for the coalesced reads of adjacent misses (read-runs.ts): the bundle
  // and gate-page tables, and the gate-row chunks and runs of bundles as the reads of at most
  // maxRead they split into (a probe from before the runs were probed has none: the bundle's rate)
  const runs = Object.entries(probe.io).find(([k]) => k.startsWith(`${dev}|run `) && k.endsWith(`|${threads}`))?.[1];
  const sized = [
    ...tables.values(),
    ...[stream, runs].flatMap((t) => (t ? [chunkReads(t, DEFAULT_MAX_READ_BYTES)] : [])),
  ];
  const rates = new Map<GGMLType, number>();
  for (const m of [...shape.layerMatrices, shape.output, { type: shape.ffnType, rows: 0, cols: shape.nEmbd }]) {
    if (rates.has(m.type)) continue;
    // rates were measured nEmbd wide; a type without its own measurement borrows the FFN type's
    rates.set(
      m.type,
      probe.matvec[matvecKey(m.type, shape.nEmbd, threads)] ??
        need(probe.matvec[matvecKey(shape.ffnType, shape.nEmbd, threads)], `matvec speed at ${threads} thread(s)`),
    );
  }
  return {
    threads,
    dispatch: need(probe.dispatch[threads], `dispatch cost at ${threads} thread(s)`),
    memoryBandwidth: need(probe.memoryBandwidth[threads], `memory bandwidth at ${threads} thread(s)`),
    matvecRate: (type) => rates.get(type) ?? rates.get(shape.ffnType)!,
    sparse,
    scan: need(probe.scan ?? undefined, "JS scan cost"),
    streamChunkSeconds: (qd) => (stream ? batchSecondsAt(stream, qd, 1) : Infinity),
    batchSeconds: (bytes, qd, n) =>
      tables.has(bytes) ? batchSecondsAt(tables.get(bytes)!, qd, n) : sizedBatchSecondsAt(sized, bytes, qd, n),
    submitSeconds: (bytes, qd) => submitAt(table(bytes), qd),
    iops: (bytes, qd) => iopsAt(table(bytes), qd),
    predictorSeconds: shape.predictor
      ? need(
          probe.predictor[predictorKey(shape.predictor, shape.nEmbd, shape.nFF, threads)],
          `predictor speed at ${threads} thread(s)`,
        )
      : 0,
    base,
    memories,
    // native AIO reads on while every core computes; libuv's read threads wait for a free core
    overlap: aio().binding !== null || threads < probe.fingerprint.cores,
  };
}
