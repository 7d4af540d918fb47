/**
 * Byte-level BPE pre-tokenizers, selected by `tokenizer.ggml.pre` as llama.cpp selects them.
 *
 * llama.cpp splits text with a list of expressions applied one after another: each expression
 * cuts every current piece into its matches and the stretches between matches (both are kept), so
 * later expressions only refine earlier cuts. Some lists are run through hand-written matchers in
 * llama.cpp; the expressions here are written to behave like those matchers, with JS Unicode
 * property escapes. Whitespace is Unicode's White_Space property, which is the set llama.cpp's
 * character tables use (JS `\s` differs: it has U+FEFF and lacks U+0085).
 *
 * The other lists go through std::regex in llama.cpp, which knows no Unicode classes. There every
 * character is first "collapsed" to one byte that stands for its class (ASCII stays itself, other
 * whitespace becomes \v, other letters one byte, other digits another, and so on) and the
 * expression's \p{..} are rewritten to match those bytes. The result is not what the classes
 * mean in Unicode (every non-ASCII letter is both upper and lower case, \p{Lu} is any letter), so
 * those pre-tokenizers run here on the same collapsed text: see `collapsedView`.
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

/**
 * What an expression is run on. "text": the string itself (Unicode mode). "collapsed": one
 * character per code point, standing for its class as llama.cpp collapses it for std::regex.
 * "codepoints": one character per code point, the code point itself when it fits in one UTF-16
 * unit (longer ones become U+FFFF, which no expression here names), as std::wregex sees the text.
 */
export type PreTokenizerView = "text" | "collapsed" | "codepoints";

export interface PreTokenizerConfig {
  /** Name of the llama.cpp pre-tokenizer family this maps to. */
  readonly family: string;
  readonly regexes: readonly RegExp[];
  /** The view of each expression (all "text" when absent). */
  readonly views?: readonly PreTokenizerView[];
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

// ------------------------------------------------------------------ collapsed classes

/** The byte each class collapses to (llama.cpp's choice; any distinct non-ASCII values would do). */
const C_OTHER = 0xd0,
  C_NUMBER = 0xd1,
  C_LETTER = 0xd2,
  C_PUNCT = 0xd3,
  C_MARK = 0xd4,
  C_SYMBOL = 0xd5,
  C_SPACE = 0x0b;

/**
 * Bracket-expression contents that match a class in collapsed text: the collapsed byte plus the
 * ASCII members, which are not collapsed.
 */
const COLLAPSED_CLASS: Record<string, string> = {
  N: "\\xD10-9",
  L: "\\xD2A-Za-z",
  P: "\\xD3!\"#%&'()*,\\-./:;?@\\[\\\\\\]_{}",
  M: "\\xD4",
  S: "\\xD5$+<=>^`|~",
};
// llama.cpp maps the letter subclasses to the whole letter class.
for (const sub of ["Lu", "Ll", "Lt", "Lm", "Lo"]) COLLAPSED_CLASS[sub] = COLLAPSED_CLASS.L;

/**
 * Rewrite `\p{X}` in an expression for collapsed text: inside brackets by the class's members,
 * outside by a bracket of them. The expressions given here use no other non-ASCII syntax.
 */
function collapsePattern(pattern: string): string {
  let out = "";
  let inClass = false;
  for (let i = 0; i < pattern.length; i++) {
    const c = pattern[i];
    if (c === "\\") {
      const m = /^\\p\{([A-Za-z]+)\}/.exec(pattern.slice(i));
      if (m) {
        const members = COLLAPSED_CLASS[m[1]];
        if (members === undefined) throw new Error(`no collapsed form for \\p{${m[1]}}`);
        out += inClass ? members : `[${members}]`;
        i += m[0].length - 1;
      } else {
        out += pattern.slice(i, i + 2);
        i++;
      }
      continue;
    }
    if (c === "[") inClass = true;
    else if (c === "]") inClass = false;
    out += c;
  }
  return out;
}

/** Collapsed byte per code point, filled in on first sight (most text uses few characters). */
const collapsedCache = new Uint8Array(0x110000);
const RE_SPACE = /^\p{White_Space}$/u,
  RE_N = /^\p{N}$/u,
  RE_L = /^\p{L}$/u,
  RE_P = /^\p{P}$/u,
  RE_M = /^\p{M}$/u,
  RE_S = /^\p{S}$/u;

function collapsedOf(cp: number): number {
  if (cp < 0x80) return cp;
  let b = collapsedCache[cp];
  if (b !== 0) return b;
  const ch = String.fromCodePoint(cp);
  if (RE_SPACE.test(ch)) b = C_SPACE;
  else if (RE_N.test(ch)) b = C_NUMBER;
  else if (RE_L.test(ch)) b = C_LETTER;
  else if (RE_P.test(ch)) b = C_PUNCT;
  else if (RE_M.test(ch)) b = C_MARK;
  else if (RE_S.test(ch)) b = C_SYMBOL;
  else b = C_OTHER;
  collapsedCache[cp] = b;
  return b;
}

function ccfg(
  family: string,
  steps: [PreTokenizerView, string][],
  extra: Omit<PreTokenizerConfig, "family" | "regexes" | "views"> = {},
): PreTokenizerConfig {
  return {
    family,
    // Collapsed and code point views hold one UTF-16 unit per code point: no "u" flag, so that
    // the expressions see exactly those units.
    regexes: steps.map(([view, p]) =>
      view === "collapsed" ? new RegExp(collapsePattern(p), "g") : new RegExp(p, "g"),
    ),
    views: steps.map(([view]) => view),
    ...extra,
  };
}

const CONTRACTIONS = "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])";

/**
 * o200k (GPT-4o, gpt-oss) as llama.cpp runs it: "a letter that is not a-z" and "a letter that is
 * not A-Z" stand in for the upper- and lower-case classes (which std::regex lacks), and marks are
 * not part of words.
 */
const GPT4O =
  `[^\\r\\n\\p{L}\\p{N}]?(?:(?=[\\p{L}])[^a-z])*(?:(?=[\\p{L}])[^A-Z])+${CONTRACTIONS}?` +
  `|[^\\r\\n\\p{L}\\p{N}]?(?:(?=[\\p{L}])[^a-z])+(?:(?=[\\p{L}])[^A-Z])*${CONTRACTIONS}?` +
  `|\\p{N}{1,3}` +
  `| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*` +
  `|\\s*[\\r\\n]+` +
  `|\\s+(?!\\S)` +
  `|\\s+`;

/** DeepSeek V3: digit triples, then runs of CJK ideographs and kana, then words and punctuation. */
const DEEPSEEK3_DIGITS = "\\p{N}{1,3}";
const DEEPSEEK3_CJK = "[\\u4E00-\\u9FA5\\u3040-\\u309F\\u30A0-\\u30FF]+";
const DEEPSEEK3_WORDS =
  "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+" +
  "|[^\\r\\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+" +
  "| ?[\\p{P}\\p{S}]+[\\r\\n]*" +
  "|\\s*[\\r\\n]+" +
  "|\\s+(?!\\S)" +
  "|\\s+";

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
    case "deepseek-v3":
    case "hunyuan-dense":
    case "joyai-llm":
      return ccfg(
        "deepseek-v3",
        [
          ["collapsed", DEEPSEEK3_DIGITS],
          ["codepoints", DEEPSEEK3_CJK],
          ["collapsed", DEEPSEEK3_WORDS],
        ],
        { cleanSpaces: false },
      );
    case "gpt-4o":
    case "llama4":
    case "kanana2":
    case "talkie":
    case "minimax-m2":
      return ccfg("gpt-4o", [["collapsed", GPT4O]], { cleanSpaces: false });
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
 * text that an expression does not match stays as a piece of its own. Give the whole config for
 * pre-tokenizers that run on collapsed text (a bare list of expressions runs on the text itself).
 */
export function preTokenize(text: string, pre: readonly RegExp[] | PreTokenizerConfig): string[] {
  const regexes = "regexes" in pre ? pre.regexes : (pre as readonly RegExp[]);
  const views = "regexes" in pre ? pre.views : undefined;
  if (views) return preTokenizeViews(text, regexes, views);
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

/**
 * The views hold one unit per code point, so pieces are code point ranges: cut with each
 * expression on its view, then cut the text at the final boundaries.
 */
function preTokenizeViews(text: string, regexes: readonly RegExp[], views: readonly PreTokenizerView[]): string[] {
  if (text.length === 0) return [];
  const cps: number[] = [];
  for (let i = 0; i < text.length; i++) {
    const cp = text.codePointAt(i)!;
    cps.push(cp);
    if (cp > 0xffff) i++;
  }
  let collapsed: string | undefined;
  let wide: string | undefined;
  // Piece ends, in code points; the first piece starts at 0.
  let ends = [cps.length];
  for (let r = 0; r < regexes.length; r++) {
    let view: string;
    if (views[r] === "collapsed") view = collapsed ??= collapsedView(cps);
    else if (views[r] === "codepoints") view = wide ??= codePointView(cps);
    else throw new Error(`pre-tokenizer view "${views[r]}" cannot be mixed with collapsed ones`);
    const re = regexes[r];
    const next: number[] = [];
    let start = 0;
    for (const end of ends) {
      const piece = view.substring(start, end);
      re.lastIndex = 0;
      let last = 0;
      for (let m = re.exec(piece); m !== null; m = re.exec(piece)) {
        const ms = m.index,
          me = ms + m[0].length;
        if (me === ms) {
          re.lastIndex = me + 1;
          continue;
        }
        if (ms > last) next.push(start + ms);
        next.push(start + me);
        last = me;
      }
      if (last < piece.length) next.push(end);
      start = end;
    }
    ends = next;
  }
  // Code point offsets back to UTF-16 offsets.
  const words: string[] = [];
  let cp = 0,
    unit = 0,
    from = 0;
  for (const end of ends) {
    while (cp < end) unit += cps[cp++] > 0xffff ? 2 : 1;
    words.push(text.substring(from, unit));
    from = unit;
  }
  return words;
}

/** One character per code point: its collapsed class byte. */
export function collapsedView(cps: readonly number[]): string {
  let s = "";
  for (const cp of cps) s += String.fromCharCode(collapsedOf(cp));
  return s;
}

function codePointView(cps: readonly number[]): string {
  let s = "";
  for (const cp of cps) {
    // std::wregex's \s misses non-ASCII whitespace, so llama.cpp turns it into \v first.
    s += cp > 0xffff ? "\uffff" : cp >= 0x80 && collapsedOf(cp) === C_SPACE ? "\v" : String.fromCharCode(cp);
  }
  return s;
}
