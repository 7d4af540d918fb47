/**
 * Flash reader: positional reads of a file straight into a WebAssembly memory, with O_DIRECT so
 * the kernel's page cache never holds model weights behind the memory budget's back.
 *
 * - Every request is 4 KiB aligned (file offset, length and destination), which is what O_DIRECT
 *   needs; a WebAssembly.Memory's base is page aligned, so an aligned offset into it is an
 *   aligned address. (A plain ArrayBuffer/SharedArrayBuffer is not page aligned in V8, so with
 *   one of those the reader falls back to buffered reads and says so.)
 * - Requests that are adjacent both in the file and in memory, and consecutive in the order they
 *   were submitted, are coalesced into one read of at most `maxReadBytes`; a larger request is
 *   split into reads of that size. Small random reads are IOPS-bound (docs/design: ~25K IOPS
 *   through libuv here), so coalescing is what turns neuron reads into bandwidth.
 * - Up to `queueDepth` reads are in flight at once. Direct reads go through Linux native AIO
 *   where the addon is built (src/io/aio.ts): a batch is one io_submit, finished reads are
 *   collected with io_getevents (both on the addon's I/O thread, or inline), and reported when
 *   the event loop would otherwise idle or the engine calls service(): ~4 us of CPU per read
 *   against ~30 us through libuv's thread pool on this machine (docs/store-format.md, "Reading").
 *   Otherwise each read is an fs.read on libuv's thread pool. The pool has UV_THREADPOOL_SIZE
 *   threads (default 4), fixed when the pool first starts. In an ES module program that is
 *   *before any user code runs* (Node's ESM loader reads the entry with async fs), so setting
 *   process.env.UV_THREADPOOL_SIZE inside the program is too late: it must be in the environment
 *   when node starts, or be set by a CommonJS entry point before it imports the ESM code (see
 *   docs/store-format.md, "Reading"). The reader warns once when queueDepth exceeds the pool
 *   size it can see.
 * - Each request is reported through `onComplete` as soon as its bytes have landed (and passed
 *   the optional `verify` hook), so compute can start on a cluster while others are in flight.
 * - An I/O error, a short read at end of file or a failed verification rejects the batch with a
 *   FlashReadError naming the file, offset and length. Requests not yet reported complete are
 *   never reported, and the batch settles only after its reads still in flight have returned, so
 *   no read lands in memory the caller has already reused.
 */
import { closeSync, constants, fstatSync, openSync, read, readSync } from "node:fs";
import { constants as osConstants } from "node:os";
import type { Tracer } from "../runtime/tracer.js";
import { aio, type AioBinding, type AioRing } from "./aio.js";
import { busiestCpu, interruptCounts } from "./irq-cpu.js";

export const FLASH_ALIGN = 4096;
const EBADMSG = osConstants.errno.EBADMSG ?? 74;

export class FlashReadError extends Error {
  /** errno code of the failed read (EIO, ...), when there was one */
  readonly code?: string;
  constructor(
    readonly file: string,
    readonly fileOffset: number,
    readonly length: number,
    what: string,
    override readonly cause?: unknown,
  ) {
    super(`${file}: ${what} (read of ${length} bytes at byte offset ${fileOffset})`);
    this.name = "FlashReadError";
    const code = (cause as { code?: unknown } | undefined)?.code;
    if (typeof code === "string") this.code = code;
  }
}

export interface FlashReadRequest {
  /** byte offset in the file, a multiple of 4096 */
  readonly fileOffset: number;
  /** bytes to read, a positive multiple of 4096 */
  readonly length: number;
  /** byte offset in the reader's memory where the bytes go, a multiple of 4096 */
  readonly dst: number;
  /** anything the caller wants to recognize the request by in onComplete */
  readonly tag?: unknown;
}

export type FlashMemory = WebAssembly.Memory | SharedArrayBuffer | ArrayBuffer;

/** A physical read about to be issued, as the fault hook sees it. */
export interface FlashReadInfo {
  readonly fileOffset: number;
  readonly length: number;
  /** 0, 1, 2, ...: the reads this reader has issued */
  readonly index: number;
}

export interface FlashReaderOptions {
  /** where reads land: a WebAssembly.Memory (needed for O_DIRECT), or an (Shared)ArrayBuffer */
  memory: FlashMemory;
  /** reads in flight at most (default: libuv's thread pool size, defaultQueueDepth()) */
  queueDepth?: number;
  /** largest single read (default 1 MiB), a multiple of 4096 */
  maxReadBytes?: number;
  /**
   * "auto" (default): O_DIRECT where the file system and memory allow it, else buffered reads
   * with one warning; true: O_DIRECT or a thrown error; false: buffered reads.
   */
  direct?: boolean | "auto";
  /** receives each warning once (default: process.emitWarning) */
  onWarning?: (message: string) => void;
  /**
   * Called on every completed read before its requests are reported; throw to fail the batch
   * (e.g. NeuronStore.verifier(): checksums). view is the whole memory.
   */
  verify?: (fileOffset: number, view: Uint8Array, viewOffset: number, length: number) => void;
  /** test hook: return an Error to make this read fail with it (as if the device had said EIO) */
  fault?: (read: FlashReadInfo) => Error | null | undefined;
  /**
   * How reads are issued: "aio" (Linux native AIO, direct reads only; an error where it is not
   * available), "threads" (fs.read on libuv's thread pool), "auto" (default: aio where possible).
   */
  backend?: "auto" | "aio" | "threads";
  /**
   * Native AIO: make the system calls on the addon's own I/O thread (default true: best when a
   * core is free for it) or inline on this thread (better when every core computes).
   */
  ioThread?: boolean;
  /**
   * With the I/O thread: once the first PIN_AFTER_READS reads have landed, put it on the CPU that
   * took their interrupts, alone, and keep the thread that services this reader (the one that
   * computes) on its other CPUs until close (irq-cpu.ts, native/flash_aio.c pin_threads). Default
   * true; POWERINFER_IO_PIN=0 makes it false. Nothing is pinned where that CPU is unclear or is
   * the only one allowed.
   */
  pinIoThread?: boolean;
  /**
   * Checksums the reads must match (NeuronStore.checksumTable()): with the I/O thread it checks
   * them, off this thread, and `verify` runs only to describe a mismatch; otherwise `verify` does
   * the checking. Give both.
   */
  checksums?: ReaderChecksums;
  /** records each read's issue and completion (offset, bytes, reads in flight) as an async span */
  tracer?: Tracer | null;
}

/** CRC-32 per chunk of a file region; `seen` (optional) marks chunks already verified. */
export interface ReaderChecksums {
  readonly crcs: Uint32Array;
  readonly start: number;
  readonly end: number;
  readonly chunkBytes: number;
  readonly seen: Uint8Array | null;
}

/**
 * Reads in flight by default with native AIO. The addon's I/O thread takes them all at once (so a
 * layer's misses and the next layer's read-ahead are all with the kernel while JavaScript
 * computes); past the disk's queue (256 requests here) io_submit blocks that thread, not this one.
 * Inline, io_submit would block JavaScript past the disk's queue: 256 then.
 */
export const AIO_QUEUE_DEPTH = 1024;
export const AIO_INLINE_QUEUE_DEPTH = 256;
/** reads landed before the I/O thread is pinned (FlashReaderOptions.pinIoThread): a fraction of a 7B token's */
export const PIN_AFTER_READS = 4096;

export interface FlashReaderStats {
  /** requests submitted */
  requests: number;
  /** physical reads issued (after coalescing and splitting; short-read retries included) */
  reads: number;
  /** bytes read */
  bytes: number;
  /** wall seconds during which at least one read was in flight */
  busySeconds: number;
  /** most reads ever in flight at once */
  maxInFlight: number;
  /** requests that rode along in another request's read */
  coalesced: number;
  /** extra reads made by splitting requests larger than maxReadBytes */
  splits: number;
  /** batches that failed */
  errors: number;
}

type OnComplete = ((request: FlashReadRequest) => void) | null;
type OnDone = (error: Error | null) => void;

interface Batch {
  requests: readonly FlashReadRequest[];
  onComplete: OnComplete;
  onDone: OnDone;
  /** reads still to finish, per request */
  pending: Int32Array;
  /** ops of this batch not yet finished (queued or in flight) */
  opsLeft: number;
  inFlight: number;
  error: Error | null;
  finished: boolean;
}

interface Op {
  batch: Batch | null;
  /** requests [first, first + count) of the batch that this read covers (wholly or, when split, partly) */
  first: number;
  count: number;
  fileOffset: number;
  length: number;
  dst: number;
  /** bytes already read (a short read continues from here) */
  done: number;
  /** its AIO request id while in flight */
  slot: number;
  /** the I/O thread found a checksum mismatch in it (verify describes it) */
  badChecksum: boolean;
  /** it landed in more than one read (a short read): the I/O thread saw no whole read to check, verify checks it here */
  split: boolean;
  /** its async span in a trace, while in flight */
  traceId: number;
  cb: (err: NodeJS.ErrnoException | null, bytesRead: number) => void;
}

/**
 * The default number of reads in flight through libuv: as many as its thread pool really runs at once (each
 * fs.read occupies one pool thread), which bin/powerinfer.cjs sizes to 64 before node starts; at
 * 8 KiB, 64 in flight read ~1.4x faster than 16 on this machine's disk (docs/benchmarks.md).
 */
export function defaultQueueDepth(): number {
  return visibleThreadPoolSize();
}

/**
 * The most reads worth having in flight with this process's reader: with native AIO, the disk's
 * queue (AIO_INLINE_QUEUE_DEPTH); through libuv, its thread pool. The planner probes up to it.
 */
export function readerDepthLimit(): number {
  return aio().binding ? AIO_INLINE_QUEUE_DEPTH : visibleThreadPoolSize();
}

/** The thread-pool size libuv would take from the environment (it may have started already). */
export function visibleThreadPoolSize(): number {
  const v = Number(process.env.UV_THREADPOOL_SIZE);
  return Number.isInteger(v) && v > 0 ? Math.min(v, 1024) : 4;
}

const emitted = new Set<string>();
function defaultWarning(message: string): void {
  if (emitted.has(message)) return;
  emitted.add(message);
  process.emitWarning(message, { code: "POWERINFER_FLASH_READER" });
}

function aligned(v: number): boolean {
  return Number.isSafeInteger(v) && v >= 0 && v % FLASH_ALIGN === 0;
}

/** Least time between two values of a trace's reads-in-flight counter (a value per read would double the trace). */
const COUNTER_EVERY_US = 100;

export class FlashReader {
  /** whether reads bypass the page cache (O_DIRECT) */
  readonly direct: boolean;
  /** why direct I/O is off, when it is */
  readonly bufferedReason: string | null;
  readonly queueDepth: number;
  readonly maxReadBytes: number;
  /** how reads are issued (FlashReaderOptions.backend) */
  readonly backend: "aio" | "threads";
  /** file size at open */
  readonly size: number;
  private fd: number;
  private readonly memory: FlashMemory;
  private u8: Uint8Array;
  private readonly verify: FlashReaderOptions["verify"];
  private readonly fault: FlashReaderOptions["fault"];
  private readonly queue: Op[] = [];
  private qHead = 0;
  private readonly freeOps: Op[] = [];
  private inFlight = 0;
  private busySince = 0;
  private readIndex = 0;
  private closing: Promise<void> | null = null;
  private drained: (() => void) | null = null;
  /** interrupt counts when the reader opened, until the I/O thread is pinned (or found unpinnable) */
  private irqBefore: Map<number, number> | null = null;
  private s: FlashReaderStats = {
    requests: 0,
    reads: 0,
    bytes: 0,
    busySeconds: 0,
    maxInFlight: 0,
    coalesced: 0,
    splits: 0,
    errors: 0,
  };
  /** native AIO: the binding, its ring, ops in flight by request id, free ids, ops to submit, scratch */
  private readonly aio: AioBinding | null;
  private ring: AioRing | null;
  private readonly slots: (Op | null)[] = [];
  private readonly freeSlots: number[] = [];
  private toSubmit: Op[] = [];
  private submitBuf = new Float64Array(0);
  private reaped = new Float64Array(0);
  private polling = false;
  /** while completions are processed: pump once at the end, not per completion */
  private reaping = false;
  /** checksums checked on the I/O thread (kept referenced here: the addon reads them) */
  private readonly nativeChecksums: ReaderChecksums | null = null;
  private readonly tracer: Tracer | null;
  /** when the reads-in-flight counter was last traced (it is traced at most every COUNTER_EVERY_US) */
  private counterAt = -Infinity;

  private constructor(
    readonly path: string,
    fd: number,
    direct: boolean,
    reason: string | null,
    size: number,
    opts: FlashReaderOptions,
    ring: { binding: AioBinding; ring: AioRing } | null,
  ) {
    this.fd = fd;
    this.aio = ring?.binding ?? null;
    this.ring = ring?.ring ?? null;
    this.backend = ring ? "aio" : "threads";
    this.direct = direct;
    this.bufferedReason = reason;
    this.size = size;
    this.memory = opts.memory;
    this.u8 = new Uint8Array(this.buffer());
    this.queueDepth = opts.queueDepth ?? defaultQueueDepth();
    this.maxReadBytes = opts.maxReadBytes ?? 1 << 20;
    this.verify = opts.verify;
    this.fault = opts.fault;
    this.tracer = opts.tracer ?? null;
    if (ring && opts.checksums && opts.ioThread !== false && opts.verify) {
      const c = opts.checksums;
      ring.binding.setChecksums(ring.ring, c.crcs, c.start, c.end, c.chunkBytes, c.seen);
      this.nativeChecksums = c;
    }
    if (
      ring &&
      ring.binding.pin &&
      opts.ioThread !== false &&
      (opts.pinIoThread ?? process.env.POWERINFER_IO_PIN !== "0")
    )
      this.irqBefore = interruptCounts();
    if (ring) {
      for (let i = this.queueDepth - 1; i >= 0; i--) this.freeSlots.push(i);
      this.slots.length = this.queueDepth;
      this.submitBuf = new Float64Array(4 * this.queueDepth);
      this.reaped = new Float64Array(2 * this.queueDepth);
    }
  }

  /** Open `path` for reading (see FlashReaderOptions for the choices). */
  static open(path: string, opts: FlashReaderOptions): FlashReader {
    const backend = opts.backend ?? "auto";
    if (backend !== "auto" && backend !== "aio" && backend !== "threads")
      throw new RangeError(`FlashReader: backend must be "auto", "aio" or "threads", got ${JSON.stringify(backend)}`);
    const native = backend === "threads" ? null : aio();
    const ioThread = opts.ioThread ?? true;
    const qd =
      opts.queueDepth ??
      (native?.binding && opts.direct !== false
        ? ioThread
          ? AIO_QUEUE_DEPTH
          : AIO_INLINE_QUEUE_DEPTH
        : defaultQueueDepth());
    const max = opts.maxReadBytes ?? 1 << 20;
    if (!Number.isInteger(qd) || qd < 1 || qd > 4096)
      throw new RangeError(`FlashReader: queueDepth must be an integer in [1, 4096], got ${qd}`);
    if (!aligned(max) || max === 0)
      throw new RangeError(`FlashReader: maxReadBytes must be a positive multiple of ${FLASH_ALIGN}, got ${max}`);
    const warn = opts.onWarning ?? defaultWarning;
    const want = opts.direct ?? "auto";
    const isWasm = typeof WebAssembly !== "undefined" && opts.memory instanceof WebAssembly.Memory;
    if (
      !isWasm &&
      !(opts.memory instanceof ArrayBuffer) &&
      !(typeof SharedArrayBuffer !== "undefined" && opts.memory instanceof SharedArrayBuffer)
    ) {
      throw new TypeError("FlashReader: memory must be a WebAssembly.Memory, SharedArrayBuffer or ArrayBuffer");
    }

    let fd = -1;
    let direct = false;
    let reason: string | null = null;
    if (want !== false) {
      const flag = (constants as { O_DIRECT?: number }).O_DIRECT;
      if (flag === undefined) reason = `this platform (${process.platform}) has no O_DIRECT`;
      else if (!isWasm)
        reason =
          "the destination is a plain ArrayBuffer/SharedArrayBuffer, whose address is not page aligned (O_DIRECT needs a WebAssembly.Memory)";
      else {
        try {
          fd = openSync(path, constants.O_RDONLY | flag);
          probeDirect(fd);
          direct = true;
        } catch (e) {
          if (fd >= 0) closeSync(fd);
          fd = -1;
          const code = (e as NodeJS.ErrnoException).code;
          if (code !== "EINVAL" && code !== "EOPNOTSUPP" && code !== "ENOTSUP") throw openError(path, e);
          reason = `the file system refuses O_DIRECT (${code}; e.g. tmpfs before Linux 6.6, /proc, some network and FUSE file systems)`;
        }
      }
      if (!direct && want === true)
        throw new FlashReadError(path, 0, 0, `direct I/O was required but is not possible: ${reason}`);
    } else reason = "buffered reads were asked for (direct: false)";
    if (fd < 0) {
      try {
        fd = openSync(path, "r");
      } catch (e) {
        throw openError(path, e);
      }
    }
    let size: number;
    try {
      size = fstatSync(fd).size;
    } catch (e) {
      closeSync(fd);
      throw openError(path, e);
    }
    // Native AIO for direct reads (on a buffered descriptor io_submit would read synchronously).
    let ring: { binding: AioBinding; ring: AioRing } | null = null;
    let noAio = native?.reason ?? "";
    if (native && direct && native.binding) {
      try {
        ring = { binding: native.binding, ring: native.binding.open(fd, qd, ioThread) };
      } catch (e) {
        noAio = `io_setup refused: ${(e as Error).message}`;
      }
    } else if (native && !direct) noAio = "reads are not direct";
    if (backend === "aio" && !ring) {
      closeSync(fd);
      throw new FlashReadError(path, 0, 0, `native AIO was required but is not possible: ${noAio}`);
    }
    const r = new FlashReader(path, fd, direct, reason, size, { ...opts, queueDepth: qd, maxReadBytes: max }, ring);
    if (direct && !ring && backend === "auto") {
      warn(`${path}: reading through libuv's thread pool (native AIO not in use: ${noAio}); each read costs more CPU`);
    }
    if (!direct && want === "auto") {
      warn(
        `${path}: direct I/O (O_DIRECT) is not in use: ${reason}. Reading through the page cache instead: it works, but ` +
          `the kernel will cache model weights outside the memory budget, and read speed will reflect that cache rather than the disk.`,
      );
    }
    const pool = visibleThreadPoolSize();
    if (!ring && qd > pool) {
      warn(
        `queue depth ${qd} exceeds libuv's thread pool (${process.env.UV_THREADPOOL_SIZE ? `UV_THREADPOOL_SIZE=${process.env.UV_THREADPOOL_SIZE}` : "4 threads by default"}): ` +
          `at most ${pool} reads will really run at once. Start node with UV_THREADPOOL_SIZE=${qd} in its environment.`,
      );
    }
    return r;
  }

  private buffer(): ArrayBuffer | SharedArrayBuffer {
    const m = this.memory;
    return m instanceof ArrayBuffer || (typeof SharedArrayBuffer !== "undefined" && m instanceof SharedArrayBuffer)
      ? m
      : (m as WebAssembly.Memory).buffer;
  }

  /** A view over the whole memory, re-taken after the memory grew. */
  private view(): Uint8Array {
    const b = this.buffer();
    if (this.u8.buffer !== b || this.u8.byteLength !== b.byteLength) this.u8 = new Uint8Array(b);
    return this.u8;
  }

  /** Reads in flight now. */
  get pending(): number {
    return this.inFlight + (this.queue.length - this.qHead);
  }

  stats(): FlashReaderStats {
    const s = { ...this.s };
    if (this.inFlight > 0) s.busySeconds += (performance.now() - this.busySince) / 1000;
    return s;
  }

  resetStats(): void {
    this.s = {
      requests: 0,
      reads: 0,
      bytes: 0,
      busySeconds: 0,
      maxInFlight: this.inFlight,
      coalesced: 0,
      splits: 0,
      errors: 0,
    };
    if (this.inFlight > 0) this.busySince = performance.now();
  }

  /**
   * Read a batch; resolves when every request has landed, rejects with a FlashReadError (or the
   * error verify/onComplete threw) otherwise. onComplete(request) runs as each one lands.
   */
  read(requests: readonly FlashReadRequest[], onComplete?: (request: FlashReadRequest) => void): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.submit(requests, onComplete ?? null, (e) => (e ? reject(e) : resolve()));
    });
  }

  /**
   * The callback form of read(), which allocates nothing per request: onDone(null) after the last
   * request landed, or onDone(error) once the batch has failed and none of its reads is in flight.
   * Invalid requests throw a RangeError here, before anything is read.
   */
  submit(requests: readonly FlashReadRequest[], onComplete: OnComplete, onDone: OnDone): void {
    if (this.closing) throw new FlashReadError(this.path, 0, 0, "the reader is closed");
    const memBytes = this.view().byteLength;
    for (let i = 0; i < requests.length; i++) {
      const r = requests[i];
      if (!aligned(r.fileOffset) || !aligned(r.length) || r.length === 0 || !aligned(r.dst)) {
        throw new RangeError(
          `${this.path}: request ${i} (fileOffset ${r.fileOffset}, length ${r.length}, dst ${r.dst}) is not ${FLASH_ALIGN}-byte aligned`,
        );
      }
      if (r.fileOffset + r.length > this.size) {
        throw new RangeError(
          `${this.path}: request ${i} reads [${r.fileOffset}, ${r.fileOffset + r.length}) past the end of the file (${this.size} bytes)`,
        );
      }
      if (r.dst + r.length > memBytes) {
        throw new RangeError(
          `${this.path}: request ${i} writes [${r.dst}, ${r.dst + r.length}) past the end of the memory (${memBytes} bytes)`,
        );
      }
    }
    const batch: Batch = {
      requests,
      onComplete,
      onDone,
      pending: new Int32Array(requests.length),
      opsLeft: 0,
      inFlight: 0,
      error: null,
      finished: false,
    };
    this.s.requests += requests.length;
    const max = this.maxReadBytes;
    for (let i = 0; i < requests.length;) {
      const r = requests[i];
      if (r.length > max) {
        for (let o = 0; o < r.length; o += max)
          this.enqueue(batch, i, 1, r.fileOffset + o, Math.min(max, r.length - o), r.dst + o);
        this.s.splits += Math.ceil(r.length / max) - 1;
        i++;
        continue;
      }
      let j = i + 1;
      let len = r.length;
      while (j < requests.length) {
        const p = requests[j - 1],
          q = requests[j];
        if (q.fileOffset !== p.fileOffset + p.length || q.dst !== p.dst + p.length || len + q.length > max) break;
        len += q.length;
        j++;
      }
      this.enqueue(batch, i, j - i, r.fileOffset, len, r.dst);
      this.s.coalesced += j - i - 1;
      i = j;
    }
    if (requests.length === 0) {
      batch.finished = true;
      process.nextTick(onDone, null);
      return;
    }
    this.pump();
  }

  private enqueue(batch: Batch, first: number, count: number, fileOffset: number, length: number, dst: number): void {
    const op = this.freeOps.pop() ?? this.newOp();
    op.batch = batch;
    op.first = first;
    op.count = count;
    op.fileOffset = fileOffset;
    op.length = length;
    op.dst = dst;
    op.done = 0;
    op.badChecksum = false;
    op.split = false;
    for (let k = first; k < first + count; k++) batch.pending[k]++;
    batch.opsLeft++;
    this.queue.push(op);
  }

  private newOp(): Op {
    const op: Op = {
      batch: null,
      first: 0,
      count: 0,
      fileOffset: 0,
      length: 0,
      dst: 0,
      done: 0,
      slot: -1,
      badChecksum: false,
      split: false,
      traceId: 0,
      cb: null!,
    };
    op.cb = (err, n) => this.landed(op, err, n);
    return op;
  }

  private pump(): void {
    if (this.reaping) return;
    while (this.inFlight < this.queueDepth && this.qHead < this.queue.length) {
      const op = this.queue[this.qHead];
      this.queue[this.qHead++] = undefined!;
      this.issue(op);
    }
    if (this.qHead === this.queue.length) {
      this.queue.length = 0;
      this.qHead = 0;
    } else if (this.qHead > 4096 && this.qHead * 2 > this.queue.length) {
      this.queue.splice(0, this.qHead);
      this.qHead = 0;
    }
    if (this.toSubmit.length > 0) this.flush();
  }

  private issue(op: Op): void {
    const batch = op.batch!;
    if (this.inFlight === 0) this.busySince = performance.now();
    this.inFlight++;
    batch.inFlight++;
    if (this.inFlight > this.s.maxInFlight) this.s.maxInFlight = this.inFlight;
    this.s.reads++;
    const index = this.readIndex++;
    const from = op.fileOffset + op.done;
    const len = op.length - op.done;
    const tr = this.tracer;
    if (tr) {
      op.traceId = tr.nextId();
      tr.readBegin(op.traceId, from, len, this.inFlight);
      this.traceInFlight(tr);
    }
    if (this.fault) {
      let injected: Error | null | undefined;
      try {
        injected = this.fault({ fileOffset: from, length: len, index });
      } catch (e) {
        injected = e as Error;
      }
      if (injected) {
        setImmediate(op.cb, injected, 0);
        return;
      }
    }
    if (this.ring) {
      op.slot = this.freeSlots.pop()!;
      this.slots[op.slot] = op;
      this.toSubmit.push(op);
      return;
    }
    read(this.fd, this.view(), op.dst + op.done, len, from, op.cb);
  }

  /**
   * Native AIO: hand the reads issued since the last flush to the addon in one call. With its I/O
   * thread it queues them all and wakes the thread, which makes the system calls; inline it calls
   * io_submit, which may take fewer (the rest wait for completions) or refuse the first (it fails
   * as a read would). A read the kernel refuses on the thread comes back through service().
   */
  private flush(): void {
    const ops = this.toSubmit;
    const buf = this.submitBuf;
    let from = 0;
    while (from < ops.length) {
      const n = ops.length - from;
      for (let i = 0; i < n; i++) {
        const op = ops[from + i];
        buf[4 * i] = op.slot;
        buf[4 * i + 1] = op.fileOffset + op.done;
        buf[4 * i + 2] = op.length - op.done;
        buf[4 * i + 3] = op.dst + op.done;
      }
      const k = this.aio!.submit(this.ring!, this.view(), buf, n);
      if (k < 0) {
        const op = ops[from++];
        this.freeSlot(op);
        setImmediate(op.cb, errnoError(-k, "io_submit"), 0);
        continue;
      }
      if (k === 0) {
        this.toSubmit = ops.slice(from);
        this.schedulePoll();
        return;
      }
      from += k;
    }
    ops.length = 0;
    this.schedulePoll();
  }

  private freeSlot(op: Op): void {
    this.slots[op.slot] = null;
    this.freeSlots.push(op.slot);
    op.slot = -1;
  }

  private schedulePoll(): void {
    if (this.polling || this.inFlight === 0) return;
    this.polling = true;
    setImmediate(this.poll);
  }

  /**
   * Native AIO: collect finished reads (waiting up to a millisecond for the first, so an idle
   * event loop sleeps in the kernel rather than spinning) and report them; again while any are
   * in flight. The event loop only gets here when JavaScript is not computing, which is when
   * waiting costs nothing.
   */
  private readonly poll = (): void => {
    this.polling = false;
    if (!this.ring) return;
    this.service(1);
    this.schedulePoll();
  };

  /**
   * Report the reads that have finished (waiting up to waitMs for the first) and submit queued
   * ones in their place. Native AIO only (a no-op otherwise). The engine may call it between
   * pieces of computation to keep the disk busy; completions are reported from here.
   */
  service(waitMs = 0): void {
    if (!this.ring || this.reaping) return;
    if (this.toSubmit.length > 0) this.flush();
    if (this.inFlight === 0) return;
    const out = this.reaped;
    const k = this.aio!.reap(this.ring, out, this.queueDepth, waitMs);
    if (k === 0) return;
    this.reaping = true;
    try {
      for (let i = 0; i < k; i++) {
        const op = this.slots[out[2 * i]]!;
        const res = out[2 * i + 1];
        this.freeSlot(op);
        if (res === -EBADMSG && this.nativeChecksums) {
          // the bytes landed and did not match: complete() has verify say where and what
          op.badChecksum = true;
          op.cb(null, op.length - op.done);
        } else if (res < 0) op.cb(errnoError(-res, "read"), 0);
        else op.cb(null, res);
      }
    } finally {
      this.reaping = false;
    }
    if (this.irqBefore && this.s.reads >= PIN_AFTER_READS) this.pinIoThread(this.irqBefore);
    this.pump();
  }

  /** The I/O thread onto the CPU that took the reads' interrupts, this thread off it (FlashReaderOptions.pinIoThread). */
  private pinIoThread(before: Map<number, number>): void {
    this.irqBefore = null;
    const after = interruptCounts();
    const cpu = after ? busiestCpu(before, after, 16) : -1;
    if (cpu >= 0) this.aio!.pin!(this.ring!, cpu);
  }

  private landed(op: Op, err: NodeJS.ErrnoException | null, n: number): void {
    const batch = op.batch!;
    this.inFlight--;
    batch.inFlight--;
    const tr = this.tracer;
    if (tr) {
      tr.readEnd(op.traceId, n, this.inFlight, err ? err.message : null);
      this.traceInFlight(tr);
    }
    if (this.inFlight === 0) this.s.busySeconds += (performance.now() - this.busySince) / 1000;
    if (!batch.error) {
      if (err) {
        this.fail(
          batch,
          new FlashReadError(
            this.path,
            op.fileOffset + op.done,
            op.length - op.done,
            `read failed: ${err.message}`,
            err,
          ),
        );
      } else if (n === 0) {
        this.fail(
          batch,
          new FlashReadError(
            this.path,
            op.fileOffset + op.done,
            op.length - op.done,
            `unexpected end of file (${this.size} bytes at open; was the file truncated?)`,
          ),
        );
      } else {
        this.s.bytes += n;
        op.done += n;
        if (op.done < op.length) {
          // a short read: continue where it stopped (the op keeps its place at the head of the line)
          op.split = true;
          this.issue(op);
          return;
        }
        this.complete(op, batch);
      }
    }
    batch.opsLeft--;
    op.batch = null;
    this.freeOps.push(op);
    this.settle(batch);
    this.pump();
    if (this.inFlight === 0 && this.drained) this.drained();
  }

  /** The reads-in-flight counter track, at most every COUNTER_EVERY_US (and whenever it drains). */
  private traceInFlight(tr: Tracer): void {
    const t = tr.now();
    if (this.inFlight > 0 && t - this.counterAt < COUNTER_EVERY_US) return;
    this.counterAt = t;
    tr.counter("flash reads in flight", { reads: this.inFlight });
  }

  private complete(op: Op, batch: Batch): void {
    const bad = op.badChecksum;
    if (this.verify && (bad || op.split || !this.nativeChecksums)) {
      try {
        this.verify(op.fileOffset, this.view(), op.dst, op.length);
      } catch (e) {
        this.fail(batch, e as Error);
        return;
      }
      if (bad) {
        this.fail(
          batch,
          new FlashReadError(
            this.path,
            op.fileOffset,
            op.length,
            "checksum mismatch found by the I/O thread (the bytes changed before they could be described)",
          ),
        );
        return;
      }
    }
    for (let k = op.first; k < op.first + op.count; k++) {
      if (--batch.pending[k] !== 0) continue;
      if (batch.onComplete) {
        try {
          batch.onComplete(batch.requests[k]);
        } catch (e) {
          this.fail(batch, e as Error);
          return;
        }
      }
      if (batch.error) return;
    }
  }

  private fail(batch: Batch, e: Error): void {
    if (batch.error) return;
    batch.error = e;
    this.s.errors++;
    // drop the batch's reads that have not started; those in flight are waited for in settle()
    let w = this.qHead;
    for (let r = this.qHead; r < this.queue.length; r++) {
      const op = this.queue[r];
      if (op.batch === batch) {
        batch.opsLeft--;
        op.batch = null;
        this.freeOps.push(op);
      } else this.queue[w++] = op;
    }
    this.queue.length = w;
  }

  private settle(batch: Batch): void {
    if (batch.finished || batch.inFlight > 0) return;
    if (batch.error || batch.opsLeft === 0) {
      batch.finished = true;
      batch.onDone(batch.error);
    }
  }

  /** Fail whatever is queued, wait for reads in flight, close the file. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    const queued = new Set<Batch>();
    for (let r = this.qHead; r < this.queue.length; r++) queued.add(this.queue[r].batch!);
    for (const b of queued)
      this.fail(b, new FlashReadError(this.path, 0, 0, "the reader was closed with reads pending"));
    this.closing = new Promise<void>((resolve) => {
      const finish = () => {
        this.drained = null;
        for (const b of queued) this.settle(b);
        if (this.ring) {
          this.aio!.close(this.ring);
          this.ring = null;
        }
        closeSync(this.fd);
        this.fd = -1;
        resolve();
      };
      if (this.inFlight === 0) finish();
      else this.drained = finish;
    });
    return this.closing;
  }
}

/**
 * Some file systems accept O_DIRECT at open and refuse it at read time; find out now with one
 * aligned 4 KiB read into a fresh (page-aligned) wasm page rather than on the first real read.
 */
function probeDirect(fd: number): void {
  const page = new Uint8Array(new WebAssembly.Memory({ initial: 1 }).buffer);
  readSync(fd, page, 0, FLASH_ALIGN, 0);
}

/** An errno number from the kernel as Node reports fs errors (code "EIO", ...). */
function errnoError(errno: number, syscall: string): NodeJS.ErrnoException {
  const code = Object.entries(osConstants.errno).find(([, v]) => v === errno)?.[0] ?? `errno ${errno}`;
  const e = new Error(`${code} (errno ${errno})`) as NodeJS.ErrnoException;
  e.code = code;
  e.errno = -errno;
  e.syscall = syscall;
  return e;
}

function openError(path: string, e: unknown): FlashReadError {
  return new FlashReadError(path, 0, 0, `cannot open: ${(e as Error).message}`, e);
}
