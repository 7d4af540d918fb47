/**
 * How each weight type lives in wasm memory and which kernels compute with it: the contract
 * (`WeightKernel`), the table of types and its lookups.
 *
 * A matrix of `rows` x `cols` (ggml: dims [cols, rows]) is packed once at load from its GGUF
 * bytes into a layout its kernels like (which may differ from GGUF's: e.g. scales split from
 * quants). Every matvec takes the activation already prepared in the format the type wants
 * (f32, or quantized to 8-bit blocks as llama.cpp does), so one prepared vector serves every
 * matrix that reads it (Q, K and V; Gate and Up).
 *
 * Kernel signatures (all arguments i32; pointers are byte offsets into the shared memory):
 *   matvec(w, xAct, y, rows, cols, r0, r1)        y[r] = W[r,:] . x            for r in [r0, r1)
 *   matmul(w, xAct, y, rows, cols, ntok, r0, r1)  y[t*rows + r] = W[r,:] . x_t for all t < ntok
 *   prepare_<act>(x, dst, cols, ntok)             ntok rows of f32 -> ntok prepared rows, each
 *                                                 activationBytes(act, cols) bytes apart
 * Any [r0, r1) inside [0, rows) is computed correctly; ranges whose ends are multiples of
 * `rowAlign` (or equal rows) waste no work (the packed types compute rows in tiles of 2 or 4).
 *
 * The types, one file per family in weight-kernels/ (each file describes its packed layout):
 *   f32.ts     F32               row-major f32, as in GGUF
 *   q8.ts      Q8_0              tiles of 4 rows x 128 columns (tiled.ts)
 *   q4.ts      Q4_0, Q4_1        tiles of 2 rows x 128 columns (tiled.ts)
 *              Q5_0, Q5_1        the same tiles of their low 4 bits, plus the fifth bits
 *   half.ts    F16, BF16         GGUF's own rows, packed by copying (row-copy.ts)
 *   kquant.ts  Q4_K, Q5_K, Q6_K  GGUF's own rows (row-copy.ts); the relaxed build's their own blocks
 *   mxfp4.ts   MXFP4             GGUF's own rows (row-copy.ts), ggml's Q8_0 activations in both builds
 *
 * Beside the table, kernels of another layout for a type, which weightKernel(type) never returns:
 * a caller asks for one by its layout (layoutKernel):
 *   q8-rows.ts Q8_0 "rows"       GGUF's own rows (no 128-column padding), "q16_0" activations
 *
 * Activation formats (see assembly/prepare_q8.ts): "f32_eo" is f32 with each 8 values' even ones
 * first, then its odd ones (for F16 and BF16: assembly/matvec_half.ts); "q8_0" / "q8_1" / "q8_K"
 * are ggml's own block layouts (for kernels that want them); "q8_i16" and "q8_i16n" hold the same
 * quants as ggml's Q8_0 / Q8_1 (llama.cpp's x86 rounding) widened to i16 and interleaved 4 blocks
 * at a time for the packed Q8_0 and Q4_0/Q4_1 kernels. The relaxed-SIMD kernel build (wasm.ts)
 * takes "q8_i8n" for Q4_0/Q4_1/Q5_0/Q5_1 instead (the same quants as i8, ordered for its relaxed
 * dots) and "q8_i8s" for Q8_0 (magnitudes and signs of the quants apart) and "q8_Ki" for the
 * K-quants (Q8_K's quants interleaved four sub-blocks at a time), and packs Q8_0 and the K-quants
 * its own way. "q16_0" (Q8_0 "rows" in both builds) is ggml's Q8_0 with 16-bit quants and an f32
 * scale. So the table is per build:
 * `weightKernel(type)` answers for the build this process runs.
 */
import { GGMLType, typeName } from "../format/ggml-types.js";
import { F32 } from "./weight-kernels/f32.js";
import { Q8_0, Q8_0_RELAXED } from "./weight-kernels/q8.js";
import { Q4_0, Q4_1, Q5_0, Q5_1 } from "./weight-kernels/q4.js";
import { BF16, F16 } from "./weight-kernels/half.js";
import { Q4_K, Q4_K_RELAXED, Q5_K, Q5_K_RELAXED, Q6_K, Q6_K_RELAXED, Q8KI_BYTES } from "./weight-kernels/kquant.js";
import { MXFP4 } from "./weight-kernels/mxfp4.js";
import { Q8_0_ROWS } from "./weight-kernels/q8-rows.js";
import { kernelBuild, type KernelBuild } from "./wasm.js";

/** Every activation format some kernel takes. */
export const ACTIVATION_FORMATS = [
  "f32",
  "f32_eo",
  "q8_0",
  "q8_1",
  "q8_K",
  "q8_i16",
  "q8_i16n",
  "q8_i8n",
  "q8_i8s",
  "q8_Ki",
  "q16_0",
] as const;
export type ActivationFormat = (typeof ACTIVATION_FORMATS)[number];

/** Layouts a type may be packed in beside its own (the table's): q8-rows.ts. */
export type WeightLayout = "rows";

export interface WeightKernel {
  readonly type: GGMLType;
  /** set on a kernel of another layout than its type's own (layoutKernel), absent on the table's */
  readonly layout?: WeightLayout;
  readonly act: ActivationFormat;
  /** bytes the packed matrix takes in wasm memory */
  packedBytes(rows: number, cols: number): number;
  /**
   * pack GGUF-layout rows [rowStart, rowStart + nrows) of the matrix (src holds just those rows)
   * into dst (the whole packed matrix). Packing the last row also writes the padding rows.
   */
  pack(src: Uint8Array, dst: Uint8Array, rowStart: number, nrows: number, rows: number, cols: number): void;
  /** export names of the kernels */
  readonly matvec: string;
  readonly matmul: string;
  /** row ranges handed to the kernels should start (and end, unless at `rows`) at multiples of this */
  readonly rowAlign: number;
  /**
   * The byte offset at which rows [from, rows) of a packed matrix are laid out as a packed matrix
   * of `rows - from` rows of their own (so its kernels can run on just those rows), or -1 where
   * the layout does not keep them together (from inside a tile, or columns cut into chunks).
   */
  tailOffset(rows: number, cols: number, from: number): number;
}

/** Bytes one prepared activation row of `cols` values takes. */
export function activationBytes(fmt: ActivationFormat, cols: number): number {
  switch (fmt) {
    case "f32":
    case "f32_eo":
      return cols * 4;
    case "q8_0":
      return (cols / 32) * 34;
    case "q8_1":
      return (cols / 32) * 36;
    case "q8_K":
      return (cols / 256) * 292;
    case "q8_i16":
      return Math.ceil(cols / 128) * 272;
    case "q8_i16n":
      return Math.ceil(cols / 128) * 304;
    case "q8_i8n":
      return Math.ceil(cols / 128) * 176;
    case "q8_i8s":
      return Math.ceil(cols / 128) * 288;
    case "q8_Ki":
      return (cols / 256) * Q8KI_BYTES;
    case "q16_0":
      return (cols / 32) * 68;
  }
}

/** Export name of the kernel that prepares activations in `fmt` (none for f32). */
export function prepareKernel(fmt: ActivationFormat): string | undefined {
  return fmt === "f32" ? undefined : `prepare_${fmt}`;
}

// ---------------------------------------------------------------------------------------------
// The table

const SIMD128 = [F32, Q8_0, Q4_0, Q4_1, F16, BF16, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, MXFP4];
// the relaxed build exports the same kernel names; Q4_0/Q4_1/Q5_0/Q5_1 are packed alike but take
// other activations, Q8_0 and the K-quants are packed their own way and take other activations
// (q8.ts, q4.ts, kquant.ts)
const RELAXED_OWN = new Map<WeightKernel, WeightKernel>([
  [Q4_0, { ...Q4_0, act: "q8_i8n" }],
  [Q4_1, { ...Q4_1, act: "q8_i8n" }],
  [Q8_0, Q8_0_RELAXED],
  [Q4_K, Q4_K_RELAXED],
  [Q6_K, Q6_K_RELAXED],
  [Q5_K, Q5_K_RELAXED],
  [Q5_0, { ...Q5_0, act: "q8_i8n" }],
  [Q5_1, { ...Q5_1, act: "q8_i8n" }],
]);
const RELAXED = SIMD128.map((k) => RELAXED_OWN.get(k) ?? k);
const KERNELS: Record<KernelBuild, Map<GGMLType, WeightKernel>> = {
  simd128: new Map(SIMD128.map((k) => [k.type, k])),
  relaxed: new Map(RELAXED.map((k) => [k.type, k])),
};

/** The weight types a matrix may have, by name (for errors). */
export const SUPPORTED_WEIGHT_TYPES = SIMD128.map((k) => typeName(k.type)).join(", ");

/** How `type` is packed and computed in a kernel build (by default the one this process runs). */
export function weightKernel(type: GGMLType, build: KernelBuild = kernelBuild()): WeightKernel {
  const k = KERNELS[build].get(type);
  if (!k) throw new Error(`no kernel for weight type ${typeName(type)}`);
  return k;
}

const LAYOUTS: readonly WeightKernel[] = [Q8_0_ROWS];

/**
 * The kernel of `type` packed in `layout`, or (null) its own: weightKernel(type). A layout kernel
 * is the same in both builds.
 */
export function layoutKernel(
  type: GGMLType,
  layout: WeightLayout | null,
  build: KernelBuild = kernelBuild(),
): WeightKernel {
  if (layout === null) return weightKernel(type, build);
  const k = LAYOUTS.find((l) => l.type === type && l.layout === layout);
  if (!k) throw new Error(`no kernel for weight type ${typeName(type)} in layout "${layout}"`);
  return k;
}

/** A type and layout by name, for keys and messages: "Q8_0", "Q8_0 rows". */
export const layoutName = (type: GGMLType, layout: WeightLayout | null | undefined) =>
  layout ? `${typeName(type)} ${layout}` : typeName(type);

export function hasWeightKernel(type: GGMLType): boolean {
  return KERNELS.simd128.has(type);
}
