/**
 * powerinfer-ts, the library API (in the style of node-llama-cpp):
 *
 *   const model = await loadModel({ modelPath: "model.gguf" });
 *   for await (const piece of model.generate("Once upon a time", { maxTokens: 64 })) process.stdout.write(piece);
 *   await model.dispose();
 *
 * This file only gathers what the package exports; `Model` and `loadModel` live in src/api/model.ts.
 */
export { Model, loadModel, type LoadModelOptions } from "./api/model.js";
export type { GenerateOptions, GenerationStats, StopReason } from "./generate/generator.js";
export type { ModelConfig } from "./model/config.js";
export type { OffloadOptions, OffloadStats } from "./model/offload/offloaded-ffn.js";
export type { OffloadLayout, SparsityMode } from "./model/offload/layout.js";
export { Generation } from "./generate/generator.js";
export { Tokenizer, StreamingDecoder } from "./tokenizer/index.js";
export { GGUFFile, GGUFError } from "./format/gguf.js";
export { Tracer, type TraceEvent } from "./runtime/tracer.js";
export { convertToStore, type ConvertOptions, type ConvertResult } from "./offline/convert.js";
export type { ResponseFormat } from "./generate/response-format.js";
export type { TokenLogprobs } from "./generate/sampler.js";
export { UnsupportedSchemaError } from "./generate/json-schema.js";
export * from "./chat/index.js";
export * from "./server/index.js";
