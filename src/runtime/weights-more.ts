/**
 * Weight kernels for the less common types (Q5_0, Q5_1, BF16, K-quants): registered into the
 * table of weights.ts. See weights.ts for the contract.
 */
import type { WeightKernel } from "./weights.js";

export const MORE_KERNELS: WeightKernel[] = [];
