/**
 * The chat layer's errors: the generation floor's (src/generate/errors.ts: ApiError and the errors
 * every surface shares), and the 400 for a bad request field.
 */
import { ApiError } from "../generate/errors.js";

export {
  ApiError,
  ModelBusyError,
  ModelDisposedError,
  PromptTooLongError,
  type ApiErrorType,
} from "../generate/errors.js";

/** 400 for a field of the wrong type or out of range. */
export function invalidParam(param: string, message: string, code = "invalid_value"): ApiError {
  return new ApiError(400, message, "invalid_request_error", param, code);
}
