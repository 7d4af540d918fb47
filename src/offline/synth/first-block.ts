/**
 * The first quant block. Of the residual it is reserved for the constant C; of a row that reads
 * the residual it is where the planted bias goes: element 0 takes the bias, and the block's
 * scale and the other levels are chosen so that the bias is stored exactly (planted-sparsity.ts).
 */
import { GGMLType, typeTraits } from "../../format/ggml-types.js";
import { f16Table, f32ToF16 } from "../../format/half.js";

const F16 = f16Table;

/**
 * Residual dimension 0 is the constant; 1..RESERVED-1, the rest of its quant block, stay zero, so
 * the block holds C alone: exact in the token embeddings of every type, and exact again when the
 * engine quantizes the normalized residual to 8 bits per block (a neighbour of C would otherwise
 * get C's coarse step).
 */
export const RESERVED = 32;

/**
 * Quantized rows whose element 0 needs a chosen value get their first block rewritten as
 * value_j = L_j d with d > 0 and integer levels L_j: element 0 takes level L0, the other 31 keep
 * the random levels already drawn (the level that would unbalance them, -8 or -128, is mapped
 * to 0, so they are symmetric). Q4_1 stores m = -8 d, which f16 holds exactly.
 */
export interface BlockLevels {
  /** the block's drawn scale, as a size for the new one */
  dNom: number;
  levels: Int32Array;
  /** largest |L0| for a positive / negative value */
  maxPos: number;
  maxNeg: number;
}

export function readBlock0(type: GGMLType, b: Uint8Array, o: number, out: BlockLevels): void {
  const L = out.levels;
  switch (type) {
    case GGMLType.Q8_0:
      out.dNom = Math.abs(F16[b[o] | (b[o + 1] << 8)]);
      for (let j = 1; j < 32; j++) {
        const q = (b[o + 2 + j] << 24) >> 24;
        L[j] = q === -128 ? 0 : q;
      }
      out.maxPos = 127;
      out.maxNeg = 127;
      break;
    case GGMLType.Q4_0:
    case GGMLType.Q4_1: {
      const qs = o + (type === GGMLType.Q4_0 ? 2 : 4);
      out.dNom = Math.abs(F16[b[o] | (b[o + 1] << 8)]);
      for (let j = 1; j < 32; j++) {
        const n = j < 16 ? b[qs + j] & 15 : b[qs + j - 16] >>> 4;
        L[j] = n === 0 ? 0 : n - 8;
      }
      out.maxPos = 7;
      out.maxNeg = 8;
      break;
    }
    default:
      throw new RangeError(`synthetic model: no sparse planting for type ${typeTraits(type)?.name ?? type}`);
  }
  L[0] = 0;
}

/** Write levels (L[0] included) with scale d >= 0; returns the stored (f16-rounded) scale. */
export function writeBlock0(type: GGMLType, b: Uint8Array, o: number, d: number, L: Int32Array): number {
  const dh = f32ToF16(d);
  b[o] = dh & 0xff;
  b[o + 1] = dh >>> 8;
  switch (type) {
    case GGMLType.Q8_0:
      for (let j = 0; j < 32; j++) b[o + 2 + j] = L[j] & 0xff;
      break;
    case GGMLType.Q4_0:
    case GGMLType.Q4_1: {
      let qs = o + 2;
      if (type === GGMLType.Q4_1) {
        const mh = f32ToF16(-8 * F16[dh]);
        b[o + 2] = mh & 0xff;
        b[o + 3] = mh >>> 8;
        qs = o + 4;
      }
      for (let j = 0; j < 16; j++) b[qs + j] = (L[j] + 8) | ((L[j + 16] + 8) << 4);
      break;
    }
  }
  return F16[dh];
}

/**
 * Level L0 and scale d > 0 for a rewritten block 0 such that the row's dot product with the raw
 * residual has mean/deviation z:  L0 d wc + muR + d M0 = z sqrt(R + d^2 Q0),  where R, muR are
 * the variance and mean contributed by blocks 1.., and d^2 Q0, d M0 those of the block's other
 * 31 values (which scale with d). For each level this is a quadratic in d; of all levels' roots
 * the one with d nearest the drawn scale wins, so the block stays an ordinary block wherever
 * possible. The other 31 levels may also be negated (s = -1: as random as before, and a large
 * residual mean can then help the bias instead of fighting it) or, when nothing else works,
 * zeroed (s = 0: then a root always exists). Returns [L0, d, s].
 */
export function solveBlock0(
  z: number,
  R: number,
  muR: number,
  Q0: number,
  M0: number,
  wc: number,
  bl: BlockLevels,
): [level: number, d: number, s: number] {
  // nothing to offset: the level-0 element with the drawn scale is exact
  if (z === 0 && muR === 0) return M0 === 0 ? [0, bl.dNom, 1] : [0, bl.dNom, 0];
  let bestL = 0;
  let bestD = 0;
  let bestS = 1;
  let bestCost = Infinity;
  for (const s of [1, -1, 0]) {
    if (s === 0 && bestCost < Infinity) break;
    const q0 = s === 0 ? 0 : Q0;
    const m0 = s * M0;
    const consider = (L: number, d: number) => {
      if (!(d > 0) || !Number.isFinite(d)) return;
      const lhs = (L * wc + m0) * d + muR;
      // roots of the squared equation must have the sign of z
      if (z === 0 ? Math.abs(lhs) > 1e-9 * Math.abs(muR) : lhs * z <= 0) return;
      const cost = Math.abs(Math.log(d / bl.dNom));
      if (cost < bestCost) {
        bestCost = cost;
        bestL = L;
        bestD = d;
        bestS = s;
      }
    };
    for (let L = -bl.maxNeg; L <= bl.maxPos; L++) {
      if (L === 0 && (z !== 0 || s === 0)) continue;
      const A = L * wc + m0;
      if (z === 0) {
        consider(L, -muR / A);
        continue;
      }
      // (A d + muR)^2 = z^2 (R + d^2 q0)
      const a = A * A - z * z * q0;
      const b = 2 * A * muR;
      const c = muR * muR - z * z * R;
      if (Math.abs(a) < 1e-12 * A * A) {
        consider(L, -c / b);
        continue;
      }
      const disc = b * b - 4 * a * c;
      if (disc < 0) continue;
      const sq = Math.sqrt(disc);
      const qq = -0.5 * (b + (b >= 0 ? sq : -sq)); // the numerically stable pair of roots
      consider(L, qq / a);
      if (qq !== 0) consider(L, c / qq);
    }
  }
  if (bestCost === Infinity)
    throw new Error(
      `synthetic model: no block scale puts the planted bias into a row (z ${z}, wc ${wc}); this is a bug in the generator`,
    );
  return [bestL, bestD, bestS];
}
