/**
 * Down as one row per neuron. A GGUF (and a checkpoint) stores Down as nEmbd rows of nFF values,
 * a GGUF quantized in blocks along a row, and a bundle needs column i (nEmbd values) contiguous,
 * so each column is quantized with blocks along it: requantized from a GGUF's values, quantized
 * once from a checkpoint's.
 */
import { GGMLType, traitsBytes, typeTraits } from "../../format/ggml-types.js";
import type { ConvertWork } from "./convert-runner.js";
import { measureJob, type ErrorStats } from "./row-conversion.js";
import type { MatrixView } from "./source-ffn.js";
import type { StoreSource } from "./store-source.js";

/** Lets the event loop run (progress, an abort, the workers' answers) between bands of a long transposition. */
const tick = () => new Promise<void>((r) => setImmediate(r));

/**
 * Values in one band's tile (8 MiB of f32): a few bands per layer for the workers to share, and
 * few reads (a band reads each source row's slice: nEmbd reads).
 */
const BAND_VALUES = 1 << 21;

/**
 * Down ([n] columns x [nEmbd] rows, blocks along a row) -> one row per neuron (column) in
 * `type`, into `out`. Works in bands of columns: each band's slice of every source row is read
 * as f32 into an nEmbd x band tile, and each column of the tile quantized (row-conversion.ts's
 * MeasureJob). The bands go through `pipeline`: `out` and `stats` are complete once the bands
 * submitted here have been consumed.
 */
export async function transposeDown(
  source: StoreSource,
  m: MatrixView,
  n: number,
  nEmbd: number,
  type: GGMLType,
  rowBytes: number,
  out: Uint8Array,
  work: ConvertWork,
  stats: ErrorStats,
  check: () => void,
  onBytes: (b: number) => void,
): Promise<void> {
  const t = m.t;
  const src = typeTraits(t.type)!;
  const step = source.downBandStep(m);
  const { runner, pipeline } = work;
  // a whole number of source blocks wide
  const band = Math.min(n, Math.max(step, Math.floor(BAND_VALUES / nEmbd / step) * step));
  for (let c0 = 0; c0 < n; c0 += band) {
    check();
    const w = Math.min(band, n - c0);
    const tile = pipeline.buffer(nEmbd * w * 4);
    source.readDownBand(m, c0, w, new Float32Array(tile.buffer, 0, nEmbd * w));
    const job = measureJob(pipeline, {
      name: t.name,
      src: tile,
      from: GGMLType.F32,
      columns: true,
      rows: w,
      n: nEmbd,
      to: type,
    });
    await pipeline.submit(runner.measure(job), (done) => {
      out.set(done.dst, c0 * rowBytes);
      stats.addMeasured(done);
      pipeline.release(tile, done.dst, done.errors);
      // progress counts the matrix's bytes as the GGUF holds (or would hold) them
      onBytes(traitsBytes(src, w) * nEmbd);
    });
    await tick();
  }
}
