/**
 * How a converter keeps work in flight without holding a model: chunks are handed in order to a
 * runner (this thread, or a pool of workers: offline/convert/convert-pool.ts), which reads and
 * converts them, and their results consumed (written) in the order they were handed over, with
 * at most `depth` chunks between. Reading and converting (the workers) and writing (the file
 * system's threads) overlap, memory stays at `depth` chunks, and the bytes written do not depend
 * on which thread converted what.
 *
 * The chunks' buffers are recycled: once a chunk is consumed its buffers go back to a free list
 * for the next chunks of that size class, so a multi-GB conversion allocates a few dozen buffers,
 * not one per chunk (with workers, memory they share: a job posted to one carries only numbers).
 */
import { ChunkScratch, encodeChunk, type EncodeJob } from "./chunk-encoding.js";

/** Who converts chunks: the calling thread, or workers. */
export interface ChunkRunner {
  /** chunks worth keeping in flight (0: each is consumed as soon as it is read) */
  readonly depth: number;
  /** memory for the chunks' buffers (workers share it: nothing moves between threads but the jobs' numbers) */
  allocate(bytes: number): ArrayBufferLike;
  /** job with its dst filled */
  encode(job: EncodeJob): Promise<EncodeJob>;
  /**
   * Resolves once no job is running (a failed conversion waits for this before it closes the
   * files its jobs read); absent where jobs run as they are handed over.
   */
  idle?(): Promise<void>;
}

/** The calling thread converts each chunk when it is handed over: the plain single-threaded converter. */
export function inlineRunner(): ChunkRunner {
  const scratch = new ChunkScratch();
  return {
    depth: 0,
    allocate: (bytes) => new ArrayBuffer(bytes),
    encode: (job) => settle(() => (encodeChunk(job, scratch), job)),
  };
}

/** `f`'s result, or its exception, as a promise. */
export function settle<T>(f: () => T): Promise<T> {
  try {
    return Promise.resolve(f());
  } catch (e) {
    return Promise.reject(e);
  }
}

/**
 * The size of the buffers that hold `bytes`: a multiple of an eighth of the power of two at or
 * below it (at most an eighth more than asked; a q4_0 chunk of 1M values, 576 KiB, fits one exactly).
 */
export function sizeClass(bytes: number): number {
  const step = 2 ** Math.floor(Math.log2(Math.max(bytes, 4096))) / 8;
  return Math.ceil(bytes / step) * step;
}

/** Free buffers kept per size class: enough for every chunk in flight to have its own. */
const KEEP_PER_CLASS = 16;

export class ChunkPipeline {
  /**
   * results kept waiting before the oldest is consumed: the runner's depth, raised by a converter
   * while its thread does other work and the runner goes on with what was submitted
   */
  depth: number;
  private queue: { result: Promise<unknown>; consume: (r: unknown) => unknown }[] = [];
  private free = new Map<number, ArrayBufferLike[]>();
  private filling: { n: number; resolve: () => void } | undefined;

  constructor(private runner: Pick<ChunkRunner, "depth" | "allocate">) {
    this.depth = runner.depth;
  }

  /** Resolves once `n` results wait to be consumed (at once if they do). */
  holding(n: number): Promise<void> {
    if (this.queue.length >= n) return Promise.resolve();
    return new Promise((resolve) => (this.filling = { n, resolve }));
  }

  /** A buffer of `bytes`, recycled once released (in its size class, sizeClass()). */
  buffer(bytes: number): Uint8Array {
    const size = sizeClass(bytes);
    const ab = this.free.get(size)?.pop() ?? this.runner.allocate(size);
    return new Uint8Array(ab, 0, bytes);
  }

  /** Buffers from buffer() whose contents are no longer needed (a job's src and dst may be one). */
  release(...views: Uint8Array[]): void {
    for (const v of views) {
      const list = this.free.get(v.buffer.byteLength) ?? [];
      if (list.length < KEEP_PER_CLASS && !list.includes(v.buffer)) list.push(v.buffer);
      this.free.set(v.buffer.byteLength, list);
    }
  }

  /**
   * Hands `result` to `consume` once it and everything submitted before it are in, in the order
   * of submission; returns when at most `depth` results wait (or, over a lowered depth, two
   * fewer than did). A failed result throws here (or
   * from drain()) when its turn comes; until then it is held, never reported as unhandled.
   */
  async submit<T>(result: Promise<T>, consume: (r: T) => unknown): Promise<void> {
    result.catch(() => undefined);
    this.queue.push({ result, consume: consume as (r: unknown) => unknown });
    if (this.filling && this.queue.length >= this.filling.n) {
      this.filling.resolve();
      this.filling = undefined;
    }
    // two results at most for each submitted: a queue left over a lowered depth (a GGUF's early
    // chunks) shrinks while new chunks keep the runner busy, instead of the runner waiting for it
    for (let k = 0; k < 2 && this.queue.length > this.depth; k++) await this.next();
  }

  /** Consumes every result still waiting. */
  async drain(): Promise<void> {
    while (this.queue.length > 0) await this.next();
  }

  private async next(): Promise<void> {
    const { result, consume } = this.queue.shift()!;
    await consume(await result);
  }
}
