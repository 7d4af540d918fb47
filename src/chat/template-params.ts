/**
 * The request fields that steer the chat template, as the OpenAI-compatible servers that render
 * Hugging Face templates name them (OpenAI's own API has none):
 *
 *   chat_template_kwargs    {"enable_thinking": false}, {"reasoning_effort": "high"},
 *                           {"date_string": "15 Mar 2025"}: extra template variables
 *                           (llama-server and vLLM both take this object)
 *   add_generation_prompt   end with the assistant's cue (default true; vLLM's field)
 *   continue_final_message  go on with the last message instead of starting a new turn
 *                           (default false; vLLM's field, transformers' meaning)
 */
import { invalidParam } from "./errors.js";
import type { RenderOptions } from "./template.js";

function typeOf(v: unknown): string {
  return v === null ? "null" : Array.isArray(v) ? "array" : typeof v;
}

function optBoolean(body: Record<string, unknown>, key: string): boolean | undefined {
  const v = body[key];
  if (v === undefined || v === null) return undefined;
  if (typeof v !== "boolean") throw invalidParam(key, `${key} must be true or false, got ${typeOf(v)}`, "invalid_type");
  return v;
}

/** The render options a chat request asks for (throws ApiError(400) naming a bad field). */
export function parseTemplateParams(body: unknown): RenderOptions {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return {};
  const b = body as Record<string, unknown>;
  const options: RenderOptions = {};
  const add = optBoolean(b, "add_generation_prompt");
  const cont = optBoolean(b, "continue_final_message");
  if (add && cont)
    throw invalidParam(
      "continue_final_message",
      "continue_final_message and add_generation_prompt cannot both be true: the first goes on with the last message, " +
        "the second opens a new assistant turn",
    );
  if (add !== undefined) options.addGenerationPrompt = add;
  if (cont !== undefined) options.continueFinalMessage = cont;
  const kwargs = b.chat_template_kwargs;
  if (kwargs !== undefined && kwargs !== null) {
    if (typeof kwargs !== "object" || Array.isArray(kwargs))
      throw invalidParam(
        "chat_template_kwargs",
        `chat_template_kwargs must be an object of template variables, got ${typeOf(kwargs)}`,
        "invalid_type",
      );
    options.kwargs = kwargs as Record<string, unknown>;
  }
  return options;
}
