/**
 * A chunk of a GGUF tensor's rows made from a checkpoint's bytes: the one encoding of a GGUF's
 * rows, which the converting thread runs, or a worker (offline/convert/convert-pool.ts), with the
 * same bytes out. The rows come as the checkpoint stores them (F32, F16 or BF16, given or read
 * from the shard by the thread running the job; or f32 values the converter computed), are
 * regrouped where llama's rotary permutation says, widened to f32 (F16 and BF16 in the kernels'
 * cache, quantize_halves), Gemma's one added, and encoded into the output type: by the thread's WASM kernels
 * (src/runtime/quant-kernels.ts, quant.ts's bytes), MXFP4 by quant.ts itself. A chunk holds only
 * plain data, so that it can be posted to a worker and back.
 */
import { GGMLType } from "../ggml-types.js";
import { bf16ThroughF32 } from "../half.js";
import { quantizeRow } from "../quant.js";
import { QuantKernels, threadQuantKernels } from "../../runtime/quant-kernels.js";
import { readValues, widenToF32, type ValueRead } from "./safetensors.js";

export interface EncodeJob {
  /** `rows` rows of `rowLen` values of `dtype`, little-endian: given, or where `read` says */
  src?: Uint8Array;
  /**
   * where the thread running the job reads its rows from (instead of src): straight into its
   * kernels' memory, and off the converting thread
   */
  read?: ValueRead;
  dtype: "F32" | "F16" | "BF16";
  rows: number;
  rowLen: number;
  /**
   * Whole heads of this many rows, in HF's rotary order (a head's first halves of the rotated
   * pairs, then the second halves), which ggml's normal RoPE wants adjacent: output row 2i + j of
   * a head is its source row j * half + i.
   */
  ropeHeadRows?: number;
  /** 1 added to every value (Gemma's norms store w - 1; ggml wants w) */
  addOne?: boolean;
  type: GGMLType;
  /** the encoded rows go here: rows * the type's bytes per row */
  dst: Uint8Array;
}

/**
 * A thread's scratch for chunks of the types only quant.ts writes (MXFP4): f32 values, grown to
 * the largest chunk seen. The others go through the thread's WASM kernels (their memory is the
 * scratch).
 */
export class ChunkScratch {
  private buf = new Float32Array(0);
  private bytes = new Uint8Array(0);
  values(n: number): Float32Array {
    if (this.buf.length < n) this.buf = new Float32Array(n);
    return this.buf.subarray(0, n);
  }
  /** room for a job's source bytes read by the thread */
  raw(n: number): Uint8Array {
    if (this.bytes.length < n) this.bytes = new Uint8Array(n);
    return this.bytes.subarray(0, n);
  }
}

/**
 * Whether a chunk's rows can be encoded where they lie (dst the same bytes as src): BF16 kept
 * BF16 in source order, whose encoding changes at most a NaN's bits.
 */
export function encodesInPlace(job: Pick<EncodeJob, "dtype" | "type" | "addOne" | "ropeHeadRows">): boolean {
  return job.dtype === "BF16" && job.type === GGMLType.BF16 && !job.addOne && !job.ropeHeadRows;
}

/** The source row that output row r of a chunk comes from. */
function sourceRow(r: number, headRows: number | undefined): number {
  if (!headRows) return r;
  const k = r % headRows;
  return r - k + (k & 1) * (headRows / 2) + (k >> 1);
}

/** The job's source bytes (into.length of them) into `into`, from job.src or by job.read. */
function sourceInto(job: EncodeJob, into: Uint8Array): void {
  if (job.read) readValues(job.read, into);
  else into.set(job.src!.subarray(0, into.length));
}

/** Fill job.dst with the job's rows encoded. */
export function encodeChunk(job: EncodeJob, scratch: ChunkScratch): void {
  const { dtype, rows, rowLen, ropeHeadRows, type, dst } = job;
  const elem = dtype === "F32" ? 4 : 2;
  const rowBytes = rowLen * elem;
  const bf16Kept = dtype === "BF16" && type === GGMLType.BF16 && !job.addOne;
  if (!bf16Kept && QuantKernels.supports(type)) return encodeChunkKernels(job);
  let src = job.src!;
  if (job.read) {
    // read into dst where it is encoded in place, else into the scratch
    src = encodesInPlace(job) ? dst.subarray(0, rows * rowBytes) : scratch.raw(rows * rowBytes);
    sourceInto(job, src);
  }
  if (bf16Kept) {
    for (let r = 0; r < rows;) {
      // runs of rows in source order go at once
      const s = sourceRow(r, ropeHeadRows);
      const run = ropeHeadRows ? 1 : rows;
      bf16ThroughF32(
        new Uint16Array(src.buffer, src.byteOffset + s * rowBytes, run * rowLen),
        new Uint16Array(dst.buffer, dst.byteOffset + r * rowBytes, run * rowLen),
      );
      r += run;
    }
    return;
  }
  const values = scratch.values(rows * rowLen);
  if (ropeHeadRows)
    for (let r = 0; r < rows; r++) {
      const s = sourceRow(r, ropeHeadRows);
      widenToF32(dtype, src.subarray(s * rowBytes, (s + 1) * rowBytes), values.subarray(r * rowLen, (r + 1) * rowLen));
    }
  else widenToF32(dtype, src.subarray(0, rows * rowBytes), values);
  if (job.addOne) for (let i = 0; i < values.length; i++) values[i] = Math.fround(values[i] + 1);
  encodeRows(type, values, rows, rowLen, dst);
}

/**
 * encodeChunk through the thread's WASM kernels: the rows copied (or read) in, encoded and copied
 * out. F16 and BF16 rows go to the type straight from their halves (quantize_halves), in source
 * order, and the output rows are regrouped as they are copied out (each row is encoded alone);
 * F32 rows, and rows with Gemma's one to add, go through the f32 values.
 */
function encodeChunkKernels(job: EncodeJob): void {
  const { dtype, rows, rowLen, ropeHeadRows, type, dst } = job;
  const k = threadQuantKernels();
  const n = rows * rowLen;
  const halves = dtype !== "F32";
  if (halves && !job.addOne) {
    k.stage({ values: 0, raw: n * 2, out: dst.length });
    sourceInto(job, k.raw(n * 2));
    k.quantizeHalves(dtype, type, n);
    const outRow = dst.length / rows;
    if (!ropeHeadRows) dst.set(k.output(dst.length));
    else for (let r = 0; r < rows; r++) dst.set(k.output(outRow, sourceRow(r, ropeHeadRows) * outRow), r * outRow);
    return;
  }
  const rowBytes = rowLen * (halves ? 2 : 4);
  k.stage({ values: n, raw: halves ? n * 2 : 0, out: dst.length });
  // the rows in source order: F32 straight into the values, F16 and BF16 into the raw bytes
  const values = k.values(n);
  const stored = halves ? k.raw(n * 2) : new Uint8Array(values.buffer, values.byteOffset, n * 4);
  sourceInto(job, stored);
  if (ropeHeadRows) {
    // regrouped through a copy (rare: F32 attention rows)
    const copy = stored.slice();
    for (let r = 0; r < rows; r++) {
      const s = sourceRow(r, ropeHeadRows);
      stored.set(copy.subarray(s * rowBytes, (s + 1) * rowBytes), r * rowBytes);
    }
  }
  if (halves) k.widen(dtype, n);
  if (job.addOne) for (let i = 0; i < n; i++) values[i] = Math.fround(values[i] + 1);
  k.quantize(type, n, dst);
}

/**
 * `rows` rows of `rowLen` f32 values as `type` into `out` (rows of whole blocks): the one
 * encoding of a GGUF's rows, which a store made straight from the checkpoint repeats exactly.
 */
export function encodeRows(type: GGMLType, values: Float32Array, rows: number, rowLen: number, out: Uint8Array): void {
  const n = rows * rowLen;
  if (type === GGMLType.F32) out.set(new Uint8Array(values.buffer, values.byteOffset, n * 4));
  else if (QuantKernels.supports(type)) {
    const k = threadQuantKernels();
    k.stage({ values: n, out: out.length });
    k.values(n).set(values.subarray(0, n));
    k.quantize(type, n, out);
  } else {
    const rb = out.length / rows;
    for (let r = 0; r < rows; r++)
      quantizeRow(type, values.subarray(r * rowLen, (r + 1) * rowLen), out.subarray(r * rb, (r + 1) * rb));
  }
}
