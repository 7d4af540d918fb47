/**
 * The smallest context a model may load with. A generation needs BOS and at least one more
 * position, so a context of 1 could never produce a token: it used to load and then fail at the
 * first prompt, far from the setting (or the file's context_length) that caused it.
 */
import { GGUFError, type ModelFile } from "../format/gguf.js";

export const MIN_CONTEXT = 2;

/**
 * Throws when the context a model would load with is too small: `requested` (the option) if
 * given, else `fromFile` (the file's context_length, capped by the loader's default).
 */
export function checkContextSize(requested: number | undefined, fromFile: number, file: ModelFile): void {
  if (requested !== undefined) {
    if (!(requested >= MIN_CONTEXT))
      throw new RangeError(
        `contextSize ${requested} is too small: a context must hold at least ${MIN_CONTEXT} tokens (BOS and one more)`,
      );
    return;
  }
  if (fromFile < MIN_CONTEXT) {
    const key = `${file.architecture}.context_length`;
    throw new GGUFError(
      file.path,
      `metadata "${key}" = ${file.getNumber(key)} makes a context of ${fromFile} token; a context must hold at least ${MIN_CONTEXT} tokens: give a context size (-c)`,
    );
  }
}

/**
 * Why a model loaded with a shorter context than it was trained for, when no context was asked
 * for (null when it was asked for, or is the model's own): a user who did not choose it hears
 * the reason rather than finding out from a "context full" later.
 */
export function contextNote(
  requested: number | undefined,
  contextSize: number,
  trained: number,
  why: "budget" | "default",
): string | null {
  if (requested !== undefined || contextSize >= trained) return null;
  const because = {
    budget: "the default under a memory budget, which pays for the KV cache",
    default: "the default without -c",
  }[why];
  return `context ${contextSize} of the model's ${trained}: ${because}; -c N sets it`;
}
