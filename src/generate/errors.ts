/**
 * The errors a generation can fail with, one set for every surface: `Model.generate`,
 * `ChatSession`, the OpenAI-shaped facade and the HTTP server throw the same class with the same
 * fields for the same mistake. Each is an `ApiError`, shaped as OpenAI's error object (status,
 * type, param, code), so that the server sends it as it is and a library caller can branch on
 * `instanceof` or on `code`.
 *
 * They live on the generation floor because `Generation` is the lowest place that can find a
 * prompt too long; the chat layer and the library API above re-export them.
 */
export type ApiErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "not_found_error"
  | "rate_limit_error"
  | "unavailable_error"
  | "server_error";

/**
 * The error a request can fail with, carrying what an OpenAI-compatible surface reports: an HTTP
 * status and the fields of `{ error: { message, type, param, code } }`. The in-process facade
 * throws it too, so a library caller and an HTTP client see the same message for the same mistake.
 */
export class ApiError extends Error {
  override name = "ApiError";

  constructor(
    readonly status: number,
    message: string,
    readonly type: ApiErrorType = "invalid_request_error",
    /** the request field at fault, e.g. "messages[1].content"; null when none */
    readonly param: string | null = null,
    /** a stable machine-readable code, e.g. "context_length_exceeded"; null when none */
    readonly code: string | null = null,
  ) {
    super(message);
  }

  /** The OpenAI wire shape. */
  toJSON(): { error: { message: string; type: string; param: string | null; code: string | null } } {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }
}

/**
 * A model (or a chat session) used after `dispose()` (503 over HTTP: the server has no model to
 * answer with).
 */
export class ModelDisposedError extends ApiError {
  override name = "ModelDisposedError";

  constructor(what: "model" | "chat session" = "model") {
    super(503, `the ${what} has been disposed`, "unavailable_error", null, "model_disposed");
  }
}

/**
 * A second generation started while one runs: a model has one KV cache. The chat layer waits its
 * turn in the model's queue instead; this is what a direct `generate` beside it gets.
 */
export class ModelBusyError extends ApiError {
  override name = "ModelBusyError";

  constructor() {
    super(
      409,
      "this model is already generating; await the other generation first (or go through ChatSession or the facade, which wait their turn)",
      "invalid_request_error",
      null,
      "model_busy",
    );
  }
}

/**
 * A prompt (or a conversation) that leaves no room in the context for a single generated token.
 * A text far too long is refused from its length before it is tokenized (`textBytes` given):
 * `promptTokens` is then the fewest tokens it can be, past the context already.
 */
export class PromptTooLongError extends ApiError {
  override name = "PromptTooLongError";
  /** whether promptTokens is the count (true) or, for a text refused by its length, the fewest it can be */
  readonly exact: boolean;

  constructor(
    /** tokens in the prompt as the model would see it (template and BOS included) */
    readonly promptTokens: number,
    /** tokens the model's context holds, prompt and answer together */
    readonly contextSize: number,
    /** what the caller sent: "prompt" or "messages" */
    param: "prompt" | "messages" = "prompt",
    /** the text's UTF-8 length, when it was refused by it (and the most bytes one token covers) */
    measured?: { textBytes: number; bytesPerToken: number },
  ) {
    const what = param === "messages" ? "conversation" : "prompt";
    const length = measured
      ? `at least ${promptTokens} tokens long (${measured.textBytes} bytes of text, at most ${measured.bytesPerToken} bytes a token)`
      : `${promptTokens} tokens long`;
    super(
      400,
      `the ${what} is ${length}, but the model's context holds ${contextSize} tokens for prompt and answer together; ` +
        `shorten it or load the model with a larger context size`,
      "invalid_request_error",
      param,
      "context_length_exceeded",
    );
    this.exact = measured === undefined;
  }
}
