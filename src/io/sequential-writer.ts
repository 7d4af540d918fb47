/**
 * A converted model's file, written front to back with O_DIRECT where the file system takes it.
 * Buffered writes cost this VM's cores 0.2-2.3 s of system time a GB (the kernel copying each
 * page into its cache, then writing it back under the inode's lock: `dd bs=4M conv=fsync` of 2 GB
 * spent 4.6 s in the kernel at 383 MB/s, `oflag=direct` 0.2 s at 2.1 GB/s), time a 2-core
 * conversion takes from its quantizers, and the page cache then holds a file the engine reads
 * with O_DIRECT anyway.
 *
 * Bytes are gathered in staging buffers carved from a WebAssembly.Memory (whose base is page
 * aligned, which O_DIRECT needs of every address) and written STAGE_BYTES at a time at page-aligned
 * offsets while the next buffer fills; the last, partial page is padded with zeros and the file
 * truncated to its length. A write behind the buffers already written (a header's magic, a GGUF
 * writer's tensor written out of order) waits for the writes in flight and goes through a
 * buffered descriptor; a write past the end leaves zeros between. Where O_DIRECT is refused
 * (tmpfs before Linux 6.6, some network and FUSE file systems, other platforms) the same
 * buffers go through the page cache, synced as they go (EarlyWriteback) when the caller syncs.
 */
import { constants } from "node:fs";
import { open, type FileHandle } from "node:fs/promises";
import { EarlyWriteback } from "./early-writeback.js";
import { FLASH_ALIGN } from "./direct-open.js";

/** Bytes written by one write system call. */
const STAGE_BYTES = 4 << 20;
/** Staging buffers: all but one being written while the last fills. */
const STAGES = 4;
const WASM_PAGE = 65536;

export interface SequentialWriterOptions {
  /** O_DIRECT where possible (default), or buffered */
  direct?: boolean;
  /** the caller syncs at the end: buffered writes are synced as they go meanwhile */
  fsync?: boolean;
}

export class SequentialWriter {
  /** file offset of the next byte appended */
  position = 0;
  private stages: Uint8Array[];
  private free: Uint8Array[];
  private buf: Uint8Array;
  /** bytes of buf filled, and buf's file offset */
  private fill = 0;
  private bufAt = 0;
  private writes: { done: Promise<void>; buf: Uint8Array }[] = [];
  /** every operation in turn: writes may be started before the last has finished */
  private queue: Promise<void> = Promise.resolve();
  private patcher: FileHandle | undefined;
  private writeback: EarlyWriteback | undefined;
  private ended = false;

  private constructor(
    readonly path: string,
    private fh: FileHandle,
    /** whether writes bypass the page cache */
    readonly direct: boolean,
    fsync: boolean,
  ) {
    const memory = new WebAssembly.Memory({ initial: (STAGES * STAGE_BYTES) / WASM_PAGE });
    this.stages = Array.from({ length: STAGES }, (_, i) => new Uint8Array(memory.buffer, i * STAGE_BYTES, STAGE_BYTES));
    this.free = this.stages.slice(1);
    this.buf = this.stages[0];
    if (!direct && fsync) this.writeback = new EarlyWriteback(fh);
  }

  /** Creates (or empties) `path` for writing. */
  static async create(path: string, opts: SequentialWriterOptions = {}): Promise<SequentialWriter> {
    const flag = (constants as { O_DIRECT?: number }).O_DIRECT;
    if (opts.direct !== false && flag !== undefined) {
      try {
        const fh = await open(path, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | flag, 0o666);
        return new SequentialWriter(path, fh, true, opts.fsync ?? true);
      } catch (e) {
        const code = (e as NodeJS.ErrnoException).code;
        if (code !== "EINVAL" && code !== "EOPNOTSUPP" && code !== "ENOTSUP") throw e;
      }
    }
    return new SequentialWriter(path, await open(path, "w"), false, opts.fsync ?? true);
  }

  /**
   * `data` at file offset `at` (default: the end, where the writes before this one leave it).
   * Resolves once the bytes are staged or written (the caller may reuse `data`); a failed write
   * rejects this call or a later one.
   */
  write(data: Uint8Array, at?: number): Promise<void> {
    return this.enqueue(() => this.put(data, at ?? this.position));
  }

  /** `n` zeros appended. */
  zeros(n: number): Promise<void> {
    return this.enqueue(() => this.put(undefined, this.position, n));
  }

  /** Everything staged written, the file truncated to `position`: later writes go behind the end only. */
  end(): Promise<void> {
    return this.enqueue(async () => {
      if (this.ended) return;
      const length = this.position;
      if (this.direct && this.fill % FLASH_ALIGN !== 0) {
        const pad = FLASH_ALIGN - (this.fill % FLASH_ALIGN);
        this.buf.fill(0, this.fill, this.fill + pad);
        this.fill += pad;
      }
      await this.flush();
      await this.settle();
      await this.fh.truncate(length);
      this.ended = true;
    });
  }

  /** The file's data and size on the disk (after end()). */
  sync(): Promise<void> {
    return this.enqueue(async () => {
      await this.settle();
      await this.writeback?.settle();
      await this.patcher?.datasync();
      await this.fh.sync();
    });
  }

  async close(): Promise<void> {
    await this.queue.catch(() => undefined);
    await this.settle().catch(() => undefined);
    await this.writeback?.settle().catch(() => undefined);
    await this.patcher?.close().catch(() => undefined);
    await this.fh.close().catch(() => undefined);
  }

  private enqueue(op: () => Promise<void>): Promise<void> {
    const next = this.queue.then(op);
    // a failure rejects the call that met it; the queue goes on (to close and clean up)
    this.queue = next.catch(() => undefined);
    return next;
  }

  /** `data` (or `n` zeros) at `at`: behind what is staged through the patcher, then into the buffers. */
  private async put(data: Uint8Array | undefined, at: number, n = data?.length ?? 0): Promise<void> {
    if (this.ended && at + n > this.position) throw new Error(`${this.path}: a write past the end after end()`);
    if (at < this.bufAt) {
      // behind the buffers: over what was written (or is being written)
      const k = Math.min(n, this.bufAt - at);
      await this.settle();
      // O_DIRECT takes whole pages only: a second, buffered descriptor writes these
      const fh = this.direct ? (this.patcher ??= await open(this.path, "r+")) : this.fh;
      const bytes = data ? data.subarray(0, k) : new Uint8Array(k);
      for (let off = 0; off < k;) off += (await fh.write(bytes, off, k - off, at + off)).bytesWritten;
      [data, at, n] = [data?.subarray(k), at + k, n - k];
    }
    if (n > 0 && at < this.position) {
      // inside the staged buffer
      const k = Math.min(n, this.position - at);
      const o = at - this.bufAt;
      if (data) this.buf.set(data.subarray(0, k), o);
      else this.buf.fill(0, o, o + k);
      [data, at, n] = [data?.subarray(k), at + k, n - k];
    }
    // zeros up to `at`, then the rest appended
    if (at > this.position) await this.append(undefined, at - this.position);
    if (n > 0) await this.append(data, n);
  }

  private async append(data: Uint8Array | undefined, n: number): Promise<void> {
    for (let i = 0; i < n;) {
      const k = Math.min(n - i, this.buf.length - this.fill);
      if (data) this.buf.set(data.subarray(i, i + k), this.fill);
      else this.buf.fill(0, this.fill, this.fill + k);
      this.fill += k;
      this.position += k;
      i += k;
      if (this.fill === this.buf.length) await this.flush();
    }
  }

  /** Starts writing the buffer and goes on in a free one: unused, or the oldest write's once it is done. */
  private async flush(): Promise<void> {
    if (this.fill === 0) return;
    const done = this.writeOut(this.buf, this.fill, this.bufAt);
    // a failed write throws when it is awaited (held till then, not reported as unhandled)
    done.catch(() => undefined);
    this.writes.push({ done, buf: this.buf });
    this.bufAt += this.fill;
    this.fill = 0;
    if (this.free.length === 0) {
      const oldest = this.writes.shift()!;
      await oldest.done;
      this.free.push(oldest.buf);
    }
    this.buf = this.free.pop()!;
  }

  private async writeOut(buf: Uint8Array, bytes: number, at: number): Promise<void> {
    for (let off = 0; off < bytes;) {
      const { bytesWritten } = await this.fh.write(buf, off, bytes - off, at + off);
      if (bytesWritten === 0) throw new Error(`${this.path}: short write at offset ${at + off}`);
      off += bytesWritten;
    }
    this.writeback?.wrote(bytes);
  }

  /** Waits for every write in flight. */
  private async settle(): Promise<void> {
    for (const w of this.writes.splice(0)) {
      try {
        await w.done;
      } finally {
        this.free.push(w.buf);
      }
    }
  }
}
