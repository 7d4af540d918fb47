/**
 * Where every field of a well-formed GGUF file sits: the map the structure-aware GGUF mutator
 * aims with (a key's length, a value's type, an array's count, a tensor's dims, type and offset,
 * each tensor's data). A deliberately small reader of its own, for pristine files only: it
 * shares nothing with the parser under test, so a bug there cannot hide itself here.
 */
import { typeTraits } from "../../src/format/ggml-types.js";

export interface Field {
  at: number;
  /** bytes: 1, 2, 4 or 8 */
  size: number;
  what: string;
}

export interface KVLayout {
  key: string;
  at: number;
  keyLen: Field;
  type: Field;
  valueType: number;
  valueAt: number;
  end: number;
  /** string values: their length field */
  strLen?: Field;
  /** arrays: item type, count, first item and item size (0 for strings) */
  itemType?: Field;
  count?: Field;
  items?: { at: number; size: number; type: number; n: number };
}

export interface TensorLayout {
  name: string;
  at: number;
  end: number;
  nameLen: Field;
  nDims: Field;
  dims: Field[];
  dimValues: number[];
  type: Field;
  ggmlType: number;
  offset: Field;
  dataAt: number;
  bytes: number;
}

export interface GGUFLayout {
  size: number;
  version: Field;
  nTensors: Field;
  nKV: Field;
  kvs: KVLayout[];
  tensors: TensorLayout[];
  dataStart: number;
  alignment: number;
}

const SCALAR_SIZE: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
const STRING = 8;
const ARRAY = 9;

export function ggufLayout(buf: Uint8Array): GGUFLayout {
  const v = new DataView(buf.buffer, buf.byteOffset, buf.byteLength);
  let p = 0;
  const field = (size: number, what: string): Field => {
    const f = { at: p, size, what };
    p += size;
    return f;
  };
  const u32 = (at: number) => v.getUint32(at, true);
  const u64 = (at: number) => Number(v.getBigUint64(at, true));
  const str = (what: string) => {
    const len = field(8, `${what} length`);
    const n = u64(len.at);
    const s = Buffer.from(buf.subarray(p, p + n)).toString("utf8");
    p += n;
    return { len, s };
  };
  p = 4;
  const version = field(4, "version");
  const nTensors = field(8, "tensor count");
  const nKV = field(8, "metadata count");
  const kvs: KVLayout[] = [];
  let alignment = 32;
  for (let i = 0, n = u64(nKV.at); i < n; i++) {
    const at = p;
    const { len: keyLen, s: key } = str(`metadata key #${i}`);
    const type = field(4, `type of "${key}"`);
    const valueType = u32(type.at);
    const kv: KVLayout = { key, at, keyLen, type, valueType, valueAt: p, end: 0 };
    if (valueType === STRING) kv.strLen = str(`"${key}"`).len;
    else if (valueType === ARRAY) {
      kv.itemType = field(4, `"${key}" item type`);
      kv.count = field(8, `"${key}" count`);
      const t = u32(kv.itemType.at);
      const count = u64(kv.count.at);
      kv.items = { at: p, size: t === STRING ? 0 : SCALAR_SIZE[t], type: t, n: count };
      if (t === STRING) for (let j = 0; j < count; j++) str(`"${key}"[${j}]`);
      else p += count * SCALAR_SIZE[t];
    } else {
      if (key === "general.alignment") alignment = u32(p);
      p += SCALAR_SIZE[valueType];
    }
    kv.end = p;
    kvs.push(kv);
  }
  const raw: Omit<TensorLayout, "dataAt" | "bytes">[] = [];
  for (let i = 0, n = u64(nTensors.at); i < n; i++) {
    const at = p;
    const { len: nameLen, s: name } = str(`tensor #${i} name`);
    const nDims = field(4, `"${name}" dimension count`);
    const dims: Field[] = [];
    const dimValues: number[] = [];
    for (let d = 0; d < u32(nDims.at); d++) {
      dims.push(field(8, `"${name}" dimension ${d}`));
      dimValues.push(u64(p - 8));
    }
    const type = field(4, `"${name}" type`);
    const offset = field(8, `"${name}" offset`);
    raw.push({ name, at, end: p, nameLen, nDims, dims, dimValues, type, ggmlType: u32(type.at), offset });
  }
  const dataStart = Math.ceil(p / alignment) * alignment;
  const tensors = raw.map((t) => {
    const tr = typeTraits(t.ggmlType)!;
    const elements = t.dimValues.reduce((a, b) => a * b, 1);
    return { ...t, dataAt: dataStart + u64(t.offset.at), bytes: (elements / tr.blockSize) * tr.typeSize };
  });
  return { size: buf.length, version, nTensors, nKV, kvs, tensors, dataStart, alignment };
}
