/**
 * Structure-aware mutation of GGUF files: header fields, metadata keys (their lengths, value
 * types, string lengths and bytes, array item types, counts and items, with the model's own
 * hyper-parameters and token ids favoured), the tensor table (name lengths, dimension counts,
 * dimensions, types, offsets), tensor data (NaN and infinities planted by type, random bytes),
 * and generic damage (bit flips, interesting bytes, truncation at field boundaries, duplicated
 * or deleted entries, inserted bytes). A case stacks one to three mutations, every one recorded
 * as a byte patch of the pristine file.
 */
import { GGMLType, typeTraits } from "../../src/format/ggml-types.js";
import type { GGUFLayout, KVLayout, TensorLayout, Field } from "./gguf-layout.js";
import { f32Hex, interestingInt, leHex, INTERESTING_FLOATS, type Mutation } from "./patch.js";
import type { Rng } from "./rng.js";

export interface Pristine {
  name: string;
  bytes: Uint8Array;
  layout: GGUFLayout;
}

export interface GGUFCase {
  target: "gguf";
  file: string;
  mutations: Mutation[];
}

function readField(p: Pristine, f: Field): bigint {
  const v = new DataView(p.bytes.buffer, p.bytes.byteOffset, p.bytes.byteLength);
  if (f.size === 8) return v.getBigUint64(f.at, true);
  if (f.size === 4) return BigInt(v.getUint32(f.at, true));
  if (f.size === 2) return BigInt(v.getUint16(f.at, true));
  return BigInt(p.bytes[f.at]);
}

function setField(rng: Rng, p: Pristine, f: Field, value?: bigint): Mutation {
  const v = value ?? interestingInt(rng, Number(readField(p, f)), f.size);
  return { what: `${f.what} = ${v}`, patch: { op: "set", at: f.at, hex: leHex(v, f.size) } };
}

/** Keys whose values the loader computes with: favoured by the scalar mutator. */
const HOT_KEY =
  /(block_count|embedding_length|context_length|head_count|feed_forward_length|rope|vocab_size|epsilon|expert|token_id|alignment|file_type|sparse_threshold)/;

function kvScalar(rng: Rng, p: Pristine): Mutation {
  const scalars = p.layout.kvs.filter((k) => k.valueType !== 8 && k.valueType !== 9);
  const hot = scalars.filter((k) => HOT_KEY.test(k.key));
  const kv = rng.chance(0.8) && hot.length ? rng.pick(hot) : rng.pick(scalars);
  const size = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 }[kv.valueType] ?? 4;
  if (kv.valueType === 6 && rng.chance(0.7)) {
    const f = rng.pick(INTERESTING_FLOATS);
    return { what: `"${kv.key}" = ${f}`, patch: { op: "set", at: kv.valueAt, hex: f32Hex(f) } };
  }
  if (kv.valueType === 12 && rng.chance(0.7)) {
    const f = rng.pick(INTERESTING_FLOATS);
    return {
      what: `"${kv.key}" = ${f}`,
      patch: { op: "set", at: kv.valueAt, hex: Buffer.from(new Float64Array([f]).buffer).toString("hex") },
    };
  }
  return setField(rng, p, { at: kv.valueAt, size, what: `"${kv.key}"` });
}

/** The offset of string item `j` of an array of strings (walks the lengths). */
function stringItemAt(p: Pristine, kv: KVLayout, j: number): number {
  const v = new DataView(p.bytes.buffer, p.bytes.byteOffset, p.bytes.byteLength);
  let at = kv.items!.at;
  for (let i = 0; i < j; i++) at += 8 + Number(v.getBigUint64(at, true));
  return at;
}

function kvArrayItem(rng: Rng, p: Pristine): Mutation | null {
  const arrays = p.layout.kvs.filter((k) => k.items && k.items.n > 0);
  if (!arrays.length) return null;
  const kv = rng.pick(arrays);
  const it = kv.items!;
  const j = rng.int(it.n);
  if (it.size === 0) {
    const at = stringItemAt(p, kv, j);
    if (rng.chance(0.5)) return setField(rng, p, { at, size: 8, what: `"${kv.key}"[${j}] length` });
    const len = Number(new DataView(p.bytes.buffer, p.bytes.byteOffset).getBigUint64(at, true));
    if (len === 0) return null;
    const bad = rng.pick(["ff", "c080", "eda080", "f4908080", "00", "e2"]);
    return {
      what: `"${kv.key}"[${j}] bytes = ${bad}`,
      patch: { op: "set", at: at + 8 + rng.int(len), hex: bad.slice(0, 2 * Math.min(bad.length / 2, len)) },
    };
  }
  const at = it.at + j * it.size;
  if (it.type === 6) {
    const f = rng.pick(INTERESTING_FLOATS);
    return { what: `"${kv.key}"[${j}] = ${f}`, patch: { op: "set", at, hex: f32Hex(f) } };
  }
  return setField(rng, p, { at, size: it.size, what: `"${kv.key}"[${j}]` });
}

function tensorField(rng: Rng, p: Pristine): Mutation {
  const t = rng.pick(p.layout.tensors);
  const which = rng.weighted<string>([
    [1, "nameLen"],
    [1, "nDims"],
    [3, "dim"],
    [1, "swapDims"],
    [2, "type"],
    [3, "offset"],
  ]);
  switch (which) {
    case "nameLen":
      return setField(rng, p, t.nameLen);
    case "nDims":
      return setField(rng, p, t.nDims, BigInt(rng.pick([0, 1, 2, 3, 4, 5, 8, 255, 0xffffffff])));
    case "dim":
      return setField(rng, p, rng.pick(t.dims));
    case "swapDims": {
      if (t.dims.length < 2) return setField(rng, p, t.dims[0]);
      // same bytes, another shape
      const hex = leHex(t.dimValues[1], 8) + leHex(t.dimValues[0], 8);
      return { what: `"${t.name}" dims swapped`, patch: { op: "set", at: t.dims[0].at, hex } };
    }
    case "type": {
      const ids = [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 24, 25, 26, 27, 28, 30, 31, 39, 1000];
      return setField(rng, p, t.type, BigInt(rng.pick(ids)));
    }
    default: {
      const cur = Number(readField(p, t.offset));
      const other = rng.pick(p.layout.tensors);
      const a = p.layout.alignment;
      const v = rng.pick([
        cur + a,
        cur - a,
        cur + 1,
        0,
        Number(readField(p, other.offset)),
        cur + 4096,
        p.layout.size,
        2 ** 40,
      ]);
      return setField(rng, p, t.offset, BigInt.asUintN(64, BigInt(v)));
    }
  }
}

/** A non-finite value planted in a tensor's data, where the type keeps its floats. */
function plantNonFinite(rng: Rng, p: Pristine): Mutation | null {
  const t = rng.pick(p.layout.tensors);
  const tr = typeTraits(t.ggmlType);
  if (!tr || t.bytes === 0) return null;
  const blocks = t.bytes / tr.typeSize;
  const b = rng.int(blocks);
  const at = t.dataAt + b * tr.typeSize;
  const f = rng.pick([NaN, Infinity, -Infinity]);
  switch (t.ggmlType) {
    case GGMLType.F32:
      return { what: `"${t.name}" value ${b} = ${f}`, patch: { op: "set", at, hex: f32Hex(f) } };
    case GGMLType.F16: {
      const h = Number.isNaN(f) ? 0x7e00 : f > 0 ? 0x7c00 : 0xfc00;
      return { what: `"${t.name}" value ${b} = ${f} (f16)`, patch: { op: "set", at, hex: leHex(h, 2) } };
    }
    case GGMLType.Q8_0:
    case GGMLType.Q4_0:
    case GGMLType.Q4_1:
    case GGMLType.Q5_0:
    case GGMLType.Q5_1:
      return { what: `"${t.name}" block ${b} scale = NaN (f16)`, patch: { op: "set", at, hex: leHex(0x7e00, 2) } };
    default:
      return null;
  }
}

function bitFlip(rng: Rng, p: Pristine): Mutation {
  // mostly in the header and tables, where structure lives
  const end = rng.chance(0.8) ? p.layout.dataStart : p.layout.size;
  const at = rng.int(end);
  const bit = rng.int(8);
  return {
    what: `bit ${bit} of byte ${at} flipped`,
    patch: { op: "set", at, hex: leHex(p.bytes[at] ^ (1 << bit), 1) },
  };
}

function interestingByte(rng: Rng, p: Pristine): Mutation {
  const at = rng.int(p.layout.dataStart);
  const v = rng.pick([0x00, 0xff, 0x7f, 0x80, 0x01, 0xfe]);
  return { what: `byte ${at} = ${v}`, patch: { op: "set", at, hex: leHex(v, 1) } };
}

/** Size-changing mutations: applied last, since they move every offset after them. */
function resize(rng: Rng, p: Pristine): Mutation {
  const L = p.layout;
  const boundaries = [
    0,
    1,
    3,
    4,
    8,
    16,
    24,
    ...L.kvs.flatMap((k) => [k.at, k.end, k.valueAt, k.end - 1]),
    ...L.tensors.flatMap((t) => [t.at, t.end, t.dataAt, t.dataAt + t.bytes - 1]),
    L.dataStart,
    L.size - 1,
  ].filter((x) => x >= 0 && x < L.size);
  const kind = rng.weighted<string>([
    [3, "truncate"],
    [1, "truncateRandom"],
    [2, "duplicateKV"],
    [2, "deleteKV"],
    [1, "insert"],
    [1, "delete"],
    [1, "append"],
  ]);
  switch (kind) {
    case "truncate": {
      const size = rng.pick(boundaries);
      return { what: `truncated to ${size} bytes (a field boundary)`, patch: { op: "truncate", size } };
    }
    case "truncateRandom": {
      const size = rng.int(L.size);
      return { what: `truncated to ${size} bytes`, patch: { op: "truncate", size } };
    }
    case "duplicateKV": {
      // the entry again right after itself; the count is not raised, so the last key is read as a tensor
      const k = rng.pick(L.kvs);
      const hex = Buffer.from(p.bytes.subarray(k.at, k.end)).toString("hex");
      return { what: `metadata "${k.key}" duplicated in place`, patch: { op: "insert", at: k.end, hex } };
    }
    case "deleteKV": {
      const k = rng.pick(L.kvs);
      return { what: `metadata "${k.key}" bytes deleted`, patch: { op: "delete", at: k.at, len: k.end - k.at } };
    }
    case "insert": {
      const at = rng.pick(boundaries);
      const hex = Buffer.from(rng.bytes(rng.pick([1, 4, 8, 16, 64]))).toString("hex");
      return { what: `${hex.length / 2} random bytes inserted at ${at}`, patch: { op: "insert", at, hex } };
    }
    case "delete": {
      const at = rng.pick(boundaries);
      const len = rng.pick([1, 4, 8, 16, 100]);
      return { what: `${len} bytes deleted at ${at}`, patch: { op: "delete", at, len } };
    }
    default: {
      const hex = Buffer.from(rng.bytes(rng.pick([1, 32, 4096]))).toString("hex");
      return { what: `${hex.length / 2} bytes appended`, patch: { op: "append", hex } };
    }
  }
}

/**
 * A duplicated key with the count raised: a well-formed file that holds one key twice (the copy
 * then shadows nothing: readers must refuse it rather than pick one).
 */
function duplicateKeyCounted(rng: Rng, p: Pristine): Mutation[] {
  const k = rng.pick(p.layout.kvs);
  const n = readField(p, p.layout.nKV);
  const hex = Buffer.from(p.bytes.subarray(k.at, k.end)).toString("hex");
  return [
    setField(rng, p, p.layout.nKV, n + 1n),
    { what: `metadata "${k.key}" appears twice`, patch: { op: "insert", at: k.end, hex } },
  ];
}

export function ggufCase(rng: Rng, pristines: readonly Pristine[]): GGUFCase {
  // the smallest model most often: a case's cost is mostly loading it
  const p = rng.weighted(pristines.map((x, i) => [i === 0 ? 6 : 1, x] as const));
  const L = p.layout;
  const fixed: Mutation[] = [];
  const n = rng.weighted([
    [6, 1],
    [3, 2],
    [1, 3],
  ] as const);
  for (let i = 0; i < n; i++) {
    const kind = rng.weighted<string>([
      [2, "header"],
      [2, "keyLen"],
      [2, "kvType"],
      [6, "scalar"],
      [2, "strLen"],
      [4, "arrayItem"],
      [1, "arrayType"],
      [2, "arrayCount"],
      [8, "tensor"],
      [4, "nonFinite"],
      [2, "dataBytes"],
      [3, "bitFlip"],
      [2, "byte"],
    ]);
    let m: Mutation | null = null;
    const kvPick = () => rng.pick(L.kvs);
    switch (kind) {
      case "header":
        m = setField(rng, p, rng.pick([L.version, L.nTensors, L.nKV]));
        if (m.what.startsWith("version") && rng.chance(0.5))
          m = setField(rng, p, L.version, BigInt(rng.pick([0, 1, 2, 3, 4, 0xffff])));
        break;
      case "keyLen":
        m = setField(rng, p, kvPick().keyLen);
        break;
      case "kvType":
        m = setField(rng, p, kvPick().type, BigInt(rng.pick([0, 1, 4, 5, 6, 7, 8, 9, 10, 12, 13, 255, 0xffffffff])));
        break;
      case "scalar":
        m = kvScalar(rng, p);
        break;
      case "strLen": {
        const strings = L.kvs.filter((k) => k.strLen);
        if (strings.length) m = setField(rng, p, rng.pick(strings).strLen!);
        break;
      }
      case "arrayItem":
        m = kvArrayItem(rng, p);
        break;
      case "arrayType": {
        const arrays = L.kvs.filter((k) => k.itemType);
        if (arrays.length) m = setField(rng, p, rng.pick(arrays).itemType!, BigInt(rng.int(14)));
        break;
      }
      case "arrayCount": {
        const arrays = L.kvs.filter((k) => k.count);
        if (arrays.length) m = setField(rng, p, rng.pick(arrays).count!);
        break;
      }
      case "tensor":
        m = tensorField(rng, p);
        break;
      case "nonFinite":
        m = plantNonFinite(rng, p);
        break;
      case "dataBytes": {
        const t: TensorLayout = rng.pick(L.tensors);
        const len = Math.min(t.bytes, rng.pick([1, 2, 4, 16]));
        const at = t.dataAt + rng.int(Math.max(1, t.bytes - len));
        m = {
          what: `"${t.name}" data bytes at ${at}`,
          patch: { op: "set", at, hex: Buffer.from(rng.bytes(len)).toString("hex") },
        };
        break;
      }
      case "bitFlip":
        m = bitFlip(rng, p);
        break;
      default:
        m = interestingByte(rng, p);
    }
    if (m) fixed.push(m);
  }
  const resizing = rng.chance(0.25) ? [resize(rng, p)] : rng.chance(0.05) ? duplicateKeyCounted(rng, p) : [];
  if (fixed.length === 0 && resizing.length === 0) fixed.push(bitFlip(rng, p));
  return { target: "gguf", file: p.name, mutations: [...fixed, ...resizing] };
}
