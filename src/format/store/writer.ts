/**
 * Writing a store (used by src/offline/convert.ts and the predictor tools): streamed, with the
 * chunk checksums computed on the way, and crash-safe.
 */
import { open as openAsync, rename, rm, type FileHandle } from "node:fs/promises";
import { EarlyWriteback } from "../early-writeback.js";
import { crc32 } from "./checksum.js";
import { encodeHeader, STORE_PAGE, STORE_VERSION } from "./header.js";
import { base64Of, STORE_FORMAT_NAME, type StoreManifest } from "./manifest.js";

export interface StoreWriterOptions {
  /** fsync before the rename (default true), so a crash cannot leave a torn store under the final name */
  fsync?: boolean;
  /** bytes buffered before a write system call (default 4 MiB; up to WRITE_BUFFERS such buffers, all but one being written) */
  bufferBytes?: number;
}

/**
 * Buffers a writer fills and writes at once: writes in flight smooth over one that the disk (or a
 * thread pool short of a core) is slow to take.
 */
const WRITE_BUFFERS = 4;

/** The manifest minus what the writer fills in itself (format, version, checksums). */
export type StoreManifestBody = Omit<StoreManifest, "format" | "version" | "checksums">;

/**
 * Sequential writer of a store. Everything goes to `<path>.partial-<pid>`, whose header page
 * stays zero until finish() has written the manifest; then the header is written, the file is
 * synced and renamed to `path`. A crash or abort never leaves something that opens as a store.
 * Full buffers are written while the next fills: the caller goes on converting while the disk
 * writes (waiting for each write took a store conversion's thread 40% of its time).
 */
export class StoreWriter {
  readonly tmpPath: string;
  /** file offset of the next byte written */
  position = STORE_PAGE;
  private buf: Buffer;
  /** buffers free to fill next */
  private free: Buffer[] = [];
  /** writes in flight, oldest first, each with the buffer it writes */
  private writes: { done: Promise<void>; buf: Buffer }[] = [];
  private fill = 0;
  /** the disk writing what is written as it goes (with fsync only) */
  private writeback: EarlyWriteback | undefined;
  /** file offset of buf[0] */
  private bufAt = STORE_PAGE;
  /** CRC-32 of every finished chunk since STORE_PAGE */
  private crcs = new Uint32Array(1024);
  private nCrcs = 0;
  private curCrc = 0;
  private curFill = 0;
  private closed = false;

  private constructor(
    readonly path: string,
    private fh: FileHandle,
    private opts: StoreWriterOptions,
  ) {
    this.tmpPath = `${path}.partial-${process.pid}`;
    this.buf = Buffer.alloc(opts.bufferBytes ?? 4 << 20);
    if (opts.fsync !== false) this.writeback = new EarlyWriteback(fh);
  }

  static async create(path: string, opts: StoreWriterOptions = {}): Promise<StoreWriter> {
    const tmp = `${path}.partial-${process.pid}`;
    const fh = await openAsync(tmp, "w");
    const w = new StoreWriter(path, fh, opts);
    try {
      // the header page is written as zeros now and for real in finish()
      await fh.write(new Uint8Array(STORE_PAGE), 0, STORE_PAGE, 0);
    } catch (e) {
      await w.abort();
      throw e;
    }
    return w;
  }

  /** Append bytes (copied: the caller may reuse `data` as soon as this resolves). */
  async write(data: Uint8Array): Promise<void> {
    if (this.closed) throw new Error(`${this.path}: write after finish/abort`);
    this.checksum(data);
    let i = 0;
    while (i < data.length) {
      const n = Math.min(data.length - i, this.buf.length - this.fill);
      this.buf.set(data.subarray(i, i + n), this.fill);
      this.fill += n;
      i += n;
      if (this.fill === this.buf.length) await this.flush();
    }
    this.position += data.length;
  }

  /** Zeros up to the next multiple of `alignment`. */
  async pad(alignment = STORE_PAGE): Promise<void> {
    const n = (alignment - (this.position % alignment)) % alignment;
    if (n > 0) await this.write(new Uint8Array(n));
  }

  private checksum(data: Uint8Array): void {
    let i = 0;
    while (i < data.length) {
      const n = Math.min(data.length - i, STORE_PAGE - this.curFill);
      this.curCrc = crc32(data.subarray(i, i + n), this.curCrc);
      this.curFill += n;
      i += n;
      if (this.curFill === STORE_PAGE) {
        if (this.nCrcs === this.crcs.length) {
          const next = new Uint32Array(this.crcs.length * 2);
          next.set(this.crcs);
          this.crcs = next;
        }
        this.crcs[this.nCrcs++] = this.curCrc;
        this.curCrc = 0;
        this.curFill = 0;
      }
    }
  }

  /** Starts writing the buffer and goes on in a free one: a new one, or the oldest write's once it is done. */
  private async flush(): Promise<void> {
    const done = this.writeOut(this.buf, this.fill, this.bufAt);
    // a failed write throws when it is awaited (held till then, not reported as unhandled)
    done.catch(() => undefined);
    this.writes.push({ done, buf: this.buf });
    this.bufAt += this.fill;
    this.fill = 0;
    if (this.free.length === 0 && this.writes.length < WRITE_BUFFERS) this.free.push(Buffer.alloc(this.buf.length));
    if (this.free.length === 0) {
      const oldest = this.writes.shift()!;
      await oldest.done;
      this.free.push(oldest.buf);
    }
    this.buf = this.free.pop()!;
  }

  /** Waits for every write in flight. */
  private async settle(): Promise<void> {
    for (const w of this.writes.splice(0)) {
      await w.done;
      this.free.push(w.buf);
    }
  }

  private async writeOut(buf: Buffer, bytes: number, at: number): Promise<void> {
    let off = 0;
    while (off < bytes) {
      const { bytesWritten } = await this.fh.write(buf, off, bytes - off, at + off);
      off += bytesWritten;
    }
    this.writeback?.wrote(bytes);
  }

  /** Write the manifest and the header, sync, rename into place. Returns the file size. */
  async finish(body: StoreManifestBody): Promise<{ bytes: number; manifest: StoreManifest }> {
    await this.pad();
    const end = this.position;
    const manifest: StoreManifest = {
      format: STORE_FORMAT_NAME,
      version: STORE_VERSION,
      ...body,
      // listed even when empty: its presence tells the reader to hold the layout to no gaps
      unused: body.unused ?? [],
      checksums: {
        algorithm: "crc32",
        chunkBytes: STORE_PAGE,
        start: STORE_PAGE,
        end,
        crc32: base64Of(this.crcs.subarray(0, this.nCrcs)),
      },
    };
    const json = Buffer.from(JSON.stringify(manifest), "utf8");
    await this.write(json);
    // the file ends on a page boundary so that an O_DIRECT read of the manifest's last page works
    await this.pad();
    await this.flush();
    await this.settle();
    this.closed = true;
    await this.fh.write(
      encodeHeader({ manifestOffset: end, manifestBytes: json.length, manifestCrc32: crc32(json) }),
      0,
      STORE_PAGE,
      0,
    );
    if (this.opts.fsync !== false) {
      await this.writeback?.settle();
      await this.fh.sync();
    }
    await this.fh.close();
    await rename(this.tmpPath, this.path);
    return { bytes: this.position, manifest };
  }

  /** Close and delete the partial file. */
  async abort(): Promise<void> {
    this.closed = true;
    await this.settle().catch(() => undefined);
    await this.writeback?.settle().catch(() => undefined);
    await this.fh.close().catch(() => undefined);
    await rm(this.tmpPath, { force: true });
  }
}
