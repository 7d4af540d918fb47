/**
 * A prompt too long for the context, refused from its byte length before it is tokenized.
 *
 * Tokenizing a 3.9 MB request took 1.3 s and 400 MB only to learn that it holds a million tokens
 * for a context of a few thousand. No token covers more input bytes than its own text holds (the
 * longest token of the vocabulary: SentencePiece's "▁" stands for one space, a byte token for
 * one byte, an unknown token for one character of at most 4 bytes), so a text of more than
 * context x longest bytes has more tokens than the context holds, whatever they turn out to be.
 * Texts under that bound are tokenized and checked exactly, as before.
 */
import type { Tokenizer } from "../tokenizer/index.js";
import { PromptTooLongError } from "./errors.js";

const longest = new WeakMap<Tokenizer, number>();

/** The most input bytes one token of this vocabulary can stand for. */
export function maxTokenBytes(tokenizer: Tokenizer): number {
  let n = longest.get(tokenizer);
  if (n === undefined) {
    n = 4; // an unknown token stands for one character: up to 4 bytes of UTF-8
    for (let id = 0; id < tokenizer.vocabSize; id++) n = Math.max(n, tokenizer.specialPiece(id).length);
    longest.set(tokenizer, n);
  }
  return n;
}

/** Throws PromptTooLongError (400, context_length_exceeded) when `text` cannot fit `contextSize` tokens. */
export function checkPromptBytes(
  model: { readonly tokenizer: Tokenizer; readonly contextSize: number },
  text: string,
  param: "prompt" | "messages",
): void {
  const perToken = maxTokenBytes(model.tokenizer);
  const limit = model.contextSize * perToken;
  // a UTF-16 unit is at most 3 bytes of UTF-8: most texts are settled without counting
  if (text.length * 3 <= limit) return;
  const bytes = Buffer.byteLength(text, "utf8");
  if (bytes <= limit) return;
  // one token covers at most perToken bytes: the text is at least this many tokens, past the context
  throw new PromptTooLongError(Math.ceil(bytes / perToken), model.contextSize, param, {
    textBytes: bytes,
    bytesPerToken: perToken,
  });
}
