/**
 * Random weights for a plain synthetic model, generated as blocks directly rather than quantized
 * from floats: the quants are raw random bits (uniform over every level) and each block's f16
 * scale is picked so the tensor's values have the standard deviation its recipe asks for. That
 * keeps the generator at memory speed. Every tensor draws from its own random stream and is
 * produced in whole rows.
 */
import { GGMLType, traitsBytes, typeTraits } from "../../format/ggml-types.js";
import { f16ToF32, f32ToF16 } from "../../format/half.js";
import { MXFP4_BLOCK_BYTES } from "../../format/mxfp4.js";
import { fillRandom, type SynthStream } from "../../model/firing.js";
import type { TensorRecipe } from "./shapes.js";

// Value tables: 16 random bits -> the f16 bits of a scale or a value. A table per (type, std)
// turns the per-block work into one lookup.

/** root mean square of the integer levels each block type stores, relative to its scale */
const LEVEL_RMS: Partial<Record<GGMLType, number>> = {
  [GGMLType.Q4_0]: Math.sqrt(21.5), // (q - 8), q uniform in 0..15
  [GGMLType.Q4_1]: Math.sqrt(21.25), // (q - 7.5): m = -7.5 d centres the levels
  [GGMLType.Q5_0]: Math.sqrt(85.5), // (q - 16), q uniform in 0..31
  [GGMLType.Q5_1]: Math.sqrt(85.25), // (q - 15.5): m = -15.5 d
  [GGMLType.Q8_0]: Math.sqrt(5461.5), // q uniform in -128..127
};

const tableCache = new Map<string, Uint16Array>();
/** Sparse models pick a scale per layer; a bound keeps a long-lived process from hoarding tables. */
function cacheTable(key: string, t: Uint16Array): void {
  if (tableCache.size >= 32) tableCache.clear();
  tableCache.set(key, t);
}

/**
 * Block scales: |d| = std / LEVEL_RMS times a factor spread uniformly over [0.75, 1.25] (blocks
 * differ, as in real files). Q4_0 and Q5_0 scales also get a random sign, because their levels
 * have mean -0.5: with a fixed sign every row would share a bias along the input's mean, while a
 * random sign per block leaves it zero on average (llama.cpp's Q4_0 writes negative scales too).
 */
function scaleTable(type: GGMLType, std: number): Uint16Array {
  const key = `d${type}:${std}`;
  let t = tableCache.get(key);
  if (t) return t;
  t = new Uint16Array(65536);
  const base = std / LEVEL_RMS[type]!;
  const signed = type === GGMLType.Q4_0 || type === GGMLType.Q5_0;
  for (let r = 0; r < 65536; r++) {
    const factor = 0.75 + 0.5 * ((r >>> 1) / 32768);
    const sign = signed && (r & 1) === 1 ? -1 : 1;
    t[r] = f32ToF16(sign * base * factor);
  }
  cacheTable(key, t);
  return t;
}

/** Q4_1 / Q5_1 mins matching scaleTable: m = -7.5 d / -15.5 d (the levels' middle), from the stored (rounded) d. */
function minTable(type: GGMLType.Q4_1 | GGMLType.Q5_1, std: number): Uint16Array {
  const key = `m${type}:${std}`;
  let t = tableCache.get(key);
  if (t) return t;
  const d = scaleTable(type, std);
  const middle = type === GGMLType.Q4_1 ? 7.5 : 15.5;
  t = new Uint16Array(65536);
  for (let r = 0; r < 65536; r++) t[r] = f32ToF16(-middle * f16ToF32(d[r]));
  cacheTable(key, t);
  return t;
}

/** F16 values uniform on (-a, a) with a = std * sqrt(3) (so their standard deviation is std). */
function f16ValueTable(std: number, centre: number): Uint16Array {
  const key = `v:${std}:${centre}`;
  let t = tableCache.get(key);
  if (t) return t;
  t = new Uint16Array(65536);
  const a = std * Math.sqrt(3);
  for (let r = 0; r < 65536; r++) t[r] = f32ToF16(centre + (((r + 0.5) / 65536) * 2 - 1) * a);
  cacheTable(key, t);
  return t;
}

// ---------------------------------------------------------------------------------------------
// Row fillers

/**
 * Writes `rows` whole rows of a tensor into `dst` (which has room for them, rounded up to 4
 * bytes), drawing from the tensor's stream. `words` views the same memory as `dst`.
 */
export type RowFiller = (dst: Uint8Array, words: Uint32Array, rows: number) => void;

/** The generator for one tensor of a plain random model (a sparse model post-processes its rows: SparsityPlanter). */
export function rowFiller(recipe: TensorRecipe, stream: SynthStream): RowFiller {
  const rowLen = recipe.dims[0];
  const tr = typeTraits(recipe.type)!;
  const rowBytes = traitsBytes(tr, rowLen);
  const centre = recipe.kind === "norm" || recipe.kind === "qk_norm" || recipe.kind === "post_norm" ? 1 : 0;
  switch (recipe.type) {
    case GGMLType.F32: {
      // uniform on (centre - a, centre + a) from 24 random bits
      const a = recipe.std * Math.sqrt(3);
      const step = (2 * a) / 16777216;
      return (dst, words, rows) => {
        const n = rows * rowLen;
        fillRandom(stream, words, n);
        const f = new Float32Array(dst.buffer, dst.byteOffset, n);
        for (let i = 0; i < n; i++) f[i] = centre - a + ((words[i] >>> 8) + 0.5) * step;
      };
    }
    case GGMLType.F16: {
      const table = f16ValueTable(recipe.std, centre);
      return (dst, words, rows) => {
        const n = rows * rowLen;
        fillRandom(stream, words, (n + 1) >>> 1);
        const h = new Uint16Array(dst.buffer, dst.byteOffset, n);
        for (let i = 0; i < n; i++) h[i] = table[h[i]];
      };
    }
    case GGMLType.Q4_0:
    case GGMLType.Q8_0:
    case GGMLType.Q4_1:
    case GGMLType.Q5_0:
    case GGMLType.Q5_1: {
      // Random bits everywhere: they are the quants (and Q5's fifth bits). Then each block's
      // first 16 bits become its scale (and, for Q4_1 / Q5_1, the next 16 its matching min).
      const dt = scaleTable(recipe.type, recipe.std);
      const mt =
        recipe.type === GGMLType.Q4_1 || recipe.type === GGMLType.Q5_1 ? minTable(recipe.type, recipe.std) : undefined;
      const bs = tr.typeSize;
      return (dst, words, rows) => {
        const bytes = rows * rowBytes;
        fillRandom(stream, words, (bytes + 3) >>> 2);
        if (mt) {
          for (let o = 0; o < bytes; o += bs) {
            const r = dst[o] | (dst[o + 1] << 8);
            const d = dt[r];
            const m = mt[r];
            dst[o] = d & 0xff;
            dst[o + 1] = d >>> 8;
            dst[o + 2] = m & 0xff;
            dst[o + 3] = m >>> 8;
          }
        } else {
          for (let o = 0; o < bytes; o += bs) {
            const d = dt[dst[o] | (dst[o + 1] << 8)];
            dst[o] = d & 0xff;
            dst[o + 1] = d >>> 8;
          }
        }
      };
    }
    case GGMLType.MXFP4: {
      // Random bits are the 4-bit codes (values of RMS 5.85 units of the half scale d); each
      // block's first byte becomes an exponent giving d within a factor of 2 of std / 5.85.
      const e0 = 128 + Math.round(Math.log2(recipe.std / Math.sqrt(34.25)));
      return (dst, words, rows) => {
        const bytes = rows * rowBytes;
        fillRandom(stream, words, (bytes + 3) >>> 2);
        for (let o = 0; o < bytes; o += MXFP4_BLOCK_BYTES) dst[o] = e0 - 1 + (dst[o] % 3);
      };
    }
    default:
      throw new RangeError(`synthetic model: no generator for type ${tr.name}`);
  }
}
