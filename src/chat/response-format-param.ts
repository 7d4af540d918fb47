/**
 * The request fields that shape an answer beyond sampling: `response_format` (OpenAI's
 * `{type: "json_object"}` and `{type: "json_schema", json_schema: {schema}}`, and llama-server's
 * `{type: "json_object", schema}` and top-level `json_schema`), and `logprobs` / `top_logprobs`.
 * Each bad shape is a 400 naming the field; a schema constrained decoding cannot enforce is a 400
 * naming its keywords (src/generate/json-schema.ts), all before the request waits in the queue.
 */
import { responseGrammar, type ResponseFormat } from "../generate/response-format.js";
import { ApiError, invalidParam } from "./errors.js";

type Body = Record<string, unknown>;

/** OpenAI's limit on top_logprobs (and ours on the completions endpoint's logprobs). */
export const MAX_TOP_LOGPROBS = 20;

function isObject(v: unknown): v is Body {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function kind(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
}

/** The response format a request asks for (undefined: text), compiled and checked. */
export function parseResponseFormat(body: Body): ResponseFormat | undefined {
  let format: ResponseFormat | undefined;
  const rf = body.response_format;
  if (rf !== undefined && rf !== null) {
    if (!isObject(rf))
      throw invalidParam("response_format", `response_format must be an object, got ${kind(rf)}`, "invalid_type");
    switch (rf.type) {
      case "text":
        break;
      case "json_object":
        // llama-server's extension: json_object with a schema
        format =
          rf.schema !== undefined
            ? { type: "json_schema", schema: schemaAt(rf.schema, "response_format.schema") }
            : { type: "json_object" };
        break;
      case "json_schema": {
        const js = rf.json_schema;
        if (isObject(js) && js.schema !== undefined)
          format = { type: "json_schema", schema: schemaAt(js.schema, "response_format.json_schema.schema") };
        else if (rf.schema !== undefined)
          format = { type: "json_schema", schema: schemaAt(rf.schema, "response_format.schema") };
        else
          throw new ApiError(
            400,
            "response_format of type json_schema needs json_schema.schema (the JSON schema the answer must follow)",
            "invalid_request_error",
            "response_format.json_schema.schema",
            "missing_required_parameter",
          );
        break;
      }
      default:
        throw invalidParam(
          "response_format.type",
          `response_format.type must be "text", "json_object" or "json_schema", got ${JSON.stringify(rf.type ?? null)}`,
        );
    }
  }
  // llama-server's top-level json_schema field
  if (body.json_schema !== undefined && body.json_schema !== null) {
    if (format) throw invalidParam("json_schema", "give either response_format or json_schema, not both");
    format = { type: "json_schema", schema: schemaAt(body.json_schema, "json_schema") };
  }
  responseGrammar(format);
  return format;
}

function schemaAt(v: unknown, param: string): Record<string, unknown> | boolean {
  if (typeof v === "boolean" || isObject(v)) return v;
  throw invalidParam(param, `${param} must be a JSON schema (an object), got ${kind(v)}`, "invalid_type");
}

/**
 * Chat: `logprobs: true` with `top_logprobs: 0..20` alternatives per token. Returns the number
 * of alternatives, or undefined when logprobs are not asked for.
 */
export function parseChatLogprobs(body: Body): number | undefined {
  const on = body.logprobs;
  if (on !== undefined && on !== null && typeof on !== "boolean")
    throw invalidParam("logprobs", `logprobs must be true or false, got ${kind(on)}`, "invalid_type");
  const top = topCount(body.top_logprobs, "top_logprobs");
  if (top !== undefined && on !== true) throw invalidParam("top_logprobs", "top_logprobs needs logprobs: true");
  return on === true ? (top ?? 0) : undefined;
}

/** Completions: `logprobs: N` alternatives per token (0: the chosen tokens' own only). */
export function parseCompletionLogprobs(body: Body): number | undefined {
  return topCount(body.logprobs, "logprobs");
}

function topCount(v: unknown, param: string): number | undefined {
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "number" || !Number.isInteger(v))
    throw invalidParam(
      param,
      `${param} must be an integer, got ${typeof v === "number" ? v : kind(v)}`,
      "invalid_type",
    );
  if (v < 0 || v > MAX_TOP_LOGPROBS)
    throw invalidParam(param, `${param} must be between 0 and ${MAX_TOP_LOGPROBS}, got ${v}`);
  return v;
}
