/**
 * Structure-aware mutation of neuron stores: the header page (fields, reserved bytes; its CRC
 * recomputed or left stale), the manifest (any field set to another value or type, deleted,
 * array entries dropped, duplicated or swapped; its CRC recomputed most of the time, so the
 * parser's and the layout check's own rules are what is exercised), the data chunks (bytes set
 * with the chunk CRC recomputed or not, padding included), and the file's size.
 *
 * Each mutation says whether it may change what the model computes ("semantic": metadata values,
 * the neuron order, weight bytes with their checksum recomputed): for all others, a store that
 * still loads must generate exactly the pristine store's text.
 */
import { crc32, encodeHeader, STORE_PAGE } from "../../src/format/store/index.js";
import { applyPatches, leHex, type Patch } from "./patch.js";
import type { Rng } from "./rng.js";

export type JsonPath = (string | number)[];

export type StoreMutation =
  | {
      kind: "manifest";
      what: string;
      path: JsonPath;
      action: "set" | "delete" | "duplicate" | "swap";
      value?: unknown;
      with?: number;
      semantic: boolean;
    }
  | { kind: "data"; what: string; at: number; hex: string; recrc: boolean; semantic: boolean }
  | { kind: "header"; what: string; at: number; hex: string; recrc: boolean }
  | { kind: "raw"; what: string; patch: Patch };

export interface StoreCase {
  target: "store";
  /** recompute the manifest's CRC in the header after the edits (else the stale CRC should be caught) */
  manifestCrc: boolean;
  mutations: StoreMutation[];
}

/** The pristine store split into its parts. */
export interface StoreParts {
  bytes: Buffer;
  manifestOffset: number;
  manifest: Record<string, unknown>;
  /** byte ranges inside the data region that only hold padding (zeros no reader computes with) */
  padding: [number, number][];
}

export function storeParts(bytes: Buffer): StoreParts {
  const at = Number(bytes.readBigUInt64LE(16));
  const n = Number(bytes.readBigUInt64LE(24));
  const manifest = JSON.parse(bytes.toString("utf8", at, at + n)) as Record<string, any>;
  const padding: [number, number][] = [];
  for (const t of manifest.fixed) {
    const end = t.offset + Math.ceil(t.bytes / STORE_PAGE) * STORE_PAGE;
    if (t.offset + t.bytes < end) padding.push([t.offset + t.bytes, end]);
  }
  const f = manifest.ffn;
  for (const L of f.layers)
    for (let i = 0; i < L.neurons; i++) {
      const b = L.offset + i * f.bundleBytes;
      if (3 * f.rowBytes < f.bundleBytes) padding.push([b + 3 * f.rowBytes, b + f.bundleBytes]);
    }
  return { bytes, manifestOffset: at, manifest, padding };
}

function get(obj: unknown, path: JsonPath): unknown {
  let o = obj as any;
  for (const k of path) o = o?.[k];
  return o;
}

/** Every path in the manifest, containers included (long arrays of numbers are not walked into). */
function paths(obj: unknown, prefix: JsonPath = [], out: JsonPath[] = []): JsonPath[] {
  out.push(prefix);
  if (Array.isArray(obj)) {
    if (obj.length <= 64 || typeof obj[0] === "object") obj.forEach((v, i) => paths(v, [...prefix, i], out));
  } else if (obj && typeof obj === "object") for (const [k, v] of Object.entries(obj)) paths(v, [...prefix, k], out);
  return out;
}

/** Whether a change at `path` may change the computation (anything else must not). */
function isSemantic(path: JsonPath): boolean {
  return path[0] === "metadata" || path.includes("order") || (path[0] === "fixed" && path[2] === "name");
}

function otherValue(rng: Rng, v: unknown): unknown {
  if (typeof v === "number") {
    return rng.pick<unknown>([
      0,
      -1,
      v + 1,
      v - 1,
      v + 4096,
      v - 4096,
      v * 2,
      Math.floor(v / 2),
      2 ** 31,
      2 ** 32,
      2 ** 53,
      2 ** 53 + 2,
      1e300,
      -1e300,
      v + 0.5,
      "NaN",
      String(v),
      null,
      true,
      [],
      {},
    ]);
  }
  if (typeof v === "string") {
    const b64 = Buffer.from(v, "base64");
    const flipped = Buffer.from(b64);
    if (flipped.length) flipped[Math.floor(flipped.length / 2)] ^= 0x01;
    return rng.pick<unknown>([
      "",
      "x",
      v + "x",
      v.slice(1),
      v.slice(0, Math.floor(v.length / 2)),
      flipped.toString("base64"),
      "!!!not base64!!!",
      0,
      null,
      [v],
    ]);
  }
  if (Array.isArray(v)) return rng.pick<unknown>([[], null, "[]", 0, [...v, ...v], v.slice(1), [v[0]]]);
  if (v && typeof v === "object") return rng.pick<unknown>([null, [], {}, 0, "x"]);
  return rng.pick<unknown>([null, 0, 1, "", "x", true, false, [], {}]);
}

function manifestMutation(rng: Rng, parts: StoreParts): StoreMutation {
  const all = paths(parts.manifest).filter((p) => p.length > 0);
  // layout fields most often: where the damage that checksums cannot see lives
  const layout = all.filter((p) =>
    [
      "offset",
      "bytes",
      "dims",
      "type",
      "neurons",
      "gateRows",
      "rowBytes",
      "bundleBytes",
      "nEmbd",
      "parts",
      "start",
      "end",
      "chunkBytes",
      "unused",
      "layers",
      "fixed",
    ].includes(String(p[p.length - 1])),
  );
  const path = rng.chance(0.6) && layout.length ? rng.pick(layout) : rng.pick(all);
  const cur = get(parts.manifest, path);
  const parent = get(parts.manifest, path.slice(0, -1));
  const semantic = isSemantic(path);
  const action = rng.weighted<string>([
    [6, "set"],
    [2, "delete"],
    [1, Array.isArray(parent) ? "duplicate" : "set"],
    [1, Array.isArray(parent) && parent.length > 1 ? "swap" : "set"],
  ]);
  if (action === "swap") {
    const i = path[path.length - 1] as number;
    const j = (i + 1 + rng.int((parent as unknown[]).length - 1)) % (parent as unknown[]).length;
    return {
      kind: "manifest",
      what: `manifest ${path.join(".")} swapped with entry ${j}`,
      path,
      action,
      with: j,
      semantic,
    };
  }
  if (action === "delete" || action === "duplicate")
    return { kind: "manifest", what: `manifest ${path.join(".")} ${action}d`, path, action, semantic };
  const value = otherValue(rng, cur);
  return {
    kind: "manifest",
    what: `manifest ${path.join(".")} = ${JSON.stringify(value)?.slice(0, 60)}`,
    path,
    action: "set",
    value,
    semantic,
  };
}

function dataMutation(rng: Rng, parts: StoreParts): StoreMutation {
  const recrc = rng.chance(0.6);
  if (rng.chance(0.35) && parts.padding.length) {
    const [a, b] = rng.pick(parts.padding);
    const at = a + rng.int(b - a);
    const hex = Buffer.from(rng.bytes(Math.min(b - at, rng.pick([1, 4, 16])))).toString("hex");
    // padding holds nothing: with its checksum fixed, the run must not change
    return {
      kind: "data",
      what: `padding bytes at ${at}${recrc ? " (chunk CRC recomputed)" : ""}`,
      at,
      hex,
      recrc,
      semantic: false,
    };
  }
  const at = STORE_PAGE + rng.int(parts.manifestOffset - STORE_PAGE);
  const planted = rng.chance(0.3);
  const hex = planted
    ? rng.pick([leHex(0x7fc00000, 4), leHex(0x7f800000, 4), leHex(0xff800000, 4)])
    : Buffer.from(rng.bytes(rng.pick([1, 2, 4, 8]))).toString("hex");
  return {
    kind: "data",
    what: `${planted ? "non-finite f32" : "bytes"} at ${at}${recrc ? " (chunk CRC recomputed)" : ""}`,
    at: planted ? at - (at % 4) : at,
    hex,
    recrc,
    // weights changed and re-checksummed: another model, whose text may differ
    semantic: recrc,
  };
}

function headerMutation(rng: Rng): StoreMutation {
  const recrc = rng.chance(0.5);
  const field = rng.pick([
    [0, 8, "magic"],
    [8, 4, "version"],
    [12, 4, "flags"],
    [16, 8, "manifestOffset"],
    [24, 8, "manifestBytes"],
    [32, 4, "manifestCrc32"],
    [36, 4, "headerCrc32"],
    [40 + rng.int(4096 - 40), 1, "reserved byte"],
  ] as const);
  const [at, size, name] = field;
  const v = rng.pick([0, 1, 2, 4096, 4095, 0xffffffff, rng.u32(), 2 ** 40]);
  return {
    kind: "header",
    what: `header ${name} = ${v}${recrc ? " (header CRC recomputed)" : ""}`,
    at,
    hex: leHex(v, size),
    recrc: recrc && name !== "headerCrc32",
  };
}

function rawMutation(rng: Rng, parts: StoreParts): StoreMutation {
  const size = parts.bytes.length;
  const p: Patch = rng.pick<Patch>([
    { op: "truncate", size: rng.int(size) },
    { op: "truncate", size: size - STORE_PAGE },
    { op: "truncate", size: STORE_PAGE },
    { op: "append", hex: "00".repeat(rng.pick([1, 4096])) },
  ]);
  const what =
    p.op === "truncate"
      ? `truncated to ${p.size} bytes`
      : p.op === "append"
        ? `${p.hex.length / 2} bytes appended`
        : p.op;
  return { kind: "raw", what, patch: p };
}

export function storeCase(rng: Rng, parts: StoreParts): StoreCase {
  const n = rng.weighted([
    [6, 1],
    [3, 2],
    [1, 3],
  ] as const);
  const mutations: StoreMutation[] = [];
  for (let i = 0; i < n; i++) {
    const kind = rng.weighted<string>([
      [10, "manifest"],
      [4, "data"],
      [2, "header"],
    ]);
    mutations.push(
      kind === "manifest"
        ? manifestMutation(rng, parts)
        : kind === "data"
          ? dataMutation(rng, parts)
          : headerMutation(rng),
    );
  }
  if (rng.chance(0.08)) mutations.push(rawMutation(rng, parts));
  return { target: "store", manifestCrc: rng.chance(0.9), mutations };
}

/** Whether a store case may change the computed text (else a store that loads must give the pristine text). */
export function mayChangeText(c: StoreCase): boolean {
  return c.mutations.some((m) => (m.kind === "manifest" || m.kind === "data") && m.semantic);
}

/** The mutated store's bytes. */
export function buildStore(parts: StoreParts, c: StoreCase): Buffer {
  const data = Buffer.from(parts.bytes.subarray(0, parts.manifestOffset));
  const m = structuredClone(parts.manifest) as Record<string, any>;
  const crcs = new Uint32Array(Buffer.from(m.checksums.crc32, "base64").buffer.slice(0));
  let crcsChanged = false;
  for (const mu of c.mutations) {
    if (mu.kind !== "data") continue;
    Buffer.from(mu.hex, "hex").copy(data, mu.at);
    if (mu.recrc) {
      for (let chunk = Math.floor(mu.at / STORE_PAGE); chunk * STORE_PAGE < mu.at + mu.hex.length / 2; chunk++) {
        crcs[chunk - 1] = crc32(data.subarray(chunk * STORE_PAGE, (chunk + 1) * STORE_PAGE));
        crcsChanged = true;
      }
    }
  }
  if (crcsChanged) m.checksums.crc32 = Buffer.from(crcs.buffer).toString("base64");
  for (const mu of c.mutations) {
    if (mu.kind !== "manifest") continue;
    const parent = get(m, mu.path.slice(0, -1)) as any;
    const key = mu.path[mu.path.length - 1];
    if (parent === null || typeof parent !== "object") continue; // an earlier edit removed it
    if (mu.action === "set") parent[key] = structuredClone(mu.value);
    else if (mu.action === "delete") {
      if (Array.isArray(parent)) parent.splice(key as number, 1);
      else delete parent[key];
    } else if (mu.action === "duplicate" && Array.isArray(parent))
      parent.splice(key as number, 0, structuredClone(parent[key as number]));
    else if (mu.action === "swap" && Array.isArray(parent) && mu.with! < parent.length)
      [parent[key as number], parent[mu.with!]] = [parent[mu.with!], parent[key as number]];
  }
  const json = Buffer.from(JSON.stringify(m));
  const pad = Buffer.alloc((STORE_PAGE - (json.length % STORE_PAGE)) % STORE_PAGE);
  let out: Buffer = Buffer.concat([data, json, pad]);
  const crc = c.manifestCrc ? crc32(json) : (parts.bytes.readUInt32LE(32) ^ 1) >>> 0;
  Buffer.from(
    encodeHeader({ manifestOffset: parts.manifestOffset, manifestBytes: json.length, manifestCrc32: crc }),
  ).copy(out, 0);
  for (const mu of c.mutations) {
    if (mu.kind !== "header") continue;
    Buffer.from(mu.hex, "hex").copy(out, mu.at);
    if (mu.recrc) out.writeUInt32LE(crc32(out.subarray(0, 36)), 36);
  }
  const raw = c.mutations.flatMap((mu) => (mu.kind === "raw" ? [mu.patch] : []));
  if (raw.length) out = applyPatches(out, raw);
  return out;
}
