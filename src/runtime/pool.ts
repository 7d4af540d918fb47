/**
 * A pool of worker threads that run kernels over shared WebAssembly memories.
 *
 * Every thread instantiates the kernel module once per memory: a model past 4 GiB (wasm32's
 * limit) keeps its layers in several memories (shards), and a kernel index names a kernel bound
 * to one of them (`fn(name, shard)`: shard * kernels + kernel). One memory is the common case.
 *
 * A job is "call kernel F with these i32 arguments over the range [0, total)": the range is cut
 * into a few chunks per thread and every thread, the caller included, grabs chunks from an
 * atomic counter until none are left, appending each chunk's (r0, r1) to the arguments. So
 * `threads: 1` means no workers at all, and a worker that the OS has not scheduled yet does not
 * hold up the step: the others take its chunks (on a busy 2-core machine a fixed split made
 * every step wait for a time slice). Workers spin briefly before sleeping, because a decode step
 * issues hundreds of small jobs and a wake-up from Atomics.wait costs microseconds; but much more
 * briefly where the model reads from flash (`shareCoresWithReads`).
 * Independent jobs can go as one group (runAll): the threads take chunks of all of them from
 * one counter and wait once. Which thread computes a chunk never changes its result. Dispatch
 * allocates nothing.
 */
import { Worker } from "node:worker_threads";
import { instantiateKernels, kernelBuild, kernelModule, type KernelExports } from "./wasm.js";

/** What a pool worker is started with (pool-worker-loop.ts). */
export interface PoolWorkerData {
  module: WebAssembly.Module;
  /** the shards' memories: the kernel module is instantiated over each, in this order */
  memories: WebAssembly.Memory[];
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

export const MAX_ARGS = 16;
/** jobs one group can hold */
export const MAX_JOBS = 4;
/** A job slot's fields in the control block, relative to the slot. */
export const JOB = {
  FN: 0, // index of the kernel: shard * kernels + its place in the name table
  NARGS: 1, // fixed arguments before the range
  TOTAL: 2, // range length
  ALIGN: 3, // chunks start at multiples of this
  FIRST: 4, // the group's chunk number of this job's first chunk
  NCHUNKS: 5,
  ARGS: 6, // up to MAX_ARGS arguments
  SIZE: 6 + MAX_ARGS,
} as const;
/** Control block layout (Int32 slots): a header, then one slot per job of the current group. */
export const CTRL = {
  GEN: 0, // group generation: bumped for each group; workers wait for it to change
  NEXT: 1, // (generation tag << CHUNK_BITS) | next chunk to hand out, counted over the whole group
  DONE: 2, // chunks finished in the current group
  NCHUNKS: 3, // chunks in the group
  NJOBS: 4, // jobs in the group, or -1 to exit
  ERROR: 5, // set by a worker whose kernel threw
  SPIN: 6, // how long an idle worker spins before it sleeps (loop rounds)
  JOBS: 8, // MAX_JOBS job slots of JOB.SIZE from here
  SIZE: 8 + MAX_JOBS * JOB.SIZE,
} as const;
/**
 * Worker spins before sleeping. Long: the gap between two kernels of a token computing from
 * memory. Short: a worker spinning through the caller's own work between kernels (picking
 * neurons, issuing reads) takes the core that thousands of reads' system calls and interrupts
 * need; on 2 cores a SmallThinker-4B shape from a store decoded 1.3x faster at 2 threads with the
 * short spin, and a 1B model in memory 2.5% slower (docs/benchmarks-log.md).
 */
const LONG_SPIN = 200000;
const SHORT_SPIN = 2000;
const CHUNK_BITS = 12;
const CHUNKS_PER_THREAD = 4;
const TAG_MASK = (1 << (31 - CHUNK_BITS)) - 1;

/**
 * One job of a group given to ThreadPool.runAll: kernel `fn` with the first `nargs` of `args`,
 * over [0, total) in chunks starting at multiples of `align`; `work` estimates its size in
 * matvec multiply-adds' time (see ThreadPool.run).
 */
export interface PoolJob {
  fn: number;
  /** nargs + 2 long at least: a job run on the caller alone gets its range appended here */
  readonly args: Int32Array;
  nargs: number;
  total: number;
  align: number;
  work: number;
}

/** A job with room for MAX_ARGS arguments and the range after them, to fill in and reuse. */
export function newPoolJob(): PoolJob {
  return { fn: 0, args: new Int32Array(MAX_ARGS + 2), nargs: 0, total: 0, align: 1, work: 0 };
}

/** The tag a group's chunk counter carries: its generation's low bits. */
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
 * Grab chunks of the group tagged `tag` and run them until none are left (or the group is no
 * longer the current one). A chunk's job (kernel, arguments, sizes) is read from the control
 * block only after the chunk is claimed: from then until that chunk is reported done the group
 * cannot be replaced, so what is read belongs to it (read before, it could be a newer group's).
 * `a` is scratch for the arguments; the chunk range goes after them. Returns false if a kernel threw.
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
    // -1 (a group being written) matches no tag
    if ((v & ~((1 << CHUNK_BITS) - 1)) !== tag || chunk >= Atomics.load(c, CTRL.NCHUNKS)) return ok;
    if (Atomics.compareExchange(c, CTRL.NEXT, v, v + 1) !== v) continue;
    const nChunks = Atomics.load(c, CTRL.NCHUNKS);
    // the job whose chunks hold this one: jobs hand out their chunks in order
    let j = CTRL.JOBS;
    while (chunk >= Atomics.load(c, j + JOB.FIRST) + Atomics.load(c, j + JOB.NCHUNKS)) j += JOB.SIZE;
    const nargs = Atomics.load(c, j + JOB.NARGS);
    const f = fns[Atomics.load(c, j + JOB.FN)];
    for (let i = 0; i < nargs; i++) a[i] = Atomics.load(c, j + JOB.ARGS + i);
    splitRange(
      Atomics.load(c, j + JOB.TOTAL),
      Atomics.load(c, j + JOB.ALIGN),
      Atomics.load(c, j + JOB.NCHUNKS),
      chunk - Atomics.load(c, j + JOB.FIRST),
      range,
    );
    a[nargs] = range[0];
    a[nargs + 1] = range[1];
    try {
      if (range[0] < range[1]) call(f, a, nargs + 2);
    } catch {
      ok = false;
      // flagged before the chunk counts as done, so the caller sees it when it sees the group finish
      Atomics.store(c, CTRL.ERROR, 1);
    }
    if (Atomics.add(c, CTRL.DONE, 1) + 1 === nChunks) Atomics.notify(c, CTRL.DONE);
  }
}

/** The function exports of the kernel module, in the order kernel indices count them. */
export function kernelNames(module: WebAssembly.Module): string[] {
  return WebAssembly.Module.exports(module)
    .filter((e) => e.kind === "function")
    .map((e) => e.name);
}

/** f(a[0], ..., a[count - 1]) as a fixed-arity call: wasm ignores the extra arguments, and nothing is allocated. */
function call(f: (...a: number[]) => number, a: Int32Array, count: number): void {
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

/** Job j's kernel f over its whole range, on the caller. */
function runAlone(f: (...a: number[]) => number, j: PoolJob): void {
  j.args[j.nargs] = 0;
  j.args[j.nargs + 1] = j.total;
  call(f, j.args, j.nargs + 2);
}

export class ThreadPool {
  readonly threads: number;
  /** the kernels over the first memory (shard 0) */
  readonly kernels: KernelExports;
  /** the first memory (shard 0's) */
  readonly memory: WebAssembly.Memory;
  private readonly shardKernels: KernelExports[];
  private readonly ctrl: Int32Array;
  private readonly names: string[];
  private readonly index = new Map<string, number>();
  private readonly fns: ((...a: number[]) => number)[];
  private readonly workers: PoolWorker[] = [];
  private readonly chunkArgs = new Int32Array(MAX_ARGS + 2);
  private readonly range = new Int32Array(2);
  private readonly groupChunks = new Int32Array(MAX_JOBS);
  /** run()'s job */
  private readonly single = [newPoolJob()];
  private disposed = false;
  /** time spent in each kernel (group), when POWERINFER_KERNEL_TIMES is set: see KernelTimes */
  private readonly times: KernelTimes | null;
  /** jobs smaller than this (in matvec multiply-adds' time) run on the caller alone */
  minParallelWork = 1 << 17;

  private constructor(
    /** the shards' memories */
    readonly memories: readonly WebAssembly.Memory[],
    threads: number,
  ) {
    if (memories.length < 1) throw new RangeError("a thread pool needs at least one memory");
    this.threads = threads;
    this.memory = memories[0];
    const module = kernelModule();
    this.shardKernels = memories.map((m) => instantiateKernels(m, module));
    this.kernels = this.shardKernels[0];
    this.names = kernelNames(module);
    this.names.forEach((n, i) => this.index.set(n, i));
    this.fns = this.shardKernels.flatMap((k) => this.names.map((n) => k[n]));
    this.ctrl = new Int32Array(new SharedArrayBuffer(CTRL.SIZE * 4));
    this.ctrl[CTRL.SPIN] = LONG_SPIN;
    this.times =
      typeof process !== "undefined" && process.env?.POWERINFER_KERNEL_TIMES
        ? new KernelTimes(memories.flatMap((_, s) => this.names.map((n) => (s === 0 ? n : `${n}@${s}`))))
        : null;
  }

  /**
   * Start a pool of `threads` threads (including the caller) over `memory`, or over several
   * memories (shards: kernels for each, `fn(name, shard)`).
   */
  static async create(
    memory: WebAssembly.Memory | readonly WebAssembly.Memory[],
    threads: number,
  ): Promise<ThreadPool> {
    const pool = new ThreadPool(
      memory instanceof WebAssembly.Memory ? [memory] : memory,
      Math.max(1, Math.floor(threads)),
    );
    await pool.startWorkers();
    return pool;
  }

  /** The kernels bound to shard `shard`'s memory, for calls on the caller alone. */
  kernelsOf(shard: number): KernelExports {
    const k = this.shardKernels[shard];
    if (!k) throw new RangeError(`shard ${shard}: the pool has ${this.shardKernels.length} memories`);
    return k;
  }

  private async startWorkers(): Promise<void> {
    const module = kernelModule();
    const ready: Promise<void>[] = [];
    for (let i = 1; i < this.threads; i++) {
      const w = spawnWorker({
        module,
        memories: [...this.memories],
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

  /** Index of a kernel export over shard `shard`'s memory (default the first), for `run`. Throws for an unknown name. */
  fn(name: string, shard = 0): number {
    const i = this.index.get(name);
    if (i === undefined)
      throw new Error(`kernel "${name}" is not in the ${kernelBuild()} kernel build (rebuild with "npm run build")`);
    if (!(shard >= 0 && shard < this.memories.length))
      throw new RangeError(`shard ${shard}: the pool has ${this.memories.length} memories`);
    return shard * this.names.length + i;
  }

  /**
   * Run kernel `fn` (an index from `fn(name)`) with `nargs` arguments taken from `args`
   * (plus r0, r1) over [0, total), split among all threads. Returns when every share is done.
   * `work` estimates the job's size in matvec multiply-adds' time: below `minParallelWork` the
   * caller runs it alone, since waking a worker costs more than a tiny job and, on a busy
   * machine, a descheduled worker stalls the whole step.
   */
  run(fn: number, args: ArrayLike<number>, nargs: number, total: number, align = 1, work = Infinity): void {
    const j = this.single[0];
    j.fn = fn;
    j.nargs = nargs;
    j.total = total;
    j.align = align;
    j.work = work;
    for (let i = 0; i < nargs; i++) j.args[i] = args[i];
    this.runAll(this.single, 1);
  }

  /** Flash reads share the cores with this pool's threads from now on: idle workers spin briefly (SHORT_SPIN). */
  shareCoresWithReads(): void {
    Atomics.store(this.ctrl, CTRL.SPIN, SHORT_SPIN);
  }

  /**
   * Run the first `count` of `jobs` (at most MAX_JOBS, independent of each other) as one group: their chunks are handed out
   * in order from one counter, so the threads wait once for all of them, not once per job
   * (a decode step's q, k and v, or gate and up, are one wait instead of three or two). Each
   * job gets chunks in proportion to its work; put the largest first, so the last chunks
   * claimed are the small ones. Below `minParallelWork` in all, the caller runs them alone.
   */
  runAll(jobs: readonly PoolJob[], count = jobs.length): void {
    if (count > MAX_JOBS) throw new RangeError(`runAll: at most ${MAX_JOBS} jobs, got ${count}`);
    if (this.times === null) this.runGroup(jobs, count);
    else {
      const t0 = performance.now();
      this.runGroup(jobs, count);
      this.times.add(jobs, count, performance.now() - t0);
    }
  }

  private runGroup(jobs: readonly PoolJob[], count: number): void {
    let work = 0;
    for (let i = 0; i < count; i++) work += jobs[i].work;
    if (this.threads === 1 || work < this.minParallelWork) {
      for (let i = 0; i < count; i++) {
        const j = jobs[i];
        if (j.total > 0) runAlone(this.fns[j.fn], j);
      }
      return;
    }
    const budget = this.threads * CHUNKS_PER_THREAD;
    const chunks = this.groupChunks;
    let nChunks = 0;
    for (let i = 0; i < count; i++) {
      const j = jobs[i];
      // (a job of unknown size, work Infinity, gets the whole budget)
      const share = Number.isFinite(work) && work > 0 ? Math.max(1, Math.round((budget * j.work) / work)) : budget;
      chunks[i] = j.total > 0 ? Math.min(Math.ceil(j.total / j.align), share, (1 << CHUNK_BITS) / MAX_JOBS) : 0;
      nChunks += chunks[i];
    }
    if (nChunks <= 1) {
      for (let i = 0; i < count; i++) if (chunks[i] > 0) runAlone(this.fns[jobs[i].fn], jobs[i]);
      return;
    }
    this.closeGroup();
    let first = 0;
    let slot = 0;
    for (let i = 0; i < count; i++) {
      if (chunks[i] === 0) continue;
      const j = jobs[i];
      this.writeJob(slot++, j.fn, j.args, j.nargs, j.total, j.align, first, chunks[i]);
      first += chunks[i];
    }
    this.dispatch(slot, nChunks);
  }

  /**
   * Close the previous group's counter before rewriting the job slots: a descheduled worker
   * that read the old counter could otherwise claim a chunk with the old tag against the new
   * fields and run the new arguments through a stale kernel (seen as rare "kernel failed"
   * errors on a busy machine, and it could also miscount DONE). -1 matches no tag.
   */
  private closeGroup(): void {
    Atomics.store(this.ctrl, CTRL.NEXT, -1);
  }

  private writeJob(
    slot: number,
    fn: number,
    args: ArrayLike<number>,
    nargs: number,
    total: number,
    align: number,
    first: number,
    nChunks: number,
  ): void {
    const c = this.ctrl;
    const j = CTRL.JOBS + slot * JOB.SIZE;
    c[j + JOB.FN] = fn;
    c[j + JOB.NARGS] = nargs;
    c[j + JOB.TOTAL] = total;
    c[j + JOB.ALIGN] = align;
    c[j + JOB.FIRST] = first;
    c[j + JOB.NCHUNKS] = nChunks;
    for (let i = 0; i < nargs; i++) c[j + JOB.ARGS + i] = args[i];
  }

  /** Publish the group written in the first `nJobs` slots (nChunks chunks), take part, wait for the rest. */
  private dispatch(nJobs: number, nChunks: number): void {
    const c = this.ctrl;
    c[CTRL.NJOBS] = nJobs;
    c[CTRL.NCHUNKS] = nChunks;
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
    if (!ok) throw new Error(`kernel ${this.failedNames(nJobs)} failed`);
  }

  /** The kernels of a failed group, for its error: "a" or "a, b or c". */
  private failedNames(nJobs: number): string {
    const names: string[] = [];
    for (let s = 0; s < nJobs; s++) {
      const name = this.names[this.ctrl[CTRL.JOBS + s * JOB.SIZE + JOB.FN] % this.names.length];
      if (!names.includes(name)) names.push(name);
    }
    return names.length === 1 ? names[0] : `${names.slice(0, -1).join(", ")} or ${names[names.length - 1]}`;
  }

  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.times?.report(this.threads);
    if (this.workers.length) {
      this.ctrl[CTRL.NJOBS] = -1;
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

/**
 * Wall time per kernel group (POWERINFER_KERNEL_TIMES=1): each runAll is timed whole on the
 * caller and counted under its kernels' names ("a+b" for a group) with the items of their ranges
 * (rows of a matvec, neurons of a sparse kernel), and the table goes to stderr
 * when the pool is disposed. A profiling aid: it costs two clock reads per call while on, and a
 * null check while off.
 */
class KernelTimes {
  /** by group: its kernels' indices as digits of base names.length + 1 (a number, so a call allocates nothing once seen) */
  private readonly ms = new Map<number, { fns: number[]; ms: number; calls: number; items: number }>();

  constructor(private readonly names: readonly string[]) {}

  add(jobs: readonly PoolJob[], count: number, ms: number): void {
    let key = 0;
    let items = 0;
    for (let i = 0; i < count; i++) {
      key = key * (this.names.length + 1) + jobs[i].fn + 1;
      items += jobs[i].total;
    }
    const e = this.ms.get(key);
    if (e) {
      e.ms += ms;
      e.calls++;
      e.items += items;
    } else this.ms.set(key, { fns: jobs.slice(0, count).map((j) => j.fn), ms, calls: 1, items });
  }

  report(threads: number): void {
    const rows = [...this.ms.values()].sort((a, b) => b.ms - a.ms);
    const total = rows.reduce((s, e) => s + e.ms, 0);
    const lines = [`kernel times (${threads} thread${threads === 1 ? "" : "s"}): ${total.toFixed(1)} ms in all`];
    for (const e of rows)
      lines.push(
        `  ${e.ms.toFixed(1).padStart(10)} ms ${((100 * e.ms) / total).toFixed(1).padStart(5)}% ${String(e.calls).padStart(8)} calls ${String(e.items).padStart(11)} items ${((1000 * e.ms) / Math.max(1, e.items)).toFixed(3).padStart(9)} us/item  ${e.fns.map((f) => this.names[f]).join("+")}`,
      );
    process.stderr.write(lines.join("\n") + "\n");
  }
}
