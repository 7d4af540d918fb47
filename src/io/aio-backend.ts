/**
 * The flash reader's batch backend, over an AioBinding (src/io/aio.ts): Linux native AIO through
 * the addon, or the browser's OPFS reader workers, which have the same shape. Direct reads only
 * (on a buffered descriptor io_submit would read synchronously).
 *
 * A batch of reads is one io_submit and finished reads are collected with io_getevents, both on the
 * addon's I/O thread (or inline on this one), and reported when the event loop would otherwise
 * idle or the engine calls service(): ~4 us of CPU per read against ~30 us through libuv's thread
 * pool on this machine (docs/store-format.md, "Reading"), and no thread woken per read.
 */
import { constants as osConstants } from "node:os";
import type { AioBinding, AioRing } from "./aio.js";
import type { ReaderChecksums } from "./flash-reader.js";
import { busiestCpu, interruptCounts } from "./irq-cpu.js";
import type { ReadBackend, ReadHost, ReadOp } from "./read-backend.js";

const EBADMSG = osConstants.errno.EBADMSG ?? 74;

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

export interface AioBackendOptions {
  /** reads in flight at most: the ring's capacity */
  queueDepth: number;
  /** whether the ring makes its system calls on the addon's own I/O thread (AioBinding.open) */
  ioThread: boolean;
  /** FlashReaderOptions.pinIoThread, resolved */
  pinIoThread: boolean;
  /** checksums for the I/O thread to check (only with it, and only where verify can describe a mismatch) */
  checksums: ReaderChecksums | null;
}

export class AioBackend implements ReadBackend {
  readonly kind = "aio";
  readonly checksChecksums: boolean;
  /** while completions are reported: the reader pumps once at the end, not per completion */
  reporting = false;
  private ring: AioRing | null;
  private readonly queueDepth: number;
  /** ops in flight by request id, and the free ids */
  private readonly slots: (ReadOp | null)[] = [];
  private readonly freeSlots: number[] = [];
  /** ops started since the last flush */
  /**
   * Reads started since the last flush: toSubmit[0, nToSubmit). Kept at its largest length (a JS
   * array cut to length 0 drops its storage, and would be grown again every batch).
   */
  private readonly toSubmit: (ReadOp | null)[] = [];
  private nToSubmit = 0;
  private readonly submitBuf: Float64Array;
  private readonly reaped: Float64Array;
  private polling = false;
  /** checksums checked on the I/O thread (kept referenced here: the addon reads them) */
  private readonly nativeChecksums: ReaderChecksums | null = null;
  /** interrupt counts when the reader opened, until the I/O thread is pinned (or found unpinnable) */
  private irqBefore: Map<number, number> | null = null;

  constructor(
    private readonly host: ReadHost,
    private readonly binding: AioBinding,
    ring: AioRing,
    opts: AioBackendOptions,
  ) {
    this.ring = ring;
    this.queueDepth = opts.queueDepth;
    if (opts.checksums && opts.ioThread) {
      const c = opts.checksums;
      binding.setChecksums(ring, c.crcs, c.start, c.end, c.chunkBytes, c.seen);
      this.nativeChecksums = c;
    }
    this.checksChecksums = this.nativeChecksums !== null;
    if (binding.pin && opts.ioThread && opts.pinIoThread) this.irqBefore = interruptCounts();
    for (let i = this.queueDepth - 1; i >= 0; i--) this.freeSlots.push(i);
    this.slots.length = this.queueDepth;
    this.submitBuf = new Float64Array(4 * this.queueDepth);
    this.reaped = new Float64Array(2 * this.queueDepth);
  }

  start(op: ReadOp): void {
    op.slot = this.freeSlots.pop()!;
    this.slots[op.slot] = op;
    this.toSubmit[this.nToSubmit++] = op;
  }

  flush(): void {
    if (this.nToSubmit > 0) this.submitStarted();
  }

  /**
   * Hand the reads started since the last flush to the addon in one call. With its I/O thread it
   * queues them all and wakes the thread, which makes the system calls; inline it calls io_submit,
   * which may take fewer (the rest wait for completions) or refuse the first (it fails as a read
   * would). A read the kernel refuses on the thread comes back through service().
   */
  private submitStarted(): void {
    const ops = this.toSubmit;
    const buf = this.submitBuf;
    let from = 0;
    while (from < this.nToSubmit) {
      const n = this.nToSubmit - from;
      for (let i = 0; i < n; i++) {
        const op = ops[from + i]!;
        buf[4 * i] = op.slot;
        buf[4 * i + 1] = op.fileOffset + op.done;
        buf[4 * i + 2] = op.length - op.done;
        buf[4 * i + 3] = op.dst + op.done;
      }
      const k = this.binding.submit(this.ring!, this.host.view(), buf, n);
      if (k < 0) {
        const op = ops[from++]!;
        this.freeSlot(op);
        setImmediate(op.cb, errnoError(-k, "io_submit"), 0);
        continue;
      }
      if (k === 0) {
        // the ring is full: the rest wait at the front for the next flush
        ops.copyWithin(0, from, this.nToSubmit);
        this.nToSubmit -= from;
        ops.fill(null, this.nToSubmit);
        this.schedulePoll();
        return;
      }
      from += k;
    }
    ops.fill(null, 0, this.nToSubmit);
    this.nToSubmit = 0;
    this.schedulePoll();
  }

  private freeSlot(op: ReadOp): void {
    this.slots[op.slot] = null;
    this.freeSlots.push(op.slot);
    op.slot = -1;
  }

  private schedulePoll(): void {
    if (this.polling || this.host.inFlight() === 0) return;
    this.polling = true;
    setImmediate(this.poll);
  }

  /**
   * Collect finished reads (waiting up to a millisecond for the first, so an idle event loop
   * sleeps in the kernel rather than spinning) and report them; again while any are in flight.
   * The event loop only gets here when JavaScript is not computing, which is when waiting costs
   * nothing.
   */
  private readonly poll = (): void => {
    this.polling = false;
    if (!this.ring) return;
    this.service(1);
    this.schedulePoll();
  };

  service(waitMs: number): void {
    if (!this.ring || this.reporting) return;
    if (this.nToSubmit > 0) this.submitStarted();
    if (this.host.inFlight() === 0) return;
    const out = this.reaped;
    const k = this.binding.reap(this.ring, out, this.queueDepth, waitMs);
    if (k === 0) return;
    this.reporting = true;
    try {
      for (let i = 0; i < k; i++) {
        const op = this.slots[out[2 * i]]!;
        const res = out[2 * i + 1];
        this.freeSlot(op);
        if (res === -EBADMSG && this.nativeChecksums) {
          // the bytes landed and did not match: the reader has verify say where and what
          op.badChecksum = true;
          op.cb(null, op.length - op.done);
        } else if (res < 0) op.cb(errnoError(-res, "read"), 0);
        else op.cb(null, res);
      }
    } finally {
      this.reporting = false;
    }
    if (this.irqBefore && this.host.readsIssued() >= PIN_AFTER_READS) this.pinIoThread(this.irqBefore);
    this.host.pump();
  }

  /** The I/O thread onto the CPU that took the reads' interrupts, this thread off it (FlashReaderOptions.pinIoThread). */
  private pinIoThread(before: Map<number, number>): void {
    this.irqBefore = null;
    const after = interruptCounts();
    const cpu = after ? busiestCpu(before, after, 16) : -1;
    if (cpu >= 0) this.binding.pin!(this.ring!, cpu);
  }

  close(): void {
    if (this.ring) {
      this.binding.close(this.ring);
      this.ring = null;
    }
  }
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
