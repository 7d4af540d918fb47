/**
 * Changing a row's type: dequantize, quantize into the store's type, and measure what the stored
 * row decodes to against the source values. The max and rms error per part go into the manifest.
 * Rows go in jobs (MeasureJob: plain data, so that a worker can run one, convert-pool.ts), whose
 * errors are kept per row and summed by the caller in row order: the manifest's figures do not
 * depend on which thread measured what. The thread's WASM kernels run a job
 * (src/runtime/quant-kernels.ts: the same bytes, sums and maxima as RowConverter and ErrorStats,
 * which stay the reference and run the types the kernels do not write).
 */
import { GGMLType, traitsBytes, typeName, typeTraits } from "../../format/ggml-types.js";
import { dequantizeRow, quantizeRow } from "../../format/quant.js";
import type { ChunkPipeline } from "../../format/hf/chunk-pipeline.js";
import type { StoreConversion } from "../../format/store/index.js";
import { QuantKernels, threadQuantKernels } from "../../runtime/quant-kernels.js";
import { ConvertError } from "./convert-error.js";
import { refuseNonFinite } from "../../format/hf/planned-rows.js";
import { readValues, type ValueRead } from "../../format/hf/safetensors.js";
import { findNonFinite } from "../../format/finite-check.js";

/** The error of a conversion, accumulated over rows: max and rms against the source, and the largest source value. */
export class ErrorStats {
  maxAbs = 0;
  sumSq = 0;
  count = 0;
  maxValue = 0;
  add(src: Float32Array, got: Float32Array, n: number): void {
    let m = this.maxAbs,
      s = 0,
      v = this.maxValue;
    for (let i = 0; i < n; i++) {
      const d = Math.abs(got[i] - src[i]);
      if (d > m) m = d;
      s += d * d;
      const a = Math.abs(src[i]);
      if (a > v) v = a;
    }
    this.maxAbs = m;
    this.sumSq += s;
    this.count += n;
    this.maxValue = v;
  }
  /** A measured job's rows, in order (the sum of squares as add() sums them row by row). */
  addMeasured(job: MeasureJob): void {
    const errors = new Float64Array(job.errors.buffer, job.errors.byteOffset, job.rows);
    for (let r = 0; r < job.rows; r++) this.sumSq += errors[r];
    this.count += job.rows * job.n;
    this.maxAbs = Math.max(this.maxAbs, job.maxAbs);
    this.maxValue = Math.max(this.maxValue, job.maxValue);
  }
  reset(): void {
    this.maxAbs = this.sumSq = this.count = this.maxValue = 0;
  }
  merge(o: ErrorStats): void {
    this.maxAbs = Math.max(this.maxAbs, o.maxAbs);
    this.sumSq += o.sumSq;
    this.count += o.count;
    this.maxValue = Math.max(this.maxValue, o.maxValue);
  }
  report(from: GGMLType): StoreConversion {
    return {
      from,
      fromName: typeName(from),
      maxAbsError: this.maxAbs,
      rmsError: this.count ? Math.sqrt(this.sumSq / this.count) : 0,
      maxAbsValue: this.maxValue,
    };
  }
}

/** Converts rows of one length (the embedding width) between types, with scratch for the f32 values. */
export class RowConverter {
  private a: Float32Array;
  private b: Float32Array;
  constructor(readonly n: number) {
    this.a = new Float32Array(n);
    this.b = new Float32Array(n);
  }
  /** Convert one row of tensor `name` between types, measuring the error against the source values. */
  convert(name: string, from: GGMLType, src: Uint8Array, to: GGMLType, dst: Uint8Array, stats: ErrorStats): void {
    dequantizeRow(from, src, this.n, this.a);
    this.quantize(name, this.a, to, dst, stats);
  }
  /**
   * Quantize f32 values of tensor `name` and measure what the stored row decodes to against them.
   * A finite value the type cannot hold (F16 above 65504, or a block scale that overflows f16)
   * is refused: the kernels would read the infinity as a finite number.
   */
  quantize(name: string, values: Float32Array, to: GGMLType, dst: Uint8Array, stats: ErrorStats): void {
    quantizeRow(to, values, dst);
    dequantizeRow(to, dst, this.n, this.b);
    for (let i = 0; i < this.n; i++)
      if (!Number.isFinite(this.b[i])) {
        const wider = ["bf16", "f32", "q8_0"].filter((t) => t !== typeName(to).toLowerCase());
        throw new ConvertError(
          `${name}: the value ${values[i]} does not fit in ${typeName(to)} (it becomes ${this.b[i]}): convert with one of --type ${wider.join(", ")}`,
        );
      }
    stats.add(values, this.b, this.n);
  }
}

/** Rows to convert into the store's type, measured: plain data, posted to a worker and back. */
export interface MeasureJob {
  /** the tensor, for messages */
  name: string;
  /**
   * `rows` rows of `n` values of type `from` (F32: values read in place); with `columns`, a band
   * of a matrix stored the other way, n rows of `rows` f32 values, each column of which is a row
   */
  src?: Uint8Array;
  /**
   * instead of src: a checkpoint's F16 or BF16 rows, read by the thread converting them, a value
   * that is not finite refused as readPlannedRows refuses it (naming the file, tensor, row and column)
   */
  read?: ValueRead;
  /** the checkpoint tensor's row `read` starts at */
  sourceRow?: number;
  from: GGMLType;
  columns: boolean;
  rows: number;
  n: number;
  to: GGMLType;
  /** the rows in `to` go here */
  dst: Uint8Array;
  /** filled: each row's sum of squared errors, f64 */
  errors: Uint8Array;
  /** filled: the largest error and the largest |value| over the rows */
  maxAbs: number;
  maxValue: number;
}

/** A job for `job.rows` rows (or columns) of `job.src`, its dst and errors from `pipeline`. */
export function measureJob(
  pipeline: Pick<ChunkPipeline, "buffer">,
  job: Omit<MeasureJob, "dst" | "errors" | "maxAbs" | "maxValue">,
): MeasureJob {
  const rb = traitsBytes(typeTraits(job.to)!, job.n);
  return { ...job, dst: pipeline.buffer(job.rows * rb), errors: pipeline.buffer(job.rows * 8), maxAbs: 0, maxValue: 0 };
}

/** Columns gathered at once from a band: each row of the band is read 16 floats at a time. */
const GATHER = 16;

/** Columns of a band transposed at once by the WASM kernels: 128 KiB of f32 per 1024 values of a column. */
const KERNEL_STRIP = 32;

/**
 * A thread's scratch for measured jobs: converters per row length and the gathered columns (for
 * the types only quant.ts writes); the others go through the thread's WASM kernels
 * (src/runtime/quant-kernels.ts), which give the same bytes and figures.
 */
export class MeasureScratch {
  private converters = new Map<number, RowConverter>();
  private cols = new Float32Array(0);
  private row = new ErrorStats();
  private raw = new Uint8Array(0);

  /** Fill job.dst with its rows in job.to, and job's errors. */
  run(job: MeasureJob): void {
    const { n, rows, to, name } = job;
    let rc = this.converters.get(n);
    if (!rc) this.converters.set(n, (rc = new RowConverter(n)));
    if (QuantKernels.supports(to)) return this.runKernels(job, rc);
    const src = job.src ?? this.readSource(job);
    const rb = traitsBytes(typeTraits(to)!, n);
    const errors = new Float64Array(job.errors.buffer, job.errors.byteOffset, rows);
    const row = this.row;
    job.maxAbs = job.maxValue = 0;
    const measured = (r: number) => {
      errors[r] = row.sumSq;
      job.maxAbs = Math.max(job.maxAbs, row.maxAbs);
      job.maxValue = Math.max(job.maxValue, row.maxValue);
    };
    if (job.columns) {
      // a column-at-a-time gather strides through the whole band (the converter's hot spot once)
      const tile = new Float32Array(src.buffer, src.byteOffset, n * rows);
      if (this.cols.length < GATHER * n) this.cols = new Float32Array(GATHER * n);
      const cols = this.cols;
      for (let j0 = 0; j0 < rows; j0 += GATHER) {
        const g = Math.min(GATHER, rows - j0);
        for (let r = 0; r < n; r++) {
          const at = r * rows + j0;
          for (let k = 0; k < g; k++) cols[k * n + r] = tile[at + k];
        }
        for (let k = 0; k < g; k++) {
          row.reset();
          rc.quantize(
            name,
            cols.subarray(k * n, (k + 1) * n),
            to,
            job.dst.subarray((j0 + k) * rb, (j0 + k + 1) * rb),
            row,
          );
          measured(j0 + k);
        }
      }
      return;
    }
    const srcRb = traitsBytes(typeTraits(job.from)!, n);
    const values = job.from === GGMLType.F32 ? new Float32Array(src.buffer, src.byteOffset, rows * n) : undefined;
    for (let r = 0; r < rows; r++) {
      row.reset();
      const dst = job.dst.subarray(r * rb, (r + 1) * rb);
      if (values) rc.quantize(name, values.subarray(r * n, (r + 1) * n), to, dst, row);
      else rc.convert(name, job.from, src.subarray(r * srcRb, (r + 1) * srcRb), to, dst, row);
      measured(r);
    }
  }

  /** A job's read made here: its F16 or BF16 bytes, a value that is not finite refused. */
  private readSource(job: MeasureJob): Uint8Array {
    const { read, rows, n } = job;
    const bytes = rows * n * 2;
    if (this.raw.length < bytes) this.raw = new Uint8Array(bytes);
    const raw = this.raw.subarray(0, bytes);
    readValues(read!, raw);
    const bad = findNonFinite(job.from, raw, 0);
    if (bad) refuseRead(job, bad.value, bad.element);
    return raw;
  }

  /** run() through the thread's WASM kernels: the rows (or the band) copied in, measured, copied out. */
  private runKernels(job: MeasureJob, rc: RowConverter): void {
    const { n, rows, to, name } = job;
    const k = threadQuantKernels();
    const rb = traitsBytes(typeTraits(to)!, n);
    if (job.columns) {
      // the band copied in, and transposed a strip of columns at a time
      k.stage({
        values: KERNEL_STRIP * n,
        raw: n * QuantKernels.bandStride(rows) * 4,
        out: rows * rb,
        rowLen: n,
        rows,
      });
      k.putBand(job.src!, n, rows);
      k.resetMaxima();
      for (let j0 = 0; j0 < rows; j0 += KERNEL_STRIP) {
        const g = Math.min(KERNEL_STRIP, rows - j0);
        k.columns(n, rows, j0, g);
        const bad = k.measure(to, g, n, j0);
        if (bad >= 0) refuse(rc, name, k.values(n, bad * n), to);
      }
    } else {
      const halves = job.from === GGMLType.F16 || job.from === GGMLType.BF16;
      k.stage({ values: rows * n, raw: halves ? rows * n * 2 : 0, out: rows * rb, rowLen: n, rows });
      if (job.from === GGMLType.F32) k.putValues(job.src!.subarray(0, rows * n * 4));
      else if (halves) {
        // a GGUF's or a checkpoint's F16 or BF16 rows: widened by the kernels, the values
        // dequantizeRow gives
        const raw = k.raw(rows * n * 2);
        if (job.read) readValues(job.read, raw);
        else raw.set(job.src!.subarray(0, rows * n * 2));
        const bad = k.widen(job.from === GGMLType.F16 ? "F16" : "BF16", rows * n);
        if (bad >= 0 && job.read) refuseRead(job, k.values(rows * n)[bad], bad);
      } else {
        const srcRb = traitsBytes(typeTraits(job.from)!, n);
        const values = k.values(rows * n);
        for (let r = 0; r < rows; r++)
          dequantizeRow(job.from, job.src!.subarray(r * srcRb, (r + 1) * srcRb), n, values, r * n);
      }
      k.resetMaxima();
      const bad = k.measure(to, rows, n);
      if (bad >= 0) refuse(rc, name, k.values(n, bad * n), to);
    }
    k.takeOut(job.dst.subarray(0, rows * rb));
    k.takeErrors(job.errors, rows);
    job.maxAbs = k.maxAbs;
    job.maxValue = k.maxValue;
  }
}

/** The refusal of value i of a job's read: a checkpoint's NaN or infinity, named as readPlannedRows names it. */
function refuseRead(job: MeasureJob, value: number, i: number): never {
  return refuseNonFinite(job.read!.file, job.read!.tensor, value, i, job.sourceRow ?? 0, 0, job.n);
}

/**
 * A row the kernels found a non-finite value in, stored: the reference quantizes it again and
 * throws its error, which names the tensor and the value.
 */
function refuse(rc: RowConverter, name: string, values: Float32Array, to: GGMLType): never {
  rc.quantize(name, values, to, new Uint8Array(traitsBytes(typeTraits(to)!, values.length)), new ErrorStats());
  throw new Error(
    `${name}: the quantizing kernels found a value of ${typeName(to)} that is not finite, the reference none`,
  );
}
