/**
 * The flash reader's fallback backend: each read is an fs.read on libuv's thread pool, used where
 * native AIO is not (no addon, reads that are not direct, or backend "threads"). It costs ~30 us
 * of CPU per read against ~4 us through native AIO on this machine (docs/store-format.md,
 * "Reading"), and one pool thread per read in flight.
 *
 * The pool has UV_THREADPOOL_SIZE threads (default 4), fixed when the pool first starts. In an ES
 * module program that is *before any user code runs* (Node's ESM loader reads the entry with async
 * fs), so setting process.env.UV_THREADPOOL_SIZE inside the program is too late: it must be in the
 * environment when node starts, or be set by a CommonJS entry point before it imports the ESM code
 * (see docs/store-format.md, "Reading"). The reader warns once when its queue depth exceeds the
 * pool size it can see.
 */
import { read } from "node:fs";
import type { ReadBackend, ReadHost, ReadOp } from "./read-backend.js";

/**
 * The default number of reads in flight through libuv: as many as its thread pool really runs at once (each
 * fs.read occupies one pool thread), which bin/powerinfer.cjs sizes to 64 before node starts; at
 * 8 KiB, 64 in flight read ~1.4x faster than 16 on this machine's disk (docs/benchmarks.md).
 */
export function defaultQueueDepth(): number {
  return visibleThreadPoolSize();
}

/** The thread-pool size libuv would take from the environment (it may have started already). */
export function visibleThreadPoolSize(): number {
  const v = Number(process.env.UV_THREADPOOL_SIZE);
  return Number.isInteger(v) && v > 0 ? Math.min(v, 1024) : 4;
}

export class ThreadPoolBackend implements ReadBackend {
  readonly kind = "threads";
  readonly checksChecksums = false;
  /** libuv reports each read on its own turn of the event loop: never a batch */
  readonly reporting = false;

  constructor(
    private readonly host: ReadHost,
    private readonly fd: number,
  ) {}

  start(op: ReadOp): void {
    read(this.fd, this.host.view(), op.dst + op.done, op.length - op.done, op.fileOffset + op.done, op.cb);
  }

  flush(): void {}

  service(): void {}

  close(): void {}
}
