/**
 * Validation of OpenAI-shaped requests: every field is checked for type and range, and a bad
 * one fails with ApiError(400) naming the field, so that `{"temperature": "hot"}` is answered
 * with "temperature must be a number, got string" rather than silently sampling at a default.
 * Unknown fields are ignored (clients send extras); fields this engine cannot honour (n > 1,
 * tools, echo...) are refused rather than ignored, since ignoring them changes the answer.
 */
import type { GenerateOptions } from "../generate/generator.js";
import { ApiError, invalidParam } from "./errors.js";
import type { ChatMessage } from "./template.js";
import { parseChatLogprobs, parseCompletionLogprobs, parseResponseFormat } from "./response-format-param.js";

export const MAX_STOP_STRINGS = 16;

export interface ParsedRequest {
  model: string | undefined;
  stream: boolean;
  /** usage in a separate final chunk (stream_options.include_usage) */
  includeUsage: boolean;
  /** sampling and length options for Model.generate (no signal, no stop strings of the template) */
  options: GenerateOptions;
}

export interface ParsedChatRequest extends ParsedRequest {
  messages: ChatMessage[];
}

export interface ParsedCompletionRequest extends ParsedRequest {
  /** text, or token ids used as they are */
  prompt: string | number[];
}

type Body = Record<string, unknown>;

function typeOf(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
}

function asObject(body: unknown): Body {
  if (typeof body !== "object" || body === null || Array.isArray(body)) {
    throw new ApiError(
      400,
      `the request body must be a JSON object, got ${typeOf(body)}`,
      "invalid_request_error",
      null,
      "invalid_body",
    );
  }
  return body as Body;
}

/**
 * Both bounds are required: every number a request carries has a range, so that no value (1e300
 * included) reaches code that sizes memory or loops by it.
 */
interface NumberRule {
  integer?: boolean;
  min: number;
  max: number;
  /** the minimum itself is not allowed */
  exclusiveMin?: boolean;
}

/** token counts and positions are 32-bit integers in the engine */
const INT32_MAX = 2 ** 31 - 1;
/** the largest context a model may have (src/model/config.ts) */
const MAX_CONTEXT = 2 ** 24;
/** `n` and `best_of`: only 1 is supported; a bound keeps 1e300 from being called an integer count */
const MAX_CHOICES = 128;

function optNumber(body: Body, key: string, rule: NumberRule): number | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isFinite(v)) {
    throw invalidParam(
      key,
      `${key} must be ${rule.integer ? "an integer" : "a number"}, got ${typeof v === "number" ? String(v) : typeOf(v)}`,
      "invalid_type",
    );
  }
  if (rule.integer && !Number.isInteger(v))
    throw invalidParam(key, `${key} must be an integer, got ${v}`, "invalid_type");
  const low = rule.exclusiveMin ? v <= rule.min : v < rule.min;
  if (low || v > rule.max) {
    const kind = rule.integer ? "an integer " : "";
    const bound = rule.exclusiveMin
      ? `greater than ${rule.min} and at most ${rule.max}`
      : `between ${rule.min} and ${rule.max}`;
    throw invalidParam(key, `${key} must be ${kind}${bound}, got ${v}`);
  }
  return v;
}

function optBoolean(body: Body, key: string): boolean | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw invalidParam(key, `${key} must be true or false, got ${typeOf(v)}`, "invalid_type");
  return v;
}

function optString(body: Body, key: string): string | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "string") throw invalidParam(key, `${key} must be a string, got ${typeOf(v)}`, "invalid_type");
  return v;
}

function unsupported(param: string, what: string): ApiError {
  return new ApiError(
    400,
    `${what} is not supported by this server`,
    "invalid_request_error",
    param,
    "unsupported_parameter",
  );
}

/** The fields both endpoints share. */
function parseCommon(body: Body): ParsedRequest {
  const model = optString(body, "model");
  const stream = optBoolean(body, "stream") ?? false;
  let includeUsage = false;
  const so = body.stream_options;
  if (so !== undefined && so !== null) {
    if (typeof so !== "object" || Array.isArray(so))
      throw invalidParam("stream_options", `stream_options must be an object, got ${typeOf(so)}`, "invalid_type");
    includeUsage = optBoolean(so as Body, "include_usage") ?? false;
    if (!stream && includeUsage)
      throw invalidParam("stream_options", "stream_options is only allowed when stream is true");
  }

  const n = optNumber(body, "n", { integer: true, min: 1, max: MAX_CHOICES });
  if (n !== undefined && n !== 1) throw unsupported("n", `n = ${n} (several choices per request)`);
  const bestOf = optNumber(body, "best_of", { integer: true, min: 1, max: MAX_CHOICES });
  if (bestOf !== undefined && bestOf !== 1) throw unsupported("best_of", `best_of = ${bestOf}`);
  const bias = body.logit_bias;
  if (bias !== undefined && bias !== null && (typeof bias !== "object" || Object.keys(bias).length > 0))
    throw unsupported("logit_bias", "logit_bias");
  for (const key of ["tools", "functions"]) {
    const v = body[key];
    if (v !== undefined && v !== null && !(Array.isArray(v) && v.length === 0))
      throw unsupported(key, `${key} (tool calling)`);
  }
  // -1 is llama-server's "no limit"; 0 is allowed and yields an empty answer.
  const maxTokens =
    optNumber(body, "max_completion_tokens", { integer: true, min: -1, max: INT32_MAX }) ??
    optNumber(body, "max_tokens", { integer: true, min: -1, max: INT32_MAX });
  const options: GenerateOptions = {
    maxTokens,
    temperature: optNumber(body, "temperature", { min: 0, max: 100 }),
    topP: optNumber(body, "top_p", { min: 0, max: 1 }),
    topK: optNumber(body, "top_k", { integer: true, min: 0, max: INT32_MAX }),
    minP: optNumber(body, "min_p", { min: 0, max: 1 }),
    repeatPenalty: optNumber(body, "repeat_penalty", { min: 0, exclusiveMin: true, max: 100 }),
    repeatLastN: optNumber(body, "repeat_last_n", { integer: true, min: 0, max: MAX_CONTEXT }),
    frequencyPenalty: optNumber(body, "frequency_penalty", { min: -2, max: 2 }),
    presencePenalty: optNumber(body, "presence_penalty", { min: -2, max: 2 }),
    seed: optNumber(body, "seed", { integer: true, min: -Number.MAX_SAFE_INTEGER, max: Number.MAX_SAFE_INTEGER }),
    stop: parseStop(body.stop),
    ignoreEos: optBoolean(body, "ignore_eos"),
    responseFormat: parseResponseFormat(body),
  };
  for (const k of Object.keys(options) as (keyof GenerateOptions)[]) if (options[k] === undefined) delete options[k];
  return { model, stream, includeUsage, options };
}

function parseStop(v: unknown): string[] | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v === "string") return v === "" ? undefined : [v];
  if (!Array.isArray(v))
    throw invalidParam("stop", `stop must be a string or an array of strings, got ${typeOf(v)}`, "invalid_type");
  if (v.length > MAX_STOP_STRINGS)
    throw invalidParam("stop", `stop holds at most ${MAX_STOP_STRINGS} strings, got ${v.length}`);
  v.forEach((s, i) => {
    if (typeof s !== "string")
      throw invalidParam(`stop[${i}]`, `stop[${i}] must be a string, got ${typeOf(s)}`, "invalid_type");
  });
  const stops = (v as string[]).filter((s) => s !== "");
  return stops.length ? stops : undefined;
}

const ROLES: Record<string, ChatMessage["role"]> = {
  system: "system",
  developer: "system",
  user: "user",
  assistant: "assistant",
};

function parseMessages(v: unknown): ChatMessage[] {
  if (v === undefined || v === null)
    throw new ApiError(
      400,
      "messages is required (an array of {role, content})",
      "invalid_request_error",
      "messages",
      "missing_required_parameter",
    );
  if (!Array.isArray(v)) throw invalidParam("messages", `messages must be an array, got ${typeOf(v)}`, "invalid_type");
  if (v.length === 0) throw invalidParam("messages", "messages must hold at least one message");
  return v.map((m, i): ChatMessage => {
    const at = `messages[${i}]`;
    if (typeof m !== "object" || m === null || Array.isArray(m))
      throw invalidParam(at, `${at} must be an object {role, content}, got ${typeOf(m)}`, "invalid_type");
    const msg = m as Body;
    if (typeof msg.role !== "string")
      throw invalidParam(`${at}.role`, `${at}.role must be a string, got ${typeOf(msg.role)}`, "invalid_type");
    const role = ROLES[msg.role];
    if (!role)
      throw invalidParam(
        `${at}.role`,
        `${at}.role must be one of system, developer, user, assistant; got "${msg.role}"`,
      );
    return { role, content: parseContent(msg.content, `${at}.content`, role) };
  });
}

function parseContent(c: unknown, at: string, role: string): string {
  if (typeof c === "string") return c;
  // An assistant turn may carry no content (OpenAI allows null there).
  if ((c === null || c === undefined) && role === "assistant") return "";
  if (Array.isArray(c)) {
    return c
      .map((part, j) => {
        const p = part as Body;
        if (typeof part !== "object" || part === null || p.type !== "text") {
          const t = typeof part === "object" && part !== null ? JSON.stringify(p.type) : typeOf(part);
          throw new ApiError(
            400,
            `${at}[${j}] has type ${t}: only text content parts are supported`,
            "invalid_request_error",
            `${at}[${j}]`,
            "unsupported_content",
          );
        }
        if (typeof p.text !== "string")
          throw invalidParam(
            `${at}[${j}].text`,
            `${at}[${j}].text must be a string, got ${typeOf(p.text)}`,
            "invalid_type",
          );
        return p.text;
      })
      .join("");
  }
  throw invalidParam(at, `${at} must be a string or an array of text parts, got ${typeOf(c)}`, "invalid_type");
}

export function parseChatRequest(body: unknown): ParsedChatRequest {
  const b = asObject(body);
  const common = parseCommon(b);
  const logprobs = parseChatLogprobs(b);
  if (logprobs !== undefined) common.options.logprobs = logprobs;
  return { ...common, messages: parseMessages(b.messages) };
}

export function parseCompletionRequest(body: unknown, vocabSize: number): ParsedCompletionRequest {
  const b = asObject(body);
  const common = parseCommon(b);
  const logprobs = parseCompletionLogprobs(b);
  if (logprobs !== undefined) common.options.logprobs = logprobs;
  if (b.echo === true) throw unsupported("echo", "echo");
  if (b.suffix !== undefined && b.suffix !== null && b.suffix !== "")
    throw unsupported("suffix", "suffix (fill-in-the-middle)");
  return { ...common, prompt: parsePrompt(b.prompt, vocabSize) };
}

function parsePrompt(p: unknown, vocabSize: number): string | number[] {
  if (p === undefined || p === null)
    throw new ApiError(400, "prompt is required", "invalid_request_error", "prompt", "missing_required_parameter");
  if (typeof p === "string") return p;
  if (!Array.isArray(p))
    throw invalidParam(
      "prompt",
      `prompt must be a string, an array of token ids, or a one-element array of either; got ${typeOf(p)}`,
      "invalid_type",
    );
  if (p.length > 0 && p.every((x) => typeof x === "number")) return checkIds(p as number[], "prompt", vocabSize);
  if (p.length !== 1) {
    throw new ApiError(
      400,
      `prompt holds ${p.length} prompts: only one prompt per request is supported`,
      "invalid_request_error",
      "prompt",
      "unsupported_parameter",
    );
  }
  const only = p[0];
  if (typeof only === "string") return only;
  if (Array.isArray(only) && only.length > 0 && only.every((x) => typeof x === "number"))
    return checkIds(only as number[], "prompt[0]", vocabSize);
  throw invalidParam(
    "prompt[0]",
    `prompt[0] must be a string or an array of token ids, got ${typeOf(only)}`,
    "invalid_type",
  );
}

function checkIds(ids: number[], at: string, vocabSize: number): number[] {
  ids.forEach((id, i) => {
    if (!Number.isInteger(id) || id < 0 || id >= vocabSize) {
      throw invalidParam(`${at}[${i}]`, `${at}[${i}] = ${id} is not a token id of this model (0..${vocabSize - 1})`);
    }
  });
  return ids;
}
