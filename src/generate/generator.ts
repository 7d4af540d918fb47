/**
 * Text generation over a model and its tokenizer: prefill the prompt in batches, then decode
 * token by token, sampling, streaming text pieces that never split a UTF-8 character, stopping at
 * end-of-generation, a stop string, maxTokens, a full context or an AbortSignal.
 */
import type { LlamaModel } from "../model/model.js";
import { Sampler, type SamplerOptions, type TokenLogprobs } from "./sampler.js";
import { StreamingDecoder, type Tokenizer } from "../tokenizer/index.js";
import { PromptTooLongError } from "./errors.js";
import { JsonConstraint } from "./json-constraint.js";
import { checkAnswerRoom, responseGrammar, type ResponseFormat } from "./response-format.js";
import type { SchemaNode } from "./json-schema.js";
import { OffloadCounters } from "./trace-counters.js";

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
  /**
   * record each generated token's log-probability and those of this many most probable
   * alternatives (0: the token's own only) in `Generation.logprobs`; default: none
   */
  logprobs?: number;
  /**
   * the answer's form: `{ type: "json_object" }` or `{ type: "json_schema", schema }` make it one
   * JSON value that parses (and validates), by constrained decoding; default text
   */
  responseFormat?: ResponseFormat;
}

/** "eos": an end-of-generation token, or the end of the JSON value a responseFormat asked for. */
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
  /** with the `logprobs` option: one entry per generated token, as `tokens` */
  readonly logprobs: TokenLogprobs[] = [];
  private started = false;
  /** the response format's grammar (null: text), compiled when the generation is made */
  private readonly grammar: SchemaNode | null;

  constructor(
    private readonly model: LlamaModel,
    private readonly tokenizer: Tokenizer,
    private readonly prompt: string | number[],
    private readonly options: GenerateOptions,
  ) {
    this.grammar = responseGrammar(options.responseFormat);
    const top = options.logprobs;
    if (top !== undefined && !(Number.isInteger(top) && top >= 0 && top <= 20))
      throw new RangeError(`logprobs must be an integer 0..20 (alternatives per token), got ${top}`);
  }

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
    if (promptIds.length >= model.contextSize) throw new PromptTooLongError(promptIds.length, model.contextSize);
    // Tokens that may still be generated when `generated` are out and the next goes at `pos`.
    const room = (generated: number, pos: number) =>
      Math.min(maxTokens < 0 ? Infinity : maxTokens - generated, model.contextSize - pos + 1);
    const constraint = this.grammar ? new JsonConstraint(this.grammar, tokenizer, !options.ignoreEos) : null;
    if (this.grammar) checkAnswerRoom(this.grammar, room(0, promptIds.length));
    const logprobs = options.logprobs;
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
    const tr = model.tracer;
    const traceStart = tr ? tr.now() : 0;
    const counters = tr && model.offloaded ? new OffloadCounters(tr, model.offloaded) : null;
    const t0 = performance.now();
    const cache = model.cachedTokens;
    let pos = 0;
    while (pos < cache.length && pos < promptIds.length - 1 && cache[pos] === promptIds[pos]) pos++;
    pos = model.reusablePrefix(pos);
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
    if (tr) tr.span("prefill", "generate", tr.fromClock(t0), { tokens: promptIds.length - stats.cachedPromptTokens });
    counters?.sample();
    stats.prefillTokensPerSecond = ((promptIds.length - stats.cachedPromptTokens) / stats.prefillMs) * 1000;

    const decoder = new StreamingDecoder(tokenizer);
    const stop = options.stop?.filter((s) => s.length > 0) ?? [];
    const holdBack = stop.reduce((m, s) => Math.max(m, s.length - 1), 0);
    let pending = ""; // text held back while it could be the start of a stop string
    const one = [0];
    const t1 = performance.now();
    let decodeTokens = 0;
    // false when the loop is left from outside: the reader stopped iterating (or dispose did)
    let loopDone = false;
    try {
      for (let i = 0; maxTokens < 0 || i < maxTokens; i++) {
        if (signal?.aborted) {
          stats.stopReason = "abort";
          break;
        }
        const tt = tr ? tr.now() : 0;
        const id = sampleNamed(sampler, logits!, model.file.path, pos, constraint?.allowed(room(i, pos)));
        if (tr) tr.span("sample", "generate", tt);
        const lp = logprobs === undefined ? null : sampler.lastLogprobs(id, logprobs);
        sampler.accept(id);
        if (!options.ignoreEos && tokenizer.isEog(id)) {
          stats.stopReason = "eos";
          break;
        }
        constraint?.accept(id);
        this.tokens.push(id);
        if (lp) this.logprobs.push(lp);
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
        if (constraint?.finished) {
          // the JSON value is complete: the answer's natural end
          stats.stopReason = "eos";
          break;
        }
        if (maxTokens >= 0 && i + 1 >= maxTokens) break;
        if (pos >= model.contextSize) {
          stats.stopReason = "contextFull";
          break;
        }
        one[0] = id;
        logits = model.offloaded ? await model.forwardAsync(one, 1, pos++) : model.forward(one, 1, pos++);
        decodeTokens++;
        if (tr) {
          tr.span(`token ${i + 1}`, "generate", tt);
          counters?.sample();
        }
      }
      loopDone = true;
    } finally {
      if (!loopDone) stats.stopReason = "abort";
      if (tr)
        tr.span("generate", "generate", traceStart, { prompt: promptIds.length, generated: stats.generatedTokens });
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
function sampleNamed(sampler: Sampler, logits: Float32Array, file: string, pos: number, allowed?: Uint8Array): number {
  try {
    return sampler.sample(logits, allowed);
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
