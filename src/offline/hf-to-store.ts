/**
 * A Hugging Face model directory straight to a `.pi` neuron store, with no GGUF in between: the
 * store builder (convert.ts's buildStore) reads the checkpoint in place (convert/hf-source.ts),
 * streaming, a few chunks in memory and one bundle group's Down in the store's type. The store
 * equals one made through `convert DIR -o x.gguf` where the two must agree (metadata, fixed
 * tensors, Gate and Up rows), except Down: each column is quantized once from the checkpoint's
 * values instead of being requantized from the GGUF's rows. Activation predictors the
 * checkpoint carries (TurboSparse's, which a GGUF has no place for) go into the store from the
 * directory itself, unless `predictors` names others.
 */
import { resolve } from "node:path";
import type { HFOutputType } from "../format/hf/hf-to-gguf.js";
import { buildStore, type ConvertOptions, type ConvertResult } from "./convert.js";
import { inlineConvertRunner } from "./convert/convert-runner.js";
import { hfSource } from "./convert/hf-source.js";

export interface HFStoreOptions extends Omit<ConvertOptions, "type"> {
  /** the weight type as `convert DIR -o x.gguf` takes it; the store's FFN keeps it */
  type?: HFOutputType;
}

export interface HFStoreResult {
  arch: string;
  /** the type asked for, "auto" resolved */
  type: string;
  store: ConvertResult;
}

export async function convertHFToStore(opts: HFStoreOptions): Promise<HFStoreResult> {
  const input = resolve(opts.input);
  const runner = opts.runner ?? inlineConvertRunner();
  const { source, type, arch, predictors } = hfSource(input, opts.type ?? "auto", runner);
  const store = await buildStore(source, {
    ...opts,
    runner,
    input,
    predictors: opts.predictors ?? (predictors > 0 ? input : undefined),
    type: "keep",
  });
  return { arch, type, store };
}
