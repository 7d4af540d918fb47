/**
 * NaN and infinity in weights, found while the bytes pass through the loader.
 *
 * A NaN weight does not fail where it sits: it spreads through every product it enters, and the
 * run dies tokens later with "every logit is -Infinity or NaN", naming nothing. Checking the
 * bytes as they are read costs one pass over data the loader touches anyway (F32: a mask test
 * per value; F16/BF16: one per 16 bits; quantized blocks: only their f16/f32 scale fields, since
 * the quants themselves are small integers and cannot be non-finite).
 */
import { GGMLType, traitsBytes, typeName, typeTraits } from "./ggml-types.js";
import type { GGUFTensorInfo, ModelFile } from "./gguf.js";
import { f16ToF32 } from "./half.js";
import { e8m0Half } from "./mxfp4.js";

export class NonFiniteWeightError extends Error {
  override name = "NonFiniteWeightError";
  constructor(
    readonly file: string,
    readonly tensor: string,
    message: string,
  ) {
    super(`${file}: ${message}`);
  }
}

/** What findNonFinite reports: the element index in the tensor, the value, and whether it is a block's scale. */
export interface NonFinite {
  element: number;
  value: number;
  scale?: boolean;
}

/**
 * Byte offsets, inside one block, of the scale fields of each quantized type (f16 unless listed in
 * F32_SCALES): ggml's block layouts (ggml-common.h).
 */
const SCALES: Partial<Record<GGMLType, number[]>> = {
  [GGMLType.Q4_0]: [0],
  [GGMLType.Q4_1]: [0, 2],
  [GGMLType.Q5_0]: [0],
  [GGMLType.Q5_1]: [0, 2],
  [GGMLType.Q8_0]: [0],
  [GGMLType.Q8_1]: [0, 2],
  [GGMLType.Q2_K]: [80, 82],
  [GGMLType.Q3_K]: [108],
  [GGMLType.Q4_K]: [0, 2],
  [GGMLType.Q5_K]: [0, 2],
  [GGMLType.Q6_K]: [208],
  [GGMLType.Q8_K]: [0],
};
const F32_SCALES = new Set<GGMLType>([GGMLType.Q8_K]);
/** The first MXFP4 exponent byte whose block can hold an infinity (12 * 2^(e - 128) past f32's range). */
const MXFP4_OVERFLOW_EXPONENT = 253;

const EXP_F32 = 0x7f800000;
const EXP_F16 = 0x7c00;
const EXP_BF16 = 0x7f80;

/** The f32 value of 16 bits of bf16. */
function bf16Value(bits: number): number {
  return new Float32Array(new Uint32Array([bits << 16]).buffer)[0];
}

/**
 * The first NaN or infinity in `bytes`, which hold part of a tensor of `type` starting
 * `startByte` bytes into it (a partial block at either end is skipped: its scale is checked with
 * the piece that holds it whole). Null when every value is finite, or the type has no float
 * fields this knows of (integer types).
 */
export function findNonFinite(type: GGMLType, bytes: Uint8Array, startByte: number): NonFinite | null {
  const traits = typeTraits(type);
  if (!traits) return null;
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.byteLength);
  const size = traits.typeSize;
  // first whole block (or value) in the piece
  const skip = (size - (startByte % size)) % size;
  const first = (startByte + skip) / size;
  const blocks = Math.floor((bytes.length - skip) / size);
  switch (type) {
    case GGMLType.F32:
      for (let i = 0; i < blocks; i++) {
        if ((view.getUint32(skip + 4 * i, true) & EXP_F32) === EXP_F32)
          return { element: first + i, value: view.getFloat32(skip + 4 * i, true) };
      }
      return null;
    case GGMLType.F16:
      for (let i = 0; i < blocks; i++) {
        const h = view.getUint16(skip + 2 * i, true);
        if ((h & EXP_F16) === EXP_F16) return { element: first + i, value: f16ToF32(h) };
      }
      return null;
    case GGMLType.BF16:
      for (let i = 0; i < blocks; i++) {
        const h = view.getUint16(skip + 2 * i, true);
        if ((h & EXP_BF16) === EXP_BF16) return { element: first + i, value: bf16Value(h) };
      }
      return null;
    case GGMLType.F64:
      for (let i = 0; i < blocks; i++) {
        const v = view.getFloat64(skip + 8 * i, true);
        if (!Number.isFinite(v)) return { element: first + i, value: v };
      }
      return null;
  }
  if (type === GGMLType.MXFP4) {
    // the E8M0 exponent byte: from 253 on, the block's largest values (+-12 half-scales) overflow
    // f32 (and 255 is MX's NaN), which ggml does not check
    for (let b = 0; b < blocks; b++) {
      const e = bytes[skip + b * size];
      if (e >= MXFP4_OVERFLOW_EXPONENT)
        return { element: (first + b) * traits.blockSize, value: Math.fround(12 * e8m0Half(e)), scale: true };
    }
    return null;
  }
  const scales = SCALES[type];
  if (!scales) return null;
  const wide = F32_SCALES.has(type);
  // the exponent bits tested (through 16-bit words where they are aligned: every f16 scale of an
  // even-sized block), the value made only for the report
  const halves =
    !wide && bytes.byteOffset % 2 === 0 && skip % 2 === 0 && size % 2 === 0
      ? new Uint16Array(bytes.buffer, bytes.byteOffset, bytes.byteLength >> 1)
      : undefined;
  if (halves && scales.length === 1) {
    // the common case (Q8_0, Q4_0): one scale, first in the block
    const step = size >> 1;
    for (let b = 0, i = (skip + scales[0]) >> 1; b < blocks; b++, i += step)
      if ((halves[i] & EXP_F16) === EXP_F16)
        return { element: (first + b) * traits.blockSize, value: f16ToF32(halves[i]), scale: true };
    return null;
  }
  const nonFinite = (at: number) =>
    halves
      ? (halves[at >> 1] & EXP_F16) === EXP_F16
      : wide
        ? (view.getUint32(at, true) & EXP_F32) === EXP_F32
        : (view.getUint16(at, true) & EXP_F16) === EXP_F16;
  for (let b = 0; b < blocks; b++) {
    const at = skip + b * size;
    for (let k = 0; k < scales.length; k++) {
      if (!nonFinite(at + scales[k])) continue;
      const value = wide ? view.getFloat32(at + scales[k], true) : f16ToF32(view.getUint16(at + scales[k], true));
      return { element: (first + b) * traits.blockSize, value, scale: true };
    }
  }
  return null;
}

/** The error for a non-finite value found in tensor `t` of `path`. */
export function nonFiniteError(path: string, t: GGUFTensorInfo, found: NonFinite): NonFiniteWeightError {
  const traits = typeTraits(t.type)!;
  const cols = t.dims[0];
  const row = Math.floor(found.element / cols);
  const col = found.element % cols;
  const byte = t.offset + traitsBytes(traits, found.element);
  const what = found.scale
    ? `${String(found.value)} in the scale of the block at row ${row}, columns ${col}..${col + traits.blockSize - 1}`
    : `${String(found.value)} at row ${row}, column ${col}`;
  return new NonFiniteWeightError(
    path,
    t.name,
    `tensor "${t.name}" (${typeName(t.type)}) holds ${what} (byte offset ${byte}${t.fileIndex > 0 ? ` of part ${t.fileIndex + 1}` : ""}): the model file is damaged`,
  );
}

/**
 * Make `file` check every tensor read it serves (readTensor, and tensorData through it) for NaN
 * and infinity, throwing NonFiniteWeightError naming the tensor, the position and the file. The
 * object itself is returned, its readTensor replaced: the loader keeps the type it was given
 * (GGUFFile, NeuronStore) and everything else about it.
 */
export function checkFiniteOnRead<T extends ModelFile>(file: T): T {
  const read = file.readTensor.bind(file);
  file.readTensor = (t: GGUFTensorInfo, dst: Uint8Array, start = 0, length = t.bytes - start) => {
    read(t, dst, start, length);
    const found = findNonFinite(t.type, dst.subarray(0, length), start);
    if (found) throw nonFiniteError(file.path, t, found);
  };
  return file;
}
