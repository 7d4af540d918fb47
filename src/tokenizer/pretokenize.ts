/**
 * Byte-level BPE pre-tokenizers, selected by `tokenizer.ggml.pre` as llama.cpp selects them.
 *
 * llama.cpp splits text with a list of expressions applied one after another: each expression
 * cuts every current piece into its matches and the stretches between matches (both are kept), so
 * later expressions only refine earlier cuts. Some lists are run through hand-written matchers in
 * llama.cpp; the expressions here are written to behave like those matchers, with JS Unicode
 * property escapes. Whitespace is Unicode's White_Space property, which is the set llama.cpp's
 * character tables use (JS `\s` differs: it has U+FEFF and lacks U+0085).
 */

const WS = "\\p{White_Space}";
const S = `[${WS}]`;
const NS = `[^${WS}]`;

/** GPT-2: contractions, letters, numbers and other runs each with one optional leading space. */
const GPT2 = `'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^${WS}\\p{L}\\p{N}]+|${S}+(?!${NS})|${S}+`;

/** Llama 3 style: case-insensitive contractions, any one non-letter before a word, digit groups. */
function llama3Like(digits: string): string {
  return (
    `'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD]` +
    `|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+` +
    `|\\p{N}${digits}` +
    `| ?[^${WS}\\p{L}\\p{N}]+[\\r\\n]*` +
    `|${S}*[\\r\\n]+` +
    `|${S}+(?!${NS})` +
    `|${S}+`
  );
}
const LLAMA3 = llama3Like("{1,3}");
const QWEN2 = llama3Like("");

/** Punctuation runs (with the ASCII symbols GPT-2 era tokenizers treat alike). */
const PUNCT_DEFAULT = "[\\p{P}$+<=>^~|]+";
const PUNCT_FALCON = "[\\p{P}$+<=>^~|`]+";
const THREE_DIGITS = "[0-9][0-9][0-9]";
/** CJK ideographs (U+4E00-U+9FA5), U+0800-U+4E00 and Hangul syllables, as DeepSeek's tokenizer lists them. */
const CJK_DEEPSEEK = "[\\u4E00-\\u9FA5\\u0800-\\u4E00\\uAC00-\\uD7FF]+";
/** BLOOM: words are runs of anything but whitespace and a handful of sentence punctuation. */
const BLOOM = ` ?[^(${WS}|.,!?\\u2026\\u3002\\uFF0C\\u3001\\u0964\\u06D4\\u060C)]+`;

export interface PreTokenizerConfig {
  /** Name of the llama.cpp pre-tokenizer family this maps to. */
  readonly family: string;
  readonly regexes: readonly RegExp[];
  /** Overrides of the BPE defaults (clean_spaces true, ignore_merges false, add_bos false). */
  readonly cleanSpaces?: boolean;
  readonly ignoreMerges?: boolean;
  readonly addBos?: boolean;
  /** chatglm-bpe has no BOS token. */
  readonly noBos?: boolean;
}

function cfg(
  family: string,
  patterns: string[],
  extra: Omit<PreTokenizerConfig, "family" | "regexes"> = {},
): PreTokenizerConfig {
  return { family, regexes: patterns.map((p) => new RegExp(p, "gu")), ...extra };
}

/** The pre-tokenizer for a `tokenizer.ggml.pre` value, or null when it is not implemented. */
export function preTokenizerConfig(pre: string): PreTokenizerConfig | null {
  switch (pre) {
    case "":
    case "default":
      return cfg("default", [PUNCT_DEFAULT, GPT2, "\\p{N}+", THREE_DIGITS]);
    case "llama3":
    case "llama-v3":
    case "llama-bpe":
    case "falcon3":
      return cfg("llama3", [LLAMA3], { ignoreMerges: true, addBos: true });
    case "dbrx":
    case "smaug-bpe":
      return cfg("llama3", [LLAMA3]);
    case "chatglm-bpe":
      return cfg("llama3", [LLAMA3], { noBos: true });
    case "gpt-2":
    case "phi-2":
    case "jina-es":
    case "jina-de":
    case "gigachat":
    case "jina-v1-en":
    case "jina-v2-es":
    case "jina-v2-de":
    case "jina-v2-code":
    case "roberta-bpe":
    case "mpt":
    case "olmo":
    case "jais":
      return cfg("gpt2", [GPT2]);
    case "qwen2":
      return cfg("qwen2", [QWEN2], { cleanSpaces: false });
    case "stablelm2":
    case "megrez":
      return cfg("qwen2", [QWEN2]);
    case "starcoder":
    case "refact":
    case "codeshell":
    case "exaone":
    case "minerva-7b":
      return cfg("starcoder", ["\\p{N}", GPT2]);
    case "command-r":
    case "smollm":
      return cfg("starcoder", ["\\p{N}", GPT2], { cleanSpaces: false });
    case "falcon":
      return cfg("falcon", [PUNCT_FALCON, GPT2, THREE_DIGITS]);
    case "deepseek-coder":
      return cfg("deepseek-coder", ["[\\r\\n]", `${S}?\\p{L}+`, `${S}?\\p{P}+`, CJK_DEEPSEEK, "\\p{N}"], {
        cleanSpaces: false,
      });
    case "bloom":
    case "gpt3-finnish":
      return cfg("bloom", [BLOOM]);
    case "poro-chat":
      return cfg("bloom", [BLOOM], { cleanSpaces: false });
    case "viking":
      return cfg("viking", [BLOOM, "\\p{N}"], { cleanSpaces: false });
    default:
      return null;
  }
}

/**
 * Split text into pre-tokenizer words. Each expression refines the pieces of the previous one;
 * text that an expression does not match stays as a piece of its own.
 */
export function preTokenize(text: string, regexes: readonly RegExp[]): string[] {
  let pieces: string[] = text.length > 0 ? [text] : [];
  for (const re of regexes) {
    const out: string[] = [];
    for (const piece of pieces) splitPiece(piece, re, out);
    pieces = out;
  }
  return pieces;
}

function splitPiece(s: string, re: RegExp, out: string[]): void {
  re.lastIndex = 0;
  let last = 0;
  for (let m = re.exec(s); m !== null; m = re.exec(s)) {
    const start = m.index;
    const end = start + m[0].length;
    if (end === start) {
      // None of the expressions above can match empty text; step over it rather than loop.
      re.lastIndex = end + 1;
      continue;
    }
    if (start > last) out.push(s.substring(last, start));
    out.push(m[0]);
    last = end;
  }
  if (last < s.length) out.push(s.substring(last));
}
