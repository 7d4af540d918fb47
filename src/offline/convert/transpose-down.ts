/**
 * Down as one row per neuron. A GGUF (and a checkpoint) stores Down as nEmbd rows of nFF values,
 * a GGUF quantized in blocks along a row, and a bundle needs column i (nEmbd values) contiguous,
 * so each column is quantized with blocks along it: requantized from a GGUF's values, quantized
 * once from a checkpoint's.
 */
import { traitsBytes, typeTraits, type GGMLType } from "../../format/ggml-types.js";
import type { ErrorStats, RowConverter } from "./row-conversion.js";
import type { MatrixView } from "./source-ffn.js";
import type { StoreSource } from "./store-source.js";

/** Lets the event loop run (progress, an abort) between bands of a long transposition. */
const tick = () => new Promise<void>((r) => setImmediate(r));

/**
 * Down ([n] columns x [nEmbd] rows, blocks along a row) -> one row per neuron (column) in
 * `type`. Works in bands of columns: each band's slice of every source row is read as f32 into
 * an nEmbd x band tile, then each column of the tile is quantized.
 */
export async function transposeDown(
  source: StoreSource,
  m: MatrixView,
  n: number,
  nEmbd: number,
  type: GGMLType,
  rowBytes: number,
  out: Uint8Array,
  rc: RowConverter,
  stats: ErrorStats,
  check: () => void,
  onBytes: (b: number) => void,
): Promise<void> {
  const t = m.t;
  const src = typeTraits(t.type)!;
  const step = source.downBandStep(m);
  // at most ~32 MiB of f32 tile, a whole number of source blocks wide
  const maxBand = Math.max(step, Math.floor((8 << 20) / nEmbd / step) * step);
  const band = Math.min(n, maxBand);
  const tile = new Float32Array(nEmbd * band);
  // columns are gathered 16 at a time, so each row of the tile is read 16 floats at once
  // (a column-at-a-time gather strides through the whole tile and was the converter's hot spot)
  const G = 16;
  const cols = new Float32Array(G * nEmbd);
  for (let c0 = 0; c0 < n; c0 += band) {
    check();
    const w = Math.min(band, n - c0);
    source.readDownBand(m, c0, w, tile);
    for (let j0 = 0; j0 < w; j0 += G) {
      const g = Math.min(G, w - j0);
      for (let r = 0; r < nEmbd; r++) {
        const at = r * w + j0;
        for (let k = 0; k < g; k++) cols[k * nEmbd + r] = tile[at + k];
      }
      for (let k = 0; k < g; k++) {
        const c = c0 + j0 + k;
        rc.quantize(
          t.name,
          cols.subarray(k * nEmbd, (k + 1) * nEmbd),
          type,
          out.subarray(c * rowBytes, (c + 1) * rowBytes),
          stats,
        );
      }
    }
    // progress counts the matrix's bytes as the GGUF holds (or would hold) them
    onBytes(traitsBytes(src, w) * nEmbd);
    await tick();
  }
}
