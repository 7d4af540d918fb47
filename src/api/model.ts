/**
 * The library's model: `loadModel` opens a GGUF file or neuron store and returns a `Model`, which
 * tokenizes and generates (one generation at a time: the KV cache is the model's). Exported by
 * the package through src/index.ts.
 */
import { availableParallelism } from "node:os";
import { LlamaModel } from "../model/model.js";
import { Tokenizer } from "../tokenizer/index.js";
import { Generation, type GenerateOptions } from "../generate/generator.js";
import { ModelBusyError, ModelDisposedError } from "../generate/errors.js";
import type { ModelConfig } from "../model/config.js";
import { NeuronStore } from "../format/store/index.js";
import { tensorBytes, typeName } from "../format/ggml-types.js";
import type { OffloadOptions, OffloadStats } from "../model/offload/offloaded-ffn.js";
import type { OffloadLayout } from "../model/offload/layout.js";
import type { Tracer } from "../runtime/tracer.js";

export interface LoadModelOptions {
  /** a GGUF file (or PowerInfer "PWRI" GGUF; any part of a split model) */
  modelPath: string;
  /** compute threads including the caller; "auto" or omitted = all cores */
  threads?: number | "auto";
  /** KV cache length in tokens; "auto" = the model's training context, at most 4096 (256 under a memory budget) */
  contextSize?: number | "auto";
  /** most prompt tokens per forward pass (default 256) */
  batchSize?: number;
  /** element types of the KV cache's keys and values: "f16" (default, as llama.cpp) or "f32" */
  kvCache?: { k?: "f16" | "f32"; v?: "f16" | "f32" };
  onLoadProgress?: (loadedBytes: number, totalBytes: number) => void;
  /** for a neuron store (.pi): everything resident must fit in this many bytes */
  memoryBudget?: number;
  /** what the budget counts: the process's resident size ("process", default) or the wasm memory and its buffers ("wasm", a browser) */
  budgetCounts?: "process" | "wasm";
  /**
   * the most bytes one wasm memory may hold (default 4 GiB, all wasm32 addresses; in Node
   * $POWERINFER_SHARD_BYTES); a model larger is split among several memories by whole layers. For
   * tests, and for a browser whose tabs are allowed less per memory.
   */
  shardBytes?: number;
  /** for a neuron store: cache size, hot share, read queue depth, pipelining (see OffloadOptions) */
  offload?: Partial<OffloadOptions>;
  /** per layer: FFN activations with |act(gate)| at or below count as zero (default: the model's calibrated thresholds, if any) */
  activationThresholds?: ArrayLike<number>;
  /**
   * record a Chrome trace of this model's work: loading, each token per layer (attention, the
   * FFN's steps), a store's reads and waits, and cache counters; `tracer.write(path)` saves it
   */
  tracer?: Tracer;
}

export class Model {
  private busy = false;
  /** parameters and main weight type, read from the tensor table once when first asked */
  private facts: { params: number; mainType: number | undefined } | undefined;
  private disposed = false;
  /** the running generation's own abort (dispose() stops it), and its end */
  private running: { controller: AbortController; iterator: AsyncGenerator<string>; ended: Promise<void> } | null =
    null;

  constructor(
    private readonly llama: LlamaModel,
    readonly tokenizer: Tokenizer,
  ) {}

  get config(): ModelConfig {
    return this.llama.config;
  }
  get contextSize(): number {
    return this.llama.contextSize;
  }

  /** why the context is shorter than the model's trained one when none was asked for (null otherwise) */
  get contextNote(): string | null {
    return this.llama.contextNote;
  }
  get threads(): number {
    return this.llama.threads;
  }
  /** the model file's metadata (GGUF key/values: hyper-parameters, tokenizer, chat template) */
  get metadata(): ReadonlyMap<string, unknown> {
    return this.llama.file.metadata;
  }
  /**
   * Parameters and the type most of the weight bytes have, as llama.cpp's model description
   * gives them (see typeDescription); a store's FFN counts
   * though its bundles are not tensors.
   */
  get parameterCount(): number {
    return this.weights.params;
  }
  /** "ARCH PARAMS TYPE", the label llama-bench shows for a model */
  get typeDescription(): string {
    const { params, mainType } = this.weights;
    return `${this.llama.config.architecture} ${formatParameterCount(params)} ${mainType === undefined ? "?" : typeName(mainType).toUpperCase()}`;
  }
  private get weights(): { params: number; mainType: number | undefined } {
    return (this.facts ??= weightFacts(this.llama));
  }
  /** counters of the offloaded FFN (neurons computed, cache hits, bytes read), for a neuron store */
  offloadStats(): OffloadStats | undefined {
    return this.llama.offloaded?.snapshot();
  }
  /** how a neuron store's FFN picks its neurons ("dense", "gate" or "predictor"); undefined for a model in memory */
  get offloadMode(): string | undefined {
    return this.llama.offloaded?.mode;
  }
  /**
   * How a store's budget is laid out (undefined for a model in memory): what stays resident, the
   * neuron cache's size, the hot neurons pinned per layer and the share asked for, whether the
   * gate rows stay in memory (src/model/offload/layout.ts).
   */
  get offloadLayout(): OffloadLayout | undefined {
    return this.llama.offloaded?.layout;
  }
  /** bytes of wasm memory in use (weights, KV cache, buffers) */
  get residentBytes(): number {
    return this.llama.residentBytes;
  }
  /** bytes of the wasm memories (weights, KV cache, buffers, a store's neuron cache); they only grow, so this is their peak */
  get wasmMemoryBytes(): number {
    return this.llama.wasmMemoryBytes;
  }
  /** how many wasm memories the model is split into: one, unless it is larger than one memory addresses (4 GiB) */
  get wasmMemories(): number {
    return this.llama.shardCount;
  }
  /** whether dispose() has been called */
  get isDisposed(): boolean {
    return this.disposed;
  }

  /** Token ids of `text` (no BOS unless asked; special tokens parsed only if asked). */
  tokenize(text: string, options: { addBos?: boolean; special?: boolean } = {}): number[] {
    return this.tokenizer.encode(text, { addBos: options.addBos ?? false, parseSpecial: options.special ?? false });
  }

  detokenize(ids: number[]): string {
    return this.tokenizer.decode(ids);
  }

  /**
   * Generate a continuation of `prompt` (text, or token ids used as they are). Iterate the result
   * for text pieces; its `stats` hold prefill and decode speed once done. One generation at a
   * time per model: the KV cache is the model's, and a second one beside it throws
   * ModelBusyError; after dispose() it throws ModelDisposedError.
   */
  generate(prompt: string | number[], options: GenerateOptions = {}): Generation {
    if (this.disposed) throw new ModelDisposedError();
    const model = this;
    // The generation's own signal: the caller's abort, or dispose().
    const controller = new AbortController();
    const callerSignal = options.signal;
    const inner = new Generation(this.llama, this.tokenizer, prompt, { ...options, signal: controller.signal });
    // Guard the one KV cache against two interleaved generations.
    const iterate = inner[Symbol.asyncIterator].bind(inner);
    let iterator: AsyncGenerator<string> | undefined;
    const guarded = async function* () {
      if (model.disposed) throw new ModelDisposedError();
      if (model.busy) throw new ModelBusyError();
      model.busy = true;
      const forward = () => controller.abort(callerSignal!.reason);
      if (callerSignal?.aborted) forward();
      else callerSignal?.addEventListener("abort", forward, { once: true });
      let ended!: () => void;
      model.running = { controller, iterator: iterator!, ended: new Promise<void>((r) => (ended = r)) };
      try {
        yield* { [Symbol.asyncIterator]: iterate };
      } finally {
        callerSignal?.removeEventListener("abort", forward);
        model.busy = false;
        model.running = null;
        ended();
      }
    };
    inner[Symbol.asyncIterator] = () => (iterator = guarded());
    return inner;
  }

  /**
   * Frees the worker threads and memory. A generation still running is stopped first (at once if
   * its reader is between pieces, else after the token in progress): its iteration ends with
   * stopReason "abort".
   */
  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    const running = this.running;
    if (running) {
      running.controller.abort(new ModelDisposedError());
      // Ends the iteration even when nobody pulls the next piece (dispose called in the loop's body).
      await running.iterator.return(undefined);
      await running.ended;
    }
    const tr = this.llama.tracer;
    const t = tr ? tr.now() : 0;
    await this.llama.dispose();
    if (tr) tr.span("dispose", "model", t);
  }

  /** `await using model = await loadModel(...)` disposes it at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }
}

/** 292352 -> "292.35 K", 6.74e9 -> "6.74 B", as llama-bench writes parameter counts. */
export function formatParameterCount(n: number): string {
  if (n >= 1e9) return `${(n / 1e9).toFixed(2)} B`;
  if (n >= 1e6) return `${(n / 1e6).toFixed(2)} M`;
  if (n >= 1e3) return `${(n / 1e3).toFixed(2)} K`;
  return String(n);
}

/** Parameters and the type of most weight bytes, from the loaded file's tensor table (and a store's FFN). */
function weightFacts(llama: LlamaModel): { params: number; mainType: number | undefined } {
  let params = 0;
  const bytesByType = new Map<number, number>();
  for (const t of llama.file.tensors.values()) {
    params += t.elements;
    if (t.dims.length >= 2) bytesByType.set(t.type, (bytesByType.get(t.type) ?? 0) + t.bytes);
  }
  const ffn = llama.file instanceof NeuronStore ? llama.file.ffn : undefined;
  if (ffn) {
    // the FFN lives in neuron bundles, not tensors: gate, up and down of every layer's experts
    const cfg = llama.config;
    const elements = 3 * ffn.layers.length * cfg.nEmbd * ffn.layers[0].neurons;
    params += elements;
    bytesByType.set(ffn.type, (bytesByType.get(ffn.type) ?? 0) + tensorBytes(ffn.type, elements));
  }
  const mainType = [...bytesByType.entries()].sort((a, b) => b[1] - a[1])[0]?.[0];
  return { params, mainType };
}

export async function loadModel(options: LoadModelOptions): Promise<Model> {
  if (!options || typeof options.modelPath !== "string")
    throw new TypeError("loadModel: modelPath (a string) is required");
  const threads =
    options.threads === undefined || options.threads === "auto" ? availableParallelism() : options.threads;
  if (!Number.isInteger(threads) || threads < 1)
    throw new RangeError(`loadModel: threads must be a positive integer, got ${threads}`);
  const tr = options.tracer;
  const t = tr ? tr.now() : 0;
  const llama = await LlamaModel.load(options.modelPath, {
    threads,
    contextSize: options.contextSize === "auto" ? undefined : options.contextSize,
    batchSize: options.batchSize,
    kvCache: options.kvCache,
    memoryBudget: options.memoryBudget,
    budgetCounts: options.budgetCounts,
    shardBytes: options.shardBytes,
    offload: options.offload,
    activationThresholds: options.activationThresholds,
    onProgress: options.onLoadProgress,
    tracer: tr,
  });
  try {
    const model = new Model(llama, Tokenizer.fromGGUF(llama.file));
    if (tr) tr.span("load", "model", t, { path: options.modelPath });
    return model;
  } catch (e) {
    await llama.dispose();
    throw e;
  }
}
