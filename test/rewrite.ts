/**
 * Test models made from real ones: a GGUF rewritten with another architecture name, magic,
 * metadata, extra or replaced tensors, or split into parts.
 */
import { join } from "node:path";
import { GGUFFile, type GGUFValue } from "../src/format/gguf.js";
import { GGUFWriter } from "../src/format/gguf-writer.js";
import { GGMLType } from "../src/format/ggml-types.js";
import { dequantize, quantizeRow, rowBytes } from "../src/format/quant.js";
import { f32Bytes, tempDir } from "./helpers.js";

const dir = tempDir();

export interface Rewrite {
  arch?: string;
  magic?: "GGUF" | "PWRI";
  dropKeys?: string[];
  metadata?: Record<string, string | number>;
  /** replace or add tensors: name -> [dims, f32 data] (undefined removes) */
  tensors?: (src: GGUFFile) => Map<string, [number[], Float32Array] | undefined>;
  /** give tensors another type (their bytes zeros of that type's size) */
  retype?: Record<string, GGMLType>;
}

/** Write a copy of `srcPath` with the given changes into one file or `parts` split files. */
export async function rewrite(srcPath: string, name: string, r: Rewrite, parts = 1): Promise<string> {
  const src = GGUFFile.open(srcPath);
  // (a predictors-only file has no architecture)
  const srcArch = src.has("general.architecture") ? src.architecture : "";
  const arch = r.arch ?? srcArch;
  const changed = r.tensors?.(src) ?? new Map();
  const tensorList: { name: string; dims: number[]; type: GGMLType; data: Uint8Array }[] = [];
  for (const t of src.tensors.values()) {
    if (changed.has(t.name)) continue;
    const type = r.retype?.[t.name];
    if (type !== undefined) {
      const data = new Uint8Array(rowBytes(type, t.dims[0]) * (t.elements / t.dims[0]));
      tensorList.push({ name: t.name, dims: t.dims, type, data });
    } else tensorList.push({ name: t.name, dims: t.dims, type: t.type, data: src.tensorData(t.name) });
  }
  for (const [n, v] of changed)
    if (v) tensorList.push({ name: n, dims: v[0], type: GGMLType.F32, data: f32Bytes(v[1]) });
  const paths: string[] = [];
  const per = Math.ceil(tensorList.length / parts);
  for (let p = 0; p < parts; p++) {
    const path =
      parts === 1
        ? join(dir, `${name}.gguf`)
        : join(dir, `${name}-${String(p + 1).padStart(5, "0")}-of-${String(parts).padStart(5, "0")}.gguf`);
    const w = new GGUFWriter(path, { magic: r.magic ?? "GGUF", fsync: false });
    for (const [key, value] of src.metadata) {
      if (r.dropKeys?.includes(key)) continue;
      const k = key.startsWith(`${srcArch}.`) ? `${arch}.${key.slice(srcArch.length + 1)}` : key;
      w.setMetadata(
        k,
        k === "general.architecture" ? arch : (value as Exclude<GGUFValue, GGUFValue[]> | string[] as never),
      );
    }
    for (const [k, v] of Object.entries(r.metadata ?? {})) w.setMetadata(k, v);
    if (parts > 1) {
      w.setMetadata("split.no", p);
      w.setMetadata("split.count", parts);
    }
    for (const t of tensorList.slice(p * per, (p + 1) * per)) w.addTensor(t.name, t.dims, t.type, t.data);
    await w.finish();
    paths.push(path);
  }
  src.close();
  return paths[0];
}

/**
 * A copy of `srcPath` with its FFN matrices in `type`, and (`down` given) each layer's ffn_down
 * replaced by F32 values: down(layer)[r * nFF + i] is row r, neuron i.
 */
export async function retypeFFN(
  srcPath: string,
  out: string,
  type: GGMLType,
  down?: (layer: number) => Float32Array,
): Promise<void> {
  const src = GGUFFile.open(srcPath);
  const w = new GGUFWriter(out, { fsync: false });
  for (const [k, v] of src.metadata) w.setMetadata(k, v as never);
  for (const t of src.tensors.values()) {
    const m = /^blk\.(\d+)\.ffn_(gate|up|down)\.weight$/.exec(t.name);
    if (!m) w.addTensor(t.name, t.dims, t.type, src.tensorData(t.name));
    else if (down && m[2] === "down") {
      const f = down(Number(m[1]));
      w.addTensor(t.name, t.dims, GGMLType.F32, new Uint8Array(f.buffer, f.byteOffset, f.byteLength));
    } else {
      const f = dequantize(t.type, src.tensorData(t.name), t.elements);
      const rb = rowBytes(type, t.dims[0]);
      const q = new Uint8Array(t.dims[1] * rb);
      for (let r = 0; r < t.dims[1]; r++)
        quantizeRow(type, f.subarray(r * t.dims[0], (r + 1) * t.dims[0]), q.subarray(r * rb));
      w.addTensor(t.name, t.dims, type, q);
    }
  }
  await w.finish();
  src.close();
}
