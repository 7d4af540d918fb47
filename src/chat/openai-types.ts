/**
 * The request and response shapes of OpenAI's chat and text completion APIs, as far as this
 * engine implements them, plus llama-server's sampling extensions (top_k, min_p, repeat_penalty,
 * repeat_last_n, ignore_eos) and its `timings` block. Field names are the wire's (snake_case), so
 * the same objects go over HTTP and through the in-process facade.
 */

export interface ChatContentPartText {
  type: "text";
  text: string;
}

export interface ChatCompletionMessageParam {
  /** "developer" is OpenAI's newer name for "system" and is treated as one */
  role: "system" | "developer" | "user" | "assistant";
  content: string | ChatContentPartText[] | null;
  name?: string;
}

/** Sampling and length fields shared by both endpoints. null means "not given", as OpenAI's. */
export interface SamplingParams {
  /** echoed back; the HTTP server answers 404 for a name it does not serve */
  model?: string;
  /** most tokens to generate; -1 = until end of generation or a full context (the default) */
  max_tokens?: number | null;
  /** OpenAI's newer name for max_tokens */
  max_completion_tokens?: number | null;
  /** 0 = greedy; default 0.8 (llama-server's) */
  temperature?: number | null;
  top_p?: number | null;
  top_k?: number | null;
  min_p?: number | null;
  repeat_penalty?: number | null;
  repeat_last_n?: number | null;
  frequency_penalty?: number | null;
  presence_penalty?: number | null;
  seed?: number | null;
  /** up to 16 stop strings; the stop string itself is not returned */
  stop?: string | string[] | null;
  /** keep generating past end-of-generation tokens */
  ignore_eos?: boolean | null;
  /** only 1 is supported */
  n?: number | null;
  user?: string;
  /** the answer as JSON: any object, or a value a JSON schema accepts (constrained decoding) */
  response_format?: ResponseFormatParam | null;
}

export interface StreamOptions {
  /** send usage in a separate last chunk with empty `choices` (OpenAI's way) instead of in the finishing chunk */
  include_usage?: boolean | null;
}

export interface ChatCompletionCreateParams extends SamplingParams {
  messages: ChatCompletionMessageParam[];
  /** return each answer token's log-probability */
  logprobs?: boolean | null;
  /** and this many most probable alternatives per token (0..20; needs logprobs: true) */
  top_logprobs?: number | null;
  stream?: boolean | null;
  stream_options?: StreamOptions | null;
  /** extra chat-template variables, e.g. `{ enable_thinking: false }` (llama-server's and vLLM's field) */
  chat_template_kwargs?: Record<string, unknown> | null;
  /** end the prompt with the assistant's cue (default true; vLLM's field) */
  add_generation_prompt?: boolean | null;
  /** go on with the last message's text instead of opening a new turn (default false; vLLM's field) */
  continue_final_message?: boolean | null;
}

export interface CompletionCreateParams extends SamplingParams {
  /** text, token ids, or a one-element array of either */
  prompt: string | string[] | number[] | number[][];
  /** return each answer token's log-probability and this many alternatives (0..20) */
  logprobs?: number | null;
  stream?: boolean | null;
  stream_options?: StreamOptions | null;
}

export type FinishReason = "stop" | "length";

/** The response format of a request (OpenAI's; `schema` beside `type` is llama-server's form). */
export type ResponseFormatParam =
  | { type: "text" }
  | { type: "json_object"; schema?: Record<string, unknown> }
  | { type: "json_schema"; json_schema: { name?: string; schema: Record<string, unknown>; strict?: boolean | null } };

/** One token of a chat answer with its log-probability and the most probable alternatives. */
export interface ChatTokenLogprob {
  token: string;
  logprob: number;
  /** the token's UTF-8 bytes (its text may be a fragment of a character) */
  bytes: number[];
  top_logprobs: { token: string; logprob: number; bytes: number[] }[];
}

export interface ChatLogprobs {
  content: ChatTokenLogprob[];
}

/** The legacy completions form: parallel arrays, one entry per token. */
export interface CompletionLogprobs {
  tokens: string[];
  token_logprobs: number[];
  top_logprobs: Record<string, number>[];
  text_offset: number[];
}

export interface CompletionUsage {
  prompt_tokens: number;
  completion_tokens: number;
  total_tokens: number;
  /** prompt tokens served from the KV cache of the previous generation */
  prompt_tokens_details?: { cached_tokens: number };
}

/** llama-server's speed report, attached to the last response or chunk. */
export interface Timings {
  prompt_n: number;
  prompt_ms: number;
  prompt_per_second: number;
  predicted_n: number;
  predicted_ms: number;
  predicted_per_second: number;
}

export interface ChatCompletion {
  id: string;
  object: "chat.completion";
  created: number;
  model: string;
  choices: {
    index: number;
    message: { role: "assistant"; content: string };
    finish_reason: FinishReason;
    logprobs: ChatLogprobs | null;
  }[];
  usage: CompletionUsage;
  timings: Timings;
}

export interface ChatCompletionChunk {
  id: string;
  object: "chat.completion.chunk";
  created: number;
  model: string;
  choices: {
    index: number;
    delta: { role?: "assistant"; content?: string };
    finish_reason: FinishReason | null;
    logprobs: ChatLogprobs | null;
  }[];
  usage?: CompletionUsage;
  timings?: Timings;
}

export interface Completion {
  id: string;
  object: "text_completion";
  created: number;
  model: string;
  choices: { index: number; text: string; finish_reason: FinishReason | null; logprobs: CompletionLogprobs | null }[];
  usage?: CompletionUsage;
  timings?: Timings;
}

/** A streamed text completion chunk has the same shape as the whole response. */
export type CompletionChunk = Completion;

export interface ModelObject {
  id: string;
  object: "model";
  created: number;
  owned_by: string;
}
