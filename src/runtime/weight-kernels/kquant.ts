/** The K-quants Q4_K, Q5_K and Q6_K (assembly/matvec_kquant.ts), in GGUF's rows (row-copy.ts), with ggml's Q8_K activations. */
import { GGMLType } from "../../format/ggml-types.js";
import { copyKernel } from "./row-copy.js";

export const Q4_K = copyKernel(GGMLType.Q4_K, "q8_K", "q4_K");
export const Q5_K = copyKernel(GGMLType.Q5_K, "q8_K", "q5_K");
export const Q6_K = copyKernel(GGMLType.Q6_K, "q8_K", "q6_K");
