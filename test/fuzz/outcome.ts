/**
 * What a fuzz case can come to, and how an exception is judged.
 *
 *  - success: the input was accepted and everything ran (for stores: and gave the pristine text
 *    where the mutation cannot change it);
 *  - clean: refused with one of the engine's errors, one line naming the problem;
 *  - crash: any other exception (TypeError, a wasm trap, an engine RangeError such as "Invalid
 *    typed array length"), a multi-line or unnamed error, a 5xx, a malformed error response;
 *  - wrong: accepted, but gave other text than the pristine input where the damage cannot
 *    legitimately change it (a moved tensor, a changed profile);
 *  - hang: no answer within the case's time limit;
 *  - blowup: the process grew past the memory limit, or a worker ran out of heap.
 */
import { GGUFError } from "../../src/format/gguf.js";
import { StoreError } from "../../src/format/store/index.js";
import { NonFiniteWeightError } from "../../src/format/finite-check.js";
import { TokenizerError } from "../../src/tokenizer/vocab.js";
import { UsageError } from "../../src/cli/args.js";
import { ApiError } from "../../src/chat/errors.js";
import { HFConvertError } from "../../src/format/hf/hf-config.js";
import { SafetensorsError } from "../../src/format/hf/safetensors.js";
import { HFTokenizerError } from "../../src/format/hf-tokenizer.js";

export type Outcome = "success" | "clean" | "crash" | "wrong" | "hang" | "blowup";

/** Outcomes that fail a fuzz run. */
export const FAILURES: readonly Outcome[] = ["crash", "wrong", "hang", "blowup"];

export interface CaseResult {
  outcome: Outcome;
  /** the error message, or what was wrong */
  detail: string;
  /** which step of the case it came from (e.g. "inspect --json", "run") */
  step?: string;
  ms?: number;
}

/** The engine's own error classes: what a user is meant to see. */
const OURS = [
  GGUFError,
  StoreError,
  NonFiniteWeightError,
  TokenizerError,
  UsageError,
  ApiError,
  HFConvertError,
  SafetensorsError,
  HFTokenizerError,
];

/** JavaScript's and WebAssembly's own errors: never what a user should see. */
const ENGINE_NAMES = new Set(["TypeError", "ReferenceError", "SyntaxError", "InternalError", "RuntimeError"]);

/**
 * Judge an exception thrown while handling input from `file` (a path, or "" when there is none):
 * clean when it is one of ours, or when it is an Error whose single-line message names the file;
 * a crash otherwise (with the stack's first frames, to find the site).
 */
export function judgeError(err: unknown, file: string): CaseResult {
  if (!(err instanceof Error)) return { outcome: "crash", detail: `threw a non-Error: ${String(err)}` };
  const oneLine = !err.message.includes("\n") && err.message.trim() !== "";
  const site = (err.stack ?? "").split("\n").slice(1, 4).join(" | ");
  if (ENGINE_NAMES.has(err.name)) return { outcome: "crash", detail: `${err.name}: ${err.message} @ ${site}` };
  if (!oneLine) return { outcome: "crash", detail: `multi-line or empty message: ${JSON.stringify(err.message)}` };
  if (OURS.some((c) => err instanceof c)) return { outcome: "clean", detail: err.message };
  const base = file.split("/").pop() ?? "";
  if (base !== "" && err.message.includes(base)) return { outcome: "clean", detail: err.message };
  return { outcome: "crash", detail: `${err.name} naming no file: ${err.message} @ ${site}` };
}

/** The worse of two results (failures first, then clean errors, then success). */
export function worse(a: CaseResult, b: CaseResult): CaseResult {
  const rank: Record<Outcome, number> = { success: 0, clean: 1, wrong: 2, crash: 3, blowup: 4, hang: 5 };
  return rank[b.outcome] > rank[a.outcome] ? b : a;
}
