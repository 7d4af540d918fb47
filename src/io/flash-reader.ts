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
 * - With a bridge region (`bridge`), consecutive requests near each other in the file but not
 *   adjacent in memory are read as one read into a slot of that region and copied out
 *   (read-bridge.ts).
 * - Up to `queueDepth` reads are in flight at once, issued through one of two backends
 *   (read-backend.ts): direct reads go through Linux native AIO where the addon is built
 *   (aio-backend.ts: a batch per system call, completions collected when the event loop would
 *   otherwise idle or the engine calls service()); otherwise each read is an fs.read on libuv's
 *   thread pool (thread-pool-backend.ts, whose size must be set before node starts). The reader
 *   warns once when queueDepth exceeds the pool size it can see.
 * - Each request is reported through `onComplete` as soon as its bytes have landed (and passed
 *   the optional `verify` hook), so compute can start on a cluster while others are in flight.
 * - An I/O error, a short read at end of file or a failed verification rejects the batch with a
 *   FlashReadError naming the file, offset and length. Requests not yet reported complete are
 *   never reported, and the batch settles only after its reads still in flight have returned, so
 *   no read lands in memory the caller has already reused.
 */
import { closeSync } from "node:fs";
import type { Tracer } from "../runtime/tracer.js";
import { aio, type AioBinding, type AioRing } from "./aio.js";
import { AIO_INLINE_QUEUE_DEPTH, AIO_QUEUE_DEPTH, AioBackend } from "./aio-backend.js";
import type { ReadBackend, ReadHost, ReadOp } from "./read-backend.js";
import { defaultQueueDepth, ThreadPoolBackend, visibleThreadPoolSize } from "./thread-pool-backend.js";
import { FLASH_ALIGN, flashAligned, openFile } from "./direct-open.js";
import { ReadBridge, type BridgeRegion } from "./read-bridge.js";
import { FlashReadError } from "./flash-read-error.js";

// Re-exported: the reader's users import these from here.
export { AIO_INLINE_QUEUE_DEPTH, AIO_QUEUE_DEPTH, PIN_AFTER_READS } from "./aio-backend.js";
export { defaultQueueDepth, visibleThreadPoolSize } from "./thread-pool-backend.js";
export { FLASH_ALIGN } from "./direct-open.js";
export { FlashReadError } from "./flash-read-error.js";

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
  /**
   * Memory [dst, dst + bytes) the reader may read bridged runs into (4 KiB aligned; nothing else
   * may use it while the reader is open), in slots of BRIDGE_SLOT_BYTES. Without it nothing is
   * bridged.
   */
  bridge?: BridgeRegion;
  /** the most bytes of the file no request asked for that one bridged read may span between two requests (default BRIDGE_GAP_BYTES) */
  maxGapBytes?: number;
}

/** CRC-32 per chunk of a file region; `seen` (optional) marks chunks already verified. */
export interface ReaderChecksums {
  readonly crcs: Uint32Array;
  readonly start: number;
  readonly end: number;
  readonly chunkBytes: number;
  readonly seen: Uint8Array | null;
}

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
  /** requests that rode along in another request's read through the bridge region, and the bytes read between them for nothing */
  bridged: number;
  gapBytes: number;
  /** extra reads made by splitting requests larger than maxReadBytes */
  splits: number;
  /** batches that failed */
  errors: number;
}

type OnComplete = ((request: FlashReadRequest) => void) | null;
type OnDone = (error: Error | null) => void;

/** Largest single read when FlashReaderOptions.maxReadBytes is not given (the planner costs coalesced reads with it). */
export const DEFAULT_MAX_READ_BYTES = 1 << 20;
const NO_REQUESTS: readonly FlashReadRequest[] = [];
const NO_DONE: OnDone = () => undefined;

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

/** A physical read of the reader's: what the backend reads, and which requests of which batch it serves. */
interface Op extends ReadOp {
  batch: Batch | null;
  /** requests [first, first + count) of the batch that this read covers (wholly or, when split, partly) */
  first: number;
  count: number;
  /** it landed in more than one read (a short read): the I/O thread saw no whole read to check, verify checks it here */
  split: boolean;
  /** its async span in a trace, while in flight */
  traceId: number;
  /** the bridge slot it reads into (its requests' bytes are copied out as it lands), or -1 */
  bridgeSlot: number;
}

/**
 * The most reads worth having in flight with this process's reader: with native AIO, the disk's
 * queue (AIO_INLINE_QUEUE_DEPTH); through libuv, its thread pool. The planner probes up to it.
 */
export function readerDepthLimit(): number {
  return aio().binding ? AIO_INLINE_QUEUE_DEPTH : visibleThreadPoolSize();
}

const emitted = new Set<string>();
function defaultWarning(message: string): void {
  if (emitted.has(message)) return;
  emitted.add(message);
  process.emitWarning(message, { code: "POWERINFER_FLASH_READER" });
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
  /**
   * Reads waiting for a place in flight: queue[qHead, qTail). The array keeps its length once
   * grown (setting a JS array's length to 0 drops its storage, and every batch would grow it
   * again: garbage on every step of a decode that reads).
   */
  private readonly queue: (Op | undefined)[] = [];
  private qHead = 0;
  private qTail = 0;
  private readonly freeOps: Op[] = [];
  /** finished batches, reused by the next submit (their `pending` arrays too) */
  private readonly freeBatches: Batch[] = [];
  private inFlight = 0;
  private busySince = 0;
  private readIndex = 0;
  private closing: Promise<void> | null = null;
  private drained: (() => void) | null = null;
  private s: FlashReaderStats = {
    requests: 0,
    reads: 0,
    bytes: 0,
    busySeconds: 0,
    maxInFlight: 0,
    coalesced: 0,
    bridged: 0,
    gapBytes: 0,
    splits: 0,
    errors: 0,
  };
  /** where reads are issued: native AIO or libuv's thread pool */
  private readonly io: ReadBackend;
  private readonly tracer: Tracer | null;
  /** when the reads-in-flight counter was last traced (it is traced at most every COUNTER_EVERY_US) */
  private counterAt = -Infinity;
  private readonly bridge: ReadBridge;

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
    this.direct = direct;
    this.bufferedReason = reason;
    this.size = size;
    this.memory = opts.memory;
    this.u8 = new Uint8Array(this.buffer());
    this.queueDepth = opts.queueDepth ?? defaultQueueDepth();
    this.maxReadBytes = opts.maxReadBytes ?? DEFAULT_MAX_READ_BYTES;
    this.verify = opts.verify;
    this.fault = opts.fault;
    this.tracer = opts.tracer ?? null;
    this.bridge = new ReadBridge(opts.bridge, opts.maxGapBytes);
    const host: ReadHost = {
      view: () => this.view(),
      inFlight: () => this.inFlight,
      readsIssued: () => this.s.reads,
      pump: () => this.pump(),
    };
    this.io = ring
      ? new AioBackend(host, ring.binding, ring.ring, {
          queueDepth: this.queueDepth,
          ioThread: opts.ioThread !== false,
          pinIoThread: opts.pinIoThread ?? process.env.POWERINFER_IO_PIN !== "0",
          // the I/O thread checks only where verify is there to describe a mismatch
          checksums: opts.verify ? (opts.checksums ?? null) : null,
        })
      : new ThreadPoolBackend(host, fd);
    this.backend = this.io.kind;
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
    const max = opts.maxReadBytes ?? DEFAULT_MAX_READ_BYTES;
    if (!Number.isInteger(qd) || qd < 1 || qd > 4096)
      throw new RangeError(`FlashReader: queueDepth must be an integer in [1, 4096], got ${qd}`);
    if (!flashAligned(max) || max === 0)
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
    const refused = ReadBridge.refusal(
      opts.bridge,
      opts.maxGapBytes,
      (isWasm ? (opts.memory as WebAssembly.Memory).buffer : (opts.memory as ArrayBuffer)).byteLength,
    );
    if (refused) throw refused;

    const { fd, direct, reason, size } = openFile(path, want, isWasm);
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
    return this.inFlight + (this.qTail - this.qHead);
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
      bridged: 0,
      gapBytes: 0,
      splits: 0,
      errors: 0,
    };
    if (this.inFlight > 0) this.busySince = performance.now();
  }

  /**
   * Read a batch; resolves when every request has landed, rejects with a FlashReadError (or the
   * error verify/onComplete threw) otherwise. onComplete(request) runs as each one lands. `count`:
   * the first that many of `requests` (a caller's array kept at its largest size).
   */
  read(
    requests: readonly FlashReadRequest[],
    onComplete?: (request: FlashReadRequest) => void,
    count = requests.length,
  ): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      this.submit(requests, onComplete ?? null, (e) => (e ? reject(e) : resolve()), count);
    });
  }

  /**
   * The callback form of read(), which allocates nothing per request: onDone(null) after the last
   * request landed, or onDone(error) once the batch has failed and none of its reads is in flight.
   * Invalid requests throw a RangeError here, before anything is read.
   */
  submit(requests: readonly FlashReadRequest[], onComplete: OnComplete, onDone: OnDone, count = requests.length): void {
    if (this.closing) throw new FlashReadError(this.path, 0, 0, "the reader is closed");
    if (!(Number.isInteger(count) && count >= 0 && count <= requests.length))
      throw new RangeError(`${this.path}: count ${count} is not within the ${requests.length} requests given`);
    const memBytes = this.view().byteLength;
    for (let i = 0; i < count; i++) {
      const r = requests[i];
      if (!flashAligned(r.fileOffset) || !flashAligned(r.length) || r.length === 0 || !flashAligned(r.dst)) {
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
    const batch = this.newBatch(requests, onComplete, onDone, count);
    this.s.requests += count;
    const max = this.maxReadBytes;
    for (let i = 0; i < count;) {
      const r = requests[i];
      if (r.length > max) {
        for (let o = 0; o < r.length; o += max)
          this.enqueue(batch, i, 1, r.fileOffset + o, Math.min(max, r.length - o), r.dst + o);
        this.s.splits += Math.ceil(r.length / max) - 1;
        i++;
        continue;
      }
      // the run one read serves: adjacent in the file and in memory (read in place), or near each
      // other in the file (bridged: read into a slot and copied out), whichever serves more
      let j = i + 1;
      let end = r.fileOffset + r.length;
      for (; j < count; j++) {
        const p = requests[j - 1],
          q = requests[j];
        if (q.fileOffset !== end || q.dst !== p.dst + p.length || q.fileOffset + q.length - r.fileOffset > max) break;
        end += q.length;
      }
      const k = this.bridge.runEnd(requests, i, count, max);
      if (k <= j) {
        this.enqueue(batch, i, j - i, r.fileOffset, end - r.fileOffset, r.dst);
        this.s.coalesced += j - i - 1;
      } else {
        const last = requests[k - 1];
        const span = last.fileOffset + last.length - r.fileOffset;
        let asked = 0;
        for (let m = i; m < k; m++) asked += requests[m].length;
        const slot = this.bridge.take();
        this.enqueue(batch, i, k - i, r.fileOffset, span, this.bridge.address(slot), slot);
        this.s.bridged += k - i - 1;
        this.s.gapBytes += span - asked;
        j = k;
      }
      i = j;
    }
    if (count === 0) {
      batch.finished = true;
      this.freeBatches.push(batch);
      process.nextTick(onDone, null);
      return;
    }
    this.pump();
  }

  /** A batch for `count` requests: a finished one again where there is one. */
  private newBatch(
    requests: readonly FlashReadRequest[],
    onComplete: OnComplete,
    onDone: OnDone,
    count: number,
  ): Batch {
    const b = this.freeBatches.pop() ?? {
      requests,
      onComplete,
      onDone,
      pending: new Int32Array(Math.max(16, count)),
      opsLeft: 0,
      inFlight: 0,
      error: null,
      finished: false,
    };
    b.requests = requests;
    b.onComplete = onComplete;
    b.onDone = onDone;
    if (b.pending.length < count) b.pending = new Int32Array(Math.max(count, 2 * b.pending.length));
    else b.pending.fill(0, 0, count);
    b.opsLeft = 0;
    b.inFlight = 0;
    b.error = null;
    b.finished = false;
    return b;
  }

  private enqueue(
    batch: Batch,
    first: number,
    count: number,
    fileOffset: number,
    length: number,
    dst: number,
    bridgeSlot = -1,
  ): void {
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
    op.bridgeSlot = bridgeSlot;
    for (let k = first; k < first + count; k++) batch.pending[k]++;
    batch.opsLeft++;
    this.queue[this.qTail++] = op;
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
      bridgeSlot: -1,
      cb: null!,
    };
    op.cb = (err, n) => this.landed(op, err, n);
    return op;
  }

  private pump(): void {
    if (this.io.reporting) return;
    while (this.inFlight < this.queueDepth && this.qHead < this.qTail) {
      const op = this.queue[this.qHead]!;
      this.queue[this.qHead++] = undefined;
      this.issue(op);
    }
    if (this.qHead === this.qTail) this.qHead = this.qTail = 0;
    else if (this.qHead > 4096 && this.qHead * 2 > this.qTail) {
      // the waiting reads to the front, so that the array stops growing
      this.queue.copyWithin(0, this.qHead, this.qTail);
      this.queue.fill(undefined, this.qTail - this.qHead, this.qTail);
      this.qTail -= this.qHead;
      this.qHead = 0;
    }
    this.io.flush();
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
    this.io.start(op);
  }

  /**
   * Report the reads that have finished (waiting up to waitMs for the first) and submit queued
   * ones in their place. Native AIO only (a no-op otherwise). The engine may call it between
   * pieces of computation to keep the disk busy; completions are reported from here.
   */
  service(waitMs = 0): void {
    this.io.service(waitMs);
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
    this.freeOp(op);
    this.settle(batch);
    this.pump();
    if (this.inFlight === 0 && this.drained) this.drained();
  }

  private freeOp(op: Op): void {
    if (op.bridgeSlot >= 0) this.bridge.give(op.bridgeSlot);
    op.bridgeSlot = -1;
    op.batch = null;
    this.freeOps.push(op);
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
    if (this.verify && (bad || op.split || !this.io.checksChecksums)) {
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
    // a bridged read holds its requests whole
    if (op.bridgeSlot >= 0) ReadBridge.copyOut(this.view(), batch.requests, op.first, op.count, op.fileOffset, op.dst);
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
    for (let r = this.qHead; r < this.qTail; r++) {
      const op = this.queue[r]!;
      if (op.batch === batch) {
        batch.opsLeft--;
        this.freeOp(op);
      } else this.queue[w++] = op;
    }
    this.queue.fill(undefined, w, this.qTail);
    this.qTail = w;
  }

  private settle(batch: Batch): void {
    if (batch.finished || batch.inFlight > 0) return;
    if (batch.error || batch.opsLeft === 0) {
      batch.finished = true;
      const { onDone, error } = batch;
      // nothing refers to it now (its ops are back in freeOps): the next submit may take it
      batch.requests = NO_REQUESTS;
      batch.onComplete = null;
      batch.onDone = NO_DONE;
      this.freeBatches.push(batch);
      onDone(error);
    }
  }

  /** Fail whatever is queued, wait for reads in flight, close the file. */
  close(): Promise<void> {
    if (this.closing) return this.closing;
    const queued = new Set<Batch>();
    for (let r = this.qHead; r < this.qTail; r++) queued.add(this.queue[r]!.batch!);
    for (const b of queued)
      this.fail(b, new FlashReadError(this.path, 0, 0, "the reader was closed with reads pending"));
    this.closing = new Promise<void>((resolve) => {
      const finish = () => {
        this.drained = null;
        for (const b of queued) this.settle(b);
        this.io.close();
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
