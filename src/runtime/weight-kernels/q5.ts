/**
 * Q5_0 and Q5_1 weights (assembly/matvec_q5.ts), in GGUF's rows (row-copy.ts), with ggml's Q8_0 /
 * Q8_1 activations. The relaxed-SIMD build packs them as Q4 tiles plus fifth bits instead
 * (Q5_0_RELAXED / Q5_1_RELAXED in q4.ts).
 */
import { GGMLType } from "../../format/ggml-types.js";
import { copyKernel } from "./row-copy.js";

export const Q5_0 = copyKernel(GGMLType.Q5_0, "q8_0", "q5_0");
export const Q5_1 = copyKernel(GGMLType.Q5_1, "q8_1", "q5_1");
