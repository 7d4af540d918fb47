/**
 * A pool of worker threads that run kernels over one shared WebAssembly.Memory.
 *
 * A job is "call kernel F with these i32 arguments, splitting the range [0, total) among the
 * threads": each thread appends its sub-range (r0, r1) to the arguments. The calling thread
 * takes a share itself, so `threads: 1` means no workers at all. Jobs are handed out through an
 * Int32Array control block with Atomics; workers spin briefly before sleeping, because a decode
 * step issues hundreds of small jobs and a wake-up from Atomics.wait costs microseconds.
 * Dispatch allocates nothing.
 */
import { Worker } from "node:worker_threads";
import { instantiateKernels, kernelModule, type KernelExports } from "./wasm.js";

/** Control block layout (Int32 slots). */
export const CTRL = {
  GEN: 0, // job generation: bumped for each job; workers wait for it to change
  PENDING: 1, // workers that have not finished the current job
  FN: 2, // index of the kernel in the name table, or -1 to exit
  NARGS: 3, // fixed arguments before the range
  TOTAL: 4, // range length
  ALIGN: 5, // sub-ranges start at multiples of this
  NTHREADS: 6,
  ERROR: 7, // set by a worker whose kernel threw
  ARGS: 8, // up to MAX_ARGS arguments
  SIZE: 32,
} as const;
export const MAX_ARGS = 16;

/** Thread `index` of `n` gets [r0, r1) of [0, total), starts aligned to `align`. */
export function splitRange(total: number, align: number, n: number, index: number, out: Int32Array): void {
  const units = Math.ceil(total / align);
  const per = Math.floor(units / n);
  const extra = units % n;
  const u0 = index * per + Math.min(index, extra);
  const u1 = u0 + per + (index < extra ? 1 : 0);
  out[0] = Math.min(total, u0 * align);
  out[1] = Math.min(total, u1 * align);
}

export class ThreadPool {
  readonly threads: number;
  readonly kernels: KernelExports;
  private readonly ctrl: Int32Array;
  private readonly names: string[];
  private readonly index = new Map<string, number>();
  private readonly fns: ((...a: number[]) => number)[];
  private readonly workers: Worker[] = [];
  private readonly args = new Int32Array(MAX_ARGS + 2);
  private readonly range = new Int32Array(2);
  private disposed = false;

  private constructor(readonly memory: WebAssembly.Memory, threads: number) {
    this.threads = threads;
    const module = kernelModule();
    this.kernels = instantiateKernels(memory, module);
    this.names = WebAssembly.Module.exports(module).filter((e) => e.kind === "function").map((e) => e.name);
    this.names.forEach((n, i) => this.index.set(n, i));
    this.fns = this.names.map((n) => this.kernels[n]);
    this.ctrl = new Int32Array(new SharedArrayBuffer(CTRL.SIZE * 4));
  }

  /** Start a pool of `threads` threads (including the caller) over `memory`. */
  static async create(memory: WebAssembly.Memory, threads: number): Promise<ThreadPool> {
    const pool = new ThreadPool(memory, Math.max(1, Math.floor(threads)));
    await pool.startWorkers();
    return pool;
  }

  private async startWorkers(): Promise<void> {
    const module = kernelModule();
    const ready: Promise<void>[] = [];
    for (let i = 1; i < this.threads; i++) {
      const w = new Worker(new URL("./pool-worker.js", import.meta.url), {
        workerData: { module, memory: this.memory, ctrl: this.ctrl.buffer, names: this.names, index: i },
      });
      w.unref();
      ready.push(
        new Promise((resolve, reject) => {
          w.once("message", () => resolve());
          w.once("error", reject);
        }),
      );
      this.workers.push(w);
    }
    await Promise.all(ready);
  }

  /** Index of a kernel export, for `run`. Throws for an unknown name. */
  fn(name: string): number {
    const i = this.index.get(name);
    if (i === undefined) throw new Error(`kernel "${name}" is not in build/kernels.wasm (rebuild with "npm run build")`);
    return i;
  }

  /**
   * Run kernel `fn` (an index from `fn(name)`) with `nargs` arguments taken from `args`
   * (plus r0, r1) over [0, total), split among all threads. Returns when every share is done.
   */
  run(fn: number, args: ArrayLike<number>, nargs: number, total: number, align = 1): void {
    if (total <= 0) return;
    const a = this.args;
    for (let i = 0; i < nargs; i++) a[i] = args[i];
    const n = this.threads;
    if (n === 1 || total <= align) {
      a[nargs] = 0;
      a[nargs + 1] = total;
      this.call(fn, nargs + 2);
      return;
    }
    const c = this.ctrl;
    c[CTRL.FN] = fn;
    c[CTRL.NARGS] = nargs;
    c[CTRL.TOTAL] = total;
    c[CTRL.ALIGN] = align;
    c[CTRL.NTHREADS] = n;
    for (let i = 0; i < nargs; i++) c[CTRL.ARGS + i] = a[i];
    Atomics.store(c, CTRL.PENDING, n - 1);
    Atomics.add(c, CTRL.GEN, 1);
    Atomics.notify(c, CTRL.GEN);
    splitRange(total, align, n, 0, this.range);
    a[nargs] = this.range[0];
    a[nargs + 1] = this.range[1];
    if (a[nargs] < a[nargs + 1]) this.call(fn, nargs + 2);
    // Wait for the workers: spin first (they usually finish within microseconds of us).
    let spins = 0;
    for (;;) {
      const p = Atomics.load(c, CTRL.PENDING);
      if (p === 0) break;
      if (++spins > 20000) Atomics.wait(c, CTRL.PENDING, p, 1);
    }
    if (c[CTRL.ERROR] !== 0) {
      c[CTRL.ERROR] = 0;
      throw new Error(`kernel ${this.names[fn]} failed in a worker thread`);
    }
  }

  private call(fn: number, count: number): void {
    const a = this.args;
    const f = this.fns[fn];
    // A fixed-arity call: wasm ignores the extra arguments, and nothing is allocated.
    if (count <= 8) f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
    else f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17]);
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    if (this.workers.length) {
      this.ctrl[CTRL.FN] = -1;
      Atomics.add(this.ctrl, CTRL.GEN, 1);
      Atomics.notify(this.ctrl, CTRL.GEN);
      // The workers are unref'd (an idle pool must not keep a program alive); ref them while
      // waiting, or the event loop could drain before their exit events arrive.
      await Promise.all(
        this.workers.map((w) => {
          w.ref();
          return new Promise((r) => w.once("exit", r));
        }),
      );
    }
  }
}
