/**
 * The store's first 4 KiB page (docs/store-format.md): magic (8) | u32 version | u32 flags |
 * u64 manifestOffset | u64 manifestBytes | u32 manifestCrc32 | u32 crc32 of the preceding 36
 * bytes | zeros to 4096.
 *
 * The header carries only what is needed to find and check the manifest; everything else lives in
 * the manifest. The converter writes this page last, so a file whose magic is all zeros is an
 * unfinished conversion, not a corrupt store.
 */
import { closeSync, readSync } from "node:fs";
import { openModelFile } from "../model-file-open.js";
import { crc32, crcHex } from "./checksum.js";
import { StoreError } from "./store-error.js";

export const STORE_MAGIC = "PISTORE\0";
/** The version this writer writes (2: mixtures of experts); the reader also reads version 1. */
export const STORE_VERSION = 2;
export const STORE_OLDEST_VERSION = 1;
/** Alignment of everything that is read together (O_DIRECT needs it) and the checksum chunk. */
export const STORE_PAGE = 4096;
/** Bytes of the header page that carry fields (the rest of the page is zero). */
export const STORE_HEADER_FIELD_BYTES = 40;

export interface StoreHeader {
  version: number;
  flags: number;
  manifestOffset: number;
  manifestBytes: number;
  manifestCrc32: number;
}

/** The header's fields as stored, before any of them is checked (decodeHeader checks them). */
export interface StoreHeaderFields {
  version: number;
  flags: number;
  /** u64 on disk: kept exact, so that an offset beyond 2^53 is refused instead of rounded */
  manifestOffset: bigint;
  manifestBytes: bigint;
  manifestCrc32: number;
  /** CRC-32 of the header's first 36 bytes, as stored */
  headerCrc32: number;
}

/** Whether `bytes` begins with the store magic: the one place that recognizes a store. */
export function startsWithStoreMagic(bytes: Uint8Array): boolean {
  if (bytes.length < STORE_MAGIC.length) return false;
  for (let i = 0; i < STORE_MAGIC.length; i++) if (bytes[i] !== STORE_MAGIC.charCodeAt(i)) return false;
  return true;
}

/**
 * Whether `path` is a neuron store (by its magic), as opposed to a GGUF file. False for anything
 * that cannot be opened as a model (missing, empty, not a regular file): the GGUF reader then
 * says why.
 */
export function isNeuronStore(path: string): boolean {
  let fd: number;
  try {
    ({ fd } = openModelFile(path, (m) => new Error(m)));
  } catch {
    return false;
  }
  try {
    const head = Buffer.alloc(STORE_MAGIC.length);
    return readSync(fd, head, 0, head.length, 0) === head.length && startsWithStoreMagic(head);
  } finally {
    closeSync(fd);
  }
}

/** The header page for a store whose manifest is at `manifestOffset`, in the version written now. */
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

/** Read the fields of a header (at least its first STORE_HEADER_FIELD_BYTES bytes) without checking them. */
export function readHeaderFields(page: Uint8Array): StoreHeaderFields {
  const v = new DataView(page.buffer, page.byteOffset, page.byteLength);
  return {
    version: v.getUint32(8, true),
    flags: v.getUint32(12, true),
    manifestOffset: v.getBigUint64(16, true),
    manifestBytes: v.getBigUint64(24, true),
    manifestCrc32: v.getUint32(32, true),
    headerCrc32: v.getUint32(36, true),
  };
}

/**
 * Check a whole header page of a file of `fileSize` bytes and return its fields; throws a
 * StoreError that says what is wrong (a GGUF model given instead of a store, an unfinished
 * conversion, a version from a newer writer, corruption, truncation).
 */
export function decodeHeader(file: string, page: Buffer, fileSize: number): StoreHeader {
  if (!startsWithStoreMagic(page)) {
    const magic = page.toString("latin1", 0, 8);
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
  const fields = readHeaderFields(page);
  const { version } = fields;
  if (version < STORE_OLDEST_VERSION || version > STORE_VERSION) {
    throw new StoreError(
      file,
      `store format version ${version} is not supported (this reader handles versions ${STORE_OLDEST_VERSION} to ${STORE_VERSION})${version > STORE_VERSION ? "; a newer powerinfer-ts wrote it" : ""}`,
      8,
    );
  }
  const want = fields.headerCrc32,
    got = crc32(page.subarray(0, 36));
  if (want !== got)
    throw new StoreError(
      file,
      `header checksum mismatch (stored 0x${crcHex(want)}, computed 0x${crcHex(got)}): the header page is corrupt`,
      0,
    );
  for (let i = STORE_HEADER_FIELD_BYTES; i < STORE_PAGE; i++) {
    if (page[i] !== 0) throw new StoreError(file, `header page has a non-zero byte in its reserved area`, i);
  }
  const { flags } = fields;
  if (flags !== 0)
    throw new StoreError(file, `header flags 0x${flags.toString(16)} are not understood by this reader`, 12);
  const mo = fields.manifestOffset,
    mb = fields.manifestBytes;
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
  return { version, flags, manifestOffset, manifestBytes, manifestCrc32: fields.manifestCrc32 };
}
