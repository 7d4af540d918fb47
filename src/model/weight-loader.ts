/**
 * Moves a model's tensors from the GGUF file into wasm memory: matrices packed for their
 * kernels, vectors (norms, biases) as f32. Reads in bounded chunks, so loading never holds a
 * whole tensor in JS memory.
 */
import { GGMLType, typeName, typeTraits } from "../format/ggml-types.js";
import { GGUFError, type ModelFile, type GGUFTensorInfo } from "../format/gguf.js";
import { dequantizeRow, quantizeRow, rowBytes } from "../format/quant.js";
import type { Arena } from "../runtime/arena.js";
import type { ThreadPool } from "../runtime/pool.js";
import { hasWeightKernel, weightKernel, type WeightKernel } from "../runtime/weight-kernels.js";

/** A weight matrix in wasm memory: `rows` outputs, each a dot product over `cols` inputs. */
export interface Matrix {
  readonly name: string;
  readonly ptr: number;
  readonly rows: number;
  readonly cols: number;
  readonly kernel: WeightKernel;
  /** pool indices of its kernels */
  readonly matvecFn: number;
  readonly matmulFn: number;
}

/** load-time read buffer: small, because under a memory budget a transient buffer counts too */
const CHUNK_BYTES = 2 << 20;

/**
 * The types requantMatrix converts to, each with the least weight magnitude it cannot hold:
 * F16's rounds to infinity (past 65504), and so would Q8_0's block scale (max|w| / 127, an f16).
 */
const REQUANT_LIMITS: ReadonlyMap<GGMLType, number> = new Map([
  [GGMLType.F16, 65520],
  [GGMLType.Q8_0, 65520 * 127],
]);

function checkDims(file: ModelFile, t: GGUFTensorInfo, expected: number[]): void {
  const same = t.dims.length === expected.length && t.dims.every((d, i) => d === expected[i]);
  if (!same)
    throw new GGUFError(
      file.path,
      `tensor "${t.name}" has shape [${t.dims.join(", ")}], expected [${expected.join(", ")}]`,
    );
}

function checkRowOrder(name: string, rows: number, rowOrder?: Int32Array): void {
  if (rowOrder && rowOrder.length !== rows)
    throw new RangeError(`${name}: a row order of ${rowOrder.length} entries for ${rows} rows`);
}

/**
 * Rows [from', m.rows) of m as a matrix of their own, from' being `from` rounded down to a
 * multiple of m's rowAlign: its kernels then compute only those rows, into out + 4 from' for out
 * a row of m's outputs. Null where the layout cannot keep them together, or from' is 0.
 */
export function rowTail(m: Matrix, from: number): { matrix: Matrix; from: number } | null {
  const k = m.kernel;
  const f = from - (from % k.rowAlign);
  const at = f > 0 && f < m.rows ? k.tailOffset(m.rows, m.cols, f) : -1;
  return at < 0 ? null : { matrix: { ...m, name: `${m.name}[${f}:]`, ptr: m.ptr + at, rows: m.rows - f }, from: f };
}

/** What the loaders of one model share, whichever memory each loads into. */
interface LoadState {
  /** bytes of weights placed in wasm memory so far */
  loadedBytes: number;
  /**
   * Read buffers, reused from tensor to tensor: a fresh 2 MiB buffer per tensor left tens of MiB
   * of garbage that the process kept resident after loading (measured 26 MiB on a 1B model),
   * memory a budget does not count.
   */
  readonly buffers: Uint8Array[];
  readonly usedNames: Set<string>;
}

export class WeightLoader {
  private readonly state: LoadState;

  constructor(
    readonly file: ModelFile,
    readonly arena: Arena,
    readonly pool: ThreadPool,
    private readonly onProgress?: (bytes: number) => void,
    /** the pool's memory `arena` is (its kernels are the ones a matrix names) */
    readonly shard = 0,
    state?: LoadState,
  ) {
    this.state = state ?? { loadedBytes: 0, buffers: [], usedNames: new Set() };
  }

  /** A loader into another shard's memory, sharing this one's progress, read buffers and record of tensors read. */
  onShard(arena: Arena, shard: number): WeightLoader {
    return new WeightLoader(this.file, arena, this.pool, this.onProgress, shard, this.state);
  }

  /** bytes of weights placed in wasm memory so far (by every loader of the model) */
  get loadedBytes(): number {
    return this.state.loadedBytes;
  }

  /**
   * Every tensor the model reads, through this loader or (`use`) beside it: what the file holds
   * beyond them would be ignored, and the model is refused for it (unused-tensors-check.ts).
   */
  get used(): ReadonlySet<string> {
    return this.state.usedNames;
  }

  /** Records a tensor the model reads without this loader (the RoPE factors, the embeddings of a store). */
  use(name: string): void {
    this.state.usedNames.add(name);
  }

  private tensor(name: string): GGUFTensorInfo {
    const t = this.file.tensor(name);
    this.state.usedNames.add(name);
    return t;
  }

  /**
   * The largest magnitude of each column of matrix `name` (GGUF shape [cols, rows]), read in
   * chunks through the reusable buffer (the tensor decoded whole would be garbage the budget does
   * not count).
   */
  columnMaxima(name: string, cols: number, rows: number): Float64Array {
    const t = this.tensor(name);
    checkDims(this.file, t, [cols, rows]);
    const rb = t.bytes / rows;
    const rowsPerChunk = Math.max(1, Math.floor(CHUNK_BYTES / rb));
    const buf = this.scratch(0, Math.min(rows, rowsPerChunk) * rb);
    const row = new Float32Array(cols);
    const max = new Float64Array(cols);
    for (let r = 0; r < rows; r += rowsPerChunk) {
      const n = Math.min(rowsPerChunk, rows - r);
      this.readRows(t, buf, 0, rb, r, n);
      for (let i = 0; i < n; i++) {
        dequantizeRow(t.type, buf.subarray(i * rb, (i + 1) * rb), cols, row);
        for (let c = 0; c < cols; c++) max[c] = Math.max(max[c], Math.abs(row[c]));
      }
    }
    return max;
  }

  /** Reusable read buffer `which` (0 or 1) of at least `bytes`, as a view of exactly that many. */
  private scratch(which: number, bytes: number): Uint8Array {
    const buffers = this.state.buffers;
    if ((buffers[which]?.length ?? -1) < bytes) buffers[which] = new Uint8Array(bytes);
    return buffers[which].subarray(0, bytes);
  }

  /**
   * Load matrix `name` whose GGUF shape is [cols, rows]; with `rowOrder`, row r in memory is the
   * file's row rowOrder[r] (a permutation of the rows).
   */
  matrix(name: string, cols: number, rows: number, rowOrder?: Int32Array): Matrix {
    const t = this.tensor(name);
    checkDims(this.file, t, [cols, rows]);
    return this.rowsOf(t, name, 0, cols, rows, rowOrder);
  }

  /**
   * Rows [r, r + n) of tensor t (rows of `rb` bytes from byte `start` on) into buf, or with
   * `rowOrder` the file's rows rowOrder[r..r + n) (one read each).
   */
  private readRows(
    t: GGUFTensorInfo,
    buf: Uint8Array,
    start: number,
    rb: number,
    r: number,
    n: number,
    rowOrder?: Int32Array,
  ): void {
    if (!rowOrder) this.file.readTensor(t, buf, start + r * rb, n * rb);
    else for (let i = 0; i < n; i++) this.file.readTensor(t, buf.subarray(i * rb), start + rowOrder[r + i] * rb, rb);
  }

  /**
   * Load expert `expert` of a mixture's 3-D tensor `name` (GGUF shape [cols, rows, experts]: one
   * matrix per expert, one after the other) as a matrix of its own.
   */
  expertMatrix(name: string, expert: number, cols: number, rows: number, experts: number): Matrix {
    const t = this.tensor(name);
    checkDims(this.file, t, [cols, rows, experts]);
    return this.rowsOf(t, `${name}[${expert}]`, (expert * t.bytes) / experts, cols, rows);
  }

  /**
   * Rows [from, from + rows) of the 2-D tensor `name` (GGUF shape [cols, allRows]) as a matrix of
   * their own: one part of a fused matrix (phi3's attn_qkv, its gate and up in one ffn_up).
   */
  matrixRows(name: string, cols: number, allRows: number, from: number, rows: number): Matrix {
    const t = this.tensor(name);
    checkDims(this.file, t, [cols, allRows]);
    if (from < 0 || from + rows > allRows)
      throw new RangeError(`${name}: rows [${from}, ${from + rows}) of ${allRows}`);
    return this.rowsOf(t, `${name}[${from}:${from + rows}]`, (from * t.bytes) / allRows, cols, rows);
  }

  /** `rows` rows of `cols` values of tensor t from byte `start` on (in `rowOrder`, if given), packed for its kernel. */
  private rowsOf(
    t: GGUFTensorInfo,
    name: string,
    start: number,
    cols: number,
    rows: number,
    rowOrder?: Int32Array,
  ): Matrix {
    checkRowOrder(name, rows, rowOrder);
    if (!hasWeightKernel(t.type)) {
      throw new GGUFError(
        this.file.path,
        `tensor "${t.name}" has type ${typeName(t.type)}, which this engine cannot compute with yet`,
      );
    }
    const kernel = weightKernel(t.type);
    const size = kernel.packedBytes(rows, cols);
    const ptr = this.arena.alloc(size, 64);
    const rb = rowBytes(t.type, cols);
    const rowsPerChunk = Math.max(1, Math.floor(CHUNK_BYTES / rb));
    const buf = this.scratch(0, Math.min(rows, rowsPerChunk) * rb);
    const dst = this.arena.u8(ptr, size);
    for (let r = 0; r < rows; r += rowsPerChunk) {
      const n = Math.min(rowsPerChunk, rows - r);
      this.readRows(t, buf, start, rb, r, n, rowOrder);
      kernel.pack(buf.subarray(0, n * rb), dst, r, n, rows, cols);
      this.progress(n * rb);
    }
    return {
      name,
      ptr,
      rows,
      cols,
      kernel,
      matvecFn: this.pool.fn(kernel.matvec, this.shard),
      matmulFn: this.pool.fn(kernel.matmul, this.shard),
    };
  }

  /**
   * Load matrix `name` (GGUF shape [cols, rows], F32, F16 or BF16) converted to type `to` (Q8_0 or
   * F16: REQUANT_LIMITS), packed in the type's own layout or, given a kernel, in that kernel's
   * (layoutKernel), and padded with zeros to `paddedRows` x `paddedCols` (paddedCols a whole
   * number of the type's blocks): rows past `rows` are all zero, and so is every column past
   * `cols`, so a padded row contributes exactly 0 to a product and a padded column reads
   * nothing. The rounding is ggml's reference rounding (Q8_0: per 32-value block, d = max|w| /
   * 127; F16: nearest, ties to even, exact from F16), done here in JS once, chunk by chunk. A
   * weight the type cannot hold is refused, naming it: the memory it takes was laid out from the
   * tensor table before any weight was read, so loading cannot fall back to another type's size.
   * `rowOrder` permutes the rows as in matrix(). `scales` multiplies each weight by its row's
   * factor (by its row in the file) and its column's before the conversion.
   */
  requantMatrix(
    name: string,
    cols: number,
    rows: number,
    paddedCols: number,
    paddedRows: number,
    to: GGMLType | WeightKernel,
    rowOrder?: Int32Array,
    scales: { rows?: ArrayLike<number>; cols?: ArrayLike<number> } = {},
  ): Matrix {
    const type = typeof to === "number" ? to : to.type;
    const t = this.tensor(name);
    checkDims(this.file, t, [cols, rows]);
    checkRowOrder(name, rows, rowOrder);
    if (t.type !== GGMLType.F32 && t.type !== GGMLType.F16 && t.type !== GGMLType.BF16) {
      throw new GGUFError(
        this.file.path,
        `tensor "${name}" has type ${typeName(t.type)}: only F32, F16 and BF16 are converted to ${typeName(type)} at load`,
      );
    }
    const limit = REQUANT_LIMITS.get(type);
    if (limit === undefined)
      throw new RangeError(`${name}: cannot convert to ${typeName(type)} at load (only Q8_0 and F16)`);
    const block = typeTraits(type)!.blockSize;
    if (!(paddedCols >= cols && paddedCols % block === 0 && paddedRows >= rows)) {
      throw new RangeError(
        `${name}: cannot pad ${rows} x ${cols} to ${paddedRows} x ${paddedCols} as ${typeName(type)} (columns must pad to a multiple of ${block})`,
      );
    }
    const kernel = typeof to === "number" ? weightKernel(to) : to;
    const size = kernel.packedBytes(paddedRows, paddedCols);
    const ptr = this.arena.alloc(size, 64);
    const dst = this.arena.u8(ptr, size);
    const rowBytesIn = t.bytes / rows;
    const outRowBytes = rowBytes(type, paddedCols);
    const rowsPerChunk = Math.max(1, Math.floor(CHUNK_BYTES / Math.max(rowBytesIn, outRowBytes)));
    const buf = this.scratch(0, Math.min(rows, rowsPerChunk) * rowBytesIn);
    const out = this.scratch(
      1,
      Math.max(Math.min(rows, rowsPerChunk), Math.min(paddedRows - rows, rowsPerChunk)) * outRowBytes,
    );
    const row = new Float32Array(paddedCols); // columns past `cols` stay 0
    for (let r = 0; r < rows; r += rowsPerChunk) {
      const n = Math.min(rowsPerChunk, rows - r);
      this.readRows(t, buf, 0, rowBytesIn, r, n, rowOrder);
      for (let i = 0; i < n; i++) {
        dequantizeRow(t.type, buf.subarray(i * rowBytesIn, (i + 1) * rowBytesIn), cols, row);
        const fileRow = rowOrder ? rowOrder[r + i] : r + i;
        const rowScale = scales.rows?.[fileRow] ?? 1;
        for (let c = 0; c < cols; c++) {
          const k = rowScale * (scales.cols?.[c] ?? 1);
          const v = (row[c] *= k);
          if (Number.isFinite(v) && Math.abs(v) < limit) continue;
          const at = `row ${fileRow}, column ${c}`;
          const weight = k === 1 ? `${v}` : `${v / k} (${v} as scaled at load)`;
          throw new GGUFError(
            this.file.path,
            Number.isFinite(v)
              ? `tensor "${name}" has weight ${weight} at ${at}, beyond what ${typeName(type)} holds (magnitudes below ${limit}), the type it is converted to at load`
              : `tensor "${name}" has an inf or NaN weight at ${at}: the model file is damaged`,
          );
        }
        quantizeRow(type, row, out.subarray(i * outRowBytes, (i + 1) * outRowBytes));
      }
      kernel.pack(out.subarray(0, n * outRowBytes), dst, r, n, paddedRows, paddedCols);
      this.progress(n * rowBytesIn);
    }
    // The padding rows: all zero (Q8_0: scale 0, quants 0); packing the last row also zeroes the tile padding.
    out.fill(0);
    for (let r = rows; r < paddedRows; r += rowsPerChunk) {
      const n = Math.min(rowsPerChunk, paddedRows - r);
      kernel.pack(out.subarray(0, n * outRowBytes), dst, r, n, paddedRows, paddedCols);
    }
    return {
      name,
      ptr,
      rows: paddedRows,
      cols: paddedCols,
      kernel,
      matvecFn: this.pool.fn(kernel.matvec, this.shard),
      matmulFn: this.pool.fn(kernel.matmul, this.shard),
    };
  }

  /**
   * A matrix stored transposed (PowerInfer's `ffn_down_t`: row i is column i of the real matrix),
   * turned back into a row-major F32 matrix of [cols, rows] so the dense kernels can use it.
   */
  transposedMatrix(name: string, cols: number, rows: number): Matrix {
    const t = this.tensor(name);
    checkDims(this.file, t, [rows, cols]);
    const raw = this.file.tensorData(name);
    const src = new Float32Array(rows * cols);
    const rowBytes = t.bytes / cols;
    for (let c = 0; c < cols; c++)
      dequantizeRow(t.type, raw.subarray(c * rowBytes, (c + 1) * rowBytes), rows, src, c * rows);
    const kernel = weightKernel(GGMLType.F32);
    const ptr = this.arena.alloc(rows * cols * 4, 64);
    const dst = this.arena.f32(ptr, rows * cols);
    for (let r = 0; r < rows; r++) for (let c = 0; c < cols; c++) dst[r * cols + c] = src[c * rows + r];
    this.progress(t.bytes);
    return {
      name,
      ptr,
      rows,
      cols,
      kernel,
      matvecFn: this.pool.fn(kernel.matvec, this.shard),
      matmulFn: this.pool.fn(kernel.matmul, this.shard),
    };
  }

  /** Values [from, from + n) of the 1-D tensor `name` of `all` values, as f32 in wasm memory (a fused bias's part). */
  vectorPart(name: string, all: number, from: number, n: number): number {
    const t = this.tensor(name);
    checkDims(this.file, t, [all]);
    const ptr = this.arena.alloc(n * 4, 64);
    const values = new Float32Array(all);
    dequantizeRow(t.type, this.file.tensorData(name), all, values);
    this.arena.f32(ptr, n).set(values.subarray(from, from + n));
    this.progress((t.bytes * n) / all);
    return ptr;
  }

  /** Row `expert` of the 2-D tensor `name` (GGUF shape [n, experts]: a mixture's per-expert biases) as n f32 in wasm memory. */
  expertVector(name: string, expert: number, n: number, experts: number): number {
    const t = this.tensor(name);
    checkDims(this.file, t, [n, experts]);
    const ptr = this.arena.alloc(n * 4, 64);
    const rb = t.bytes / experts;
    dequantizeRow(
      t.type,
      this.file.tensorData(name).subarray(expert * rb, (expert + 1) * rb),
      n,
      this.arena.f32(ptr, n),
    );
    this.progress(rb);
    return ptr;
  }

  /** A 1-D tensor of n values as f32 in wasm memory. */
  vector(name: string, n: number): number {
    const t = this.tensor(name);
    checkDims(this.file, t, [n]);
    const ptr = this.arena.alloc(n * 4, 64);
    dequantizeRow(t.type, this.file.tensorData(name), n, this.arena.f32(ptr, n));
    this.progress(t.bytes);
    return ptr;
  }

  /** The tensor's entry, its dims checked (for a tensor read later, piece by piece). */
  check(name: string, expected: number[]): GGUFTensorInfo {
    const t = this.tensor(name);
    checkDims(this.file, t, expected);
    return t;
  }

  /** A tensor's raw bytes in JS memory (the embedding table: one row is read per token). */
  raw(name: string, expected: number[]): { info: GGUFTensorInfo; data: Uint8Array } {
    const t = this.check(name, expected);
    const data = this.file.tensorData(name);
    this.progress(t.bytes);
    return { info: t, data };
  }

  private progress(bytes: number): void {
    this.state.loadedBytes += bytes;
    this.onProgress?.(this.state.loadedBytes);
  }
}
