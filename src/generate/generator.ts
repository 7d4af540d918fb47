/**
 * Text generation over a model and its tokenizer: prefill the prompt in batches, then decode
 * token by token, sampling, streaming text pieces that never split a UTF-8 character, stopping at
 * end-of-generation, a stop string, maxTokens, a full context or an AbortSignal.
 */
import type { LlamaModel } from "../model/llama.js";
import { Sampler, type SamplerOptions } from "./sampler.js";
import { StreamingDecoder, type Tokenizer } from "../tokenizer/index.js";

export interface GenerateOptions extends SamplerOptions {
  /** most tokens to generate (default 256; -1 = until the context is full) */
  maxTokens?: number;
  /** stop as soon as the output contains one of these (the stop string is not returned) */
  stop?: string[];
  signal?: AbortSignal;
  /** add BOS before the prompt (default: the model's tokenizer setting) */
  addBos?: boolean;
  /** keep generating past end-of-generation tokens (benchmarks, as llama.cpp's --ignore-eos) */
  ignoreEos?: boolean;
}

export type StopReason = "eos" | "maxTokens" | "stop" | "contextFull" | "abort";

export interface GenerationStats {
  promptTokens: number;
  /** prompt tokens whose KV entries were reused from the previous generation */
  cachedPromptTokens: number;
  generatedTokens: number;
  prefillMs: number;
  decodeMs: number;
  /** prompt tokens per second of prefill */
  prefillTokensPerSecond: number;
  /** generated tokens per second of decode (the first token is counted in prefill) */
  decodeTokensPerSecond: number;
  stopReason: StopReason;
}

/** One generation: iterate it for text pieces; `stats` and `tokens` are filled as it runs. */
export class Generation implements AsyncIterable<string> {
  stats: GenerationStats | undefined;
  readonly tokens: number[] = [];
  private started = false;

  constructor(
    private readonly model: LlamaModel,
    private readonly tokenizer: Tokenizer,
    private readonly prompt: string | number[],
    private readonly options: GenerateOptions,
  ) {}

  /** All the text at once. */
  async text(): Promise<string> {
    let s = "";
    for await (const piece of this) s += piece;
    return s;
  }

  async *[Symbol.asyncIterator](): AsyncIterator<string> {
    if (this.started) throw new Error("a Generation can be iterated only once");
    this.started = true;
    const { model, tokenizer, options } = this;
    const maxTokens = options.maxTokens ?? 256;
    const signal = options.signal;
    const sampler = new Sampler(options);
    const promptIds =
      typeof this.prompt === "string"
        ? tokenizer.encode(this.prompt, { addBos: options.addBos ?? tokenizer.addBos, parseSpecial: true })
        : this.prompt;
    if (promptIds.length === 0) throw new Error("the prompt is empty (no tokens, and the model adds no BOS)");
    if (promptIds.length >= model.contextSize) {
      throw new RangeError(`the prompt has ${promptIds.length} tokens, but the context holds ${model.contextSize}`);
    }
    for (const id of promptIds) sampler.accept(id);

    const stats: GenerationStats = {
      promptTokens: promptIds.length,
      cachedPromptTokens: 0,
      generatedTokens: 0,
      prefillMs: 0,
      decodeMs: 0,
      prefillTokensPerSecond: 0,
      decodeTokensPerSecond: 0,
      stopReason: "maxTokens",
    };
    this.stats = stats;

    // Prefill: the prompt in batches; the last batch leaves the logits of the last prompt token.
    // Positions whose tokens are already in the KV cache (a shared prefix with what the model
    // saw last, as in a chat) are reused; at least the last prompt token is evaluated again.
    const t0 = performance.now();
    const cache = model.cachedTokens;
    let pos = 0;
    while (pos < cache.length && pos < promptIds.length - 1 && cache[pos] === promptIds[pos]) pos++;
    stats.cachedPromptTokens = pos;
    let logits: Float32Array | undefined;
    while (pos < promptIds.length) {
      if (signal?.aborted) {
        stats.stopReason = "abort";
        return;
      }
      const n = Math.min(model.batchSize, promptIds.length - pos);
      const batch = promptIds.slice(pos, pos + n);
      logits = model.offloaded ? await model.forwardAsync(batch, n, pos) : model.forward(batch, n, pos);
      pos += n;
    }
    stats.prefillMs = performance.now() - t0;
    stats.prefillTokensPerSecond = ((promptIds.length - stats.cachedPromptTokens) / stats.prefillMs) * 1000;

    const decoder = new StreamingDecoder(tokenizer);
    const stop = options.stop?.filter((s) => s.length > 0) ?? [];
    const holdBack = stop.reduce((m, s) => Math.max(m, s.length - 1), 0);
    let pending = ""; // text held back while it could be the start of a stop string
    const one = [0];
    const t1 = performance.now();
    let decodeTokens = 0;
    try {
      for (let i = 0; maxTokens < 0 || i < maxTokens; i++) {
        if (signal?.aborted) {
          stats.stopReason = "abort";
          break;
        }
        const id = sampleNamed(sampler, logits!, model.file.path, pos);
        sampler.accept(id);
        if (!options.ignoreEos && tokenizer.isEog(id)) {
          stats.stopReason = "eos";
          break;
        }
        this.tokens.push(id);
        stats.generatedTokens++;
        pending += decoder.push(id);
        if (stop.length) {
          const hit = firstStop(pending, stop);
          if (hit >= 0) {
            pending = pending.slice(0, hit);
            stats.stopReason = "stop";
            break;
          }
        }
        if (pending.length > holdBack) {
          const out = pending.slice(0, pending.length - holdBack);
          pending = pending.slice(pending.length - holdBack);
          yield out;
        }
        if (maxTokens >= 0 && i + 1 >= maxTokens) break;
        if (pos >= model.contextSize) {
          stats.stopReason = "contextFull";
          break;
        }
        one[0] = id;
        logits = model.offloaded ? await model.forwardAsync(one, 1, pos++) : model.forward(one, 1, pos++);
        decodeTokens++;
      }
    } finally {
      stats.decodeMs = performance.now() - t1;
      stats.decodeTokensPerSecond = decodeTokens > 0 ? (decodeTokens / stats.decodeMs) * 1000 : 0;
    }
    if (stats.stopReason !== "stop") pending += decoder.flush();
    if (pending) yield pending;
  }
}

/**
 * A sample; when no logit is finite, an error naming the model file and the position: the
 * weights were finite when loaded (they are checked), so they overflow float32 in the
 * computation or are damaged in a way no check sees.
 */
function sampleNamed(sampler: Sampler, logits: Float32Array, file: string, pos: number): number {
  try {
    return sampler.sample(logits);
  } catch (e) {
    if (e instanceof RangeError && /every logit/.test(e.message))
      throw new Error(
        `${file}: the model computed no finite logit at position ${pos} (its weights overflow float32, or the file is damaged)`,
      );
    throw e;
  }
}

function firstStop(text: string, stops: string[]): number {
  let best = -1;
  for (const s of stops) {
    const i = text.indexOf(s);
    if (i >= 0 && (best < 0 || i < best)) best = i;
  }
  return best;
}
