/**
 * What identifies a store for a plan: its size and its manifest's checksum (read from the store's
 * header), so that a copy elsewhere still matches and a rewritten store does not.
 */
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { crcHex, readHeaderFields, startsWithStoreMagic, STORE_HEADER_FIELD_BYTES } from "../format/store/index.js";

/** Identifies a store's content: its size and its manifest's checksum (a copy elsewhere still matches). */
export interface ModelFingerprint {
  path: string;
  bytes: number;
  mtimeMs: number;
  manifestCrc32: string;
}

export function modelFingerprint(path: string): ModelFingerprint {
  const st = statSync(path);
  const fd = openSync(path, "r");
  try {
    const head = Buffer.alloc(STORE_HEADER_FIELD_BYTES);
    if (readSync(fd, head, 0, head.length, 0) !== head.length || !startsWithStoreMagic(head)) {
      throw new Error(
        `${path}: not a .pi neuron store (the planner plans stores: convert the model first with "powerinfer convert")`,
      );
    }
    return {
      path: resolve(path),
      bytes: st.size,
      mtimeMs: Math.round(st.mtimeMs),
      manifestCrc32: crcHex(readHeaderFields(head).manifestCrc32),
    };
  } finally {
    closeSync(fd);
  }
}

/** null when the plan's model is this store, else what differs. */
export function modelDifference(planned: ModelFingerprint, here: ModelFingerprint): string | null {
  if (planned.bytes !== here.bytes)
    return `the plan is for a store of ${planned.bytes} bytes (${planned.path}), this one has ${here.bytes}`;
  if (planned.manifestCrc32 !== here.manifestCrc32)
    return `the plan is for another store (manifest checksum ${planned.manifestCrc32}, this one ${here.manifestCrc32}; ${planned.path})`;
  return null;
}
