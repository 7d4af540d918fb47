/**
 * CRC-32 (IEEE, the one zlib, gzip and PNG use): the checksum of the store's header, its manifest
 * and every 4 KiB chunk in between (docs/store-format.md).
 */
import * as zlib from "node:zlib";

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

/** A CRC as error messages show it: 8 lowercase hex digits. */
export function crcHex(v: number): string {
  return (v >>> 0).toString(16).padStart(8, "0");
}
