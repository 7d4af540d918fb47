/**
 * `responseFormat`, the library's form of OpenAI's `response_format`: the answer is one JSON
 * value, by constrained decoding (json-constraint.ts), however little JSON the model saw.
 *
 *   { type: "text" }                     no constraint (the default)
 *   { type: "json_object" }              any JSON object
 *   { type: "json_schema", schema }      a value the JSON schema accepts (json-schema.ts lists the keywords)
 */
import { ApiError } from "./errors.js";
import { anyObject, compileSchema, type SchemaNode } from "./json-schema.js";

export type ResponseFormat =
  { type: "text" } | { type: "json_object" } | { type: "json_schema"; schema: Record<string, unknown> | boolean };

const compiled = new WeakMap<object, SchemaNode>();

/**
 * The grammar of a response format (null for text), compiled once per format object. Throws
 * UnsupportedSchemaError (an ApiError 400) for a schema it cannot enforce, ApiError 400 for a
 * format that is not one of the three.
 */
export function responseGrammar(format: ResponseFormat | undefined | null): SchemaNode | null {
  if (format === undefined || format === null) return null;
  if (typeof format !== "object")
    throw new ApiError(
      400,
      `responseFormat must be an object, got ${typeof format}`,
      "invalid_request_error",
      "response_format",
    );
  let node = compiled.get(format);
  if (node) return node;
  switch (format.type) {
    case "text":
      return null;
    case "json_object":
      node = anyObject();
      break;
    case "json_schema":
      node = compileSchema(format.schema);
      break;
    default:
      throw new ApiError(
        400,
        `responseFormat.type must be "text", "json_object" or "json_schema", got ${JSON.stringify((format as { type: unknown }).type)}`,
        "invalid_request_error",
        "response_format",
        "invalid_value",
      );
  }
  compiled.set(format, node);
  return node;
}

/**
 * The budget check before generating: `tokens` (what max_tokens and the context leave) must hold
 * the shortest value the grammar accepts, one token per byte.
 */
export function checkAnswerRoom(grammar: SchemaNode, tokens: number): void {
  if (grammar.minLen > tokens)
    throw new ApiError(
      400,
      `the response format's shortest JSON answer takes ${grammar.minLen} tokens, but only ${tokens} may be generated ` +
        `(max_tokens and the context left after the prompt); allow more tokens`,
      "invalid_request_error",
      "max_tokens",
      "max_tokens_too_small",
    );
}
