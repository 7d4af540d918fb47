/**
 * Reading a store: `NeuronStore` opens one (header, manifest checksum, every structural field of
 * the manifest) and reads from it with every byte checked against its chunk's CRC-32
 * (`verifyRange`), which is how a flipped byte becomes an error instead of a wrong token.
 *
 * It offers the same metadata accessors as GGUFFile (getString/getNumber/..., tensor(),
 * tensorData(), readTensor()), so the config reader and the tokenizer work on a store as they do
 * on a GGUF file.
 */
import { closeSync, fstatSync, readSync } from "node:fs";
import { MetadataAccess, type GGUFTensorInfo, type GGUFValue, type ModelFile } from "../gguf.js";
import { openModelFile } from "../model-file-open.js";
import { crc32, crcHex } from "./checksum.js";
import { decodeHeader, STORE_PAGE, type StoreHeader } from "./header.js";
import type { StoreManifest } from "./manifest.js";
import { checkManifest, type StoreFFN, type StoreFFNLayer, type StoreTensorInfo } from "./manifest-check.js";
import { StoreError } from "./store-error.js";
import { errorText } from "../printable.js";

/** What src/model/config.ts's readConfig and the tokenizer read from a model file: a ModelFile's metadata and tensor table. */
export type ModelMetadataSource = Omit<ModelFile, "readTensor" | "close">;

/** How often verifier() checks a chunk: every time it is read, or the first time only. */
export type VerifyMode = "always" | "once";

/** Largest piece readTensor reads at once (bounds its temporary buffer). */
const READ_PIECE = 16 << 20;

export class NeuronStore extends MetadataAccess implements ModelMetadataSource {
  readonly version: number;
  /** the magic of the model it was converted from: "PWRI" when it came from a PowerInfer GGUF */
  readonly magic: "GGUF" | "PWRI";
  readonly metadata: Map<string, GGUFValue>;
  readonly tensors: Map<string, StoreTensorInfo>;
  readonly ffn: StoreFFN;
  readonly manifest: StoreManifest;
  readonly fileSize: number;
  /** the checksummed region [start, end): everything after the header page up to the manifest */
  readonly checksummed: { readonly start: number; readonly end: number; readonly chunkBytes: number };
  private readonly crcs: Uint32Array;
  /** readTensor's page-aligned staging (reused; reads are synchronous) */
  private scratch = Buffer.alloc(0);
  private verified: Uint8Array | undefined;
  private fd: number;

  private constructor(
    readonly path: string,
    fd: number,
    size: number,
    /** the checked header (the manifest's offset, size and checksum) */
    readonly header: StoreHeader,
    manifest: StoreManifest,
  ) {
    super();
    this.fd = fd;
    this.fileSize = size;
    this.openedStat = { size, mtimeNs: fstatSync(fd, { bigint: true }).mtimeNs };
    this.version = header.version;
    this.manifest = manifest;
    const checked = checkManifest(path, header, manifest);
    this.magic = checked.magic;
    this.metadata = checked.metadata;
    this.tensors = checked.tensors;
    this.ffn = checked.ffn;
    this.checksummed = checked.checksummed;
    this.crcs = checked.crcs;
  }

  /** Open a store: checks the header, the manifest's checksum and every structural field. */
  static open(path: string): NeuronStore {
    const { fd, size } = openModelFile(path, (m) => new StoreError(path, m));
    try {
      if (size < STORE_PAGE)
        throw new StoreError(
          path,
          `file truncated: a store begins with a ${STORE_PAGE}-byte header page, the file has ${size} bytes`,
          0,
        );
      const page = Buffer.alloc(STORE_PAGE);
      preadFully(fd, page, 0, path);
      const header = decodeHeader(path, page, size);
      const raw = Buffer.alloc(header.manifestBytes);
      preadFully(fd, raw, header.manifestOffset, path);
      const got = crc32(raw);
      if (got !== header.manifestCrc32) {
        throw new StoreError(
          path,
          `manifest checksum mismatch (header says 0x${crcHex(header.manifestCrc32)}, the ${header.manifestBytes} bytes give 0x${crcHex(got)}): the file is corrupt`,
          header.manifestOffset,
        );
      }
      let manifest: StoreManifest;
      try {
        manifest = JSON.parse(raw.toString("utf8"));
      } catch (e) {
        throw new StoreError(path, `manifest is not valid JSON: ${errorText(e)}`, header.manifestOffset);
      }
      if (typeof manifest !== "object" || manifest === null)
        throw new StoreError(path, "manifest is not a JSON object", header.manifestOffset);
      return new NeuronStore(path, fd, size, header, manifest);
    } catch (e) {
      closeSync(fd);
      throw e;
    }
  }

  // --- the GGUFFile-like metadata surface ---------------------------------------------------

  /** GGUFFile compatibility: the files the model lives in. */
  get paths(): string[] {
    return [this.path];
  }

  protected metadataError(message: string): Error {
    return new StoreError(this.path, message);
  }

  tensor(name: string): StoreTensorInfo {
    const t = this.tensors.get(name);
    if (!t) {
      const ffn = /^blk\.\d+\.ffn_(gate|up|down|down_t)\.weight$/.test(name)
        ? " (FFN weights live in neuron bundles: see store.ffn)"
        : "";
      throw new StoreError(this.path, `missing tensor "${name}"${ffn}`);
    }
    return t;
  }

  /**
   * Read `length` bytes of a fixed tensor from `start` into dst, verified: the chunks that hold
   * them are read whole and checked against their CRCs first.
   */
  readTensor(t: GGUFTensorInfo, dst: Uint8Array, start = 0, length = t.bytes - start): void {
    if (start < 0 || length < 0 || start + length > t.bytes || dst.length < length)
      throw new RangeError(`${this.path}: bad read of tensor ${t.name} (${start}+${length} of ${t.bytes} bytes)`);
    let done = 0;
    while (done < length) {
      const from = t.offset + start + done;
      const a = from - (from % STORE_PAGE);
      const n = Math.min(length - done, READ_PIECE - (from - a));
      const b = Math.ceil((from + n) / STORE_PAGE) * STORE_PAGE;
      // one scratch buffer, grown as needed: a model run from a store reads an embedding row per token here
      if (this.scratch.length < b - a) this.scratch = Buffer.alloc(b - a);
      const buf = this.scratch.subarray(0, b - a);
      this.readVerified(a, buf);
      dst.set(buf.subarray(from - a, from - a + n), done);
      done += n;
    }
  }

  tensorData(name: string): Uint8Array {
    const t = this.tensor(name);
    const out = new Uint8Array(t.bytes);
    this.readTensor(t, out);
    return out;
  }

  // --- FFN bundles ----------------------------------------------------------------------------

  layer(index: number): StoreFFNLayer {
    const L = this.ffn.layers[index];
    if (!L) throw new RangeError(`${this.path}: no FFN layer ${index} (the store has ${this.ffn.layers.length})`);
    return L;
  }

  /** File offset of the bundle at stored position `pos` of layer `layer`. */
  bundleOffset(layer: number, pos: number): number {
    const L = this.layer(layer);
    if (!Number.isInteger(pos) || pos < 0 || pos >= L.neurons)
      throw new RangeError(`${this.path}: layer ${layer} has no stored position ${pos}`);
    return L.offset + pos * L.bundleBytes;
  }

  /** Read `count` bundles starting at stored position `pos` into dst (verified). */
  readBundles(layer: number, pos: number, count: number, dst: Uint8Array): void {
    const L = this.layer(layer);
    if (count < 1 || pos + count > L.neurons)
      throw new RangeError(`${this.path}: layer ${layer} has no bundles [${pos}, ${pos + count})`);
    if (dst.length < count * L.bundleBytes)
      throw new RangeError(
        `${this.path}: destination holds ${dst.length} bytes, ${count} bundles need ${count * L.bundleBytes}`,
      );
    this.readVerified(this.bundleOffset(layer, pos), dst.subarray(0, count * L.bundleBytes));
  }

  /** Read `count` gate rows of the contiguous copy from stored position `pos` into dst (verified). */
  readGateRows(layer: number, pos: number, count: number, dst: Uint8Array): void {
    const L = this.layer(layer);
    if (L.gateRows === null)
      throw new RangeError(`${this.path}: layer ${layer} has no gate row copy (a store converted before it existed)`);
    if (count < 1 || pos < 0 || pos + count > L.neurons)
      throw new RangeError(`${this.path}: layer ${layer} has no gate rows [${pos}, ${pos + count})`);
    const from = L.gateRows + pos * L.rowBytes;
    const a = from - (from % STORE_PAGE);
    const buf = Buffer.alloc(Math.ceil((from + count * L.rowBytes) / STORE_PAGE) * STORE_PAGE - a);
    this.readVerified(a, buf);
    dst.set(buf.subarray(from - a, from - a + count * L.rowBytes));
  }

  // --- verification -----------------------------------------------------------------------------

  private readVerified(offset: number, dst: Uint8Array): void {
    preadFully(this.fd, dst, offset, this.path);
    this.verifyRange(offset, dst, 0, dst.length);
  }

  /**
   * Check bytes that were read from [fileOffset, fileOffset + length) and now sit at
   * view[viewOffset..] against the chunk checksums. The range must be chunk aligned and inside
   * the checksummed region. Throws a StoreError naming the file, the chunk's offset and what
   * lives there.
   */
  verifyRange(fileOffset: number, view: Uint8Array, viewOffset: number, length: number): void {
    const { start, end, chunkBytes } = this.checksummed;
    if (fileOffset % chunkBytes !== 0 || length % chunkBytes !== 0 || fileOffset < start || fileOffset + length > end) {
      throw new RangeError(
        `${this.path}: cannot verify [${fileOffset}, ${fileOffset + length}): checksums cover ${chunkBytes}-byte chunks of [${start}, ${end})`,
      );
    }
    for (let o = 0; o < length; o += chunkBytes) {
      const chunk = (fileOffset + o - start) / chunkBytes;
      const got = crc32(view.subarray(viewOffset + o, viewOffset + o + chunkBytes));
      if (got !== this.crcs[chunk]) {
        throw new StoreError(
          this.path,
          `checksum mismatch in the ${chunkBytes}-byte chunk at ${fileOffset + o} (${this.describeOffset(fileOffset + o)}): ` +
            `stored 0x${crcHex(this.crcs[chunk])}, read 0x${crcHex(got)}; the file is corrupt or was changed after conversion`,
          fileOffset + o,
        );
      }
    }
  }

  /**
   * A verify hook for the flash reader (FlashReaderOptions.verify). "once" remembers chunks that
   * passed and skips them later: cheaper (CRC-32 runs at ~2 GB/s on one core) but blind to a
   * file changed while it is open.
   */
  verifier(
    mode: VerifyMode = "always",
  ): (fileOffset: number, view: Uint8Array, viewOffset: number, length: number) => void {
    if (mode === "always") return (fo, v, vo, len) => this.verifyRange(fo, v, vo, len);
    const { start, chunkBytes } = this.checksummed;
    const seen = (this.verified ??= new Uint8Array(this.crcs.length));
    return (fo, v, vo, len) => {
      for (let o = 0; o < len; o += chunkBytes) {
        const c = (fo + o - start) / chunkBytes;
        if (seen[c]) continue;
        this.verifyRange(fo + o, v, vo + o, chunkBytes);
        seen[c] = 1;
      }
    };
  }

  /** the file's size and modification time when it was opened (assertUnchanged compares them) */
  private readonly openedStat: { size: number; mtimeNs: bigint };

  /**
   * Throws a StoreError when the file's size or modification time differ from when it was
   * opened: with "once" verification, chunks checked before are not checked again, so a file
   * rewritten under a running model must be caught here (one fstat, ~2 us).
   */
  assertUnchanged(): void {
    if (this.fd < 0) return;
    const st = fstatSync(this.fd, { bigint: true });
    if (Number(st.size) !== this.openedStat.size || st.mtimeNs !== this.openedStat.mtimeNs) {
      throw new StoreError(
        this.path,
        `the file changed on disk while in use (size ${this.openedStat.size} -> ${st.size}, modified since it was opened): reopen it`,
      );
    }
  }

  /**
   * The checksums as a table for a reader that checks reads itself (FlashReaderOptions.checksums):
   * with "once", chunks verified before are skipped and the ones it verifies marked, shared with
   * verifier("once").
   */
  checksumTable(mode: VerifyMode): {
    crcs: Uint32Array;
    start: number;
    end: number;
    chunkBytes: number;
    seen: Uint8Array | null;
  } {
    const { start, end, chunkBytes } = this.checksummed;
    return {
      crcs: this.crcs,
      start,
      end,
      chunkBytes,
      seen: mode === "once" ? (this.verified ??= new Uint8Array(this.crcs.length)) : null,
    };
  }

  /** Read and check every chunk (e.g. after copying a store). Reports bytes checked so far. */
  verifyAll(onProgress?: (done: number, total: number) => void): void {
    const { start, end } = this.checksummed;
    const piece = Buffer.alloc(Math.min(READ_PIECE, Math.max(STORE_PAGE, end - start)));
    for (let o = start; o < end; o += piece.length) {
      const view = piece.subarray(0, Math.min(piece.length, end - o));
      this.readVerified(o, view);
      onProgress?.(o + view.length - start, end - start);
    }
  }

  /** What lives at a file offset, for error messages. */
  describeOffset(offset: number): string {
    if (offset < STORE_PAGE) return "the header page";
    for (const L of this.ffn.layers) {
      if (offset >= L.offset && offset < L.offset + L.neurons * L.bundleBytes) {
        const pos = Math.floor((offset - L.offset) / L.bundleBytes);
        return `layer ${L.index} FFN, bundle at stored position ${pos} (neuron ${L.order[pos]})`;
      }
      if (L.gateRows !== null && offset >= L.gateRows && offset < L.gateRows + L.neurons * L.rowBytes) {
        const pos = Math.floor((offset - L.gateRows) / L.rowBytes);
        return `layer ${L.index} FFN, gate row copy at stored position ${pos} (neuron ${L.order[pos]})`;
      }
    }
    for (const t of this.tensors.values()) {
      if (offset >= t.offset && offset < t.offset + t.paddedBytes) return `fixed tensor ${t.name}`;
    }
    if (offset >= this.checksummed.end) return "the manifest";
    return "padding";
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }
}

function preadFully(fd: number, dst: Uint8Array, offset: number, path: string): void {
  let got = 0;
  while (got < dst.length) {
    const r = readSync(fd, dst, got, Math.min(dst.length - got, 1 << 30), offset + got);
    if (r === 0)
      throw new StoreError(
        path,
        `file truncated: needed ${dst.length} bytes from offset ${offset}, the file ends after ${got}`,
        offset + got,
      );
    got += r;
  }
}
