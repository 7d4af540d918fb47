/**
 * llama-server's tokenizer routes:
 *   POST /tokenize   {content, add_special?, parse_special?, with_pieces?} -> {tokens}
 *   POST /detokenize {tokens} -> {content}
 * `add_special` (default false) adds the model's BOS/EOS as generation would; `parse_special`
 * (default true) reads special-token text such as "<s>" as the token; `with_pieces` answers
 * `[{id, piece}]` (a piece that is not whole UTF-8 is given as its bytes).
 */
import { ApiError, invalidParam } from "../../chat/errors.js";
import type { Route } from "./route.js";

type Body = Record<string, unknown>;

function asObject(body: unknown): Body {
  if (typeof body !== "object" || body === null || Array.isArray(body))
    throw new ApiError(400, "the request body must be a JSON object", "invalid_request_error", null, "invalid_body");
  return body as Body;
}

function flag(body: Body, key: string, absent: boolean): boolean {
  const v = body[key];
  if (v === undefined || v === null) return absent;
  if (typeof v !== "boolean") throw invalidParam(key, `${key} must be true or false, got ${typeof v}`, "invalid_type");
  return v;
}

const strict = new TextDecoder("utf-8", { fatal: true });

export const tokenizeRoute: Route = {
  method: "POST",
  async handle(ctx) {
    const body = asObject(await ctx.readBody());
    if (typeof body.content !== "string")
      throw new ApiError(
        400,
        `content must be a string (the text to tokenize), got ${body.content === undefined ? "nothing" : typeof body.content}`,
        "invalid_request_error",
        "content",
        body.content === undefined ? "missing_required_parameter" : "invalid_type",
      );
    const addSpecial = flag(body, "add_special", false);
    const tk = ctx.model.tokenizer;
    const tokens = tk.encode(body.content, {
      addBos: addSpecial && tk.addBos,
      addEos: addSpecial && tk.addEos,
      parseSpecial: flag(body, "parse_special", true),
    });
    if (!flag(body, "with_pieces", false)) return { json: { tokens } };
    return {
      json: {
        tokens: tokens.map((id) => {
          const bytes = tk.piece(id);
          try {
            return { id, piece: strict.decode(bytes) };
          } catch {
            return { id, piece: [...bytes] };
          }
        }),
      },
    };
  },
};

export const detokenizeRoute: Route = {
  method: "POST",
  async handle(ctx) {
    const body = asObject(await ctx.readBody());
    const tokens = body.tokens;
    if (!Array.isArray(tokens))
      throw new ApiError(
        400,
        `tokens must be an array of token ids, got ${tokens === undefined ? "nothing" : typeof tokens}`,
        "invalid_request_error",
        "tokens",
        tokens === undefined ? "missing_required_parameter" : "invalid_type",
      );
    const n = ctx.model.tokenizer.vocabSize;
    tokens.forEach((id, i) => {
      if (typeof id !== "number" || !Number.isInteger(id) || id < 0 || id >= n)
        throw invalidParam(
          `tokens[${i}]`,
          `tokens[${i}] = ${JSON.stringify(id)} is not a token id of this model (0..${n - 1})`,
        );
    });
    return { json: { content: ctx.model.tokenizer.decode(tokens as number[]) } };
  },
};
