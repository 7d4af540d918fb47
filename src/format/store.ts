/**
 * The `.pi` neuron store (docs/store-format.md): a model laid out for flash offloading.
 *
 * One file: a 4 KiB header page, the fixed tensors (each 4 KiB aligned, in their GGUF type and
 * layout), the FFN as per-layer arrays of neuron bundles (Gate row i | Up row i | Down column i,
 * each bundle padded to a multiple of 4 KiB), then a JSON manifest. Every 4 KiB chunk between the
 * header and the manifest has a CRC-32 in the manifest; the manifest has one in the header, and
 * the header one of its own fields. Whatever reads part of the file can therefore check exactly
 * what it read (`verifyRange`), which is how a flipped byte becomes an error instead of a wrong
 * token.
 *
 * This module holds both sides of the format: `StoreWriter` (a streaming, crash-safe writer used
 * by src/offline/convert.ts) and `NeuronStore` (the reader). The reader offers the same metadata
 * accessors as GGUFFile (getString/getNumber/..., tensor(), tensorData(), readTensor()), so the
 * config reader and the tokenizer work on a store as they do on a GGUF file.
 */
import { closeSync, fstatSync, readSync } from "node:fs";
import { open as openAsync, rename, rm, type FileHandle } from "node:fs/promises";
import * as zlib from "node:zlib";
import { GGMLType, typeName, typeTraits } from "./ggml-types.js";
import { GGUFValueType, MetadataAccess, type GGUFTensorInfo, type GGUFValue } from "./gguf.js";
import { openModelFile } from "./model-file-open.js";
import { oneLine } from "./printable.js";
import { checkStoreLayout } from "./store-layout-check.js";

export const STORE_MAGIC = "PISTORE\0";
/** The version this writer writes (2: mixtures of experts); the reader also reads version 1. */
export const STORE_VERSION = 2;
export const STORE_OLDEST_VERSION = 1;
/** Alignment of everything that is read together (O_DIRECT needs it) and the checksum chunk. */
export const STORE_PAGE = 4096;
/** Bytes of the header page that carry fields (the rest of the page is zero). */
const HEADER_FIELDS = 40;
const FORMAT_NAME = "powerinfer-ts store";

export class StoreError extends Error {
  constructor(
    readonly file: string,
    message: string,
    readonly offset?: number,
  ) {
    super(oneLine(`${file}: ${message}${offset !== undefined ? ` (at byte offset ${offset})` : ""}`));
    this.name = "StoreError";
  }
}

// ---------------------------------------------------------------------------------------------
// CRC-32 (IEEE, the one zlib, gzip and PNG use)

type Crc32Fn = (data: Uint8Array, value?: number) => number;
/** zlib.crc32 exists from Node 20.15 / 22.2; older runtimes get the table version below. */
const nativeCrc32 = (zlib as unknown as { crc32?: Crc32Fn }).crc32;

let crcTable: Uint32Array | undefined;
function crc32Table(): Uint32Array {
  if (crcTable) return crcTable;
  crcTable = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    crcTable[n] = c >>> 0;
  }
  return crcTable;
}

/** Plain-JS CRC-32, continuing from `value` (the CRC of the preceding bytes). */
export function crc32Portable(data: Uint8Array, value = 0): number {
  const t = crc32Table();
  let c = ~value >>> 0;
  for (let i = 0; i < data.length; i++) c = t[(c ^ data[i]) & 0xff] ^ (c >>> 8);
  return ~c >>> 0;
}

/** CRC-32 of `data`, continuing from `value`; zlib's native code where the runtime has it. */
export const crc32: Crc32Fn = nativeCrc32 ? (d, v = 0) => nativeCrc32(d, v) : crc32Portable;

// ---------------------------------------------------------------------------------------------
// Manifest

/** A GGUF metadata value as the manifest stores it: [key, GGUF value type, encoded value]. */
export type EncodedMetadata = [string, number, unknown];

/** How one tensor of the FFN was changed on the way into bundles (null in the manifest: copied bit for bit). */
export interface StoreConversion {
  /** GGML type id of the source tensor */
  from: number;
  fromName: string;
  /** max |stored value - source value| over the whole layer (or model), after dequantization */
  maxAbsError: number;
  /** root mean square of the same differences */
  rmsError: number;
  /** max |source value|, so the error can be read relative to the weights' scale */
  maxAbsValue: number;
}

export interface StoreLayerManifest {
  /** a mixture of experts (version 2): the layer and the expert this group of bundles is (groups go layer by layer, expert by expert) */
  layer?: number;
  expert?: number;
  /** file offset of stored position 0's bundle (4 KiB aligned) */
  offset: number;
  neurons: number;
  /** base64 of an Int32Array (little endian): stored position -> original neuron index */
  order: string;
  /** base64 of a Float32Array: activation frequency per *original* neuron index, or null */
  frequency: string | null;
  gate: StoreConversion | null;
  up: StoreConversion | null;
  down: StoreConversion | null;
  /**
   * file offset (4 KiB aligned) of a copy of the layer's gate rows in stored order, contiguous
   * (rowBytes each): when the gate rows cannot stay in memory they are streamed from here with
   * large sequential reads. Optional: absent (or null) in stores written before it existed.
   */
  gateRows?: number | null;
}

export interface StoreFixedManifest {
  name: string;
  type: number;
  /** ggml dimension order (dims[0] is the contiguous row length) */
  dims: number[];
  offset: number;
  bytes: number;
}

export interface StoreManifest {
  format: typeof FORMAT_NAME;
  version: number;
  source: { file: string; bytes: number; magic: "GGUF" | "PWRI" };
  metadata: EncodedMetadata[];
  fixed: StoreFixedManifest[];
  ffn: {
    type: number;
    typeName: string;
    /** "gguf": each part is a plain GGUF row (blocks in file order) */
    layout: "gguf";
    nEmbd: number;
    rowBytes: number;
    bundleBytes: number;
    /** byte offsets of the three parts inside a bundle */
    parts: { gate: number; up: number; down: number };
    /** per tensor kind, the worst conversion over all layers (null: every layer copied exactly) */
    conversion: { gate: StoreConversion | null; up: StoreConversion | null; down: StoreConversion | null };
    /** a mixture of experts (version 2): experts per layer; `layers` then holds one group per (layer, expert) */
    experts?: number;
    layers: StoreLayerManifest[];
  };
  /**
   * The profile the FFN was ordered by. `routed` (a mixture of experts): per (layer, expert) group,
   * the share of profiled tokens routed to it; the groups' stored frequencies are per token (that
   * share times the expert's firing among its routed tokens). Absent in stores written before it.
   */
  profile: { file: string | null; tokens: number | null; routed?: number[] } | null;
  checksums: { algorithm: "crc32"; chunkBytes: number; start: number; end: number; crc32: string };
  /**
   * Byte ranges (whole pages) the manifest knowingly leaves unreferenced, e.g. predictors that
   * train-predictors --store replaced; absent in stores written before the layout check.
   */
  unused?: { offset: number; bytes: number; what: string }[];
}

export function base64Of(a: Int32Array | Float32Array | Uint32Array): string {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("base64");
}

function fromBase64<T extends Int32Array | Float32Array | Uint32Array>(
  text: unknown,
  ctor: { new (n: number): T; BYTES_PER_ELEMENT: number },
  fail: (m: string) => never,
  what: string,
): T {
  if (typeof text !== "string") fail(`${what} should be a base64 string`);
  const raw = Buffer.from(text, "base64");
  if (raw.length % ctor.BYTES_PER_ELEMENT !== 0)
    fail(`${what} decodes to ${raw.length} bytes, not a whole number of ${ctor.BYTES_PER_ELEMENT}-byte values`);
  const out = new ctor(raw.length / ctor.BYTES_PER_ELEMENT);
  new Uint8Array(out.buffer).set(raw);
  return out;
}

// ---------------------------------------------------------------------------------------------
// Metadata encoding: GGUF key/values with their exact types, as JSON

/**
 * Encode one scalar for JSON. Integers beyond 2^53 become decimal strings; f32/f64 values JSON
 * cannot spell (NaN, the infinities, -0) become strings too, so every value round-trips exactly.
 */
function encodeScalar(type: number, v: unknown): unknown {
  switch (type) {
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64:
      return typeof v === "bigint" ? v.toString() : v;
    case GGUFValueType.FLOAT32:
    case GGUFValueType.FLOAT64: {
      const n = v as number;
      if (Number.isNaN(n)) return "NaN";
      if (n === Infinity) return "Infinity";
      if (n === -Infinity) return "-Infinity";
      if (Object.is(n, -0)) return "-0";
      return n;
    }
    default:
      return v;
  }
}

/** Encode a value whose GGUF type is known (arrays: { t: item type, v: items or base64 }). */
export function encodeMetadataValue(type: number, itemTypes: readonly number[], v: GGUFValue): unknown {
  if (type !== GGUFValueType.ARRAY) return encodeScalar(type, v);
  const [item, ...inner] = itemTypes;
  if (item === GGUFValueType.FLOAT32 && v instanceof Float32Array) return { t: item, b64: base64Of(v) };
  if (item === GGUFValueType.INT32 && v instanceof Int32Array) return { t: item, b64: base64Of(v) };
  const arr = v as GGUFValue[];
  return { t: item, v: arr.map((x) => encodeMetadataValue(item, inner, x)) };
}

function bigToValue(v: bigint): number | bigint {
  return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
}

/** Decode to exactly the JS value GGUFFile gives for the same GGUF bytes. */
function decodeMetadataValue(type: number, enc: unknown, fail: (m: string) => never, key: string): GGUFValue {
  const bad = (what: string): never => fail(`metadata "${key}": ${what}`);
  switch (type) {
    case GGUFValueType.UINT8:
    case GGUFValueType.INT8:
    case GGUFValueType.UINT16:
    case GGUFValueType.INT16:
    case GGUFValueType.UINT32:
    case GGUFValueType.INT32:
      if (typeof enc !== "number" || !Number.isInteger(enc)) bad(`expected an integer, found ${JSON.stringify(enc)}`);
      return enc as number;
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64:
      if (typeof enc === "number" && Number.isInteger(enc)) return enc;
      if (typeof enc === "string" && /^-?\d+$/.test(enc)) return bigToValue(BigInt(enc));
      return bad(`expected a 64-bit integer, found ${JSON.stringify(enc)}`);
    case GGUFValueType.FLOAT32:
    case GGUFValueType.FLOAT64:
      if (typeof enc === "number") return enc;
      if (enc === "NaN") return NaN;
      if (enc === "Infinity") return Infinity;
      if (enc === "-Infinity") return -Infinity;
      if (enc === "-0") return -0;
      return bad(`expected a number, found ${JSON.stringify(enc)}`);
    case GGUFValueType.BOOL:
      if (typeof enc !== "boolean") bad(`expected a bool, found ${JSON.stringify(enc)}`);
      return enc as boolean;
    case GGUFValueType.STRING:
      if (typeof enc !== "string") bad(`expected a string, found ${JSON.stringify(enc)}`);
      return enc as string;
    case GGUFValueType.ARRAY: {
      if (typeof enc !== "object" || enc === null) return bad("expected an array object { t, v } or { t, b64 }");
      const { t, v, b64 } = enc as { t?: unknown; v?: unknown; b64?: unknown };
      if (typeof t !== "number") return bad("array item type missing");
      if (b64 !== undefined) {
        if (t === GGUFValueType.FLOAT32) return fromBase64(b64, Float32Array, fail, `metadata "${key}"`);
        if (t === GGUFValueType.INT32) return fromBase64(b64, Int32Array, fail, `metadata "${key}"`);
        return bad(`base64 arrays are only for f32 and i32 items, found item type ${t}`);
      }
      if (!Array.isArray(v)) return bad("array items missing");
      const out: GGUFValue[] = new Array(v.length);
      for (let i = 0; i < v.length; i++) out[i] = decodeMetadataValue(t, v[i], fail, key);
      return out;
    }
    default:
      return bad(`unknown GGUF value type ${type}`);
  }
}

// ---------------------------------------------------------------------------------------------
// Header page

export interface StoreHeader {
  version: number;
  flags: number;
  manifestOffset: number;
  manifestBytes: number;
  manifestCrc32: number;
}

/**
 * The header page: magic (8) | u32 version | u32 flags | u64 manifestOffset | u64 manifestBytes
 * | u32 manifestCrc32 | u32 crc32 of the preceding 36 bytes | zeros to 4096.
 */
export function encodeHeader(h: Omit<StoreHeader, "version" | "flags">): Uint8Array {
  const buf = Buffer.alloc(STORE_PAGE);
  buf.write(STORE_MAGIC, 0, "latin1");
  buf.writeUInt32LE(STORE_VERSION, 8);
  buf.writeUInt32LE(0, 12);
  buf.writeBigUInt64LE(BigInt(h.manifestOffset), 16);
  buf.writeBigUInt64LE(BigInt(h.manifestBytes), 24);
  buf.writeUInt32LE(h.manifestCrc32 >>> 0, 32);
  buf.writeUInt32LE(crc32(buf.subarray(0, 36)), 36);
  return buf;
}

function decodeHeader(file: string, page: Buffer, fileSize: number): StoreHeader {
  const magic = page.toString("latin1", 0, 8);
  if (magic !== STORE_MAGIC) {
    const four = magic.slice(0, 4);
    if (four === "GGUF" || four === "PWRI") {
      throw new StoreError(
        file,
        `this is a ${four === "PWRI" ? "PowerInfer " : ""}GGUF model, not a .pi neuron store: convert it first with "powerinfer convert ${file} -o MODEL.pi"`,
        0,
      );
    }
    if (page.subarray(0, 8).every((b) => b === 0)) {
      throw new StoreError(
        file,
        "the header magic is all zeros: an unfinished conversion (the converter writes the magic last); convert again",
        0,
      );
    }
    throw new StoreError(
      file,
      `not a .pi neuron store: magic is ${JSON.stringify(magic)}, expected ${JSON.stringify(STORE_MAGIC)}`,
      0,
    );
  }
  const version = page.readUInt32LE(8);
  if (version < STORE_OLDEST_VERSION || version > STORE_VERSION) {
    throw new StoreError(
      file,
      `store format version ${version} is not supported (this reader handles versions ${STORE_OLDEST_VERSION} to ${STORE_VERSION})${version > STORE_VERSION ? "; a newer powerinfer-ts wrote it" : ""}`,
      8,
    );
  }
  const want = page.readUInt32LE(36),
    got = crc32(page.subarray(0, 36));
  if (want !== got)
    throw new StoreError(
      file,
      `header checksum mismatch (stored 0x${hex(want)}, computed 0x${hex(got)}): the header page is corrupt`,
      0,
    );
  for (let i = HEADER_FIELDS; i < STORE_PAGE; i++) {
    if (page[i] !== 0) throw new StoreError(file, `header page has a non-zero byte in its reserved area`, i);
  }
  const flags = page.readUInt32LE(12);
  if (flags !== 0)
    throw new StoreError(file, `header flags 0x${flags.toString(16)} are not understood by this reader`, 12);
  const mo = page.readBigUInt64LE(16),
    mb = page.readBigUInt64LE(24);
  const manifestOffset = Number(mo),
    manifestBytes = Number(mb);
  if (
    mo > BigInt(Number.MAX_SAFE_INTEGER) ||
    mb > BigInt(Number.MAX_SAFE_INTEGER) ||
    manifestOffset < STORE_PAGE ||
    manifestOffset % STORE_PAGE !== 0 ||
    manifestBytes === 0
  ) {
    throw new StoreError(
      file,
      `header: manifest offset ${mo} / size ${mb} is impossible (the offset must be a positive multiple of ${STORE_PAGE})`,
      16,
    );
  }
  // the writer pads the file to a whole page after the manifest (so O_DIRECT can read its end)
  const end = Math.ceil((manifestOffset + manifestBytes) / STORE_PAGE) * STORE_PAGE;
  if (end > fileSize) {
    throw new StoreError(
      file,
      `file truncated: the manifest at offset ${manifestOffset} (${manifestBytes} bytes, padded to end at ${end}) needs a file of ${end} bytes, this one has ${fileSize}`,
      manifestOffset,
    );
  }
  if (end < fileSize) {
    throw new StoreError(
      file,
      `${fileSize - end} unexpected bytes after the end of the store (${end}): the file was appended to or is not what the converter wrote`,
      end,
    );
  }
  return { version, flags, manifestOffset, manifestBytes, manifestCrc32: page.readUInt32LE(32) };
}

function hex(v: number): string {
  return (v >>> 0).toString(16).padStart(8, "0");
}

// ---------------------------------------------------------------------------------------------
// FFN types a store may hold

/** FFN types a store holds: those quantizeRow can write, since Down is requantized per column. */
export const STORE_FFN_TYPES: readonly GGMLType[] = [
  GGMLType.F32,
  GGMLType.F16,
  GGMLType.BF16,
  GGMLType.Q4_0,
  GGMLType.Q4_1,
  GGMLType.Q5_0,
  GGMLType.Q5_1,
  GGMLType.Q8_0,
];

/**
 * The store type nearest to a source type: itself when storable, else the closest in bits per
 * weight and kind (K-quants have no quantizer here: Q4_K -> Q4_1, both 4-bit with a per-32
 * scale and min; Q5_K -> Q5_1; Q6_K -> Q8_0; Q2_K/Q3_K -> Q4_0, the smallest storable).
 */
export function nearestStoreType(type: GGMLType): GGMLType {
  if (STORE_FFN_TYPES.includes(type)) return type;
  switch (type) {
    case GGMLType.Q2_K:
    case GGMLType.Q3_K:
      return GGMLType.Q4_0;
    case GGMLType.Q4_K:
      return GGMLType.Q4_1;
    case GGMLType.Q5_K:
      return GGMLType.Q5_1;
    case GGMLType.Q6_K:
    case GGMLType.Q8_1:
    case GGMLType.Q8_K:
      return GGMLType.Q8_0;
    default:
      return GGMLType.F32;
  }
}

export function bundleBytesFor(rowBytes: number): number {
  return Math.ceil((3 * rowBytes) / STORE_PAGE) * STORE_PAGE;
}

// ---------------------------------------------------------------------------------------------
// Writer

export interface StoreWriterOptions {
  /** fsync before the rename (default true), so a crash cannot leave a torn store under the final name */
  fsync?: boolean;
  /** bytes buffered before a write system call (default 4 MiB) */
  bufferBytes?: number;
}

/** The manifest minus what the writer fills in itself (format, version, checksums). */
export type StoreManifestBody = Omit<StoreManifest, "format" | "version" | "checksums">;

/**
 * Sequential writer of a store. Everything goes to `<path>.partial-<pid>`, whose header page
 * stays zero until finish() has written the manifest; then the header is written, the file is
 * synced and renamed to `path`. A crash or abort never leaves something that opens as a store.
 */
export class StoreWriter {
  readonly tmpPath: string;
  /** file offset of the next byte written */
  position = STORE_PAGE;
  private buf: Buffer;
  private fill = 0;
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

  private async flush(): Promise<void> {
    let off = 0;
    while (off < this.fill) {
      const { bytesWritten } = await this.fh.write(this.buf, off, this.fill - off, this.bufAt + off);
      off += bytesWritten;
    }
    this.bufAt += this.fill;
    this.fill = 0;
  }

  /** Write the manifest and the header, sync, rename into place. Returns the file size. */
  async finish(body: StoreManifestBody): Promise<{ bytes: number; manifest: StoreManifest }> {
    await this.pad();
    const end = this.position;
    const manifest: StoreManifest = {
      format: FORMAT_NAME,
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
    this.closed = true;
    await this.fh.write(
      encodeHeader({ manifestOffset: end, manifestBytes: json.length, manifestCrc32: crc32(json) }),
      0,
      STORE_PAGE,
      0,
    );
    if (this.opts.fsync !== false) await this.fh.sync();
    await this.fh.close();
    await rename(this.tmpPath, this.path);
    return { bytes: this.position, manifest };
  }

  /** Close and delete the partial file. */
  async abort(): Promise<void> {
    this.closed = true;
    await this.fh.close().catch(() => undefined);
    await rm(this.tmpPath, { force: true });
  }
}

// ---------------------------------------------------------------------------------------------
// Reader

/** A fixed tensor in a store: GGUFTensorInfo (fileIndex 0) plus its page-padded extent. */
export interface StoreTensorInfo extends GGUFTensorInfo {
  /** bytes rounded up to STORE_PAGE: what an O_DIRECT read of the tensor reads */
  readonly paddedBytes: number;
}

export interface StoreFFNLayer {
  /** the group's index in `ffn.layers`: the layer, or for a mixture of experts layer * experts + expert */
  readonly index: number;
  /** the model layer, and the expert (-1 for a dense FFN) */
  readonly layer: number;
  readonly expert: number;
  /** file offset of stored position 0's bundle */
  readonly offset: number;
  readonly neurons: number;
  readonly bundleBytes: number;
  /** bytes of one Gate/Up/Down part (a row of nEmbd values of `type`) */
  readonly rowBytes: number;
  readonly type: GGMLType;
  /** stored position -> original neuron index */
  readonly order: Int32Array;
  /** original neuron index -> stored position */
  readonly position: Int32Array;
  /** activation frequency per original neuron index from the profile, or null */
  readonly frequency: Float32Array | null;
  readonly gate: StoreConversion | null;
  readonly up: StoreConversion | null;
  readonly down: StoreConversion | null;
  /** file offset of the contiguous copy of the gate rows in stored order, or null (see the manifest) */
  readonly gateRows: number | null;
}

export interface StoreFFN {
  readonly type: GGMLType;
  readonly nEmbd: number;
  readonly rowBytes: number;
  readonly bundleBytes: number;
  /** byte offsets of Gate, Up and Down inside a bundle */
  readonly parts: { readonly gate: number; readonly up: number; readonly down: number };
  readonly conversion: StoreManifest["ffn"]["conversion"];
  /** experts per layer (0: a dense FFN, one group per layer) */
  readonly experts: number;
  readonly layers: readonly StoreFFNLayer[];
}

/** What src/model/config.ts's readConfig and the tokenizer read from a model file. */
export interface ModelMetadataSource {
  readonly path: string;
  readonly magic: "GGUF" | "PWRI";
  readonly metadata: Map<string, GGUFValue>;
  readonly tensors: ReadonlyMap<string, GGUFTensorInfo>;
  readonly architecture: string;
  has(key: string): boolean;
  getString(key: string, fallback?: string): string;
  getNumber(key: string, fallback?: number): number;
  getBool(key: string, fallback: boolean): boolean;
  getArray(key: string): GGUFValue[] | Float32Array | Int32Array | undefined;
  tensor(name: string): GGUFTensorInfo;
  tensorData(name: string): Uint8Array;
}

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
    header: StoreHeader,
    manifest: StoreManifest,
  ) {
    super();
    this.fd = fd;
    this.fileSize = size;
    this.openedStat = { size, mtimeNs: fstatSync(fd, { bigint: true }).mtimeNs };
    this.version = header.version;
    this.manifest = manifest;
    const fail = (m: string, at = header.manifestOffset): never => {
      throw new StoreError(path, `manifest: ${m}`, at);
    };
    if (manifest.format !== FORMAT_NAME)
      fail(`format is ${JSON.stringify(manifest.format)}, expected ${JSON.stringify(FORMAT_NAME)}`);
    if (manifest.version !== header.version)
      fail(`version ${manifest.version} differs from the header's ${header.version}`);

    // checksums first: everything else is bounded by the region they cover
    const ck = manifest.checksums;
    if (
      !ck ||
      ck.algorithm !== "crc32" ||
      ck.chunkBytes !== STORE_PAGE ||
      ck.start !== STORE_PAGE ||
      ck.end !== header.manifestOffset
    ) {
      fail(
        `checksums must be crc32 over ${STORE_PAGE}-byte chunks from ${STORE_PAGE} to the manifest (${header.manifestOffset}); found ${JSON.stringify({ ...ck, crc32: undefined })}`,
      );
    }
    this.crcs = fromBase64(ck.crc32, Uint32Array, fail, "checksums.crc32");
    const chunks = (ck.end - ck.start) / ck.chunkBytes;
    if (this.crcs.length !== chunks)
      fail(`checksums.crc32 has ${this.crcs.length} entries, the region [${ck.start}, ${ck.end}) has ${chunks} chunks`);
    this.checksummed = { start: ck.start, end: ck.end, chunkBytes: ck.chunkBytes };
    const inRegion = (what: string, offset: unknown, bytes: number) => {
      if (typeof offset !== "number" || !Number.isSafeInteger(offset) || offset % STORE_PAGE !== 0)
        fail(`${what}: offset ${offset} is not a multiple of ${STORE_PAGE}`);
      if ((offset as number) < ck.start || (offset as number) + bytes > ck.end) {
        fail(
          `${what}: bytes [${offset}, ${(offset as number) + bytes}) lie outside the data region [${ck.start}, ${ck.end})`,
        );
      }
    };

    const src = manifest.source;
    if (!src || (src.magic !== "GGUF" && src.magic !== "PWRI")) fail(`source.magic must be "GGUF" or "PWRI"`);
    this.magic = src.magic;

    if (!Array.isArray(manifest.metadata)) fail("metadata must be an array of [key, type, value]");
    this.metadata = new Map();
    for (const e of manifest.metadata) {
      if (!Array.isArray(e) || e.length !== 3 || typeof e[0] !== "string" || typeof e[1] !== "number")
        fail(`metadata entry ${JSON.stringify(e).slice(0, 80)} is not [key, type, value]`);
      this.metadata.set(e[0], decodeMetadataValue(e[1], e[2], fail, e[0]));
    }

    if (!Array.isArray(manifest.fixed)) fail("fixed must be an array");
    this.tensors = new Map();
    for (const t of manifest.fixed) {
      const traits = typeTraits(t?.type);
      if (typeof t?.name !== "string" || !traits)
        fail(`fixed tensor ${JSON.stringify(t?.name)} has unknown type ${t?.type}`);
      if (
        !Array.isArray(t.dims) ||
        t.dims.length < 1 ||
        t.dims.length > 4 ||
        !t.dims.every((d) => Number.isSafeInteger(d) && d > 0)
      )
        fail(`fixed tensor "${t.name}" has bad dims ${JSON.stringify(t.dims)}`);
      const elements = t.dims.reduce((a, b) => a * b, 1);
      if (t.dims[0] % traits!.blockSize !== 0 || (elements / traits!.blockSize) * traits!.typeSize !== t.bytes) {
        fail(`fixed tensor "${t.name}": ${typeName(t.type)} [${t.dims.join(", ")}] cannot take ${t.bytes} bytes`);
      }
      const paddedBytes = Math.ceil(t.bytes / STORE_PAGE) * STORE_PAGE;
      inRegion(`fixed tensor "${t.name}"`, t.offset, paddedBytes);
      if (this.tensors.has(t.name)) fail(`fixed tensor "${t.name}" appears twice`);
      this.tensors.set(t.name, {
        name: t.name,
        dims: t.dims,
        type: t.type,
        elements,
        bytes: t.bytes,
        fileIndex: 0,
        offset: t.offset,
        paddedBytes,
      });
    }

    const f = manifest.ffn;
    if (!f || !STORE_FFN_TYPES.includes(f.type))
      fail(`ffn.type ${f?.type} is not a type a store may hold (${STORE_FFN_TYPES.map(typeName).join(", ")})`);
    if (f.layout !== "gguf") fail(`ffn.layout ${JSON.stringify(f.layout)} is not understood (expected "gguf")`);
    const tr = typeTraits(f.type)!;
    if (!Number.isSafeInteger(f.nEmbd) || f.nEmbd <= 0 || f.nEmbd % tr.blockSize !== 0)
      fail(`ffn.nEmbd ${f.nEmbd} is not a positive multiple of the ${tr.name} block size`);
    const rb = (f.nEmbd / tr.blockSize) * tr.typeSize;
    if (f.rowBytes !== rb) fail(`ffn.rowBytes ${f.rowBytes} should be ${rb} for ${f.nEmbd} ${tr.name} values`);
    if (f.bundleBytes !== bundleBytesFor(rb)) fail(`ffn.bundleBytes ${f.bundleBytes} should be ${bundleBytesFor(rb)}`);
    if (f.parts?.gate !== 0 || f.parts.up !== rb || f.parts.down !== 2 * rb)
      fail(`ffn.parts ${JSON.stringify(f.parts)} should be { gate: 0, up: ${rb}, down: ${2 * rb} }`);
    if (!Array.isArray(f.layers)) fail("ffn.layers must be an array");
    const experts = f.experts ?? 0;
    if (!Number.isSafeInteger(experts) || experts < 0 || experts > 1024)
      fail(`ffn.experts ${JSON.stringify(f.experts)} is not an expert count (0..1024)`);
    if (experts > 0 && f.layers.length % experts !== 0)
      fail(`ffn.layers has ${f.layers.length} groups, not a whole number of layers of ${experts} experts`);
    const layers: StoreFFNLayer[] = [];
    f.layers.forEach((L, index) => {
      const what =
        experts > 0
          ? `ffn group ${index} (layer ${Math.floor(index / experts)}, expert ${index % experts})`
          : `ffn layer ${index}`;
      const layer = experts > 0 ? Math.floor(index / experts) : index;
      const expert = experts > 0 ? index % experts : -1;
      if (experts > 0 ? L?.layer !== layer || L?.expert !== expert : L?.layer !== undefined || L?.expert !== undefined)
        fail(`${what}: says layer ${L?.layer}, expert ${L?.expert}`);
      if (!Number.isSafeInteger(L?.neurons) || L.neurons <= 0)
        fail(`${what}: neurons ${L?.neurons} is not a positive integer`);
      inRegion(what, L.offset, L.neurons * f.bundleBytes);
      const order = fromBase64(L.order, Int32Array, fail, `${what} order`);
      if (order.length !== L.neurons) fail(`${what}: order has ${order.length} entries for ${L.neurons} neurons`);
      const position = new Int32Array(L.neurons).fill(-1);
      for (let p = 0; p < order.length; p++) {
        const n = order[p];
        if (n < 0 || n >= L.neurons || position[n] !== -1)
          fail(`${what}: order is not a permutation (entry ${p} = ${n})`);
        position[n] = p;
      }
      const frequency = L.frequency == null ? null : fromBase64(L.frequency, Float32Array, fail, `${what} frequency`);
      if (L.gateRows != null)
        inRegion(`${what} gate rows`, L.gateRows, Math.ceil((L.neurons * rb) / STORE_PAGE) * STORE_PAGE);
      if (frequency && frequency.length !== L.neurons)
        fail(`${what}: frequency has ${frequency.length} entries for ${L.neurons} neurons`);
      layers.push({
        index,
        layer,
        expert,
        offset: L.offset,
        neurons: L.neurons,
        bundleBytes: f.bundleBytes,
        rowBytes: rb,
        type: f.type,
        order,
        position,
        frequency,
        gate: L.gate ?? null,
        up: L.up ?? null,
        down: L.down ?? null,
        gateRows: L.gateRows ?? null,
      });
    });
    this.ffn = {
      type: f.type,
      nEmbd: f.nEmbd,
      rowBytes: rb,
      bundleBytes: f.bundleBytes,
      parts: { gate: 0, up: rb, down: 2 * rb },
      conversion: f.conversion,
      experts,
      layers,
    };
    const layout = {
      tensors: [...this.tensors.values()],
      layers,
      experts,
      unused: manifest.unused,
      start: ck.start,
      end: ck.end,
    };
    checkStoreLayout({ metadata: this.metadata, ...layout }, fail);
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
          `manifest checksum mismatch (header says 0x${hex(header.manifestCrc32)}, the ${header.manifestBytes} bytes give 0x${hex(got)}): the file is corrupt`,
          header.manifestOffset,
        );
      }
      let manifest: StoreManifest;
      try {
        manifest = JSON.parse(raw.toString("utf8"));
      } catch (e) {
        throw new StoreError(path, `manifest is not valid JSON: ${(e as Error).message}`, header.manifestOffset);
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
            `stored 0x${hex(this.crcs[chunk])}, read 0x${hex(got)}; the file is corrupt or was changed after conversion`,
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
