/**
 * Values of a planned tensor read where they lie, without producing the tensor: a slice of its
 * rows as f32, straight from the checkpoint. What a neuron store built from the checkpoint needs
 * of the FFN (a few rows of Gate and Up in any order, a band of Down's columns, an expert's
 * biases), for tensors made of checkpoint rows (a rename, a fused tensor's part, experts stacked,
 * Gemma's norms with their one added), of every step-th value of each row (gpt-oss's fused gate
 * and up biases), of picked columns read down a matrix (transformers' fused gpt-oss experts), or
 * of MXFP4 rows (gpt-oss's published experts), or computed (rope_freqs). Not llama's rotary
 * regrouping (attention only).
 */
import { dequantizeMXFP4, MXFP4_BLOCK_BYTES } from "../mxfp4.js";
import { pickedCount } from "./column-pick.js";
import { HFConvertError } from "./hf-config.js";
import { HF_MXFP4_CODE_BYTES, repackMxfp4Row } from "./mxfp4-blocks.js";
import type { Mxfp4Source, PlannedTensor, RowRange } from "./plan.js";
import { firstNonFinite, widenChecked, type SafetensorsCheckpoint, type ValueRead } from "./safetensors.js";

/**
 * Values [first, first + count) of each of rows [row0, row0 + rows) of `t` (rows of dims[0]
 * values, counted over all higher dimensions) into `dst`, `count` per row, one read per run of
 * rows in one checkpoint tensor where its rows are the checkpoint's. `scratch` is reused for the
 * raw bytes. A NaN or infinity is refused, naming the checkpoint's file and tensor, as a GGUF's
 * are when a store is made of it. `hold` (for slices of rows, a band of Down's columns) gives a
 * run of whole rows' bytes read once for several calls (store-source.ts HeldMatrix), or undefined
 * where they are not held.
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
  hold?: HoldRows,
): void {
  const rowLen = t.dims[0];
  if (t.values) {
    // computed from the config (rope_freqs)
    for (let k = 0; k < rows; k++)
      dst.set(t.values.subarray((row0 + k) * rowLen + first, (row0 + k) * rowLen + first + count), k * count);
    return;
  }
  if (t.mxfp4) {
    const bytes = new Uint8Array((rowLen / 32) * MXFP4_BLOCK_BYTES);
    const row = new Float32Array(rowLen);
    for (let k = 0; k < rows; k++) {
      readPlannedMxfp4(ckpt, t, row0 + k, 1, bytes);
      dequantizeMXFP4(bytes, rowLen, row, 0);
      dst.set(row.subarray(first, first + count), k * count);
    }
    const got = dst.subarray(0, rows * count);
    const bad = firstNonFinite(got);
    if (bad >= 0) refuseNonFinite(t.mxfp4.blocks.file, t.mxfp4.blocks.name, got[bad], bad, row0, first, count);
    return;
  }
  if (!t.parts || t.parts.some((p) => p.ropeHeadRows))
    throw new HFConvertError(
      `tensor "${t.name}" is not made of checkpoint rows as they are: it cannot be read in place`,
    );
  partRuns(t, t.parts, row0, rows, (p, r, done, n) => {
    const got = dst.subarray(done * count, (done + n) * count);
    const bad = readPartRows(ckpt, p, rowLen, r, n, first, count, got, scratch, hold);
    if (bad >= 0) refuseNonFinite(p.source.file, p.source.name, got[bad], bad, r, first, count);
  });
  if (t.addOne) for (let i = 0; i < rows * count; i++) dst[i] = Math.fround(dst[i] + 1);
}

/** Rows of a planned tensor as one read of a checkpoint tensor's stored halves (plainRowsRead). */
export interface HalvesRead {
  read: ValueRead;
  dtype: "F16" | "BF16";
  /** the checkpoint tensor's row the read starts at (for messages) */
  sourceRow: number;
}

/**
 * Rows [row0, row0 + rows) of `t` as one read of the F16 or BF16 bytes a checkpoint tensor
 * stores, where they are that: within one part of checkpoint rows as they are (no picked
 * columns, no regrouping, nothing added). Else undefined: readPlannedRows reads them.
 */
export function plainRowsRead(
  ckpt: SafetensorsCheckpoint,
  t: PlannedTensor,
  row0: number,
  rows: number,
): HalvesRead | undefined {
  if (!t.parts || t.addOne || t.values || t.mxfp4) return undefined;
  let at = 0;
  for (const p of t.parts) {
    if (row0 >= at && row0 + rows <= at + p.rows) {
      const dtype = p.source.dtype;
      if (p.columns || p.ropeHeadRows || (dtype !== "F16" && dtype !== "BF16")) return undefined;
      const sourceRow = p.firstRow + row0 - at;
      const read = ckpt.fileOf(p.source).valueRead(p.source, sourceRow * t.dims[0], rows * t.dims[0] * 2);
      return { read, dtype, sourceRow };
    }
    at += p.rows;
  }
  return undefined;
}

/**
 * Rows [row0, row0 + rows) of `t`, made of `parts` one after another, as runs within one part:
 * `run(p, r, done, n)` for n rows from p's source row r, the run's first being row0 + done.
 */
function partRuns(
  t: PlannedTensor,
  parts: readonly RowRange[],
  row0: number,
  rows: number,
  run: (p: RowRange, r: number, done: number, n: number) => void,
): void {
  let at = 0; // first row of the current part within t
  let done = 0;
  for (const p of parts) {
    const end = at + p.rows;
    const lo = Math.max(row0 + done, at);
    const hi = Math.min(row0 + rows, end);
    if (lo < hi) {
      run(p, p.firstRow + (lo - at), done, hi - lo);
      done += hi - lo;
      if (done === rows) break;
    }
    at = end;
  }
  if (done !== rows)
    throw new HFConvertError(`tensor "${t.name}": rows [${row0}, ${row0 + rows}) are past its ${at} rows`);
}

/** Whole rows' bytes held across reads: `bytes` bytes from `at` of `tensor`, as `read` fills them, or undefined. */
export type HoldRows = (
  tensor: object,
  at: number,
  bytes: number,
  read: (dst: Uint8Array) => void,
) => Uint8Array | undefined;

/**
 * Rows [r, r + n) of part `p` (values [first, first + count) of each) into dst. Returns the first
 * value of dst that is not finite, or -1.
 */
function readPartRows(
  ckpt: SafetensorsCheckpoint,
  p: RowRange,
  rowLen: number,
  r: number,
  n: number,
  first: number,
  count: number,
  dst: Float32Array,
  scratch: Uint8Array,
  hold?: HoldRows,
): number {
  const file = ckpt.fileOf(p.source);
  const pick = p.columns;
  if (pick?.transpose) {
    // output row R is picked column R % picked of matrix R / picked, read down its rows: per run
    // of rows in one matrix, the span of source columns they take from each source row needed
    const s = p.source.shape;
    const width = s[s.length - 1],
      inRows = s[s.length - 2];
    const picked = pickedCount(width, pick);
    if (inRows !== rowLen)
      throw new HFConvertError(`tensor "${p.source.name}": its matrices' ${inRows} rows do not make rows of ${rowLen}`);
    for (let k = 0; k < n;) {
      const e = Math.floor((r + k) / picked),
        c = (r + k) % picked;
      const m = Math.min(n - k, picked - c);
      const col0 = pick.first + c * pick.step;
      const span = (m - 1) * pick.step + 1;
      const src = new Float32Array(span);
      for (let i = 0; i < count; i++) {
        file.readF32(p.source, (e * inRows + first + i) * width + col0, src, scratch);
        for (let j = 0; j < m; j++) dst[(k + j) * count + i] = src[j * pick.step];
      }
      k += m;
    }
    return firstNonFinite(dst);
  }
  if (pick) {
    // every step-th value of the source row: read the row whole, then pick
    const width = p.source.shape[p.source.shape.length - 1];
    if (pickedCount(width, pick) !== rowLen)
      throw new HFConvertError(`tensor "${p.source.name}": its picked columns do not make rows of ${rowLen}`);
    const src = new Float32Array(width);
    for (let k = 0; k < n; k++) {
      file.readF32(p.source, (r + k) * width, src, scratch);
      for (let c = 0; c < count; c++) dst[k * count + c] = src[pick.first + (first + c) * pick.step];
    }
    return firstNonFinite(dst);
  }
  if (count === rowLen) return file.readF32(p.source, r * rowLen, dst.subarray(0, n * count), scratch);
  const elem = p.source.bytes / Math.max(1, p.source.elements);
  if (scratch.length >= n * count * elem) {
    // each row's slice gathered into one run of raw bytes, widened at once (a band of Down's
    // columns): from the whole rows where they are held, else read one by one
    const whole = hold?.(p.source, r, n * rowLen * elem, (d) => file.readValueBytes(p.source, r * rowLen, d));
    for (let k = 0; k < n; k++) {
      const slice = scratch.subarray(k * count * elem, (k + 1) * count * elem);
      if (whole) slice.set(whole.subarray((k * rowLen + first) * elem, (k * rowLen + first + count) * elem));
      else file.readValueBytes(p.source, (r + k) * rowLen + first, slice);
    }
    return widenChecked(p.source.dtype, scratch.subarray(0, n * count * elem), dst.subarray(0, n * count));
  }
  // every row read before a value is refused (a shard cut short says so first, as above)
  let found = -1;
  for (let k = 0; k < n; k++) {
    const bad = file.readF32(p.source, (r + k) * rowLen + first, dst.subarray(k * count, (k + 1) * count), scratch);
    if (bad >= 0 && found < 0) found = k * count + bad;
  }
  return found;
}

/** The error for value `value`, element i of a read of rows from row0, values [first, first + count) of each. */
export function refuseNonFinite(
  file: string,
  name: string,
  value: number,
  i: number,
  row0: number,
  first: number,
  count: number,
): never {
  throw new HFConvertError(
    `${file}: tensor "${name}" holds ${value} (row ${row0 + Math.floor(i / count)}, column ${first + (i % count)}): a store holds only finite weights`,
  );
}

/**
 * Rows [row0, row0 + rows) of an MXFP4-planned tensor as ggml's MXFP4 blocks (the bytes a GGUF
 * keeps) into dst: output row e * outRows + r of expert e is its source row first + r * step.
 */
export function readPlannedMxfp4(
  ckpt: SafetensorsCheckpoint,
  t: PlannedTensor,
  row0: number,
  rows: number,
  dst: Uint8Array,
): void {
  const src: Mxfp4Source = t.mxfp4!;
  const [, srcRows, nBlocks] = src.scales.shape;
  const outRows = t.dims[1];
  const codes = new Uint8Array(nBlocks * HF_MXFP4_CODE_BYTES);
  const scales = new Uint8Array(nBlocks);
  const blocksFile = ckpt.fileOf(src.blocks),
    scalesFile = ckpt.fileOf(src.scales);
  for (let k = 0; k < rows; k++) {
    const e = Math.floor((row0 + k) / outRows),
      r = (row0 + k) % outRows;
    const row = e * srcRows + src.first + r * src.step;
    blocksFile.readBytes(src.blocks, row * codes.length, codes);
    scalesFile.readBytes(src.scales, row * nBlocks, scales);
    repackMxfp4Row(codes, 0, scales, 0, nBlocks, dst, k * nBlocks * MXFP4_BLOCK_BYTES);
  }
}
