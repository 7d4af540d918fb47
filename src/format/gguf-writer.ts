/**
 * Streaming GGUF v3 writer (also PowerInfer's "PWRI" variant, which differs only in its magic).
 *
 * Usage: set metadata, declare every tensor (name, ggml-order dims, type), then write each
 * tensor's bytes, in any order and in as many chunks as the producer likes, then `finish()`.
 * The header is laid out as soon as the first tensor byte is written, since tensor offsets
 * depend on it; nothing but the header is ever held in memory, so a multi-GB tensor can be
 * produced chunk by chunk.
 *
 * Safety: everything goes to `<path>.partial-<pid>` whose first four bytes stay zero until
 * `finish()` has checked that every tensor is complete; only then is the magic written and the
 * file renamed to `path`. An interrupted or failed write therefore never leaves a file that a
 * loader would take for a model. `abort()` deletes the partial file.
 */
import { rename, rm } from "node:fs/promises";
import { SequentialWriter } from "../io/sequential-writer.js";
import { GGMLType, traitsBytes, typeTraits, typeName } from "./ggml-types.js";
import { GGUFValueType, type GGUFValue } from "./gguf.js";

export { GGUFValueType };

export class GGUFWriteError extends Error {
  constructor(
    readonly file: string,
    message: string,
  ) {
    super(`${file}: ${message}`);
    this.name = "GGUFWriteError";
  }
}

/** Values setMetadata accepts. Arrays are homogeneous. */
export type GGUFWritableValue =
  | string
  | number
  | bigint
  | boolean
  | readonly string[]
  | readonly number[]
  | readonly boolean[]
  | Float32Array
  | Int32Array
  | Uint32Array;

export interface GGUFWriterOptions {
  /** "GGUF" (default) or PowerInfer's "PWRI" */
  magic?: "GGUF" | "PWRI";
  /** data alignment, a power of two; default 32. Stored as general.alignment when not 32. */
  alignment?: number;
  /** fsync before the rename, so a crash right after finish() cannot leave a torn file. Default true. */
  fsync?: boolean;
}

/** Where a chunked producer writes: each write() resolves once the chunk may be reused. */
export interface TensorSink {
  readonly name: string;
  readonly bytes: number;
  /** bytes accepted so far */
  readonly written: number;
  write(chunk: Uint8Array): Promise<void>;
}

export type TensorSource = Uint8Array | Iterable<Uint8Array> | AsyncIterable<Uint8Array>;

export interface MetaEntry {
  type: GGUFValueType;
  /** item type for arrays */
  itemType?: GGUFValueType;
  value: GGUFWritableValue;
}

interface TensorEntry {
  name: string;
  dims: number[];
  type: GGMLType;
  bytes: number;
  /** offset relative to the start of the data section */
  rel: number;
  written: number;
  /** inline data given to addTensor, written with the header */
  inline?: Uint8Array;
  sinkOpen: boolean;
}

const SCALAR_SIZE: Partial<Record<GGUFValueType, number>> = {
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
};

/** Growable little-endian byte buffer for the header. */
class ByteBuilder {
  private buf = Buffer.alloc(1 << 16);
  length = 0;

  private room(n: number): number {
    if (this.length + n > this.buf.length) {
      const next = Buffer.alloc(Math.max(this.buf.length * 2, this.length + n));
      this.buf.copy(next, 0, 0, this.length);
      this.buf = next;
    }
    const o = this.length;
    this.length += n;
    return o;
  }
  // The offset must be taken before `this.buf` is read: room() may replace the buffer.
  u8(v: number) {
    const o = this.room(1);
    this.buf.writeUInt8(v, o);
  }
  i8(v: number) {
    const o = this.room(1);
    this.buf.writeInt8(v, o);
  }
  u16(v: number) {
    const o = this.room(2);
    this.buf.writeUInt16LE(v, o);
  }
  i16(v: number) {
    const o = this.room(2);
    this.buf.writeInt16LE(v, o);
  }
  u32(v: number) {
    const o = this.room(4);
    this.buf.writeUInt32LE(v, o);
  }
  i32(v: number) {
    const o = this.room(4);
    this.buf.writeInt32LE(v, o);
  }
  f32(v: number) {
    const o = this.room(4);
    this.buf.writeFloatLE(v, o);
  }
  f64(v: number) {
    const o = this.room(8);
    this.buf.writeDoubleLE(v, o);
  }
  u64(v: number | bigint) {
    const o = this.room(8);
    this.buf.writeBigUInt64LE(BigInt(v), o);
  }
  i64(v: number | bigint) {
    const o = this.room(8);
    this.buf.writeBigInt64LE(BigInt(v), o);
  }
  bytes(b: Uint8Array) {
    const o = this.room(b.length);
    this.buf.set(b, o);
  }
  str(s: string) {
    // encoded in place (a vocabulary is 100K+ strings): room for the longest encoding, 3 bytes a
    // UTF-16 unit, then the length written before it once known
    const o = this.room(8 + 3 * s.length);
    const n = this.buf.write(s, o + 8, "utf8");
    this.buf.writeUInt32LE(n, o);
    this.buf.writeUInt32LE(0, o + 4);
    this.length = o + 8 + n;
  }
  zeros(n: number) {
    const o = this.room(n);
    this.buf.fill(0, o, this.length);
  }
  result(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

/**
 * A metadata value with its GGUF type: `type` when given (for an array, its items' type), else
 * inferred (integers -> UINT32 / INT32, other numbers -> FLOAT32, Float32Array -> array of
 * FLOAT32, Int32Array -> array of INT32, Uint32Array -> array of UINT32; a number array takes the
 * narrowest integer type that holds every item, else FLOAT32). Checked against the type.
 */
export function metadataEntry(key: string, value: GGUFWritableValue, type?: GGUFValueType): MetaEntry {
  if (typeof key !== "string" || key.length === 0) throw new TypeError("metadata key must be a non-empty string");
  if (isTypedOrArray(value)) {
    let itemType = type;
    if (itemType === undefined) {
      if (value instanceof Float32Array) itemType = GGUFValueType.FLOAT32;
      else if (value instanceof Int32Array) itemType = GGUFValueType.INT32;
      else if (value instanceof Uint32Array) itemType = GGUFValueType.UINT32;
      else if (value.length === 0) throw new TypeError(`metadata "${key}": give the item type of an empty array`);
      else if (typeof value[0] === "number") {
        // The widest type that holds every item.
        const all = value as readonly number[];
        itemType = all.every((x) => Number.isInteger(x))
          ? all.every((x) => x >= 0 && x <= 0xffffffff)
            ? GGUFValueType.UINT32
            : all.every((x) => x >= -0x80000000 && x <= 0x7fffffff)
              ? GGUFValueType.INT32
              : GGUFValueType.INT64
          : GGUFValueType.FLOAT32;
      } else itemType = inferScalarType(value[0], key);
    }
    if (itemType === GGUFValueType.ARRAY) throw new TypeError(`metadata "${key}": nested arrays are not supported`);
    for (let i = 0; i < value.length; i++) checkScalar(`${key}[${i}]`, itemType, value[i]);
    return { type: GGUFValueType.ARRAY, itemType, value };
  } else {
    const t = type ?? inferScalarType(value, key);
    if (t === GGUFValueType.ARRAY) throw new TypeError(`metadata "${key}": type ARRAY needs an array value`);
    checkScalar(key, t, value);
    return { type: t, value };
  }
}

/**
 * The value GGUFFile reads back for a written entry: FLOAT32 rounded to f32, f32 and i32 arrays
 * as typed arrays, 64-bit integers as numbers when exact, other arrays as plain arrays.
 */
export function valueAsRead(e: MetaEntry): GGUFValue {
  const scalar = (type: GGUFValueType, v: unknown): GGUFValue =>
    type === GGUFValueType.FLOAT32
      ? Math.fround(v as number)
      : typeof v === "bigint" && v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER)
        ? Number(v)
        : (v as GGUFValue);
  if (e.type !== GGUFValueType.ARRAY) return scalar(e.type, e.value);
  const items = Array.from(e.value as ArrayLike<unknown>);
  if (e.itemType === GGUFValueType.FLOAT32) return Float32Array.from(items as number[]);
  if (e.itemType === GGUFValueType.INT32) return Int32Array.from(items as number[]);
  return items.map((v) => scalar(e.itemType!, v));
}

function isTypedOrArray(v: unknown): v is readonly unknown[] | Float32Array | Int32Array | Uint32Array {
  return Array.isArray(v) || v instanceof Float32Array || v instanceof Int32Array || v instanceof Uint32Array;
}

function inferScalarType(v: unknown, key: string): GGUFValueType {
  switch (typeof v) {
    case "string":
      return GGUFValueType.STRING;
    case "boolean":
      return GGUFValueType.BOOL;
    case "bigint":
      return v < 0n ? GGUFValueType.INT64 : GGUFValueType.UINT64;
    case "number":
      if (Number.isInteger(v)) {
        if (v >= 0 && v <= 0xffffffff) return GGUFValueType.UINT32;
        if (v < 0 && v >= -0x80000000) return GGUFValueType.INT32;
        return v < 0 ? GGUFValueType.INT64 : GGUFValueType.UINT64;
      }
      return GGUFValueType.FLOAT32;
    default:
      throw new TypeError(`metadata "${key}": cannot store a value of type ${typeof v}`);
  }
}

function checkScalar(key: string, type: GGUFValueType, v: unknown): void {
  const bad = (what: string) => {
    throw new TypeError(`metadata "${key}": ${String(v)} is not ${what} (type ${GGUFValueType[type]})`);
  };
  const intRange = (lo: number, hi: number) => {
    if (typeof v !== "number" || !Number.isInteger(v) || v < lo || v > hi) bad(`an integer in [${lo}, ${hi}]`);
  };
  switch (type) {
    case GGUFValueType.UINT8:
      return intRange(0, 0xff);
    case GGUFValueType.INT8:
      return intRange(-0x80, 0x7f);
    case GGUFValueType.UINT16:
      return intRange(0, 0xffff);
    case GGUFValueType.INT16:
      return intRange(-0x8000, 0x7fff);
    case GGUFValueType.UINT32:
      return intRange(0, 0xffffffff);
    case GGUFValueType.INT32:
      return intRange(-0x80000000, 0x7fffffff);
    case GGUFValueType.FLOAT32:
    case GGUFValueType.FLOAT64:
      if (typeof v !== "number") bad("a number");
      return;
    case GGUFValueType.BOOL:
      if (typeof v !== "boolean") bad("a boolean");
      return;
    case GGUFValueType.STRING:
      if (typeof v !== "string") bad("a string");
      return;
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64: {
      const unsigned = type === GGUFValueType.UINT64;
      if (typeof v === "bigint") {
        if (unsigned ? v < 0n || v >= 1n << 64n : v < -(1n << 63n) || v >= 1n << 63n) bad("in range");
        return;
      }
      if (typeof v !== "number" || !Number.isSafeInteger(v) || (unsigned && v < 0))
        bad("a safe integer or bigint in range");
      return;
    }
    default:
      throw new TypeError(`metadata "${key}": unsupported value type ${type}`);
  }
}

function writeScalar(b: ByteBuilder, type: GGUFValueType, v: unknown): void {
  switch (type) {
    case GGUFValueType.UINT8:
      return b.u8(v as number);
    case GGUFValueType.INT8:
      return b.i8(v as number);
    case GGUFValueType.UINT16:
      return b.u16(v as number);
    case GGUFValueType.INT16:
      return b.i16(v as number);
    case GGUFValueType.UINT32:
      return b.u32(v as number);
    case GGUFValueType.INT32:
      return b.i32(v as number);
    case GGUFValueType.FLOAT32:
      return b.f32(v as number);
    case GGUFValueType.FLOAT64:
      return b.f64(v as number);
    case GGUFValueType.BOOL:
      return b.u8(v ? 1 : 0);
    case GGUFValueType.STRING:
      return b.str(v as string);
    case GGUFValueType.UINT64:
      return b.u64(v as number | bigint);
    case GGUFValueType.INT64:
      return b.i64(v as number | bigint);
    default:
      throw new TypeError(`unsupported value type ${type}`);
  }
}

const alignUp = (n: number, a: number) => Math.ceil(n / a) * a;

export class GGUFWriter {
  readonly path: string;
  readonly tempPath: string;
  readonly magic: "GGUF" | "PWRI";
  readonly alignment: number;
  private readonly doFsync: boolean;
  private meta = new Map<string, MetaEntry>();
  private tensors = new Map<string, TensorEntry>();
  private order: TensorEntry[] = [];
  private dataSize = 0;
  private out: SequentialWriter | undefined;
  private opening: Promise<SequentialWriter> | undefined;
  private dataStart = -1;
  private state: "declaring" | "writing" | "finished" | "aborted" = "declaring";
  private inflight = new Set<Promise<unknown>>();
  private failure: Error | undefined;
  private bytesWritten = 0;
  private aborting: Promise<void> | undefined;

  constructor(path: string, options: GGUFWriterOptions = {}) {
    this.path = path;
    this.tempPath = `${path}.partial-${process.pid}`;
    this.magic = options.magic ?? "GGUF";
    if (this.magic !== "GGUF" && this.magic !== "PWRI")
      throw new TypeError(`GGUF writer: magic must be "GGUF" or "PWRI", got ${JSON.stringify(this.magic)}`);
    this.alignment = options.alignment ?? 32;
    if (!Number.isInteger(this.alignment) || this.alignment < 1 || (this.alignment & (this.alignment - 1)) !== 0) {
      throw new RangeError(`GGUF writer: alignment ${this.alignment} is not a power of two`);
    }
    this.doFsync = options.fsync ?? true;
    // general.alignment is always stored (llama.cpp's own writer does the same), so readers
    // never have to guess.
    this.setMetadata("general.alignment", this.alignment, GGUFValueType.UINT32);
  }

  /** Total file size once finished (header + aligned data); known once every tensor is declared. */
  get totalBytes(): number {
    return (this.dataStart >= 0 ? this.dataStart : this.buildHeader().length) + this.dataSize;
  }

  /** Bytes of tensor data written so far. */
  get dataBytesWritten(): number {
    return this.bytesWritten;
  }

  /** Bytes of tensor data the declared tensors take (with alignment padding). */
  get dataBytes(): number {
    return this.dataSize;
  }

  /**
   * Set a metadata key, typed as metadataEntry says (inferred when `type` is omitted; for an
   * array value, `type` is its items'). Keys keep the order in which they were first set.
   */
  setMetadata(key: string, value: GGUFWritableValue, type?: GGUFValueType): this {
    this.assertDeclaring(`set metadata "${key}"`);
    this.meta.set(key, metadataEntry(key, value, type));
    return this;
  }

  /**
   * Declare a tensor. `dims` are in ggml order (dims[0] is the contiguous row length). With
   * `data` the bytes are written along with the header; otherwise write them later with
   * writeTensorData() or tensorSink().
   */
  addTensor(name: string, dims: readonly number[], type: GGMLType, data?: Uint8Array): this {
    this.assertDeclaring(`add tensor "${name}"`);
    if (this.tensors.has(name)) throw new GGUFWriteError(this.path, `tensor "${name}" declared twice`);
    if (Buffer.byteLength(name, "utf8") > 63)
      throw new GGUFWriteError(this.path, `tensor name "${name}" is longer than ggml's 63 bytes`);
    if (dims.length < 1 || dims.length > 4)
      throw new GGUFWriteError(this.path, `tensor "${name}" has ${dims.length} dimensions (1 to 4 allowed)`);
    for (const d of dims) {
      if (!Number.isSafeInteger(d) || d < 1)
        throw new GGUFWriteError(this.path, `tensor "${name}" has a bad dimension ${d}`);
    }
    const traits = typeTraits(type);
    if (!traits) throw new GGUFWriteError(this.path, `tensor "${name}" has unknown type id ${type}`);
    if (dims[0] % traits.blockSize !== 0) {
      throw new GGUFWriteError(
        this.path,
        `tensor "${name}": row length ${dims[0]} is not a multiple of the ${traits.name} block size ${traits.blockSize}`,
      );
    }
    const elements = dims.reduce((a, b) => a * b, 1);
    const bytes = traitsBytes(traits, elements);
    if (data && data.length !== bytes) {
      throw new GGUFWriteError(
        this.path,
        `tensor "${name}" (${typeName(type)} [${dims.join(", ")}]) needs ${bytes} bytes, got ${data.length}`,
      );
    }
    const e: TensorEntry = {
      name,
      dims: [...dims],
      type,
      bytes,
      rel: this.dataSize,
      written: 0,
      inline: data,
      sinkOpen: false,
    };
    this.dataSize = alignUp(this.dataSize + bytes, this.alignment);
    this.tensors.set(name, e);
    this.order.push(e);
    return this;
  }

  /** Write a whole tensor from bytes or an (async) iterable of chunks, awaiting each chunk. */
  async writeTensorData(name: string, source: TensorSource): Promise<void> {
    const sink = await this.tensorSink(name);
    if (source instanceof Uint8Array) {
      await sink.write(source);
    } else if (Symbol.asyncIterator in source) {
      for await (const chunk of source as AsyncIterable<Uint8Array>) await sink.write(chunk);
    } else {
      for (const chunk of source as Iterable<Uint8Array>) await sink.write(chunk);
    }
    const e = this.tensors.get(name)!;
    if (e.written !== e.bytes) {
      throw new GGUFWriteError(this.path, `tensor "${name}": producer ended after ${e.written} of ${e.bytes} bytes`);
    }
  }

  /**
   * A sink for one tensor's bytes, written in order. write() reserves the next range at once and
   * resolves when the chunk is on its way to disk and may be reused, so a producer can fill its
   * next buffer while the previous one is being written (double buffering).
   */
  async tensorSink(name: string): Promise<TensorSink> {
    const e = this.tensors.get(name);
    if (!e) throw new GGUFWriteError(this.path, `tensor "${name}" was never declared`);
    if (e.inline) throw new GGUFWriteError(this.path, `tensor "${name}" was given its data in addTensor`);
    if (e.sinkOpen) throw new GGUFWriteError(this.path, `tensor "${name}" is already being written`);
    await this.begin();
    e.sinkOpen = true;
    const out = this.out!;
    const self = this;
    return {
      name,
      bytes: e.bytes,
      get written() {
        return e.written;
      },
      write(chunk: Uint8Array): Promise<void> {
        if (self.state !== "writing")
          return Promise.reject(
            new GGUFWriteError(self.path, `cannot write tensor "${name}": the writer is ${self.state}`),
          );
        if (self.failure) return Promise.reject(self.failure);
        if (e.written + chunk.length > e.bytes) {
          return Promise.reject(
            new GGUFWriteError(
              self.path,
              `tensor "${name}": ${e.written + chunk.length} bytes written, but it holds only ${e.bytes}`,
            ),
          );
        }
        const pos = self.dataStart + e.rel + e.written;
        e.written += chunk.length;
        self.bytesWritten += chunk.length;
        return self.track(out.write(chunk, pos));
      },
    };
  }

  /** Check every tensor is complete, write the magic, flush and move the file into place. */
  async finish(): Promise<void> {
    if (this.state === "declaring") await this.begin();
    if (this.state !== "writing") throw new GGUFWriteError(this.path, `cannot finish: the writer is ${this.state}`);
    await this.drain();
    const missing = this.order.filter((e) => e.written !== e.bytes);
    if (missing.length > 0) {
      const list = missing
        .slice(0, 5)
        .map((e) => `"${e.name}" (${e.written} of ${e.bytes} bytes)`)
        .join(", ");
      await this.abort();
      throw new GGUFWriteError(
        this.path,
        `cannot finish: ${missing.length} tensor(s) incomplete: ${list}${missing.length > 5 ? ", ..." : ""}`,
      );
    }
    const out = this.out!;
    try {
      // The padding after the last tensor is part of the format (llama.cpp pads it too); writing
      // it makes the file length exact even if the data ended in a gap.
      const total = this.dataStart + this.dataSize;
      const last =
        this.order.length > 0
          ? this.dataStart + this.order[this.order.length - 1].rel + this.order[this.order.length - 1].bytes
          : total;
      if (total > last) await out.write(new Uint8Array(total - last), last);
      await out.end();
      if (this.doFsync) await out.sync();
      await out.write(Buffer.from(this.magic, "latin1"), 0);
      if (this.doFsync) await out.sync();
      await out.close();
      this.out = undefined;
      await rename(this.tempPath, this.path);
      this.state = "finished";
    } catch (err) {
      await this.abort();
      throw err;
    }
  }

  /** Stop, close and delete the partial file. Safe to call more than once, or after a failure. */
  abort(): Promise<void> {
    if (this.state === "finished") return Promise.resolve();
    // A second caller waits for the same cleanup instead of returning while the file still exists.
    this.aborting ??= this.cleanUp();
    return this.aborting;
  }

  private async cleanUp(): Promise<void> {
    this.state = "aborted";
    await Promise.allSettled([...this.inflight]);
    if (this.opening) await this.opening.catch(() => undefined);
    if (this.out) {
      await this.out.close();
      this.out = undefined;
    }
    await rm(this.tempPath, { force: true });
  }

  /** Layout is fixed from here: open the temp file and write the header and inline tensors. */
  private async begin(): Promise<void> {
    if (this.state === "writing") {
      await this.opening;
      return;
    }
    this.assertDeclaring("start writing");
    this.state = "writing";
    const header = this.buildHeader();
    this.dataStart = header.length;
    this.opening = SequentialWriter.create(this.tempPath, { fsync: this.doFsync });
    try {
      this.out = await this.opening;
      // Magic stays zero until finish(): a partial file is never mistaken for a model.
      header.fill(0, 0, 4);
      await this.out.write(header, 0);
      for (const e of this.order) {
        if (!e.inline) continue;
        await this.out.write(e.inline, this.dataStart + e.rel);
        e.written = e.bytes;
        this.bytesWritten += e.bytes;
      }
    } catch (err) {
      await this.abort();
      throw new GGUFWriteError(this.path, `cannot write ${this.tempPath}: ${(err as Error).message}`);
    }
  }

  private buildHeader(): Buffer {
    const b = new ByteBuilder();
    b.bytes(Buffer.from(this.magic, "latin1"));
    b.u32(3);
    b.u64(this.order.length);
    b.u64(this.meta.size);
    for (const [key, m] of this.meta) {
      b.str(key);
      b.u32(m.type);
      if (m.type === GGUFValueType.ARRAY) {
        const items = m.value as ArrayLike<unknown>;
        b.u32(m.itemType!);
        b.u64(items.length);
        for (let i = 0; i < items.length; i++) writeScalar(b, m.itemType!, items[i]);
      } else {
        writeScalar(b, m.type, m.value);
      }
    }
    for (const e of this.order) {
      b.str(e.name);
      b.u32(e.dims.length);
      for (const d of e.dims) b.u64(d);
      b.u32(e.type);
      b.u64(e.rel);
    }
    b.zeros(alignUp(b.length, this.alignment) - b.length);
    return b.result();
  }

  private track(p: Promise<void>): Promise<void> {
    const t = p.then(
      () => {
        this.inflight.delete(t);
      },
      (err: Error) => {
        this.inflight.delete(t);
        this.failure ??= new GGUFWriteError(this.path, `write failed: ${err.message}`);
        throw this.failure;
      },
    );
    this.inflight.add(t);
    return t;
  }

  private async drain(): Promise<void> {
    await Promise.allSettled([...this.inflight]);
    if (this.failure) {
      await this.abort();
      throw this.failure;
    }
  }

  private assertDeclaring(what: string): void {
    if (this.state !== "declaring") {
      throw new GGUFWriteError(this.path, `cannot ${what}: tensor data has already started (the header is fixed)`);
    }
  }
}
