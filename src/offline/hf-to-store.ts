/**
 * A Hugging Face model directory straight to a `.pi` neuron store: the directory is converted to
 * a GGUF beside the output under a temporary name (llama.cpp's layout, the type asked for), the
 * store is built from that, and the temporary GGUF is deleted whatever happens. Peak disk use is
 * therefore about twice the model; memory stays at both stages' few chunks. Activation predictors
 * the checkpoint carries (TurboSparse's, which the GGUF leaves out) go into the store from the
 * directory itself, unless `predictors` names others.
 */
import { rm } from "node:fs/promises";
import { resolve } from "node:path";
import { convertHFToGGUF, type HFConvertResult, type HFOutputType } from "../format/hf/hf-to-gguf.js";
import { convertToStore, type ConvertOptions, type ConvertResult } from "./convert.js";

export interface HFStoreOptions extends Omit<ConvertOptions, "type" | "onProgress"> {
  /** the GGUF's type, which the store keeps for its FFN (the nearest type a store holds) */
  type?: HFOutputType;
  /** bytes done / in all over both stages (each stage counts its source bytes) */
  onProgress?: (p: { stage: "gguf" | "store"; bytesDone: number; bytesTotal: number }) => void;
}

export async function convertHFToStore(opts: HFStoreOptions): Promise<{ gguf: HFConvertResult; store: ConvertResult }> {
  const output = resolve(opts.output);
  const temp = `${output}.hf-gguf-${process.pid}.tmp`;
  try {
    const gguf = await convertHFToGGUF({
      input: opts.input,
      output: temp,
      type: opts.type,
      signal: opts.signal,
      fsync: false,
      onProgress: (p) => opts.onProgress?.({ stage: "gguf", bytesDone: p.bytesDone, bytesTotal: p.bytesTotal }),
    });
    const store = await convertToStore({
      ...opts,
      predictors: opts.predictors ?? (gguf.predictorsLeftOut > 0 ? resolve(opts.input) : undefined),
      input: temp,
      output,
      type: "keep",
      onProgress: (p) => opts.onProgress?.({ stage: "store", bytesDone: p.bytesDone, bytesTotal: p.bytesTotal }),
    });
    return { gguf, store };
  } finally {
    await rm(temp, { force: true });
  }
}
