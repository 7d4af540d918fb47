/**
 * The in-process OpenAI-shaped facade: `createChatCompletion(model, { messages, stream })` and
 * `createCompletion(model, { prompt, stream })` take the same request objects as OpenAI's API and
 * return the same response (or chunk) objects, without HTTP. The server is a thin layer over
 * `prepareChatCompletion` / `prepareCompletion`, so both surfaces give identical answers.
 *
 * Generations wait their turn in the model's FIFO queue (one at a time per model), and between
 * text pieces the loop yields to the event loop, so timers, sockets and AbortSignals stay live
 * while a long answer is produced.
 */
import { randomUUID } from "node:crypto";
import { setImmediate as nextMacrotask } from "node:timers/promises";
import type { GenerateOptions, Generation, GenerationStats } from "../generate/generator.js";
import type { Tokenizer } from "../tokenizer/index.js";
import type { OffloadLayout } from "../model/offload/layout.js";
import type { OffloadStats } from "../model/offload/stats.js";
import { ApiError, ModelDisposedError, PromptTooLongError } from "./errors.js";
import type {
  ChatCompletion,
  ChatCompletionChunk,
  ChatCompletionCreateParams,
  ChatLogprobs,
  Completion,
  CompletionLogprobs,
  CompletionChunk,
  CompletionCreateParams,
  CompletionUsage,
  FinishReason,
  Timings,
} from "./openai-types.js";
import { parseChatRequest, parseCompletionRequest, type ParsedRequest } from "./params.js";
import { queueFor } from "./queue.js";
import { checkAnswerRoom, responseGrammar } from "../generate/response-format.js";
import { chatLogprobs, completionLogprobs } from "./logprobs.js";
import { checkPromptBytes } from "./prompt-bound.js";
import { templateForModel, tokenizeChatPrompt, type ChatTemplate } from "./template.js";
import { parseTemplateParams } from "./template-params.js";

/** What the chat layer needs of a model; `Model` from `loadModel` is one. */
export interface ChatModel {
  readonly tokenizer: Tokenizer;
  readonly contextSize: number;
  generate(prompt: string | number[], options?: GenerateOptions): Generation;
  /** what the server's /props and /metrics report when the model has them */
  readonly config?: { readonly architecture: string };
  readonly offloadMode?: string;
  readonly offloadLayout?: OffloadLayout;
  offloadStats?(): OffloadStats | undefined;
}

export interface CompletionOptions {
  /** abort the request: while it waits in the queue, or between generated tokens */
  signal?: AbortSignal;
  /** the chat template (default: the model's, else the plain format) */
  template?: ChatTemplate;
  /** the `model` reported in responses when the request names none (default "local") */
  modelName?: string;
  /** the `model` every response reports, whatever the request names (a server of one model) */
  servedModel?: string;
  /** generation settings under the request's own fields, e.g. `{ maxTokens: 256 }` */
  defaults?: GenerateOptions;
}

/**
 * A validated, tokenized request, ready to run once. Preparing throws ApiError(400) for a bad
 * request before anything waits in the queue.
 */
export class PreparedCompletion<Full, Chunk> {
  readonly id: string;
  readonly created = Math.floor(Date.now() / 1000);
  private used = false;
  /** the running generation (for its logprobs) */
  private gen: Generation | undefined;

  constructor(
    private readonly chatModel: ChatModel,
    readonly kind: "chat" | "text",
    /** the name echoed in `model` */
    readonly model: string,
    readonly stream: boolean,
    readonly includeUsage: boolean,
    readonly promptIds: number[],
    readonly options: GenerateOptions,
    private readonly trimStart: boolean,
  ) {
    this.id = (kind === "chat" ? "chatcmpl-" : "cmpl-") + randomUUID().replaceAll("-", "").slice(0, 24);
  }

  /** Runs to the end and returns the whole response. Rejects with the signal's reason on abort. */
  async complete(signal?: AbortSignal): Promise<Full> {
    let text = "";
    const pieces = this.pieces(signal);
    let r = await pieces.next();
    while (!r.done) {
      text += r.value;
      r = await pieces.next();
    }
    const stats = r.value;
    const finish = finishReason(stats);
    const count = this.gen?.logprobs.length ?? 0;
    if (this.kind === "chat") {
      const full: ChatCompletion = {
        id: this.id,
        object: "chat.completion",
        created: this.created,
        model: this.model,
        choices: [
          {
            index: 0,
            message: { role: "assistant", content: text },
            finish_reason: finish,
            logprobs: this.chatLogprobs(0, count),
          },
        ],
        usage: usage(stats),
        timings: timings(stats),
      };
      return full as Full;
    }
    const full: Completion = {
      id: this.id,
      object: "text_completion",
      created: this.created,
      model: this.model,
      choices: [{ index: 0, text, finish_reason: finish, logprobs: this.textLogprobs(0, count, 0) }],
      usage: usage(stats),
      timings: timings(stats),
    };
    return full as Full;
  }

  /** Logprobs of the answer's tokens [from, to) in the chat form; null when not asked for. */
  private chatLogprobs(from: number, to: number): ChatLogprobs | null {
    if (this.options.logprobs === undefined || !this.gen) return null;
    return chatLogprobs(this.chatModel.tokenizer, this.gen.logprobs, from, to);
  }

  /** The completions form; `offset`: the answer's length before token `from`. */
  private textLogprobs(from: number, to: number, offset: number): CompletionLogprobs | null {
    if (this.options.logprobs === undefined || !this.gen) return null;
    return completionLogprobs(this.chatModel.tokenizer, this.gen.logprobs, from, to, offset);
  }

  /**
   * The response as OpenAI's stream chunks: (chat) a first chunk with the role, one per text
   * piece, a finishing chunk with `finish_reason`, usage and timings (or, with include_usage, a
   * separate usage chunk with empty `choices` last). Ending the iteration early stops the
   * generation and frees the model; an abort through `signal` throws its reason.
   */
  async *chunks(signal?: AbortSignal): AsyncGenerator<Chunk, void, undefined> {
    // id first and object second, as OpenAI orders them (JSON key order follows insertion).
    const head = {
      id: this.id,
      object: this.kind === "chat" ? "chat.completion.chunk" : "text_completion",
      created: this.created,
      model: this.model,
    } as const;
    const chat = this.kind === "chat";
    // each chunk carries the logprobs of the tokens generated since the previous one
    let sent = 0;
    let offset = 0;
    const piece = (content: string): Chunk => {
      const to = this.gen?.logprobs.length ?? 0;
      const from = sent;
      sent = to;
      const chunk = chat
        ? ({
            ...head,
            object: "chat.completion.chunk",
            choices: [{ index: 0, delta: { content }, finish_reason: null, logprobs: this.chatLogprobs(from, to) }],
          } satisfies ChatCompletionChunk)
        : ({
            ...head,
            object: "text_completion",
            choices: [{ index: 0, text: content, finish_reason: null, logprobs: this.textLogprobs(from, to, offset) }],
          } satisfies CompletionChunk);
      offset += content.length;
      return chunk as Chunk;
    };
    if (chat) {
      yield {
        ...head,
        object: "chat.completion.chunk",
        choices: [{ index: 0, delta: { role: "assistant", content: "" }, finish_reason: null, logprobs: null }],
      } satisfies ChatCompletionChunk as Chunk;
    }
    const pieces = this.pieces(signal);
    let r = await pieces.next();
    while (!r.done) {
      yield piece(r.value);
      r = await pieces.next();
    }
    const stats = r.value;
    const finish = finishReason(stats);
    const tail = this.includeUsage ? {} : { usage: usage(stats), timings: timings(stats) };
    const last = this.gen?.logprobs.length ?? 0;
    yield (
      chat
        ? ({
            ...head,
            object: "chat.completion.chunk",
            choices: [
              {
                index: 0,
                delta: {},
                finish_reason: finish,
                logprobs: sent < last ? this.chatLogprobs(sent, last) : null,
              },
            ],
            ...tail,
          } satisfies ChatCompletionChunk)
        : ({
            ...head,
            object: "text_completion",
            choices: [
              {
                index: 0,
                text: "",
                finish_reason: finish,
                logprobs: sent < last ? this.textLogprobs(sent, last, offset) : null,
              },
            ],
            ...tail,
          } satisfies CompletionChunk)
    ) as Chunk;
    if (this.includeUsage) {
      yield {
        ...head,
        object: chat ? "chat.completion.chunk" : "text_completion",
        choices: [],
        usage: usage(stats),
        timings: timings(stats),
      } as Chunk;
    }
  }

  /** Text pieces in the model's turn; returns the stats; throws the signal's reason on abort. */
  private async *pieces(signal?: AbortSignal): AsyncGenerator<string, GenerationStats, undefined> {
    if (this.used) throw new Error("a prepared completion runs only once");
    this.used = true;
    const stats = yield* generateInTurn(
      this.chatModel,
      this.promptIds,
      { ...this.options, signal },
      this.trimStart,
      (gen) => (this.gen = gen),
    );
    // An abort the caller did not ask for is the model's dispose().
    if (stats.stopReason === "abort") throw signal?.aborted ? signal.reason : new ModelDisposedError();
    return stats;
  }
}

/**
 * Model.generate in the model's FIFO turn, yielding to the event loop after each piece (so I/O,
 * timers and abort handlers run between tokens: the forward pass itself is synchronous).
 * `trimStart` drops the answer's leading whitespace. Returns the generation's stats, including
 * a stopReason of "abort" when `options.signal` fired during the generation; an abort while still
 * waiting in the queue rejects with the signal's reason.
 */
export async function* generateInTurn(
  model: ChatModel,
  prompt: number[],
  options: GenerateOptions,
  trimStart = false,
  /** called once the generation is made, for its tokens and logprobs as they come */
  onStart?: (gen: Generation) => void,
): AsyncGenerator<string, GenerationStats, undefined> {
  const release = await queueFor(model).acquire(options.signal);
  try {
    const gen = model.generate(prompt, options);
    onStart?.(gen);
    let trimming = trimStart;
    for await (let piece of gen) {
      if (trimming) {
        piece = piece.trimStart();
        if (piece === "") continue;
        trimming = false;
      }
      yield piece;
      await nextMacrotask();
    }
    return gen.stats!;
  } finally {
    release();
  }
}

function finishReason(stats: GenerationStats): FinishReason {
  return stats.stopReason === "maxTokens" || stats.stopReason === "contextFull" ? "length" : "stop";
}

function usage(stats: GenerationStats): CompletionUsage {
  const u: CompletionUsage = {
    prompt_tokens: stats.promptTokens,
    completion_tokens: stats.generatedTokens,
    total_tokens: stats.promptTokens + stats.generatedTokens,
  };
  // Prompt tokens whose KV entries were reused from the previous generation (OpenAI's cached_tokens).
  const cached = (stats as { cachedPromptTokens?: number }).cachedPromptTokens;
  if (cached !== undefined) u.prompt_tokens_details = { cached_tokens: cached };
  return u;
}

function timings(stats: GenerationStats): Timings {
  return {
    prompt_n: stats.promptTokens,
    prompt_ms: round(stats.prefillMs),
    prompt_per_second: round(stats.prefillTokensPerSecond),
    predicted_n: stats.generatedTokens,
    predicted_ms: round(stats.decodeMs),
    predicted_per_second: round(stats.decodeTokensPerSecond),
  };
}

function round(x: number): number {
  return Math.round(x * 1000) / 1000;
}

/** Request options over defaults; an unlimited length unless one of them sets it. */
function mergeOptions(
  defaults: GenerateOptions | undefined,
  parsed: ParsedRequest,
  extraStop: readonly string[],
): GenerateOptions {
  const options: GenerateOptions = { maxTokens: -1, ...defaults, ...parsed.options };
  delete options.signal;
  const stop = [...(parsed.options.stop ?? defaults?.stop ?? []), ...extraStop];
  if (stop.length) options.stop = stop;
  return options;
}

function checkPromptLength(model: ChatModel, ids: number[], param: "prompt" | "messages"): void {
  if (ids.length === 0)
    throw new ApiError(400, `the ${param} is empty: it has no tokens`, "invalid_request_error", param, "empty_prompt");
  if (ids.length >= model.contextSize) throw new PromptTooLongError(ids.length, model.contextSize, param);
}

/** A JSON response format's shortest answer must fit in max_tokens and the context the prompt leaves. */
function checkAnswerFits(model: ChatModel, ids: number[], options: GenerateOptions): void {
  const grammar = responseGrammar(options.responseFormat);
  if (!grammar) return;
  const max = options.maxTokens ?? -1;
  checkAnswerRoom(grammar, Math.min(max < 0 ? Infinity : max, model.contextSize - ids.length + 1));
}

/** Validates, renders through the chat template and tokenizes a chat request (throws ApiError(400)). */
export function prepareChatCompletion(
  model: ChatModel,
  params: ChatCompletionCreateParams | unknown,
  options: CompletionOptions = {},
): PreparedCompletion<ChatCompletion, ChatCompletionChunk> {
  const parsed = parseChatRequest(params);
  const template = options.template ?? templateForModel(model);
  // chat_template_kwargs, add_generation_prompt, continue_final_message (src/chat/template-params.ts)
  const text = template.render(parsed.messages, parseTemplateParams(params));
  checkPromptBytes(model, text, "messages");
  const ids = tokenizeChatPrompt(model.tokenizer, text);
  checkPromptLength(model, ids, "messages");
  const merged = mergeOptions(options.defaults, parsed, template.stop);
  checkAnswerFits(model, ids, merged);
  return new PreparedCompletion(
    model,
    "chat",
    options.servedModel ?? parsed.model ?? options.modelName ?? "local",
    parsed.stream,
    parsed.includeUsage,
    ids,
    merged,
    template.trimAnswerStart,
  );
}

/** Validates and tokenizes a text completion request (throws ApiError(400)). */
export function prepareCompletion(
  model: ChatModel,
  params: CompletionCreateParams | unknown,
  options: CompletionOptions = {},
): PreparedCompletion<Completion, CompletionChunk> {
  const parsed = parseCompletionRequest(params, model.tokenizer.vocabSize);
  const merged = mergeOptions(options.defaults, parsed, []);
  const tk = model.tokenizer;
  if (typeof parsed.prompt === "string") checkPromptBytes(model, parsed.prompt, "prompt");
  // Text is tokenized exactly as Model.generate(text) does it, so answers match the library's.
  const ids =
    typeof parsed.prompt === "string"
      ? tk.encode(parsed.prompt, { addBos: merged.addBos ?? tk.addBos, parseSpecial: true })
      : parsed.prompt;
  checkPromptLength(model, ids, "prompt");
  checkAnswerFits(model, ids, merged);
  return new PreparedCompletion(
    model,
    "text",
    options.servedModel ?? parsed.model ?? options.modelName ?? "local",
    parsed.stream,
    parsed.includeUsage,
    ids,
    merged,
    false,
  );
}

/**
 * OpenAI's `chat.completions.create`, in process: `await createChatCompletion(model, { messages })`
 * gives a ChatCompletion; with `stream: true` it gives an async iterable of ChatCompletionChunk.
 * Bad requests reject with ApiError (status 400, the field in `param`).
 */
export function createChatCompletion(
  model: ChatModel,
  params: ChatCompletionCreateParams & { stream: true },
  options?: CompletionOptions,
): Promise<AsyncIterable<ChatCompletionChunk>>;
export function createChatCompletion(
  model: ChatModel,
  params: ChatCompletionCreateParams & { stream?: false | null },
  options?: CompletionOptions,
): Promise<ChatCompletion>;
export function createChatCompletion(
  model: ChatModel,
  params: ChatCompletionCreateParams,
  options?: CompletionOptions,
): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>>;
export async function createChatCompletion(
  model: ChatModel,
  params: ChatCompletionCreateParams,
  options: CompletionOptions = {},
): Promise<ChatCompletion | AsyncIterable<ChatCompletionChunk>> {
  const job = prepareChatCompletion(model, params, options);
  return job.stream ? job.chunks(options.signal) : job.complete(options.signal);
}

/** OpenAI's `completions.create` (plain text continuation), in process; see createChatCompletion. */
export function createCompletion(
  model: ChatModel,
  params: CompletionCreateParams & { stream: true },
  options?: CompletionOptions,
): Promise<AsyncIterable<CompletionChunk>>;
export function createCompletion(
  model: ChatModel,
  params: CompletionCreateParams & { stream?: false | null },
  options?: CompletionOptions,
): Promise<Completion>;
export function createCompletion(
  model: ChatModel,
  params: CompletionCreateParams,
  options?: CompletionOptions,
): Promise<Completion | AsyncIterable<CompletionChunk>>;
export async function createCompletion(
  model: ChatModel,
  params: CompletionCreateParams,
  options: CompletionOptions = {},
): Promise<Completion | AsyncIterable<CompletionChunk>> {
  const job = prepareCompletion(model, params, options);
  return job.stream ? job.chunks(options.signal) : job.complete(options.signal);
}
