/** The FFN weight types a store may hold, and the layout and size of one neuron bundle. */
import { GGMLType, traitsBytes, typeTraits } from "../ggml-types.js";
import { QUANTIZABLE } from "../quant.js";
import { STORE_PAGE } from "./header.js";

/**
 * FFN types a store holds: the weight types quantizeRow can write, since Down is requantized per
 * column (Q8_1 and Q8_K are activation formats, not weights). An MXFP4 store's down columns are
 * Q8_0 (storeDownType).
 */
export const STORE_FFN_TYPES: readonly GGMLType[] = QUANTIZABLE.filter(
  (t) => t !== GGMLType.Q8_1 && t !== GGMLType.Q8_K,
);

/**
 * The type of a bundle's down column: the store's type, but Q8_0 for MXFP4. Down is requantized
 * along its columns, and an MXFP4 block has one power-of-two scale for its 32 values: a column's
 * 32 values come from 32 source rows with scales of their own, and rounding them to 4 bits at
 * the largest one's E8M0 scale zeroes those under 1/32 to 1/16 of it, where Q8_0's f16 scale and
 * 8 bits keep each to 1/254 of the largest. gpt-oss-20b's Q8_0 column (2880 values, 3060 bytes)
 * still fits the two pages an MXFP4 bundle takes (3 x 1530 would too).
 */
export function storeDownType(type: GGMLType): GGMLType {
  return type === GGMLType.MXFP4 ? GGMLType.Q8_0 : type;
}

/** Byte offsets of a bundle's parts, its down column's type and size, and its whole size. */
export interface BundleParts {
  gate: number;
  up: number;
  down: number;
  /** the neuron's gate and up biases, two f32 (gpt-oss's experts); absent when the bundles have none */
  biases?: number;
  downType: GGMLType;
  downBytes: number;
  /** the bytes a bundle's parts and biases take, without the padding to whole pages */
  dataBytes: number;
  bundleBytes: number;
}

/**
 * The layout of a bundle of `nEmbd`-wide parts of `type`: gate row | up row | down column | (the
 * gate and up biases) | pad to whole pages, so that a bundle is read on its own, aligned, with
 * O_DIRECT.
 */
export function bundleParts(type: GGMLType, nEmbd: number, biased: boolean): BundleParts {
  const rowBytes = traitsBytes(typeTraits(type)!, nEmbd);
  const downType = storeDownType(type);
  const downBytes = traitsBytes(typeTraits(downType)!, nEmbd);
  // the biases 4-byte aligned (as f32 are read)
  const biases = (2 * rowBytes + downBytes + 3) & ~3;
  const bytes = biased ? biases + 8 : 2 * rowBytes + downBytes;
  return {
    gate: 0,
    up: rowBytes,
    down: 2 * rowBytes,
    ...(biased ? { biases } : {}),
    downType,
    downBytes,
    dataBytes: bytes,
    bundleBytes: Math.ceil(bytes / STORE_PAGE) * STORE_PAGE,
  };
}

/**
 * The store type nearest to a source type: itself when storable, else the closest in bits per
 * weight and kind (K-quants have no quantizer here: Q4_K -> Q4_1, both 4-bit with a per-32
 * scale and min; Q5_K -> Q5_1; Q6_K -> Q8_0; Q2_K/Q3_K -> Q4_0, the smallest storable).
 */
export function nearestStoreType(type: GGMLType): GGMLType {
  if (STORE_FFN_TYPES.includes(type)) return type;
  switch (type) {
    case GGMLType.Q2_K:
    case GGMLType.Q3_K:
      return GGMLType.Q4_0;
    case GGMLType.Q4_K:
      return GGMLType.Q4_1;
    case GGMLType.Q5_K:
      return GGMLType.Q5_1;
    case GGMLType.Q6_K:
    case GGMLType.Q8_1:
    case GGMLType.Q8_K:
      return GGMLType.Q8_0;
    default:
      return GGMLType.F32;
  }
}
