/**
 * A tiny safetensors writer for tests: the file layout (8-byte header length, JSON header, data)
 * written from f32 values as F32, F16 or BF16, with hooks to corrupt it (a header edited before
 * it is written, the file cut short).
 */
import { writeFileSync } from "node:fs";
import { f32ToBF16, f32ToF16 } from "../src/format/half.js";

export interface TestTensor {
  name: string;
  shape: number[];
  values: Float32Array;
  dtype?: "F32" | "F16" | "BF16";
}

export function safetensorsBytes(
  tensors: TestTensor[],
  edit?: (header: Record<string, { dtype: string; shape: number[]; data_offsets: number[] }>) => void,
): Uint8Array {
  const header: Record<string, { dtype: string; shape: number[]; data_offsets: number[] }> = {};
  const datas: Uint8Array[] = [];
  let off = 0;
  for (const t of tensors) {
    const dtype = t.dtype ?? "BF16";
    const size = dtype === "F32" ? 4 : 2;
    const d = new Uint8Array(t.values.length * size);
    const dv = new DataView(d.buffer);
    t.values.forEach((v, i) => {
      if (dtype === "F32") dv.setFloat32(4 * i, v, true);
      else dv.setUint16(2 * i, dtype === "F16" ? f32ToF16(v) : f32ToBF16(v), true);
    });
    header[t.name] = { dtype, shape: t.shape, data_offsets: [off, off + d.length] };
    datas.push(d);
    off += d.length;
  }
  edit?.(header);
  let json = JSON.stringify({ __metadata__: { format: "pt" }, ...header });
  while ((8 + json.length) % 8 !== 0) json += " ";
  const h = Buffer.from(json, "utf8");
  const out = new Uint8Array(8 + h.length + off);
  new DataView(out.buffer).setBigUint64(0, BigInt(h.length), true);
  out.set(h, 8);
  let p = 8 + h.length;
  for (const d of datas) {
    out.set(d, p);
    p += d.length;
  }
  return out;
}

export function writeSafetensors(path: string, tensors: TestTensor[]): void {
  writeFileSync(path, safetensorsBytes(tensors));
}
