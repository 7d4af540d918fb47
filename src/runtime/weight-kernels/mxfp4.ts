/**
 * MXFP4 weights (assembly/matvec_mxfp4.ts), in GGUF's rows (row-copy.ts), with ggml's Q8_0
 * activations as ggml pairs them (vec_dot_type Q8_0). Both kernel builds take the same layout and
 * activations and give the same bits.
 */
import { GGMLType } from "../../format/ggml-types.js";
import { copyKernel } from "./row-copy.js";

export const MXFP4 = copyKernel(GGMLType.MXFP4, "q8_0", "mxfp4");
