/**
 * Q8_0 weights kept in GGUF's own rows (row-copy.ts: 34-byte blocks, the f16 scale then 32 i8
 * quants) with "q16_0" activations (per 32-value block an f32 scale and 32 i16 quants), for
 * matrices only a few blocks wide (assembly/matvec_q8_0_rows.ts, which says why 16-bit
 * activations). The table's Q8_0 (q8.ts) pads each row to 128 columns, so a 32-column row takes
 * 4.2x its blocks' bytes there; here it takes them and nothing more. It is not the table's Q8_0:
 * weightKernel(Q8_0) stays the tiled layout, whose kernels are the ones tuned for wide rows
 * streamed from DRAM; this one is asked for by its layout (layoutKernel), as the activation
 * predictors' fc2 asks for it. Both kernel builds take the same layout and activations and give
 * the same bits.
 *
 * Plain-TS references of the activation and the dot follow, for tests.
 */
import { GGMLType } from "../../format/ggml-types.js";
import { f16Table } from "../../format/half.js";
import { roundEven } from "../../format/quant.js";
import type { WeightKernel } from "../weight-kernels.js";
import { copyKernel } from "./row-copy.js";

export const Q8_0_ROWS: WeightKernel = { ...copyKernel(GGMLType.Q8_0, "q16_0", "q8_0_rows"), layout: "rows" };

const fr = Math.fround;

/**
 * The "q16_0" row of x (a whole number of 32-value blocks), as prepare_q16_0 makes it: per block
 * d = amax / 32767 as f32, then q = round-half-to-even(x * (32767 / amax)) as i16, in f32 arithmetic.
 */
export function q16Reference(x: Float32Array): Uint8Array {
  if (x.length % 32 !== 0) throw new RangeError(`q16_0: ${x.length} values are not a whole number of 32-value blocks`);
  const out = new Uint8Array((x.length / 32) * 68);
  const view = new DataView(out.buffer);
  for (let b = 0, o = 0; b < x.length; b += 32, o += 68) {
    let amax = 0;
    for (let j = 0; j < 32; j++) amax = Math.max(amax, Math.abs(x[b + j]));
    view.setFloat32(o, fr(amax / 32767), true);
    const id = amax !== 0 ? fr(32767 / amax) : 0;
    for (let j = 0; j < 32; j++) view.setInt16(o + 4 + 2 * j, roundEven(fr(x[b + j] * id)), true);
  }
  return out;
}

/**
 * One GGUF Q8_0 row (n values) times a q16_0 row: per block the exact integer dot times the f32
 * product of the two scales, the blocks summed in double precision (as src/format/quant.ts vecDot).
 */
export function dotQ8Q16Reference(wRow: Uint8Array, act: Uint8Array, n: number): number {
  const w = new DataView(wRow.buffer, wRow.byteOffset, wRow.byteLength);
  const x = new DataView(act.buffer, act.byteOffset, act.byteLength);
  if (n % 32 !== 0 || wRow.length < (n / 32) * 34 || act.length < (n / 32) * 68)
    throw new RangeError(`Q8_0 x q16_0 dot of ${n} values: ${wRow.length} weight and ${act.length} activation bytes`);
  let sum = 0;
  for (let o = 0, a = 0; o < (n / 32) * 34; o += 34, a += 68) {
    let isum = 0;
    for (let j = 0; j < 32; j++) isum += w.getInt8(o + 2 + j) * x.getInt16(a + 4 + 2 * j, true);
    sum += isum * fr(f16Table[w.getUint16(o, true)] * x.getFloat32(a, true));
  }
  return sum;
}
