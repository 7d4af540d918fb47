/** Stores edited for tests: a manifest rewritten (its checksums valid) to test the checks of meaning. */
import { readFileSync, writeFileSync } from "node:fs";
import { crc32, encodeHeader, STORE_PAGE } from "../src/format/store/index.js";

/**
 * The store `good` with its manifest edited by `edit`, written to `out`; returns `out`. `data`:
 * edits the bytes before the manifest too, whose checksums are then computed again.
 */
export function withManifest(
  good: string,
  out: string,
  edit: (m: Record<string, any>) => void,
  data?: (b: Buffer) => void,
): string {
  const b = Buffer.from(readFileSync(good));
  const at = Number(b.readBigUInt64LE(16)),
    n = Number(b.readBigUInt64LE(24));
  const m = JSON.parse(b.toString("utf8", at, at + n));
  edit(m);
  if (data) {
    data(b);
    const crcs = new Uint32Array((at - STORE_PAGE) / STORE_PAGE);
    for (let i = 0; i < crcs.length; i++)
      crcs[i] = crc32(b.subarray(STORE_PAGE + i * STORE_PAGE, STORE_PAGE * (i + 2)));
    m.checksums.crc32 = Buffer.from(crcs.buffer).toString("base64");
  }
  const json = Buffer.from(JSON.stringify(m));
  const bytes = Buffer.concat([
    b.subarray(0, at),
    json,
    Buffer.alloc((STORE_PAGE - (json.length % STORE_PAGE)) % STORE_PAGE),
  ]);
  Buffer.from(encodeHeader({ manifestOffset: at, manifestBytes: json.length, manifestCrc32: crc32(json) })).copy(
    bytes,
    0,
  );
  writeFileSync(out, bytes);
  return out;
}
