/**
 * The error a request can fail with, carrying what an OpenAI-compatible surface reports: an HTTP
 * status and the fields of `{ error: { message, type, param, code } }`. The in-process facade
 * throws it too, so a library caller and an HTTP client see the same message for the same mistake.
 */
export type ApiErrorType =
  "invalid_request_error" | "not_found_error" | "rate_limit_error" | "unavailable_error" | "server_error";

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

/** 400 for a field of the wrong type or out of range. */
export function invalidParam(param: string, message: string, code = "invalid_value"): ApiError {
  return new ApiError(400, message, "invalid_request_error", param, code);
}
