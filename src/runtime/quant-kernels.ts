/**
 * The converter's quantizers as WebAssembly kernels (assembly/quantize_rows.ts, quant_measure.ts,
 * transpose_f32.ts): a checkpoint's values widened, quantized into a GGUF's or a store's type, and
 * for a store measured against what was stored, with the bytes and figures of the plain-TS
 * reference (src/format/quant.ts quantizeRow, offline/convert/row-conversion.ts ErrorStats),
 * which stays the reference: test/quant-kernels.test.ts compares the two. F32, F16, BF16, Q8_0,
 * Q4_0, Q4_1, Q5_0 and Q5_1 go through here; MXFP4 (gpt-oss's experts), rare, stays in TS.
 *
 * Each thread (the converting thread, each conversion worker) has one instance over a memory of
 * its own (threadQuantKernels), a staging area that each call lays out from the start: the
 * values, then the raw bytes they come from, then the output, then scratch. It grows to the
 * largest job a thread has seen (a few MiB; a store's Down band, 8 MiB, the most) and is never
 * given back. A call copies its input in and its output out (memcpy), since the jobs' buffers
 * are shared with other threads and not in any wasm memory.
 */
import { GGMLType, traitsBytes, typeTraits } from "../format/ggml-types.js";
import { f32ToF16 } from "../format/half.js";
import { ARENA_START } from "./arena.js";
import { instantiateKernels, kernelModule, type KernelExports } from "./wasm.js";

const PAGE = 65536;
/** a thread's chunks take a few MiB; the memory may grow to 1 GiB (its reservation is address space only) */
const MAX_PAGES = 16384;
/** the kernels' loads and stores are 16 bytes; parts start on cache lines */
const ALIGN = 64;

/** The types the kernels write and decode. */
const KERNEL_TYPES: ReadonlySet<GGMLType> = new Set([
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q8_0,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
]);

const align = (n: number) => Math.ceil(n / ALIGN) * ALIGN;

/** What one call lays out: values, raw bytes, output bytes, and the measuring's scratch. */
export interface StageSizes {
  /** f32 values */
  values: number;
  raw?: number;
  out?: number;
  /** measuring rows of this many values: 4 decoded rows */
  rowLen?: number;
  /** measuring this many rows: their sums of squares */
  rows?: number;
}

export class QuantKernels {
  readonly memory: WebAssembly.Memory;
  private k: KernelExports;
  private buffer: ArrayBufferLike;
  private u8: Uint8Array;
  private f32: Float32Array;
  private f64: Float64Array;
  // the staging area's parts, byte offsets (stage())
  private valuesAt = ARENA_START;
  private rawAt = ARENA_START;
  private outAt = ARENA_START;
  private gotAt = ARENA_START;
  private errorsAt = ARENA_START;
  private maximaAt = ARENA_START;
  private scratchAt = ARENA_START;
  /** the scratch the quantizing kernels take */
  private scratchBytes: number;

  /** An instance of `module` (default: the build this process runs) over a memory of its own. */
  constructor(module: WebAssembly.Module = kernelModule()) {
    this.memory = new WebAssembly.Memory({ initial: ARENA_START / PAGE + 1, maximum: MAX_PAGES, shared: true });
    this.k = instantiateKernels(this.memory, module);
    this.buffer = this.memory.buffer;
    this.u8 = new Uint8Array(this.buffer);
    this.f32 = new Float32Array(this.buffer);
    this.f64 = new Float64Array(this.buffer);
    this.scratchBytes = Math.max(this.k.quant_scratch_bytes(), this.k.quant_halves_scratch_bytes());
    // the reference's Q8_0 scale of a block holding a NaN is Math.max's NaN, whose sign is the engine's
    this.k.quant_nan_scale(f32ToF16(Math.max(0, NaN)));
  }

  /** Whether the kernels write (and measure) `type`; the others go through quant.ts. */
  static supports(type: GGMLType): boolean {
    return KERNEL_TYPES.has(type);
  }

  /** Lays out the staging area for one call, growing the memory where it is short. */
  stage(s: StageSizes): void {
    this.rawAt = align(this.valuesAt + 4 * s.values);
    this.outAt = align(this.rawAt + (s.raw ?? 0));
    this.gotAt = align(this.outAt + (s.out ?? 0));
    this.errorsAt = align(this.gotAt + 16 * (s.rowLen ?? 0));
    this.maximaAt = align(this.errorsAt + 8 * (s.rows ?? 0));
    this.scratchAt = align(this.maximaAt + 16);
    const end = this.scratchAt + this.scratchBytes;
    const have = this.memory.buffer.byteLength;
    if (end > have) this.memory.grow(Math.ceil((end - have) / PAGE));
    if (this.memory.buffer !== this.buffer) {
      this.buffer = this.memory.buffer;
      this.u8 = new Uint8Array(this.buffer);
      this.f32 = new Float32Array(this.buffer);
      this.f64 = new Float64Array(this.buffer);
    }
  }

  /** The staged values [from, from + n), to fill or read. */
  values(n: number, from = 0): Float32Array {
    return this.f32.subarray(this.valuesAt / 4 + from, this.valuesAt / 4 + from + n);
  }

  /** The staged raw bytes [from, from + n). */
  raw(n: number, from = 0): Uint8Array {
    return this.u8.subarray(this.rawAt + from, this.rawAt + from + n);
  }

  /** `bytes` copied into the staged values, from value `at` on. */
  putValues(bytes: Uint8Array, at = 0): void {
    this.u8.set(bytes, this.valuesAt + 4 * at);
  }

  /**
   * The staged raw bytes, n F16 or BF16 values, widened into the staged values exactly as
   * format/hf/safetensors.ts widenToF32 does. Returns the first value that is not finite, or -1.
   */
  widen(dtype: "F16" | "BF16", n: number): number {
    return this.k.widen_rows(dtype === "F16" ? GGMLType.F16 : GGMLType.BF16, this.rawAt, n, this.valuesAt);
  }

  /**
   * F16 or BF16 bytes widened into dst (one call: staged, widened, copied out), as widen() does.
   * Returns the first value that is not finite, or -1.
   */
  widenInto(dtype: "F16" | "BF16", raw: Uint8Array, dst: Float32Array): number {
    const n = dst.length;
    this.stage({ values: n, raw: 2 * n });
    this.u8.set(raw.subarray(0, 2 * n), this.rawAt);
    const bad = this.widen(dtype, n);
    dst.set(this.values(n));
    return bad;
  }

  /**
   * The staged raw bytes, n F16 or BF16 values, as `type` into the staged output (rows of whole
   * blocks), what widen() then quantize() give, without the f32 values going to memory.
   */
  quantizeHalves(dtype: "F16" | "BF16", type: GGMLType, n: number): void {
    const dt = dtype === "F16" ? GGMLType.F16 : GGMLType.BF16;
    if (this.k.quantize_halves(dt, type, this.rawAt, n, this.outAt, this.scratchAt) !== 0)
      throw new Error(`the quantizing kernels do not write ${GGMLType[type]} from ${dtype}`);
  }

  /** The staged output's bytes [from, from + n). */
  output(n: number, from = 0): Uint8Array {
    return this.u8.subarray(this.outAt + from, this.outAt + from + n);
  }

  /** The first n staged values as `type` into out (rows of whole blocks: out.length bytes). */
  quantize(type: GGMLType, n: number, out: Uint8Array): void {
    if (this.k.quantize_rows(type, this.valuesAt, n, this.outAt, this.scratchAt) !== 0)
      throw new Error(`the quantizing kernels do not write ${GGMLType[type]}`);
    out.set(this.output(out.length));
  }

  /**
   * The row stride (in floats) putBand gives a band of `cols` f32 columns: an odd number of 64-byte
   * cache lines, so that the rows of a column strip fall in every cache set (transpose_f32.ts).
   */
  static bandStride(cols: number): number {
    const lines = Math.ceil(cols / 16);
    return 16 * (lines % 2 ? lines : lines + 1);
  }

  /** A rows x cols f32 matrix (row-major bytes) into the staged raw bytes, its rows bandStride(cols) floats apart. */
  putBand(band: Uint8Array, rows: number, cols: number): void {
    const stride = 4 * QuantKernels.bandStride(cols);
    for (let r = 0; r < rows; r++)
      this.u8.set(band.subarray(r * cols * 4, (r + 1) * cols * 4), this.rawAt + r * stride);
  }

  /** Columns [c0, c0 + count) of the band putBand staged (`rows` rows of `cols`), as `count` rows of `rows` staged values. */
  columns(rows: number, cols: number, c0: number, count: number): void {
    this.k.transpose_columns(this.rawAt, rows, QuantKernels.bandStride(cols), c0, count, this.valuesAt);
  }

  /** Clears the largest error and |value| that measure() max-es into. */
  resetMaxima(): void {
    this.f64[this.maximaAt / 8] = this.f64[this.maximaAt / 8 + 1] = 0;
  }
  get maxAbs(): number {
    return this.f64[this.maximaAt / 8];
  }
  get maxValue(): number {
    return this.f64[this.maximaAt / 8 + 1];
  }

  /**
   * `rows` staged rows of n values into `type`, into the staged output from row `at` on, each
   * row's sum of squared errors into the staged sums (from `at` on), the largest error and
   * |value| max-ed into maxAbs and maxValue. Returns -1, or the first row (counted from the
   * first staged one) whose stored values do not all decode to finite numbers: rows after it
   * are not done, and the caller's reference says which value it was.
   */
  measure(type: GGMLType, rows: number, n: number, at = 0): number {
    const rb = traitsBytes(typeTraits(type)!, n);
    return this.k.quantize_measure(
      type,
      this.valuesAt,
      rows,
      n,
      this.outAt + at * rb,
      this.gotAt,
      this.errorsAt + 8 * at,
      this.maximaAt,
      this.scratchAt,
    );
  }

  /** The staged output's first out.length bytes into out. */
  takeOut(out: Uint8Array): void {
    out.set(this.output(out.length));
  }

  /** The staged sums of squared errors of the first `rows` rows, into errors (f64 per row). */
  takeErrors(errors: Uint8Array, rows: number): void {
    errors.set(this.u8.subarray(this.errorsAt, this.errorsAt + 8 * rows));
  }
}

let mine: QuantKernels | undefined;

/** This thread's instance (each worker has its own: module state is per thread). */
export function threadQuantKernels(): QuantKernels {
  return (mine ??= new QuantKernels());
}
