/**
 * Runs packed weight matrices over f32 rows in wasm memory: the input is quantized once per
 * activation format the matrices want (Q8_0, Q8_1, Q8_K blocks, as llama.cpp does), and every
 * matrix of that format reads the same quantized rows. Decode (one row) runs the matvec kernel,
 * a batch the matmul kernel. Allocates nothing per call.
 */
import type { ThreadPool } from "../runtime/pool.js";
import { prepareKernel, type ActivationFormat } from "../runtime/weight-kernels.js";
import type { Matrix } from "./weight-loader.js";

export class MatrixRunner {
  private readonly args = new Int32Array(8);
  private readonly prepared = new Set<ActivationFormat>();
  private input = 0;
  private inputCols = 0;

  /** `quantized`: a buffer per activation format, each large enough for a batch of the widest input */
  constructor(
    private readonly pool: ThreadPool,
    private readonly quantized: Readonly<Record<ActivationFormat, number>>,
  ) {}

  /** The f32 rows (cols wide) that the next run() calls read. */
  setInput(ptr: number, cols: number): void {
    this.input = ptr;
    this.inputCols = cols;
    this.prepared.clear();
  }

  /** out (n rows of m.rows f32) = m . input rows. */
  run(m: Matrix, out: number, n: number): void {
    const fmt = m.kernel.act;
    let x = this.input;
    if (fmt !== "f32") {
      x = this.quantized[fmt];
      if (!this.prepared.has(fmt)) {
        this.pool.kernels[prepareKernel(fmt)!](this.input, x, this.inputCols, n);
        this.prepared.add(fmt);
      }
    }
    const a = this.args;
    a[0] = m.ptr;
    a[1] = x;
    a[2] = out;
    a[3] = m.rows;
    a[4] = m.cols;
    const work = m.rows * m.cols * n;
    if (n === 1) this.pool.run(m.matvecFn, a, 5, m.rows, 16, work);
    else {
      a[5] = n;
      this.pool.run(m.matmulFn, a, 6, m.rows, 16, work);
    }
  }
}
