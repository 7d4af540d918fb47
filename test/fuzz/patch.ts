/**
 * Byte-level edits of a file, as a fuzz case records them: every mutation, however it was
 * chosen, ends up as one of these, so a case replays from the pristine file alone (and stays
 * replayable when the mutators change).
 */
import { Rng } from "./rng.js";

export type Patch =
  | { op: "set"; at: number; hex: string }
  | { op: "insert"; at: number; hex: string }
  | { op: "delete"; at: number; len: number }
  | { op: "truncate"; size: number }
  | { op: "append"; hex: string };

/** A mutation: what it means, and the edit that makes it. */
export interface Mutation {
  what: string;
  patch: Patch;
}

export function applyPatches(src: Uint8Array, patches: readonly Patch[]): Buffer {
  let b = Buffer.from(src);
  for (const p of patches) {
    switch (p.op) {
      case "set": {
        const bytes = Buffer.from(p.hex, "hex");
        if (p.at + bytes.length > b.length) {
          const grown = Buffer.alloc(p.at + bytes.length);
          b.copy(grown);
          b = grown;
        }
        bytes.copy(b, p.at);
        break;
      }
      case "insert":
        b = Buffer.concat([b.subarray(0, p.at), Buffer.from(p.hex, "hex"), b.subarray(p.at)]);
        break;
      case "delete":
        b = Buffer.concat([b.subarray(0, p.at), b.subarray(Math.min(b.length, p.at + p.len))]);
        break;
      case "truncate":
        b = b.subarray(0, Math.min(b.length, p.size));
        break;
      case "append":
        b = Buffer.concat([b, Buffer.from(p.hex, "hex")]);
        break;
    }
  }
  return b;
}

/** Little-endian bytes of an unsigned integer of `size` bytes (values wrap), as hex. */
export function leHex(value: bigint | number, size: number): string {
  let v = BigInt.asUintN(size * 8, BigInt(value));
  let out = "";
  for (let i = 0; i < size; i++) {
    out += Number(v & 0xffn)
      .toString(16)
      .padStart(2, "0");
    v >>= 8n;
  }
  return out;
}

export function f32Hex(v: number): string {
  return Buffer.from(new Float32Array([v]).buffer).toString("hex");
}

/** Integers that break parsers: edges of every width, around the current value, powers of two. */
export function interestingInt(rng: Rng, current: number, size: number): bigint {
  const max = (1n << BigInt(size * 8)) - 1n;
  const c = BigInt(current);
  const picks: bigint[] = [
    0n,
    1n,
    max,
    max >> 1n,
    (max >> 1n) + 1n,
    c + 1n,
    c - 1n,
    c * 2n,
    c / 2n,
    c + 4096n,
    c - 4096n,
    0x7fn,
    0x80n,
    0xffn,
    0x7fffn,
    0xffffn,
    0x7fffffffn,
    0x80000000n,
    0xffffffffn,
    1n << 32n,
    1n << 40n,
    1n << 53n,
    (1n << 53n) + 1n,
    1n << 62n,
    BigInt(rng.u32()),
  ];
  return BigInt.asUintN(size * 8, rng.pick(picks));
}

/** Float values that break numeric code. */
export const INTERESTING_FLOATS = [NaN, Infinity, -Infinity, 0, -0, 1e-45, 1e38, 3.4e38, -1, 1e-8, 65504, 1e30];
