/**
 * How `inspect` shows metadata values, for GGUF files and stores alike: one line of text (long
 * arrays cut short), and JSON that never fails (64-bit integers beyond 2^53 are bigints, which
 * JSON.stringify refuses, and NaN or infinities, which it would turn into null).
 */
import type { GGUFValue } from "../format/gguf.js";

/** A value on one line; arrays show their length and first 8 items unless `all`. */
export function showValue(v: GGUFValue, all: boolean): string {
  if (Array.isArray(v) || v instanceof Float32Array || v instanceof Int32Array) {
    const items = [...(v as ArrayLike<unknown> & Iterable<unknown>)];
    const shown = all ? items : items.slice(0, 8);
    return `[${items.length}] ${shown.map((x) => JSON.stringify(jsonValue(x as GGUFValue))).join(", ")}${shown.length < items.length ? ", ..." : ""}`;
  }
  if (typeof v === "string") return JSON.stringify(v.length > 200 && !all ? v.slice(0, 200) + "..." : v);
  return String(v);
}

/** A value JSON can carry exactly: bigints and non-finite numbers as strings, typed arrays as arrays. */
export function jsonValue(v: GGUFValue): unknown {
  if (typeof v === "bigint") return String(v);
  if (typeof v === "number") return Number.isFinite(v) ? v : String(v);
  if (v instanceof Float32Array || v instanceof Int32Array) return Array.from(v, (x) => jsonValue(x));
  if (Array.isArray(v)) return v.map((x) => jsonValue(x));
  return v;
}
