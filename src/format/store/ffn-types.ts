/** The FFN weight types a store may hold, and the size of one neuron bundle. */
import { GGMLType } from "../ggml-types.js";
import { QUANTIZABLE } from "../quant.js";
import { STORE_PAGE } from "./header.js";

/**
 * FFN types a store holds: the weight types quantizeRow can write, since Down is requantized per
 * column (Q8_1 and Q8_K are activation formats, not weights), but MXFP4, for which the sparse
 * bundle kernels have no code yet.
 */
export const STORE_FFN_TYPES: readonly GGMLType[] = QUANTIZABLE.filter(
  (t) => t !== GGMLType.Q8_1 && t !== GGMLType.Q8_K && t !== GGMLType.MXFP4,
);

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

/**
 * Bytes of one neuron bundle: its Gate, Up and Down parts back to back, padded to whole pages so
 * that a bundle is read on its own, aligned, with O_DIRECT.
 */
export function bundleBytesFor(rowBytes: number): number {
  return Math.ceil((3 * rowBytes) / STORE_PAGE) * STORE_PAGE;
}
