/**
 * What identifies a store for a plan: its size and its manifest's checksum (read from the store's
 * header), so that a copy elsewhere still matches and a rewritten store does not.
 */
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { resolve } from "node:path";
import { STORE_MAGIC } from "../format/store.js";

/** Header bytes up to and including the manifest's checksum (a u32 at byte 32). */
const HEAD_BYTES = 40;

/** Identifies a store's content: its size and its manifest's checksum (a copy elsewhere still matches). */
export interface ModelFingerprint {
  path: string;
  bytes: number;
  mtimeMs: number;
  manifestCrc32: string;
}

/** The first `bytes` bytes of the file at `path` when it has them and they start with the store's magic, else null (throws when it cannot be opened). */
function storeHead(path: string, bytes: number): Buffer | null {
  const fd = openSync(path, "r");
  try {
    const head = Buffer.alloc(bytes);
    if (readSync(fd, head, 0, bytes, 0) !== bytes || head.toString("latin1", 0, 8) !== STORE_MAGIC) return null;
    return head;
  } finally {
    closeSync(fd);
  }
}

/** Whether `path` is a neuron store (false too when it cannot be read). */
export function isStore(path: string): boolean {
  try {
    return storeHead(path, 8) !== null;
  } catch {
    return false;
  }
}

export function modelFingerprint(path: string): ModelFingerprint {
  const st = statSync(path);
  const head = storeHead(path, HEAD_BYTES);
  if (!head) {
    throw new Error(
      `${path}: not a .pi neuron store (the planner plans stores: convert the model first with "powerinfer convert")`,
    );
  }
  return {
    path: resolve(path),
    bytes: st.size,
    mtimeMs: Math.round(st.mtimeMs),
    manifestCrc32: head.readUInt32LE(32).toString(16).padStart(8, "0"),
  };
}

/** null when the plan's model is this store, else what differs. */
export function modelDifference(planned: ModelFingerprint, here: ModelFingerprint): string | null {
  if (planned.bytes !== here.bytes)
    return `the plan is for a store of ${planned.bytes} bytes (${planned.path}), this one has ${here.bytes}`;
  if (planned.manifestCrc32 !== here.manifestCrc32)
    return `the plan is for another store (manifest checksum ${planned.manifestCrc32}, this one ${here.manifestCrc32}; ${planned.path})`;
  return null;
}
