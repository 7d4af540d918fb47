/**
 * GGUF reader: header, metadata and tensor index by positional reads, tensor data on demand.
 *
 * Files over 2 GiB and split models (`name-00001-of-0000N.gguf`) are handled; nothing reads a
 * whole file into memory. PowerInfer's sparse GGUF ("PWRI" magic) has the same layout.
 * Every structural problem becomes a GGUFError naming the file, the byte offset and what was
 * expected, so a truncated or hostile file can never crash or hang the loader.
 */
import { closeSync, readSync, existsSync } from "node:fs";
import { basename, dirname, join } from "node:path";
import { GGMLType, traitsBytes, typeTraits, typeName } from "./ggml-types.js";
import { openModelFile } from "./model-file-open.js";
import { oneLine, quoted } from "./printable.js";

export class GGUFError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(oneLine(`${basename(file)}: ${message}`));
    this.name = "GGUFError";
  }
}

/**
 * `<arch>.rope.scaling.yarn_truncate` (bool): whether YaRN's ramp ends are rounded to whole pairs.
 * Absent: true, as llama.cpp always computes; not a llama.cpp key (it ignores it). convert writes
 * false for a checkpoint trained with the unrounded ramp (transformers' `truncate: false`).
 */
export const YARN_TRUNCATE_KEY = "rope.scaling.yarn_truncate";

export enum GGUFValueType {
  UINT8 = 0,
  INT8 = 1,
  UINT16 = 2,
  INT16 = 3,
  UINT32 = 4,
  INT32 = 5,
  FLOAT32 = 6,
  BOOL = 7,
  STRING = 8,
  ARRAY = 9,
  UINT64 = 10,
  INT64 = 11,
  FLOAT64 = 12,
}

/** A metadata value: numbers (64-bit ints become numbers when exact, else bigint), strings, arrays. */
export type GGUFValue = number | bigint | boolean | string | GGUFValue[] | Float32Array | Int32Array;

export interface GGUFTensorInfo {
  readonly name: string;
  /** ggml order: dims[0] is the row length (contiguous), dims[1] the row count, ... */
  readonly dims: number[];
  readonly type: GGMLType;
  readonly elements: number;
  readonly bytes: number;
  /** which split file holds it and its absolute byte offset there */
  readonly fileIndex: number;
  readonly offset: number;
}

const MAX_DIMS = 4;
const MAX_STRING = 1 << 30;
const READ_CHUNK = 1 << 20;

/** Sequential reader over a file descriptor that fetches 1 MiB windows with positional reads. */
class HeaderCursor {
  private buf = Buffer.alloc(0);
  private bufStart = 0;
  pos = 0;
  constructor(
    private fd: number,
    readonly size: number,
    private file: string,
  ) {}

  fail(what: string, at = this.pos): never {
    throw new GGUFError(this.file, `${what} (at byte offset ${at})`);
  }

  private ensure(n: number, what: string): number {
    if (this.pos + n > this.size)
      this.fail(`file truncated: ${what} needs ${n} bytes but only ${this.size - this.pos} remain`);
    const rel = this.pos - this.bufStart;
    if (rel >= 0 && rel + n <= this.buf.length) return rel;
    const len = Math.min(Math.max(n, READ_CHUNK), this.size - this.pos);
    this.buf = Buffer.alloc(len);
    let got = 0;
    while (got < len) {
      const r = readSync(this.fd, this.buf, got, len - got, this.pos + got);
      if (r === 0) this.fail(`unexpected end of file while reading ${what}`);
      got += r;
    }
    this.bufStart = this.pos;
    return 0;
  }

  u8(what: string) {
    const o = this.ensure(1, what);
    this.pos += 1;
    return this.buf.readUInt8(o);
  }
  i8(what: string) {
    const o = this.ensure(1, what);
    this.pos += 1;
    return this.buf.readInt8(o);
  }
  u16(what: string) {
    const o = this.ensure(2, what);
    this.pos += 2;
    return this.buf.readUInt16LE(o);
  }
  i16(what: string) {
    const o = this.ensure(2, what);
    this.pos += 2;
    return this.buf.readInt16LE(o);
  }
  u32(what: string) {
    const o = this.ensure(4, what);
    this.pos += 4;
    return this.buf.readUInt32LE(o);
  }
  i32(what: string) {
    const o = this.ensure(4, what);
    this.pos += 4;
    return this.buf.readInt32LE(o);
  }
  f32(what: string) {
    const o = this.ensure(4, what);
    this.pos += 4;
    return this.buf.readFloatLE(o);
  }
  f64(what: string) {
    const o = this.ensure(8, what);
    this.pos += 8;
    return this.buf.readDoubleLE(o);
  }
  u64(what: string): bigint {
    const o = this.ensure(8, what);
    this.pos += 8;
    return this.buf.readBigUInt64LE(o);
  }
  i64(what: string): bigint {
    const o = this.ensure(8, what);
    this.pos += 8;
    return this.buf.readBigInt64LE(o);
  }

  /** A u64 count or size that must fit the rest of the file (each item at least `minItemBytes`). */
  count(what: string, minItemBytes: number): number {
    const at = this.pos;
    const v = this.u64(what);
    const room = BigInt(this.size - this.pos);
    if (v * BigInt(Math.max(1, minItemBytes)) > room)
      this.fail(`${what} = ${v} is larger than the rest of the file (${room} bytes)`, at);
    return Number(v);
  }

  str(what: string): string {
    const at = this.pos;
    const n = this.count(`${what} length`, 1);
    if (n > MAX_STRING) this.fail(`${what} length ${n} is absurd`, at);
    const o = this.ensure(n, what);
    this.pos += n;
    return this.buf.toString("utf8", o, o + n);
  }

  bytes(n: number, what: string): Buffer {
    const o = this.ensure(n, what);
    this.pos += n;
    return this.buf.subarray(o, o + n);
  }
}

const VALUE_SIZE: Partial<Record<GGUFValueType, number>> = {
  [GGUFValueType.UINT8]: 1,
  [GGUFValueType.INT8]: 1,
  [GGUFValueType.UINT16]: 2,
  [GGUFValueType.INT16]: 2,
  [GGUFValueType.UINT32]: 4,
  [GGUFValueType.INT32]: 4,
  [GGUFValueType.FLOAT32]: 4,
  [GGUFValueType.BOOL]: 1,
  [GGUFValueType.UINT64]: 8,
  [GGUFValueType.INT64]: 8,
  [GGUFValueType.FLOAT64]: 8,
  [GGUFValueType.STRING]: 8,
};

function bigToNumber(v: bigint): number | bigint {
  return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
}

function readValue(c: HeaderCursor, type: number, key: string, depth = 0): GGUFValue {
  switch (type) {
    case GGUFValueType.UINT8:
      return c.u8(key);
    case GGUFValueType.INT8:
      return c.i8(key);
    case GGUFValueType.UINT16:
      return c.u16(key);
    case GGUFValueType.INT16:
      return c.i16(key);
    case GGUFValueType.UINT32:
      return c.u32(key);
    case GGUFValueType.INT32:
      return c.i32(key);
    case GGUFValueType.FLOAT32:
      return c.f32(key);
    case GGUFValueType.BOOL: {
      const at = c.pos;
      const b = c.u8(key);
      if (b > 1) c.fail(`metadata ${quoted(key)}: bool must be 0 or 1, found ${b}`, at);
      return b === 1;
    }
    case GGUFValueType.STRING:
      return c.str(`metadata ${quoted(key)} string`);
    case GGUFValueType.UINT64:
      return bigToNumber(c.u64(key));
    case GGUFValueType.INT64:
      return bigToNumber(c.i64(key));
    case GGUFValueType.FLOAT64:
      return c.f64(key);
    case GGUFValueType.ARRAY: {
      const at = c.pos;
      const itemType = c.u32(`metadata ${quoted(key)} array item type`);
      if (itemType === GGUFValueType.ARRAY && depth > 0)
        c.fail(`metadata ${quoted(key)}: nested arrays deeper than 2 are not supported`, at);
      const itemSize = VALUE_SIZE[itemType as GGUFValueType] ?? (itemType === GGUFValueType.ARRAY ? 12 : -1);
      if (itemSize < 0) c.fail(`metadata ${quoted(key)}: unknown array item type ${itemType}`, at);
      const n = c.count(`metadata ${quoted(key)} array length`, itemSize);
      // Typed arrays for the big numeric vocab tables (scores, token types).
      if (itemType === GGUFValueType.FLOAT32) {
        const raw = c.bytes(n * 4, key);
        const out = new Float32Array(n);
        for (let i = 0; i < n; i++) out[i] = raw.readFloatLE(i * 4);
        return out;
      }
      if (itemType === GGUFValueType.INT32) {
        const raw = c.bytes(n * 4, key);
        const out = new Int32Array(n);
        for (let i = 0; i < n; i++) out[i] = raw.readInt32LE(i * 4);
        return out;
      }
      const out: GGUFValue[] = new Array(n);
      for (let i = 0; i < n; i++) out[i] = readValue(c, itemType, key, depth + 1);
      return out;
    }
    default:
      return c.fail(`metadata ${quoted(key)}: unknown value type ${type}`);
  }
}

interface ParsedFile {
  path: string;
  fd: number;
  size: number;
  magic: "GGUF" | "PWRI";
  version: number;
  metadata: Map<string, GGUFValue>;
  tensors: GGUFTensorInfo[];
}

function parseOne(path: string, fileIndex: number): ParsedFile {
  const { fd, size } = openModelFile(path, (m) => new GGUFError(path, m));
  try {
    const c = new HeaderCursor(fd, size, path);
    const magicBytes = c.bytes(Math.min(4, size), "magic");
    const magic = magicBytes.toString("latin1");
    if (magic !== "GGUF" && magic !== "PWRI") {
      throw new GGUFError(
        path,
        `not a GGUF file: magic is ${JSON.stringify(magic)} (bytes ${[...magicBytes].map((b) => b.toString(16).padStart(2, "0")).join(" ")}), expected "GGUF" or PowerInfer's "PWRI"`,
      );
    }
    const version = c.u32("version");
    if (version !== 2 && version !== 3) c.fail(`unsupported GGUF version ${version} (this reader handles 2 and 3)`, 4);
    const nTensors = c.count("tensor count", 24);
    const nKV = c.count("metadata count", 12);
    const metadata = new Map<string, GGUFValue>();
    for (let i = 0; i < nKV; i++) {
      const keyAt = c.pos;
      const key = c.str(`metadata key #${i}`);
      // a second value for a key would silently replace the first: which one did the writer mean?
      if (metadata.has(key)) c.fail(`metadata key ${quoted(key)} appears twice`, keyAt);
      const type = c.u32(`type of metadata ${quoted(key)}`);
      metadata.set(key, readValue(c, type, key));
    }
    const alignment = metadata.has("general.alignment") ? Number(metadata.get("general.alignment")) : 32;
    if (!Number.isInteger(alignment) || alignment <= 0 || (alignment & (alignment - 1)) !== 0) {
      throw new GGUFError(path, `general.alignment = ${alignment} is not a power of two`);
    }
    const raw: { name: string; dims: number[]; type: number; rel: bigint; at: number }[] = [];
    for (let i = 0; i < nTensors; i++) {
      const at = c.pos;
      const name = c.str(`tensor #${i} name`);
      const nd = c.u32(`tensor ${quoted(name)} dimension count`);
      if (nd < 1 || nd > MAX_DIMS)
        c.fail(`tensor ${quoted(name)} has ${nd} dimensions (expected 1 to ${MAX_DIMS})`, at);
      const dims: number[] = [];
      for (let d = 0; d < nd; d++) {
        const v = c.u64(`tensor ${quoted(name)} dimension ${d}`);
        if (v === 0n || v > 1n << 40n) c.fail(`tensor ${quoted(name)} dimension ${d} = ${v} is absurd`);
        dims.push(Number(v));
      }
      const type = c.u32(`tensor ${quoted(name)} type`);
      const rel = c.u64(`tensor ${quoted(name)} offset`);
      raw.push({ name, dims, type, rel, at });
    }
    const dataStart = Math.ceil(c.pos / alignment) * alignment;
    const tensors: GGUFTensorInfo[] = [];
    for (const t of raw) {
      const traits = typeTraits(t.type);
      if (!traits)
        throw new GGUFError(path, `tensor ${quoted(t.name)} has unknown type id ${t.type} (at byte offset ${t.at})`);
      const elements = t.dims.reduce((a, b) => a * b, 1);
      if (!Number.isSafeInteger(elements) || elements > 2 ** 40)
        throw new GGUFError(path, `tensor ${quoted(t.name)} has absurd dimensions [${t.dims.join(", ")}]`);
      if (t.dims[0] % traits.blockSize !== 0) {
        throw new GGUFError(
          path,
          `tensor ${quoted(t.name)} row length ${t.dims[0]} is not a multiple of the ${traits.name} block size ${traits.blockSize}`,
        );
      }
      const bytes = traitsBytes(traits, elements);
      const offset = dataStart + Number(t.rel);
      if (t.rel % BigInt(alignment) !== 0n)
        throw new GGUFError(path, `tensor ${quoted(t.name)} offset ${t.rel} is not aligned to ${alignment}`);
      if (offset + bytes > size) {
        throw new GGUFError(
          path,
          `tensor ${quoted(t.name)} (${typeName(t.type)} [${t.dims.join(", ")}], ${bytes} bytes at offset ${offset}) extends beyond the end of the file (${size} bytes): the file is truncated or corrupt`,
        );
      }
      tensors.push({ name: t.name, dims: t.dims, type: t.type as GGMLType, elements, bytes, fileIndex, offset });
    }
    return { path, fd, size, magic: magic as "GGUF" | "PWRI", version, metadata, tensors };
  } catch (e) {
    closeSync(fd);
    throw e;
  }
}

const SPLIT_RE = /^(.*)-(\d{5})-of-(\d{5})\.gguf$/;

/** All the files of a split model, given any one of them; a single file otherwise. */
export function splitPaths(path: string): string[] {
  const m = SPLIT_RE.exec(basename(path));
  if (!m) return [path];
  const total = Number(m[3]);
  const paths: string[] = [];
  for (let i = 1; i <= total; i++) {
    const p = join(dirname(path), `${m[1]}-${String(i).padStart(5, "0")}-of-${m[3]}.gguf`);
    if (!existsSync(p)) throw new GGUFError(path, `split model: part ${i} of ${total} is missing (${basename(p)})`);
    paths.push(p);
  }
  return paths;
}

/**
 * What the model loader needs of a model file: metadata, a tensor index and positional reads.
 * GGUFFile is one; the neuron store (src/format/store/) is another.
 */
export interface ModelFile {
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
  readTensor(t: GGUFTensorInfo, dst: Uint8Array, start?: number, length?: number): void;
  tensorData(name: string): Uint8Array;
  close(): void;
}

/**
 * Typed access to a model file's metadata, with errors that name the file and the key: shared
 * by GGUFFile and the neuron store, which hold the same key/values.
 */
export abstract class MetadataAccess {
  abstract readonly path: string;
  abstract readonly metadata: Map<string, GGUFValue>;
  /** the error type of the file format, naming the file */
  protected abstract metadataError(message: string): Error;

  /** The architecture name (`general.architecture`). */
  get architecture(): string {
    return this.getString("general.architecture");
  }

  has(key: string): boolean {
    return this.metadata.has(key);
  }

  protected missing(key: string, expected: string): never {
    throw this.metadataError(`missing metadata key "${key}" (${expected})`);
  }

  getString(key: string, fallback?: string): string {
    const v = this.metadata.get(key);
    if (v === undefined) return fallback ?? this.missing(key, "a string");
    if (typeof v !== "string") throw this.metadataError(`metadata "${key}" should be a string, found ${typeof v}`);
    return v;
  }

  getNumber(key: string, fallback?: number): number {
    const v = this.metadata.get(key);
    if (v === undefined) {
      if (fallback === undefined) this.missing(key, "a number");
      return fallback;
    }
    if (typeof v === "bigint") throw this.metadataError(`metadata "${key}" = ${v} is out of range`);
    if (typeof v !== "number")
      throw this.metadataError(
        `metadata "${key}" should be a number, found ${Array.isArray(v) ? "an array" : typeof v}`,
      );
    return v;
  }

  getBool(key: string, fallback: boolean): boolean {
    const v = this.metadata.get(key);
    if (v === undefined) return fallback;
    if (typeof v !== "boolean") throw this.metadataError(`metadata "${key}" should be a bool, found ${typeof v}`);
    return v;
  }

  getArray(key: string): GGUFValue[] | Float32Array | Int32Array | undefined {
    const v = this.metadata.get(key);
    if (v === undefined) return undefined;
    if (!Array.isArray(v) && !(v instanceof Float32Array) && !(v instanceof Int32Array)) {
      throw this.metadataError(`metadata "${key}" should be an array, found ${typeof v}`);
    }
    return v;
  }
}

export class GGUFFile extends MetadataAccess implements ModelFile {
  readonly magic: "GGUF" | "PWRI";
  readonly version: number;
  readonly metadata: Map<string, GGUFValue>;
  readonly tensors: Map<string, GGUFTensorInfo>;
  readonly paths: string[];
  readonly fileSize: number;
  private fds: number[];

  private constructor(files: ParsedFile[]) {
    super();
    this.paths = files.map((f) => f.path);
    this.fds = files.map((f) => f.fd);
    this.magic = files[0].magic;
    this.version = files[0].version;
    this.metadata = files[0].metadata;
    this.fileSize = files.reduce((a, f) => a + f.size, 0);
    this.tensors = new Map();
    for (const f of files) {
      for (const t of f.tensors) {
        if (this.tensors.has(t.name)) throw new GGUFError(f.path, `tensor ${quoted(t.name)} appears twice`);
        this.tensors.set(t.name, t);
      }
    }
  }

  /** Open a GGUF (or PWRI) file; for a split model, any of its parts. */
  static open(path: string): GGUFFile {
    const paths = splitPaths(path);
    const files: ParsedFile[] = [];
    try {
      for (let i = 0; i < paths.length; i++) files.push(parseOne(paths[i], i));
      const count = files[0].metadata.get("split.count");
      if (paths.length > 1 && count !== undefined && Number(count) !== paths.length) {
        throw new GGUFError(path, `split.count = ${count} but ${paths.length} parts were found`);
      }
    } catch (e) {
      for (const f of files) closeSync(f.fd);
      throw e;
    }
    return new GGUFFile(files);
  }

  get path(): string {
    return this.paths[0];
  }

  protected metadataError(message: string): Error {
    return new GGUFError(this.path, message);
  }

  tensor(name: string): GGUFTensorInfo {
    const t = this.tensors.get(name);
    if (!t) throw new GGUFError(this.path, `missing tensor "${name}"`);
    return t;
  }

  /** Read `length` bytes of a tensor starting `start` bytes into it, into `dst`. */
  readTensor(t: GGUFTensorInfo, dst: Uint8Array, start = 0, length = t.bytes - start): void {
    if (start < 0 || start + length > t.bytes || dst.length < length)
      throw new RangeError(`bad read of tensor ${t.name}`);
    const fd = this.fds[t.fileIndex];
    let got = 0;
    while (got < length) {
      const n = Math.min(length - got, 1 << 30);
      const r = readSync(fd, dst, got, n, t.offset + start + got);
      if (r === 0)
        throw new GGUFError(this.paths[t.fileIndex], `unexpected end of file reading tensor ${quoted(t.name)}`);
      got += r;
    }
  }

  /** A tensor's bytes in a fresh buffer (for small tensors). */
  tensorData(name: string): Uint8Array {
    const t = this.tensor(name);
    const buf = new Uint8Array(t.bytes);
    this.readTensor(t, buf);
    return buf;
  }

  close(): void {
    for (const fd of this.fds) closeSync(fd);
    this.fds = [];
  }
}
