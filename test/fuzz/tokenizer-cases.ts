/**
 * Text into the tokenizers: random bytes decoded as UTF-8, random code points from every plane
 * (lone surrogates, controls, combining marks, U+2581 itself, noncharacters), the vocabulary's
 * own special tokens spliced in, whitespace runs, long repeats; and token ids into the decoder
 * (out-of-range ones included).
 *
 * Oracles beyond "no crash, no hang": decoding what encoding gave returns the text (as the
 * tokenizer normalizes it), the streaming decoder agrees with decode(), and a bad id is a
 * TokenizerError.
 */
import type { Rng } from "./rng.js";

export interface TokenizerCase {
  target: "tokenizer";
  /** which tokenizer: "spm" (stories260K's), or a small byte-level BPE under "gpt-2", "llama-bpe", "qwen2", "gpt-4o" or "deepseek-v3" */
  tokenizer: string;
  /** the text, as UTF-16 code units (so lone surrogates survive JSON) */
  units: number[];
  parseSpecial: boolean;
  addBos: boolean;
  /** ids for the decoder (some may be out of range) */
  ids: number[];
}

const SPECIALS = ["<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<tool>", "<0x0A>", "\u2581"];

function piece(rng: Rng): string {
  switch (
    rng.weighted<string>([
      [4, "ascii"],
      [3, "bytes"],
      [3, "codepoints"],
      [2, "special"],
      [2, "space"],
      [1, "repeat"],
      [1, "surrogate"],
    ])
  ) {
    case "ascii": {
      let s = "";
      for (let i = 0, n = rng.range(1, 40); i < n; i++) s += String.fromCharCode(rng.range(0x20, 0x7e));
      return s;
    }
    case "bytes":
      return Buffer.from(rng.bytes(rng.range(1, 32))).toString("utf8");
    case "codepoints": {
      let s = "";
      for (let i = 0, n = rng.range(1, 16); i < n; i++) {
        const cp = rng.weighted<number>([
          [3, rng.range(0x80, 0x7ff)],
          [3, rng.range(0x800, 0xffff)],
          [2, rng.range(0x10000, 0x10ffff)],
          [1, rng.pick([0, 0x200b, 0x200d, 0x2581, 0xfeff, 0xfffd, 0xfffe, 0x0301, 0x1f600, 0x85, 0x2028])],
        ]);
        if (cp >= 0xd800 && cp <= 0xdfff) continue;
        s += String.fromCodePoint(cp);
      }
      return s;
    }
    case "special":
      return rng.pick(SPECIALS);
    case "space":
      return rng.pick([" ", "  ", "\t", "\n", "\r\n", "\u3000", "\u00a0"]).repeat(rng.range(1, 8));
    case "repeat":
      return rng.pick(["a", "ab", " ", "é", "\u2581", "ü"]).repeat(rng.range(100, 4000));
    default:
      return String.fromCharCode(rng.range(0xd800, 0xdfff));
  }
}

export function tokenizerCase(rng: Rng, vocabSizes: Record<string, number>): TokenizerCase {
  const tokenizer = rng.pick(Object.keys(vocabSizes));
  let text = "";
  for (let i = 0, n = rng.range(1, 8); i < n; i++) text += piece(rng);
  const units = Array.from({ length: text.length }, (_, i) => text.charCodeAt(i));
  const vocab = vocabSizes[tokenizer];
  const ids = Array.from({ length: rng.range(0, 24) }, () =>
    rng.weighted<number>([
      [20, rng.int(vocab)],
      [1, rng.pick([-1, vocab, vocab + 1, 2 ** 31, 1.5, NaN])],
    ]),
  );
  return { target: "tokenizer", tokenizer, units, parseSpecial: rng.chance(0.5), addBos: rng.chance(0.5), ids };
}
