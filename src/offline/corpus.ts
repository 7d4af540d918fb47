/**
 * Text corpora for the offline tools (profile, perplexity, predictor training): read a file
 * with errors that say what is wrong with it, and turn it into token ids the way llama.cpp's
 * tools do (`common_tokenize(ctx, text, add_special = true)`: BOS first when the model wants it,
 * special-token text left as text).
 *
 *   const text = readCorpus("stories.txt");                        // string, or CorpusError
 *   const ids = corpusTokens(tokenizer, text, { maxTokens: 1e5 });  // Int32Array
 */
import { readFileSync, statSync } from "node:fs";
import type { Tokenizer } from "../tokenizer/index.js";

export class CorpusError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "CorpusError";
  }
}

/**
 * Offset of the first byte that breaks UTF-8 (truncated or overlong sequences, surrogates,
 * code points above U+10FFFF), or -1 when all of `b` is well formed.
 */
export function firstInvalidUtf8(b: Uint8Array): number {
  const n = b.length;
  let i = 0;
  while (i < n) {
    const c = b[i];
    if (c < 0x80) {
      i++;
      continue;
    }
    let len: number, min: number, cp: number;
    if (c >= 0xc2 && c <= 0xdf) {
      len = 2;
      min = 0x80;
      cp = c & 0x1f;
    } else if (c >= 0xe0 && c <= 0xef) {
      len = 3;
      min = 0x800;
      cp = c & 0x0f;
    } else if (c >= 0xf0 && c <= 0xf4) {
      len = 4;
      min = 0x10000;
      cp = c & 0x07;
    } else return i;
    if (i + len > n) return i;
    for (let k = 1; k < len; k++) {
      const d = b[i + k];
      if ((d & 0xc0) !== 0x80) return i;
      cp = (cp << 6) | (d & 0x3f);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += len;
  }
  return -1;
}

/**
 * The text of a corpus file. Refuses, naming the file: a missing file, a directory, an empty
 * file (or one of whitespace only), a NUL byte (a binary file: its offset is given) and invalid
 * UTF-8 (the offset of the first bad byte). A leading UTF-8 byte-order mark is dropped.
 */
export function readCorpus(path: string): string {
  let bytes: Buffer;
  try {
    if (statSync(path).isDirectory()) throw new CorpusError(`corpus ${path} is a directory, not a text file`);
    bytes = readFileSync(path);
  } catch (e) {
    if (e instanceof CorpusError) throw e;
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "ENOENT") throw new CorpusError(`corpus ${path} does not exist`);
    throw new CorpusError(`corpus ${path}: ${(e as Error).message}`);
  }
  if (bytes.length === 0) throw new CorpusError(`corpus ${path} is empty`);
  const nul = bytes.indexOf(0);
  if (nul >= 0) throw new CorpusError(`corpus ${path} is not a text file: NUL byte at byte offset ${nul}`);
  const bad = firstInvalidUtf8(bytes);
  if (bad >= 0) {
    throw new CorpusError(
      `corpus ${path} is not UTF-8 text: invalid byte 0x${bytes[bad].toString(16).padStart(2, "0")} at byte offset ${bad}`,
    );
  }
  const start = bytes.length >= 3 && bytes[0] === 0xef && bytes[1] === 0xbb && bytes[2] === 0xbf ? 3 : 0;
  const text = bytes.toString("utf8", start);
  if (text.trim() === "")
    throw new CorpusError(
      `corpus ${path} holds only whitespace (${bytes.length} bytes): no text to run the model over`,
    );
  return text;
}

export interface CorpusTokenOptions {
  /** keep at most this many tokens (BOS included); default: all */
  maxTokens?: number;
  /** put BOS first; default: what the model's tokenizer says (`tokenizer.addBos`), as llama.cpp */
  addBos?: boolean;
}

/**
 * Token ids of `text`, as llama.cpp's tools tokenize a whole file: BOS first when the model adds
 * one, special-token text (e.g. "</s>") tokenized as plain text.
 *
 * With maxTokens, only a prefix of the text is tokenized (cut at a paragraph or line break, grown
 * until it yields enough tokens), so that profiling a few thousand tokens of a large corpus does
 * not tokenize all of it. Tokens far from the cut are the whole text's tokens; the prefix is
 * always taken well past maxTokens, so the ids returned equal the first maxTokens of the whole.
 */
export function corpusTokens(tokenizer: Tokenizer, text: string, opts: CorpusTokenOptions = {}): Int32Array {
  const addBos = opts.addBos ?? tokenizer.addBos;
  const max = opts.maxTokens;
  if (max !== undefined && !(Number.isInteger(max) && max >= 1))
    throw new RangeError(`corpusTokens: maxTokens must be a positive integer, got ${max}`);
  if (max === undefined) return Int32Array.from(tokenizer.encode(text, { addBos }));
  // Characters per token is ~3-4 for English; start at 8 per token plus a margin, double as needed.
  let chars = max * 8 + 4096;
  for (;;) {
    if (chars >= text.length) return Int32Array.from(tokenizer.encode(text, { addBos }).slice(0, max));
    const cut = cutPoint(text, chars);
    const ids = tokenizer.encode(text.slice(0, cut), { addBos });
    // Keep a margin of 64 tokens beyond max so the tokens next to the cut are dropped.
    if (ids.length >= max + 64) return Int32Array.from(ids.slice(0, max));
    chars *= 2;
  }
}

/** A place near `at` to cut text: just after a blank line, else a newline, else a space, else `at`. */
function cutPoint(text: string, at: number): number {
  const window = Math.min(at, 4096);
  for (const sep of ["\n\n", "\n", " "]) {
    const k = text.lastIndexOf(sep, at);
    if (k >= at - window && k > 0) return k + sep.length;
  }
  return at;
}
