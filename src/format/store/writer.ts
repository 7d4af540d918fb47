/**
 * Writing a store (used by src/offline/convert.ts and the predictor tools): streamed, with the
 * chunk checksums computed on the way, and crash-safe.
 */
import { rename, rm } from "node:fs/promises";
import { SequentialWriter } from "../../io/sequential-writer.js";
import { crc32 } from "./checksum.js";
import { encodeHeader, STORE_PAGE, STORE_VERSION } from "./header.js";
import { base64Of, STORE_FORMAT_NAME, type StoreManifest } from "./manifest.js";

export interface StoreWriterOptions {
  /** fsync before the rename (default true), so a crash cannot leave a torn store under the final name */
  fsync?: boolean;
  /** O_DIRECT where the file system takes it (default true): io/sequential-writer.ts */
  direct?: boolean;
}

/** The manifest minus what the writer fills in itself (format, version, checksums). */
export type StoreManifestBody = Omit<StoreManifest, "format" | "version" | "checksums">;

/**
 * Sequential writer of a store. Everything goes to `<path>.partial-<pid>`, whose header page
 * stays zero until finish() has written the manifest; then the header is written, the file is
 * synced and renamed to `path`. A crash or abort never leaves something that opens as a store.
 * The bytes go through io/sequential-writer.ts: written a few MiB at a time while the caller goes
 * on converting (waiting for each write took a store conversion's thread 40% of its time),
 * bypassing the page cache where the file system allows.
 */
export class StoreWriter {
  readonly tmpPath: string;
  /** file offset of the next byte written */
  position = STORE_PAGE;
  /** CRC-32 of every finished chunk since STORE_PAGE */
  private crcs = new Uint32Array(1024);
  private nCrcs = 0;
  private curCrc = 0;
  private curFill = 0;
  private closed = false;

  private constructor(
    readonly path: string,
    private out: SequentialWriter,
    private opts: StoreWriterOptions,
  ) {
    this.tmpPath = out.path;
  }

  static async create(path: string, opts: StoreWriterOptions = {}): Promise<StoreWriter> {
    const tmp = `${path}.partial-${process.pid}`;
    const out = await SequentialWriter.create(tmp, opts);
    const w = new StoreWriter(path, out, opts);
    try {
      // the header page is written as zeros now and for real in finish()
      await out.zeros(STORE_PAGE);
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
    this.position += data.length;
    await this.out.write(data);
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
    await this.out.end();
    this.closed = true;
    await this.out.write(
      encodeHeader({ manifestOffset: end, manifestBytes: json.length, manifestCrc32: crc32(json) }),
      0,
    );
    if (this.opts.fsync !== false) await this.out.sync();
    await this.out.close();
    await rename(this.tmpPath, this.path);
    return { bytes: this.position, manifest };
  }

  /** Close and delete the partial file. */
  async abort(): Promise<void> {
    this.closed = true;
    await this.out.close();
    await rm(this.tmpPath, { force: true });
  }
}
