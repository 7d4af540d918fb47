/**
 * Safetensors reader: one file, or a Hugging Face checkpoint's shards listed by
 * `model.safetensors.index.json`.
 *
 * A file is an 8-byte little-endian header length, a JSON header mapping each tensor name to its
 * dtype, shape and [begin, end) byte range within the data that follows, then the data. Every
 * claim of the header is checked when the file is opened (ranges inside the file, no two tensors
 * overlapping, dtype x shape = byte length), so a later read never runs off the data or returns
 * another tensor's bytes; each error names the file, and the tensor and offset where one applies.
 * Tensors are read in row ranges and widened to f32, so a caller streams a multi-GB tensor
 * without holding it.
 */
import { closeSync, existsSync, fstatSync, openSync, readdirSync, readFileSync, readSync } from "node:fs";
import { basename, join } from "node:path";
import { f16Table } from "../half.js";
import { errorText } from "../printable.js";
import { threadQuantKernels } from "../../runtime/quant-kernels.js";

export class SafetensorsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SafetensorsError";
  }
}

/** Element sizes of the dtypes the format defines; only F32, F16 and BF16 can be read as values. */
const DTYPE_BYTES: Readonly<Record<string, number>> = {
  F64: 8,
  F32: 4,
  F16: 2,
  BF16: 2,
  I64: 8,
  U64: 8,
  I32: 4,
  U32: 4,
  I16: 2,
  U16: 2,
  I8: 1,
  U8: 1,
  BOOL: 1,
  F8_E4M3: 1,
  F8_E5M2: 1,
  F8_E8M0: 1,
};
export const READABLE_DTYPES = ["F32", "F16", "BF16"] as const;

/** The safetensors format caps the header at 100 MB; a larger length is a corrupt file. */
const MAX_HEADER_BYTES = 100_000_000;

export interface SafetensorsTensor {
  name: string;
  /** the file that holds it */
  file: string;
  dtype: string;
  /** as stored: row-major, the last dimension contiguous */
  shape: number[];
  /** absolute byte offset of the first element in `file` */
  offset: number;
  bytes: number;
  elements: number;
}

/** A read of a tensor's stored bytes (SafetensorsFile.valueRead), plain data to post to a worker. */
export interface ValueRead {
  fd: number;
  /** the file offset */
  position: number;
  /** for messages */
  file: string;
  tensor: string;
}

/** dst.length bytes from `position` of the open file `fd` (`file` and `tensor` name it in errors). */
function readFully(fd: number, dst: Uint8Array, position: number, file: string, tensor?: string): void {
  const where = tensor === undefined ? "" : `tensor "${tensor}": `;
  for (let done = 0; done < dst.length;) {
    let n: number;
    try {
      n = readSync(fd, dst, done, dst.length - done, position + done);
    } catch (e) {
      throw new SafetensorsError(`${file}: ${where}read at offset ${position + done} failed: ${errorText(e)}`);
    }
    if (n === 0)
      throw new SafetensorsError(`${file}: ${where}truncated: read at offset ${position + done} returned nothing`);
    done += n;
  }
}

/** The bytes of a ValueRead into dst (its length). */
export function readValues(r: ValueRead, dst: Uint8Array): void {
  readFully(r.fd, dst, r.position, r.file, r.tensor);
}

export class SafetensorsFile {
  readonly path: string;
  readonly tensors = new Map<string, SafetensorsTensor>();
  /** the header's `__metadata__` (string to string), if any */
  readonly metadata: Record<string, string> = {};
  readonly size: number;
  private fd: number;

  private constructor(path: string, fd: number, size: number) {
    this.path = path;
    this.fd = fd;
    this.size = size;
  }

  static open(path: string): SafetensorsFile {
    let fd: number;
    try {
      fd = openSync(path, "r");
    } catch (e) {
      throw new SafetensorsError(`${path}: cannot open: ${errorText(e)}`);
    }
    try {
      const f = new SafetensorsFile(path, fd, fstatSync(fd).size);
      f.parseHeader();
      return f;
    } catch (e) {
      closeSync(fd);
      throw e;
    }
  }

  close(): void {
    if (this.fd >= 0) closeSync(this.fd);
    this.fd = -1;
  }

  private fail(msg: string): never {
    throw new SafetensorsError(`${this.path}: ${msg}`);
  }

  private parseHeader(): void {
    if (this.size < 8) this.fail(`truncated header: the file has ${this.size} bytes, fewer than the 8-byte length`);
    const lenBuf = Buffer.alloc(8);
    this.readAt(lenBuf, 0);
    const len = lenBuf.readBigUInt64LE(0);
    if (len > BigInt(MAX_HEADER_BYTES)) this.fail(`header length ${len} is over the format's 100 MB limit`);
    const headerBytes = Number(len);
    if (8 + headerBytes > this.size)
      this.fail(`truncated header: it claims ${headerBytes} bytes but the file ends after ${this.size - 8}`);
    const text = Buffer.alloc(headerBytes);
    this.readAt(text, 8);
    let header: unknown;
    try {
      header = JSON.parse(text.toString("utf8"));
    } catch (e) {
      this.fail(`header is not JSON: ${errorText(e)}`);
    }
    if (typeof header !== "object" || header === null || Array.isArray(header))
      this.fail("header is not a JSON object");
    const dataStart = 8 + headerBytes;
    const dataBytes = this.size - dataStart;
    const ranges: { name: string; begin: number; end: number }[] = [];
    for (const [name, entry] of Object.entries(header as Record<string, unknown>)) {
      if (name === "__metadata__") {
        if (typeof entry !== "object" || entry === null || Array.isArray(entry))
          this.fail(`"__metadata__" is not an object`);
        for (const [k, v] of Object.entries(entry as Record<string, unknown>)) {
          if (typeof v !== "string") this.fail(`"__metadata__"."${k}" is not a string`);
          this.metadata[k] = v;
        }
        continue;
      }
      const t = this.parseEntry(name, entry, dataStart, dataBytes);
      ranges.push({ name, begin: t.offset - dataStart, end: t.offset - dataStart + t.bytes });
      this.tensors.set(name, t);
    }
    ranges.sort((a, b) => a.begin - b.begin || a.end - b.end);
    for (let i = 1; i < ranges.length; i++) {
      const a = ranges[i - 1],
        b = ranges[i];
      if (b.begin < a.end && b.end > b.begin && a.end > a.begin)
        this.fail(
          `tensors "${a.name}" [${a.begin}, ${a.end}) and "${b.name}" [${b.begin}, ${b.end}) overlap in the data`,
        );
    }
  }

  private parseEntry(name: string, entry: unknown, dataStart: number, dataBytes: number): SafetensorsTensor {
    const where = `tensor "${name}"`;
    if (typeof entry !== "object" || entry === null || Array.isArray(entry))
      this.fail(`${where}: entry is not an object`);
    const e = entry as Record<string, unknown>;
    const dtype = e.dtype;
    if (typeof dtype !== "string" || !(dtype in DTYPE_BYTES))
      this.fail(`${where}: unknown dtype ${JSON.stringify(dtype)}`);
    const shape = e.shape;
    if (!Array.isArray(shape) || shape.some((d) => !Number.isSafeInteger(d) || d < 0))
      this.fail(`${where}: shape ${JSON.stringify(shape)} is not a list of non-negative integers`);
    const offs = e.data_offsets;
    if (!Array.isArray(offs) || offs.length !== 2 || offs.some((d) => !Number.isSafeInteger(d) || d < 0))
      this.fail(`${where}: data_offsets ${JSON.stringify(offs)} is not a pair of non-negative integers`);
    const [begin, end] = offs as number[];
    if (end < begin) this.fail(`${where}: data_offsets [${begin}, ${end}] end before they begin`);
    if (end > dataBytes)
      this.fail(
        `truncated data: ${where} ends at data offset ${end} (file offset ${dataStart + end}) but the file has ${dataBytes} data bytes`,
      );
    let elements = 1;
    for (const d of shape as number[]) elements *= d;
    const want = elements * DTYPE_BYTES[dtype];
    if (!Number.isSafeInteger(want) || want !== end - begin)
      this.fail(
        `${where}: ${dtype} [${(shape as number[]).join(", ")}] needs ${want} bytes, its data_offsets [${begin}, ${end}] hold ${end - begin}`,
      );
    return {
      name,
      file: this.path,
      dtype,
      shape: [...(shape as number[])],
      offset: dataStart + begin,
      bytes: want,
      elements,
    };
  }

  /** `tensor`: the one read, named when the file ends before the header said (cut short since it was opened) */
  private readAt(buf: Uint8Array, position: number, tensor?: string): void {
    readFully(this.fd, buf, position, this.path, tensor);
  }

  /** The raw bytes [from, from + n) of a tensor. */
  readBytes(t: SafetensorsTensor, from: number, dst: Uint8Array): void {
    this.checkRange(t, from, dst.length);
    this.readAt(dst, t.offset + from, t.name);
  }

  /**
   * The stored bytes of elements [first, first + dst.length / element size) of a tensor of a
   * readable dtype (F32, F16, BF16), in row-major order: what widenToF32 takes.
   */
  readValueBytes(t: SafetensorsTensor, first: number, dst: Uint8Array): void {
    readValues(this.valueRead(t, first, dst.length), dst);
  }

  /**
   * What readValueBytes(t, first, dst) reads for a dst of `bytes` bytes, checked, as a read that
   * another thread of this process can make (readValues): the conversion's workers read their
   * chunks themselves. Valid while this file is open.
   */
  valueRead(t: SafetensorsTensor, first: number, bytes: number): ValueRead {
    if (!(READABLE_DTYPES as readonly string[]).includes(t.dtype))
      this.fail(`tensor "${t.name}" is ${t.dtype}: only ${READABLE_DTYPES.join(", ")} can be converted`);
    const from = first * DTYPE_BYTES[t.dtype];
    this.checkRange(t, from, bytes);
    if (this.fd < 0) this.fail(`tensor "${t.name}": the file is closed`);
    return { fd: this.fd, position: t.offset + from, file: this.path, tensor: t.name };
  }

  private checkRange(t: SafetensorsTensor, from: number, bytes: number): void {
    if (from < 0 || from + bytes > t.bytes)
      this.fail(`tensor "${t.name}": read of ${bytes} bytes at ${from} is outside its ${t.bytes}`);
  }

  /**
   * Elements [first, first + dst.length) of a tensor in row-major order, widened to f32 into dst.
   * `scratch` (optional) is reused for the raw bytes. Returns the first element read that is not
   * finite (its index in dst), or -1.
   */
  readF32(t: SafetensorsTensor, first: number, dst: Float32Array, scratch?: Uint8Array): number {
    const bytes = dst.length * DTYPE_BYTES[t.dtype];
    const raw = scratch && scratch.length >= bytes ? scratch.subarray(0, bytes) : new Uint8Array(bytes);
    this.readValueBytes(t, first, raw);
    return widenChecked(t.dtype, raw, dst);
  }
}

/** Below this many values a widening stays in TS: the kernels' copies in and out would cost more than they save. */
const KERNEL_WIDEN = 4096;

/**
 * widenToF32, also finding the first value that is not finite (-1: none). F16 and BF16 go
 * through the thread's WASM kernels (src/runtime/quant-kernels.ts: the same values, and the check
 * for free), which a store's FFN rows, all widened on the converting thread, need.
 */
export function widenChecked(dtype: string, raw: Uint8Array, dst: Float32Array): number {
  if ((dtype === "F16" || dtype === "BF16") && dst.length >= KERNEL_WIDEN)
    return threadQuantKernels().widenInto(dtype, raw, dst);
  widenToF32(dtype, raw, dst);
  return firstNonFinite(dst);
}

/** The index of the first value that is not finite, or -1. */
export function firstNonFinite(v: Float32Array): number {
  for (let i = 0; i < v.length; i++) if (!Number.isFinite(v[i])) return i;
  return -1;
}

/** F32, F16 or BF16 bytes (little-endian) to f32 values. */
export function widenToF32(dtype: string, raw: Uint8Array, dst: Float32Array): void {
  const n = dst.length;
  if (raw.byteOffset % (dtype === "F32" ? 4 : 2) === 0) {
    // aligned (the usual case: the caller's scratch buffer): whole-array views, no DataView per
    // value (typed arrays are little-endian on every platform Node runs on, as the format is)
    if (dtype === "F32") return dst.set(new Float32Array(raw.buffer, raw.byteOffset, n));
    const h = new Uint16Array(raw.buffer, raw.byteOffset, n);
    if (dtype === "F16") for (let i = 0; i < n; i++) dst[i] = f16Table[h[i]];
    else if (dtype === "BF16") {
      const bits = new Uint32Array(dst.buffer, dst.byteOffset, n);
      for (let i = 0; i < n; i++) bits[i] = h[i] << 16;
    } else throw new SafetensorsError(`dtype ${dtype} cannot be widened to f32`);
    return;
  }
  const dv = new DataView(raw.buffer, raw.byteOffset, raw.byteLength);
  if (dtype === "F32") for (let i = 0; i < n; i++) dst[i] = dv.getFloat32(4 * i, true);
  else if (dtype === "F16") for (let i = 0; i < n; i++) dst[i] = f16Table[dv.getUint16(2 * i, true)];
  else if (dtype === "BF16") {
    // a bf16 is the top half of an f32: move the bits, no arithmetic (NaN payloads kept)
    const bits = new Uint32Array(dst.buffer, dst.byteOffset, n);
    for (let i = 0; i < n; i++) bits[i] = dv.getUint16(2 * i, true) << 16;
  } else throw new SafetensorsError(`dtype ${dtype} cannot be widened to f32`);
}

/** The directory's model*.safetensors files, sorted. */
function shardFiles(dir: string): string[] {
  return readdirSync(dir)
    .filter((n) => /^model.*\.safetensors$/.test(n))
    .sort();
}

export const INDEX_FILE = "model.safetensors.index.json";

/**
 * A checkpoint's tensors over all its shards: by `model.safetensors.index.json` when the
 * directory has one (every shard it names must exist and hold the tensors it lists there, and
 * no shard may hold a tensor the index does not list), else every `model*.safetensors` file.
 */
export class SafetensorsCheckpoint {
  readonly dir: string;
  readonly files: SafetensorsFile[] = [];
  readonly tensors = new Map<string, SafetensorsTensor>();
  private byPath = new Map<string, SafetensorsFile>();

  private constructor(dir: string) {
    this.dir = dir;
  }

  static open(dir: string): SafetensorsCheckpoint {
    const c = new SafetensorsCheckpoint(dir);
    try {
      c.load();
    } catch (e) {
      c.close();
      throw e;
    }
    return c;
  }

  private openShard(path: string): SafetensorsFile {
    let f = this.byPath.get(path);
    if (!f) {
      f = SafetensorsFile.open(path);
      this.byPath.set(path, f);
      this.files.push(f);
    }
    return f;
  }

  private load(): void {
    const indexPath = join(this.dir, INDEX_FILE);
    if (existsSync(indexPath)) {
      let index: unknown;
      try {
        index = JSON.parse(readFileSync(indexPath, "utf8"));
      } catch (e) {
        throw new SafetensorsError(`${indexPath}: not JSON: ${errorText(e)}`);
      }
      const map = (index as { weight_map?: unknown } | null)?.weight_map;
      if (typeof map !== "object" || map === null || Array.isArray(map))
        throw new SafetensorsError(`${indexPath}: "weight_map" is missing or not an object`);
      const listed = new Map<string, Set<string>>();
      for (const [name, shard] of Object.entries(map as Record<string, unknown>)) {
        if (typeof shard !== "string" || shard === "" || basename(shard) !== shard)
          throw new SafetensorsError(
            `${indexPath}: tensor "${name}" names shard ${JSON.stringify(shard)}, not a file name`,
          );
        const path = join(this.dir, shard);
        if (!existsSync(path))
          throw new SafetensorsError(`${indexPath}: missing shard ${path} (it should hold tensor "${name}")`);
        const f = this.openShard(path);
        const t = f.tensors.get(name);
        if (!t)
          throw new SafetensorsError(
            `${indexPath}: tensor "${name}" is listed in shard ${path}, which does not hold it`,
          );
        this.tensors.set(name, t);
        if (!listed.has(path)) listed.set(path, new Set());
        listed.get(path)!.add(name);
      }
      // a shard beside the index that it never names would be weights dropped without a word
      for (const n of shardFiles(this.dir))
        if (!this.byPath.has(join(this.dir, n)))
          throw new SafetensorsError(`${join(this.dir, n)}: shard is not named by ${indexPath}`);
      for (const f of this.files)
        for (const name of f.tensors.keys())
          if (!listed.get(f.path)!.has(name))
            throw new SafetensorsError(`${f.path}: tensor "${name}" is not listed in ${indexPath} for this shard`);
      return;
    }
    const shards = shardFiles(this.dir);
    if (shards.length === 0) throw new SafetensorsError(`${this.dir}: no model*.safetensors file and no ${INDEX_FILE}`);
    for (const s of shards) {
      const f = this.openShard(join(this.dir, s));
      for (const [name, t] of f.tensors) {
        const before = this.tensors.get(name);
        if (before) throw new SafetensorsError(`tensor "${name}" is in both ${before.file} and ${f.path}`);
        this.tensors.set(name, t);
      }
    }
  }

  /** The file a tensor is in (for reads). */
  fileOf(t: SafetensorsTensor): SafetensorsFile {
    return this.byPath.get(t.file)!;
  }

  get bytes(): number {
    let n = 0;
    for (const t of this.tensors.values()) n += t.bytes;
    return n;
  }

  close(): void {
    for (const f of this.files) f.close();
  }
}
