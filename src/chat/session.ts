/**
 * A conversation with a model that remembers its history:
 *
 *   const chat = new ChatSession(model, { systemPrompt: "You are terse." });
 *   const a = await chat.prompt("Hi!", { onText: (t) => process.stdout.write(t) });
 *   await chat.prompt("And then?");   // sees the first exchange
 *
 * Each turn renders the whole history through the chat template and generates in the model's
 * FIFO turn. When the history outgrows the context, the oldest exchanges are dropped (the system
 * prompt stays). An aborted answer is kept in the history as far as it got, since that is what
 * the user saw.
 */
import type { GenerateOptions, Generation, GenerationStats, StopReason } from "../generate/generator.js";
import { generateInTurn, type ChatModel } from "./completions.js";
import { ModelDisposedError, PromptTooLongError } from "./errors.js";
import { templateForModel, tokenizeChatPrompt, type ChatMessage, type ChatTemplate } from "./template.js";

export interface ChatSessionOptions {
  /** a first system message */
  systemPrompt?: string;
  /** earlier messages to continue from (after the system prompt, if any) */
  history?: readonly ChatMessage[];
  /** the chat template (default: the model's, else the plain format) */
  template?: ChatTemplate;
  /** generation settings for every turn, under each prompt()'s own */
  defaults?: GenerateOptions;
  /** drop the oldest exchanges when the conversation no longer fits the context (default true) */
  trimHistory?: boolean;
}

export interface ChatPromptOptions extends GenerateOptions {
  /** called with each piece of the answer as it is generated, and the tokens generated so far */
  onText?: (piece: string, generatedTokens: number) => void;
}

export interface ChatReply {
  /** the answer (as far as it got, if aborted) */
  text: string;
  stopReason: StopReason;
  stats: GenerationStats;
  /** messages dropped from the start of the history to make this turn fit */
  droppedMessages: number;
}

export class ChatSession {
  private messages: ChatMessage[] = [];
  private readonly template: ChatTemplate;
  private readonly defaults: GenerateOptions;
  private readonly trim: boolean;
  /** turns of one session run in call order */
  private tail: Promise<unknown> = Promise.resolve();
  private disposed = false;
  /** aborts the turn in progress when the session is disposed */
  private readonly stopAll = new AbortController();

  constructor(
    readonly model: ChatModel,
    options: ChatSessionOptions = {},
  ) {
    this.template = options.template ?? templateForModel(model);
    this.defaults = { maxTokens: -1, ...options.defaults };
    this.trim = options.trimHistory ?? true;
    if (options.systemPrompt !== undefined) this.messages.push({ role: "system", content: options.systemPrompt });
    for (const m of options.history ?? []) this.messages.push({ role: m.role, content: m.content });
  }

  /** A copy of the conversation so far. */
  get history(): ChatMessage[] {
    return this.messages.map((m) => ({ ...m }));
  }

  /** Forget the conversation, keeping the system prompt. */
  reset(): void {
    this.messages = this.messages.filter((m) => m.role === "system");
  }

  /**
   * Send a user message and generate the answer; both join the history. Rejects with
   * PromptTooLongError (an ApiError 400, code "context_length_exceeded") when even the message
   * alone does not fit, with ModelDisposedError once the session or its model is disposed, and with
   * the signal's reason when aborted before generation began (the history is then unchanged).
   */
  prompt(text: string, options: ChatPromptOptions = {}): Promise<ChatReply> {
    if (typeof text !== "string") throw new TypeError(`ChatSession.prompt: text must be a string, got ${typeof text}`);
    if (this.disposed) return Promise.reject(new ModelDisposedError("chat session"));
    const run = this.tail.then(() => this.turn(text, options));
    this.tail = run.catch(() => undefined);
    return run;
  }

  /**
   * Ends the session: a turn in progress stops at its next token (it resolves with stopReason
   * "abort", as an abort would), turns still waiting and later prompts reject with
   * ModelDisposedError. The model stays loaded: the session does not own it.
   */
  async dispose(): Promise<void> {
    if (this.disposed) return;
    this.disposed = true;
    this.stopAll.abort(new ModelDisposedError("chat session"));
    await this.tail;
  }

  /** `await using chat = new ChatSession(model)` disposes it at the end of the scope. */
  [Symbol.asyncDispose](): Promise<void> {
    return this.dispose();
  }

  private async turn(text: string, options: ChatPromptOptions): Promise<ChatReply> {
    if (this.disposed) throw new ModelDisposedError("chat session");
    const { onText, ...rest } = options;
    const gen: GenerateOptions = { ...this.defaults, ...rest };
    // The caller's abort, or the session's dispose().
    gen.signal = rest.signal ? AbortSignal.any([rest.signal, this.stopAll.signal]) : this.stopAll.signal;
    gen.stop = [...(rest.stop ?? this.defaults.stop ?? []), ...this.template.stop];
    const pending = [...this.messages, { role: "user" as const, content: text }];
    const ctx = this.model.contextSize;
    const maxTokens = gen.maxTokens ?? 256;
    // Room to leave for the answer before dropping history: what was asked for, within reason.
    const reserve = Math.min(maxTokens >= 0 ? maxTokens : Math.floor(ctx / 4), Math.floor(ctx / 2));
    let dropped = 0;
    let ids = tokenizeChatPrompt(this.model.tokenizer, this.template.render(pending));
    while (this.trim && ids.length + reserve > ctx) {
      const first = pending.findIndex((m) => m.role !== "system");
      // Never drop the message being sent (the last one).
      if (first < 0 || first >= pending.length - 1) break;
      // Drop a whole exchange: the oldest user message and the answers up to the next user message.
      let end = first + 1;
      while (end < pending.length - 1 && pending[end].role === "assistant") end++;
      dropped += end - first;
      pending.splice(first, end - first);
      ids = tokenizeChatPrompt(this.model.tokenizer, this.template.render(pending));
    }
    if (ids.length >= ctx) throw new PromptTooLongError(ids.length, ctx, "messages");

    let answer = "";
    let generation: Generation | undefined;
    const pieces = generateInTurn(this.model, ids, gen, this.template.trimAnswerStart, (g) => (generation = g));
    let r = await pieces.next();
    while (!r.done) {
      answer += r.value;
      onText?.(r.value, generation?.tokens.length ?? 0);
      r = await pieces.next();
    }
    const stats = r.value;
    // Aborted before a word: as if the message had not been sent.
    if (stats.stopReason !== "abort" || answer !== "")
      this.messages = [...pending, { role: "assistant", content: answer }];
    return { text: answer, stopReason: stats.stopReason, stats, droppedMessages: dropped };
  }
}
