/**
 * Runs packed weight matrices over f32 rows in wasm memory: the input is quantized once per
 * activation format the matrices want (Q8_0, Q8_1, Q8_K blocks, as llama.cpp does), and every
 * matrix of that format reads the same quantized rows. Decode (one row) runs the matvec kernel,
 * a batch the matmul kernel. Allocates nothing per call.
 */
import { MAX_JOBS, newPoolJob, type PoolJob, type ThreadPool } from "../runtime/pool.js";
import type { KernelExports } from "../runtime/wasm.js";
import { prepareKernel, type ActivationFormat } from "../runtime/weight-kernels.js";
import type { Matrix } from "./weight-loader.js";

export class MatrixRunner {
  private readonly jobs: PoolJob[] = Array.from({ length: MAX_JOBS }, newPoolJob);
  private readonly prepared = new Set<ActivationFormat>();
  private input = 0;
  private inputCols = 0;
  /** the kernels over the memory the matrices and buffers are in, for the caller-only quantizing */
  private readonly kernels: KernelExports;

  /**
   * `quantized`: a buffer per activation format, each large enough for a batch of the widest
   * input; `shard`: which of the pool's memories the matrices and buffers are in
   */
  constructor(
    private readonly pool: ThreadPool,
    private readonly quantized: Readonly<Record<ActivationFormat, number>>,
    shard = 0,
  ) {
    this.kernels = pool.kernelsOf(shard);
  }

  /** The f32 rows (cols wide) that the next run() calls read. */
  setInput(ptr: number, cols: number): void {
    this.input = ptr;
    this.inputCols = cols;
    this.prepared.clear();
  }

  /** out (n rows of m.rows f32) = m . input rows. */
  run(m: Matrix, out: number, n: number): void {
    this.describe(this.jobs[0], m, out, n);
    this.pool.runAll(this.jobs, 1);
  }

  /**
   * outs[i] (n rows of ms[i].rows f32) = ms[i] . input rows for each i, as one group of the
   * pool's (one wait for all of them). At most MAX_JOBS matrices; largest first.
   */
  runAll(ms: readonly Matrix[], outs: readonly number[], n: number): void {
    if (ms.length > MAX_JOBS) throw new RangeError(`runAll: at most ${MAX_JOBS} matrices, got ${ms.length}`);
    for (let i = 0; i < ms.length; i++) this.describe(this.jobs[i], ms[i], outs[i], n);
    this.pool.runAll(this.jobs, ms.length);
  }

  /** Fill `job` with m's kernel over the input rows (quantized first if m's format wants it). */
  private describe(job: PoolJob, m: Matrix, out: number, n: number): void {
    const fmt = m.kernel.act;
    let x = this.input;
    if (fmt !== "f32") {
      x = this.quantized[fmt];
      if (x === undefined) throw new Error(`no ${fmt} activation buffer for a ${m.rows} x ${m.cols} matrix`);
      if (!this.prepared.has(fmt)) {
        this.kernels[prepareKernel(fmt)!](this.input, x, this.inputCols, n);
        this.prepared.add(fmt);
      }
    }
    const a = job.args;
    a[0] = m.ptr;
    a[1] = x;
    a[2] = out;
    a[3] = m.rows;
    a[4] = m.cols;
    a[5] = n;
    job.fn = n === 1 ? m.matvecFn : m.matmulFn;
    job.nargs = n === 1 ? 5 : 6;
    job.total = m.rows;
    job.align = 16;
    job.work = m.rows * m.cols * n;
  }
}
