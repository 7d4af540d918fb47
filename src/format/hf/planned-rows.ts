/**
 * Values of a planned tensor read where they lie, without producing the tensor: a slice of its
 * rows as f32, straight from the checkpoint. What a neuron store built from the checkpoint needs
 * of the FFN (a few rows of Gate and Up in any order, a band of Down's columns), for tensors
 * that are checkpoint rows as they are (a rename, a fused tensor's part, experts stacked; Gemma's
 * norms with their one added).
 */
import type { SafetensorsCheckpoint } from "./safetensors.js";
import { HFConvertError } from "./hf-config.js";
import type { PlannedTensor } from "./plan.js";

/**
 * Values [first, first + count) of each of rows [row0, row0 + rows) of `t` (rows of dims[0]
 * values, counted over all higher dimensions) into `dst`, `count` per row, one read per run of
 * rows in one checkpoint tensor. `scratch` is reused for the raw bytes. A NaN or infinity is
 * refused, naming the checkpoint's file and tensor, as a GGUF's are when a store is made of it.
 */
export function readPlannedRows(
  ckpt: SafetensorsCheckpoint,
  t: PlannedTensor,
  row0: number,
  rows: number,
  first: number,
  count: number,
  dst: Float32Array,
  scratch: Uint8Array,
): void {
  const rowLen = t.dims[0];
  if (!t.parts || t.parts.some((p) => p.columns || p.ropeHeadRows))
    throw new HFConvertError(
      `tensor "${t.name}" is not made of checkpoint rows as they are: it cannot be read in place`,
    );
  let at = 0; // first row of the current part within t
  let done = 0;
  for (const p of t.parts) {
    const end = at + p.rows;
    const lo = Math.max(row0 + done, at);
    const hi = Math.min(row0 + rows, end);
    if (lo < hi) {
      const file = ckpt.fileOf(p.source);
      const r = p.firstRow + (lo - at);
      if (count === rowLen)
        file.readF32(p.source, r * rowLen, dst.subarray(done * count, (done + hi - lo) * count), scratch);
      else
        for (let k = 0; k < hi - lo; k++)
          file.readF32(
            p.source,
            (r + k) * rowLen + first,
            dst.subarray((done + k) * count, (done + k + 1) * count),
            scratch,
          );
      const got = dst.subarray(done * count, (done + hi - lo) * count);
      for (let i = 0; i < got.length; i++)
        if (!Number.isFinite(got[i]))
          throw new HFConvertError(
            `${p.source.file}: tensor "${p.source.name}" holds ${got[i]} (row ${r + Math.floor(i / count)}, column ${first + (i % count)}): a store holds only finite weights`,
          );
      done += hi - lo;
      if (done === rows) break;
    }
    at = end;
  }
  if (done === rows) {
    if (t.addOne) for (let i = 0; i < rows * count; i++) dst[i] = Math.fround(dst[i] + 1);
    return;
  }
  throw new HFConvertError(`tensor "${t.name}": rows [${row0}, ${row0 + rows}) are past its ${at} rows`);
}
