/**
 * A chunk of a GGUF tensor's rows made from a checkpoint's bytes: the one encoding of a GGUF's
 * rows, which the converting thread runs, or a worker (offline/convert/convert-pool.ts), with the
 * same bytes out. The rows come as the checkpoint stores them (F32, F16 or BF16; or f32 values
 * the converter computed), are regrouped where llama's rotary permutation says, widened to f32,
 * Gemma's one added, and encoded into the output type: by the thread's WASM kernels
 * (src/runtime/quant-kernels.ts, quant.ts's bytes), MXFP4 by quant.ts itself. A chunk holds only
 * plain data, so that it can be posted to a worker and back.
 */
import { GGMLType } from "../ggml-types.js";
import { bf16ThroughF32 } from "../half.js";
import { quantizeRow } from "../quant.js";
import { QuantKernels, threadQuantKernels } from "../../runtime/quant-kernels.js";
import { widenToF32 } from "./safetensors.js";

export interface EncodeJob {
  /** `rows` rows of `rowLen` values of `dtype`, little-endian */
  src: Uint8Array;
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
  values(n: number): Float32Array {
    if (this.buf.length < n) this.buf = new Float32Array(n);
    return this.buf.subarray(0, n);
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

/** Fill job.dst with the job's rows encoded. */
export function encodeChunk(job: EncodeJob, scratch: ChunkScratch): void {
  const { src, dtype, rows, rowLen, ropeHeadRows, type, dst } = job;
  const elem = dtype === "F32" ? 4 : 2;
  const rowBytes = rowLen * elem;
  if (dtype === "BF16" && type === GGMLType.BF16 && !job.addOne) {
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
  if (QuantKernels.supports(type)) return encodeChunkKernels(job);
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

/** encodeChunk through the thread's WASM kernels: the rows copied in (regrouped), widened, encoded and copied out. */
function encodeChunkKernels(job: EncodeJob): void {
  const { src, dtype, rows, rowLen, ropeHeadRows, type, dst } = job;
  const k = threadQuantKernels();
  const n = rows * rowLen;
  const elem = dtype === "F32" ? 4 : 2;
  const rowBytes = rowLen * elem;
  k.stage({ values: n, raw: dtype === "F32" ? 0 : n * 2, out: dst.length });
  // F32 straight into the values; F16 and BF16 into the raw bytes, then widened
  const put = (bytes: Uint8Array, row: number) =>
    dtype === "F32" ? k.putValues(bytes, row * rowLen) : k.raw(bytes.length, row * rowBytes).set(bytes);
  if (ropeHeadRows)
    for (let r = 0; r < rows; r++) {
      const s = sourceRow(r, ropeHeadRows);
      put(src.subarray(s * rowBytes, (s + 1) * rowBytes), r);
    }
  else put(src.subarray(0, rows * rowBytes), 0);
  if (dtype !== "F32") k.widen(dtype, n);
  if (job.addOne) {
    const values = k.values(n);
    for (let i = 0; i < n; i++) values[i] = Math.fround(values[i] + 1);
  }
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
