/**
 * A pool of worker threads that run kernels over one shared WebAssembly.Memory.
 *
 * A job is "call kernel F with these i32 arguments over the range [0, total)": the range is cut
 * into a few chunks per thread and every thread, the caller included, grabs chunks from an
 * atomic counter until none are left, appending each chunk's (r0, r1) to the arguments. So
 * `threads: 1` means no workers at all, and a worker that the OS has not scheduled yet does not
 * hold up the step: the others take its chunks (on a busy 2-core machine a fixed split made
 * every step wait for a time slice). Workers spin briefly before sleeping, because a decode step
 * issues hundreds of small jobs and a wake-up from Atomics.wait costs microseconds.
 * Which thread computes a chunk never changes its result. Dispatch allocates nothing.
 */
import { Worker } from "node:worker_threads";
import { instantiateKernels, kernelBuild, kernelModule, type KernelExports } from "./wasm.js";

/** What a pool worker is started with (pool-worker-loop.ts). */
export interface PoolWorkerData {
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
  ctrl: SharedArrayBuffer;
  names: string[];
  index: number;
}

/** A started pool worker, as the pool uses it: Node's Worker has this shape; the browser build adapts a Web Worker. */
export interface PoolWorker {
  once(event: "message" | "error" | "exit", listener: (value: unknown) => void): unknown;
  ref(): void;
  unref(): void;
}

let spawnWorker: (data: PoolWorkerData) => PoolWorker = (data) =>
  new Worker(new URL("./pool-worker.js", import.meta.url), { workerData: data });

/** How pool workers start (default: Node's worker_threads); the browser build replaces it with Web Workers. */
export function setPoolWorkerSpawner(spawn: (data: PoolWorkerData) => PoolWorker): void {
  spawnWorker = spawn;
}

/** Control block layout (Int32 slots). */
export const CTRL = {
  GEN: 0, // job generation: bumped for each job; workers wait for it to change
  NEXT: 1, // (generation tag << CHUNK_BITS) | next chunk to hand out
  DONE: 2, // chunks finished in the current job
  FN: 3, // index of the kernel in the name table, or -1 to exit
  NARGS: 4, // fixed arguments before the range
  TOTAL: 5, // range length
  ALIGN: 6, // chunks start at multiples of this
  NCHUNKS: 7,
  ERROR: 8, // set by a worker whose kernel threw
  ARGS: 9, // up to MAX_ARGS arguments
  SIZE: 32,
} as const;
export const MAX_ARGS = 16;
const CHUNK_BITS = 12;
const CHUNKS_PER_THREAD = 4;
const TAG_MASK = (1 << (31 - CHUNK_BITS)) - 1;

/** The tag a job's chunk counter carries: its generation's low bits. */
export function chunkTag(gen: number): number {
  return (gen & TAG_MASK) << CHUNK_BITS;
}

/** Chunk `index` of `n` gets [r0, r1) of [0, total), starting at a multiple of `align`. */
export function splitRange(total: number, align: number, n: number, index: number, out: Int32Array): void {
  const units = Math.ceil(total / align);
  const per = Math.floor(units / n);
  const extra = units % n;
  const u0 = index * per + Math.min(index, extra);
  const u1 = u0 + per + (index < extra ? 1 : 0);
  out[0] = Math.min(total, u0 * align);
  out[1] = Math.min(total, u1 * align);
}

/**
 * Grab chunks of the job tagged `tag` and run them until none are left (or the job is no longer
 * the current one). The job's kernel (an index into `fns`), arguments and sizes are read from the
 * control block only after a chunk is claimed: from then until that chunk is reported done the
 * job cannot be replaced, so what is read belongs to it (read before, it could be a newer job's).
 * `a` is scratch for the arguments; the chunk range goes after them. Returns false if the kernel threw.
 */
export function runChunks(
  c: Int32Array,
  tag: number,
  fns: ((...a: number[]) => number)[],
  a: Int32Array,
  range: Int32Array,
): boolean {
  let ok = true;
  for (;;) {
    const v = Atomics.load(c, CTRL.NEXT);
    const chunk = v & ((1 << CHUNK_BITS) - 1);
    // -1 (a job being written) matches no tag
    if ((v & ~((1 << CHUNK_BITS) - 1)) !== tag || chunk >= Atomics.load(c, CTRL.NCHUNKS)) return ok;
    if (Atomics.compareExchange(c, CTRL.NEXT, v, v + 1) !== v) continue;
    const nChunks = Atomics.load(c, CTRL.NCHUNKS);
    const nargs = Atomics.load(c, CTRL.NARGS);
    const f = fns[Atomics.load(c, CTRL.FN)];
    for (let i = 0; i < nargs; i++) a[i] = Atomics.load(c, CTRL.ARGS + i);
    splitRange(Atomics.load(c, CTRL.TOTAL), Atomics.load(c, CTRL.ALIGN), nChunks, chunk, range);
    a[nargs] = range[0];
    a[nargs + 1] = range[1];
    try {
      if (range[0] < range[1]) {
        // A fixed-arity call: wasm ignores the extra arguments, and nothing is allocated.
        if (nargs + 2 <= 8) f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
        else
          f(
            a[0],
            a[1],
            a[2],
            a[3],
            a[4],
            a[5],
            a[6],
            a[7],
            a[8],
            a[9],
            a[10],
            a[11],
            a[12],
            a[13],
            a[14],
            a[15],
            a[16],
            a[17],
          );
      }
    } catch {
      ok = false;
      // flagged before the chunk counts as done, so the caller sees it when it sees the job finish
      Atomics.store(c, CTRL.ERROR, 1);
    }
    if (Atomics.add(c, CTRL.DONE, 1) + 1 === nChunks) Atomics.notify(c, CTRL.DONE);
  }
}

export class ThreadPool {
  readonly threads: number;
  readonly kernels: KernelExports;
  private readonly ctrl: Int32Array;
  private readonly names: string[];
  private readonly index = new Map<string, number>();
  private readonly fns: ((...a: number[]) => number)[];
  private readonly workers: PoolWorker[] = [];
  private readonly args = new Int32Array(MAX_ARGS + 2);
  private readonly chunkArgs = new Int32Array(MAX_ARGS + 2);
  private readonly range = new Int32Array(2);
  private disposed = false;
  /** jobs smaller than this (in the caller's work units, ~multiply-adds) run on the caller alone */
  minParallelWork = 1 << 17;

  private constructor(
    readonly memory: WebAssembly.Memory,
    threads: number,
  ) {
    this.threads = threads;
    const module = kernelModule();
    this.kernels = instantiateKernels(memory, module);
    this.names = WebAssembly.Module.exports(module)
      .filter((e) => e.kind === "function")
      .map((e) => e.name);
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
      const w = spawnWorker({
        module,
        memory: this.memory,
        ctrl: this.ctrl.buffer as SharedArrayBuffer,
        names: this.names,
        index: i,
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
    if (i === undefined)
      throw new Error(`kernel "${name}" is not in the ${kernelBuild()} kernel build (rebuild with "npm run build")`);
    return i;
  }

  /**
   * Run kernel `fn` (an index from `fn(name)`) with `nargs` arguments taken from `args`
   * (plus r0, r1) over [0, total), split among all threads. Returns when every share is done.
   * `work` estimates the job's size (e.g. multiply-adds): below `minParallelWork` the caller
   * runs it alone, since waking a worker costs more than a tiny job and, on a busy machine, a
   * descheduled worker stalls the whole step.
   */
  run(fn: number, args: ArrayLike<number>, nargs: number, total: number, align = 1, work = Infinity): void {
    if (total <= 0) return;
    const a = this.args;
    for (let i = 0; i < nargs; i++) a[i] = args[i];
    const n = this.threads;
    if (n === 1 || total <= align || work < this.minParallelWork) {
      a[nargs] = 0;
      a[nargs + 1] = total;
      this.call(fn, nargs + 2);
      return;
    }
    const c = this.ctrl;
    const nChunks = Math.min(Math.ceil(total / align), n * CHUNKS_PER_THREAD, 1 << CHUNK_BITS);
    // Close the previous job's counter before rewriting the job: a descheduled worker that read
    // the old counter could otherwise claim a chunk with the old tag against the new NCHUNKS and
    // run the new arguments through a stale kernel (seen as rare "kernel failed" errors on a busy
    // machine, and it could also miscount DONE). -1 matches no tag.
    Atomics.store(c, CTRL.NEXT, -1);
    c[CTRL.FN] = fn;
    c[CTRL.NARGS] = nargs;
    c[CTRL.TOTAL] = total;
    c[CTRL.ALIGN] = align;
    c[CTRL.NCHUNKS] = nChunks;
    for (let i = 0; i < nargs; i++) c[CTRL.ARGS + i] = a[i];
    const gen = (c[CTRL.GEN] + 1) | 0;
    const tag = chunkTag(gen);
    Atomics.store(c, CTRL.DONE, 0);
    Atomics.store(c, CTRL.NEXT, tag);
    Atomics.store(c, CTRL.GEN, gen);
    Atomics.notify(c, CTRL.GEN);
    let ok = runChunks(c, tag, this.fns, this.chunkArgs, this.range);
    // Wait for chunks other threads are still computing: spin first (microseconds, usually).
    let spins = 0;
    for (;;) {
      const done = Atomics.load(c, CTRL.DONE);
      if (done >= nChunks) break;
      if (++spins > 20000) Atomics.wait(c, CTRL.DONE, done, 1);
    }
    if (Atomics.load(c, CTRL.ERROR) !== 0) {
      Atomics.store(c, CTRL.ERROR, 0);
      ok = false;
    }
    if (!ok) throw new Error(`kernel ${this.names[fn]} failed`);
  }

  private call(fn: number, count: number): void {
    const a = this.args;
    const f = this.fns[fn];
    if (count <= 8) f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
    else
      f(
        a[0],
        a[1],
        a[2],
        a[3],
        a[4],
        a[5],
        a[6],
        a[7],
        a[8],
        a[9],
        a[10],
        a[11],
        a[12],
        a[13],
        a[14],
        a[15],
        a[16],
        a[17],
      );
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    if (this.workers.length) {
      this.ctrl[CTRL.FN] = -1;
      Atomics.store(this.ctrl, CTRL.NEXT, 0);
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
