/**
 * Vocabulary loaded from GGUF `tokenizer.ggml.*` metadata, with llama.cpp's defaults and quirks
 * (default special ids per model type, EOG detection by token text, special-token cache order).
 *
 * Everything the encoders and decoders need is computed here once, at load: the text -> id map,
 * the byte -> token table for SentencePiece byte fallback, each token's decoded bytes, and the
 * list of special tokens that the partitioner looks for.
 */
import { gpt2UnicodeToByte, utf8Encode } from "./unicode.js";
import { PieceTable, type PieceTableBuilder } from "./piece-table.js";
import { preTokenizerConfig, type PreTokenizerConfig } from "./pretokenize.js";

/** llama.cpp's token types (`tokenizer.ggml.token_type`). */
export enum TokenType {
  Undefined = 0,
  Normal = 1,
  Unknown = 2,
  Control = 3,
  UserDefined = 4,
  Unused = 5,
  Byte = 6,
}

/**
 * llama.cpp's token attributes (llama_token_attr), which is what its tokenizer actually reads:
 * they start from the token type and are then adjusted by name (control-looking tokens, gpt-oss's
 * always-rendered tokens, Phi-3's stripped spaces).
 */
export enum TokenAttr {
  Undefined = 0,
  Unknown = 1 << 0,
  Unused = 1 << 1,
  Normal = 1 << 2,
  Control = 1 << 3,
  UserDefined = 1 << 4,
  Byte = 1 << 5,
  Normalized = 1 << 6,
  LStrip = 1 << 7,
  RStrip = 1 << 8,
  SingleWord = 1 << 9,
}

export type VocabKind = "spm" | "bpe";

export class TokenizerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "TokenizerError";
  }
}

/** What fromGGUF needs: a GGUFFile, or anything with the same metadata map (tests use fakes). */
export interface TokenizerMetadataSource {
  readonly metadata: ReadonlyMap<string, unknown>;
  readonly path?: string;
}

const K = "tokenizer.ggml.";

export interface Vocab {
  readonly kind: VocabKind;
  /** `tokenizer.ggml.pre` as given ("" when absent); only meaningful for BPE. */
  readonly pre: string;
  readonly preTokenizer: PreTokenizerConfig | null;
  readonly tokens: string[];
  readonly scores: Float32Array;
  /** The token type each token ends up with (from its attributes, see TokenAttr). */
  readonly types: Uint8Array;
  readonly attrs: Uint16Array;
  readonly tokenToId: Map<string, number>;
  /** Longest token text in UTF-16 code units: no merge can produce anything longer. */
  readonly maxTokenLength: number;
  /** BPE merges, keyed "left right" as in the GGUF list, valued by rank. */
  readonly mergeRanks: Map<string, number>;
  /** SPM byte fallback: byte value -> token id, or -1. */
  readonly byteToToken: Int32Array;
  /**
   * Decoded bytes of each token as llama.cpp's token_to_piece(special = true) gives them; with
   * special = false, control and unknown tokens give nothing (Tokenizer.piece).
   */
  readonly pieces: PieceTable;
  /** Control, user-defined and unknown tokens, longest UTF-8 text first (llama.cpp's partition order). */
  readonly specialTokens: number[];
  readonly eogIds: ReadonlySet<number>;
  readonly bosId: number;
  readonly eosId: number;
  readonly eotId: number;
  readonly eomId: number;
  readonly unkId: number;
  readonly sepId: number;
  readonly padId: number;
  readonly maskId: number;
  readonly nlId: number;
  /** Whether `nlId` still has to be found by tokenizing "\n" (BPE: llama.cpp's way). */
  readonly nlFromText: boolean;
  readonly addBos: boolean;
  readonly addEos: boolean;
  readonly addSpacePrefix: boolean;
  readonly ignoreMerges: boolean;
  readonly cleanSpaces: boolean;
}

function where(src: TokenizerMetadataSource): string {
  return src.path ? ` in ${src.path}` : "";
}

function fail(src: TokenizerMetadataSource, message: string): never {
  throw new TokenizerError(`tokenizer metadata${where(src)}: ${message}`);
}

function describe(v: unknown): string {
  if (v === null) return "null";
  if (Array.isArray(v)) return "an array";
  if (ArrayBuffer.isView(v)) return `a ${v.constructor.name}`;
  return `a ${typeof v}`;
}

function optBool(src: TokenizerMetadataSource, key: string): boolean | undefined {
  const v = src.metadata.get(key);
  if (v === undefined) return undefined;
  if (typeof v !== "boolean") fail(src, `"${key}" should be a bool, found ${describe(v)}`);
  return v;
}

function optString(src: TokenizerMetadataSource, key: string): string | undefined {
  const v = src.metadata.get(key);
  if (v === undefined) return undefined;
  if (typeof v !== "string") fail(src, `"${key}" should be a string, found ${describe(v)}`);
  return v;
}

function optId(src: TokenizerMetadataSource, key: string): number | undefined {
  const v = src.metadata.get(key);
  if (v === undefined) return undefined;
  const n = typeof v === "bigint" ? Number(v) : v;
  if (typeof n !== "number" || !Number.isInteger(n))
    fail(src, `"${key}" should be an integer token id, found ${describe(v)}`);
  return n;
}

function stringArray(src: TokenizerMetadataSource, key: string, what: string): string[] {
  const v = src.metadata.get(key);
  if (v === undefined) fail(src, `missing "${key}" (${what})`);
  if (!Array.isArray(v)) fail(src, `"${key}" should be an array of strings (${what}), found ${describe(v)}`);
  for (let i = 0; i < v.length; i++) {
    if (typeof v[i] !== "string") fail(src, `"${key}"[${i}] should be a string, found ${describe(v[i])}`);
  }
  return v as string[];
}

function numberArray(src: TokenizerMetadataSource, key: string, n: number): ArrayLike<number> | undefined {
  const v = src.metadata.get(key);
  if (v === undefined) return undefined;
  let arr: ArrayLike<number>;
  if (v instanceof Float32Array || v instanceof Int32Array) arr = v;
  else if (Array.isArray(v) && v.every((x) => typeof x === "number")) arr = v as number[];
  else fail(src, `"${key}" should be a numeric array, found ${describe(v)}`);
  if (arr.length !== n) fail(src, `"${key}" has ${arr.length} entries but "${K}tokens" has ${n}`);
  return arr;
}

/** Texts llama.cpp takes for the end-of-turn token when the metadata names none (first found). */
const EOT_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<|end_of_text|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "<｜end▁of▁sentence｜>",
  "<end_of_utterance>",
];
/** Texts of tokens that end generation whatever the metadata says. */
const EOG_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<|return|>",
  "<|call|>",
  "<|flush|>",
  "<|calls|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "</s>",
  "<|eom_id|>",
  "<EOT>",
  "_<EOT>",
  "[EOT]",
  "[EOS]",
  "<|end_of_text|>",
  "<end_of_utterance>",
  "<eos>",
  "<turn|>",
  "<|tool_response>",
  "<｜end▁of▁sentence｜>",
  "[e~[",
];
const FIM_PRE_TEXTS = [
  "<|fim_prefix|>",
  "<fim-prefix>",
  "<fim_prefix>",
  "<｜fim▁begin｜>",
  "<PRE>",
  "▁<PRE>",
  "<|code_prefix|>",
  "<|prefix|>",
];
const FIM_SUF_TEXTS = [
  "<|fim_suffix|>",
  "<fim-suffix>",
  "<fim_suffix>",
  "<｜fim▁hole｜>",
  "<SUF>",
  "▁<SUF>",
  "<|code_suffix|>",
  "<|suffix|>",
];
const FIM_MID_TEXTS = [
  "<|fim_middle|>",
  "<fim-middle>",
  "<fim_middle>",
  "<｜fim▁end｜>",
  "<MID>",
  "▁<MID>",
  "<|code_middle|>",
  "<|middle|>",
];
const FIM_PAD_TEXTS = ["<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"];
const FIM_REP_TEXTS = ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"];
const FIM_SEP_TEXTS = ["<|file_sep|>"];
/** gpt-oss's structural tokens, which llama.cpp always parses and renders (user-defined). */
const HARMONY_RENDERED = ["<|channel|>", "<|message|>", "<|start|>", "<|constrain|>"];

const SPACE_MARK = "\u2581";

function attrOfType(ty: number): number {
  switch (ty) {
    case TokenType.Unknown:
      return TokenAttr.Unknown;
    case TokenType.Unused:
      return TokenAttr.Unused;
    case TokenType.Normal:
      return TokenAttr.Normal;
    case TokenType.Control:
      return TokenAttr.Control;
    case TokenType.UserDefined:
      return TokenAttr.UserDefined;
    case TokenType.Byte:
      return TokenAttr.Byte;
    default:
      return TokenAttr.Undefined;
  }
}

/** The type a token behaves as, from its attributes (the strongest attribute wins). */
function typeOfAttr(a: number): TokenType {
  if (a & TokenAttr.Control) return TokenType.Control;
  if (a & TokenAttr.UserDefined) return TokenType.UserDefined;
  if (a & TokenAttr.Unknown) return TokenType.Unknown;
  if (a & TokenAttr.Byte) return TokenType.Byte;
  if (a & TokenAttr.Normal) return TokenType.Normal;
  if (a & TokenAttr.Unused) return TokenType.Unused;
  return TokenType.Undefined;
}

const utf8Length = (s: string): number => utf8Encode(s).length;

export function loadVocab(src: TokenizerMetadataSource): Vocab {
  if (!src || !(src.metadata instanceof Map)) {
    throw new TokenizerError("Tokenizer.fromGGUF: expected a GGUFFile (an object with a metadata Map)");
  }
  const model = src.metadata.get(`${K}model`);
  if (model === undefined) fail(src, `missing "${K}model" (the tokenizer type, e.g. "llama" or "gpt2")`);
  if (typeof model !== "string") fail(src, `"${K}model" should be a string, found ${describe(model)}`);

  let kind: VocabKind;
  // llama.cpp's per-type defaults; metadata keys override them below.
  let bosId = -1,
    eosId = -1,
    unkId = -1;
  let addBos = false,
    addEos = false,
    addSpacePrefix = false,
    ignoreMerges = false,
    cleanSpaces = false;
  let preTokenizer: PreTokenizerConfig | null = null;
  const pre = optString(src, `${K}pre`) ?? "";
  if (model === "llama") {
    kind = "spm";
    bosId = 1;
    eosId = 2;
    unkId = 0;
    addSpacePrefix = true;
    addBos = true;
  } else if (model === "gpt2") {
    kind = "bpe";
    bosId = 11;
    eosId = 11;
    cleanSpaces = true;
    preTokenizer = preTokenizerConfig(pre);
    if (!preTokenizer)
      fail(src, `"${K}pre" = ${JSON.stringify(pre)} is a pre-tokenizer this engine does not implement`);
    if (preTokenizer.cleanSpaces !== undefined) cleanSpaces = preTokenizer.cleanSpaces;
    if (preTokenizer.ignoreMerges) ignoreMerges = true;
    if (preTokenizer.addBos) addBos = true;
    if (preTokenizer.noBos) bosId = -1;
  } else if (model === "no_vocab" || model === "none") {
    fail(src, `"${K}model" = "${model}": this model has no vocabulary to tokenize with`);
  } else if (model === "bert" || model === "t5" || model === "rwkv") {
    fail(src, `"${K}model" = "${model}" is a tokenizer type this engine does not implement (only "llama" and "gpt2")`);
  } else {
    fail(src, `"${K}model" = ${JSON.stringify(model)} is not a known tokenizer type`);
  }
  addSpacePrefix = optBool(src, `${K}add_space_prefix`) ?? addSpacePrefix;

  const tokens = stringArray(src, `${K}tokens`, "the vocabulary").slice();
  const n = tokens.length;
  if (n === 0) fail(src, `"${K}tokens" is empty`);
  const scoresIn = numberArray(src, `${K}scores`, n);
  const typesIn = numberArray(src, `${K}token_type`, n);
  const scores = new Float32Array(n);
  const attrs = new Uint16Array(n);
  const tokenToId = new Map<string, number>();
  let maxTokenLength = 0;
  for (let i = 0; i < n; i++) {
    // llama.cpp renames empty tokens so that every text maps back to one id.
    if (tokens[i].length === 0) tokens[i] = `[EMPTY_${i}]`;
    const t = tokens[i];
    const prev = tokenToId.get(t);
    if (prev !== undefined) fail(src, `"${K}tokens" has the same text ${JSON.stringify(t)} at ids ${prev} and ${i}`);
    tokenToId.set(t, i);
    if (t.length > maxTokenLength) maxTokenLength = t.length;
    if (scoresIn) scores[i] = scoresIn[i];
    attrs[i] = typesIn ? attrOfType(typesIn[i]) : TokenAttr.Normal;
  }

  const mergeRanks = new Map<string, number>();
  if (kind === "bpe") {
    const merges = stringArray(src, `${K}merges`, "BPE merges, required for gpt2 tokenizers");
    for (let i = 0; i < merges.length; i++) {
      const m = merges[i];
      // llama.cpp splits at the first space after the first character; a line without one
      // becomes the pair ("", "") which can never match a real symbol pair.
      const p = m.indexOf(" ", 1);
      const key = p < 0 ? " " : m;
      if (!mergeRanks.has(key)) mergeRanks.set(key, i);
    }
  }

  // Special token ids: present keys override the defaults; out-of-range ids are ignored, as in
  // llama.cpp (which warns and keeps the default), because converters write 0xFFFFFFFF for "none".
  const idKey = (name: string, dflt: number): number => {
    const v = optId(src, `${K}${name}`);
    if (v === undefined || v < 0 || v >= n) return dflt;
    return v;
  };
  if (bosId >= n) bosId = -1;
  if (eosId >= n) eosId = -1;
  if (unkId >= n) unkId = -1;
  bosId = idKey("bos_token_id", bosId);
  eosId = idKey("eos_token_id", eosId);
  let eotId = idKey("eot_token_id", -1);
  let eomId = idKey("eom_token_id", -1);
  unkId = idKey("unknown_token_id", unkId);
  const sepId = idKey("seperator_token_id", -1);
  const padId = idKey("padding_token_id", -1);
  const maskId = idKey("mask_token_id", -1);
  // The deprecated prefix/suffix/middle keys name the same ids; llama.cpp reads them last.
  let fimPre = idKey("prefix_token_id", idKey("fim_pre_token_id", -1));
  let fimSuf = idKey("suffix_token_id", idKey("fim_suf_token_id", -1));
  let fimMid = idKey("middle_token_id", idKey("fim_mid_token_id", -1));
  let fimPad = idKey("fim_pad_token_id", -1);
  let fimRep = idKey("fim_rep_token_id", -1);
  let fimSep = idKey("fim_sep_token_id", -1);
  addBos = optBool(src, `${K}add_bos_token`) ?? addBos;
  addEos = optBool(src, `${K}add_eos_token`) ?? addEos;

  // Auto-detection by text. llama.cpp takes the first candidate it meets in its hash map, an
  // order nobody chose; the order of its list is taken here. That agrees on Llama 3 (<|eot_id|>
  // over <|end_of_text|>), Qwen (<|im_end|> over <|endoftext|>) and Phi-3 (<|end|> over
  // <|endoftext|>), not on gpt-oss (llama.cpp: <|endoftext|>; here: <|end|>), where only the
  // reported EOT id differs: which tokens end generation is decided by text below.
  const detect = (cur: number, texts: readonly string[]): number => {
    if (cur >= 0) return cur;
    for (const t of texts) {
      const id = tokenToId.get(t);
      if (id !== undefined) {
        attrs[id] |= TokenAttr.Control;
        return id;
      }
    }
    return -1;
  };
  eotId = detect(eotId, EOT_TEXTS);
  eomId = detect(eomId, ["<|eom_id|>"]);
  fimPre = detect(fimPre, FIM_PRE_TEXTS);
  fimSuf = detect(fimSuf, FIM_SUF_TEXTS);
  fimMid = detect(fimMid, FIM_MID_TEXTS);
  fimPad = detect(fimPad, FIM_PAD_TEXTS);
  fimRep = detect(fimRep, FIM_REP_TEXTS);
  fimSep = detect(fimSep, FIM_SEP_TEXTS);
  // Control tokens named "unused" are marked so (it changes nothing in tokenizing).
  for (let id = 0; id < n; id++) {
    if (attrs[id] & TokenAttr.Control && tokens[id].includes("unused")) attrs[id] |= TokenAttr.Unused;
  }
  const eogIds = new Set<number>();
  for (const id of [fimPad, fimRep, fimSep]) if (id >= 0) eogIds.add(id);
  for (const t of EOG_TEXTS) {
    const id = tokenToId.get(t);
    if (id !== undefined) {
      eogIds.add(id);
      attrs[id] |= TokenAttr.Control;
    }
  }
  for (const t of HARMONY_RENDERED) {
    const id = tokenToId.get(t);
    if (id !== undefined) attrs[id] = TokenAttr.UserDefined;
  }
  for (const id of [eosId, eotId, eomId]) if (id >= 0) eogIds.add(id);
  // gpt-oss (and solar-open): "<|end|>" ends a message, not the generation, when the vocabulary
  // also has the tokens that do.
  {
    const eogText = new Set([...eogIds].map((id) => tokens[id]));
    const end = tokenToId.get("<|end|>");
    if (
      end !== undefined &&
      eogIds.has(end) &&
      ((eogText.has("<|return|>") && eogText.has("<|call|>")) || (eogText.has("<|calls|>") && eogText.has("<|flush|>")))
    ) {
      eogIds.delete(end);
      attrs[end] = TokenAttr.UserDefined;
    }
    const s = tokenToId.get("</s>");
    if (s !== undefined && eogIds.has(s) && eogText.has("<|tool_response>")) {
      eogIds.delete(s);
      attrs[s] = TokenAttr.Normal;
    }
  }

  // Byte fallback table (SPM): "<0xNN>" tokens, else a token that is the byte itself.
  const byteToToken = new Int32Array(256).fill(-1);
  if (kind === "spm") {
    for (let b = 0; b < 256; b++) {
      const hex = b.toString(16).toUpperCase().padStart(2, "0");
      let id = tokenToId.get(`<0x${hex}>`);
      if (id === undefined && b < 0x80) id = tokenToId.get(String.fromCharCode(b));
      if (id !== undefined) byteToToken[b] = id;
    }
  }
  const nlId = kind === "spm" ? (byteToToken[10] >= 0 ? byteToToken[10] : padId) : -1;

  const specialTokens: number[] = [];
  const specialMask = TokenAttr.Control | TokenAttr.UserDefined | TokenAttr.Unknown;
  for (let id = 0; id < n; id++) if (attrs[id] & specialMask) specialTokens.push(id);
  // Longest UTF-8 text first, as llama.cpp sorts, so that a special token containing another
  // wins; ties by id for determinism (llama.cpp's sort leaves them in no particular order).
  const bytes = new Map<number, number>();
  for (const id of specialTokens) bytes.set(id, utf8Length(tokens[id]));
  specialTokens.sort((a, b) => bytes.get(b)! - bytes.get(a)! || a - b);

  // Per-model attributes llama.cpp sets by name.
  const name = (optString(src, "general.name") ?? "").toLowerCase();
  const arch = optString(src, "general.architecture") ?? "";
  const setAttr = (text: string, a: TokenAttr, on: boolean) => {
    const id = tokenToId.get(text);
    if (id !== undefined) attrs[id] = on ? attrs[id] | a : attrs[id] & ~a;
  };
  if (
    ["jina-v2-de", "jina-v2-es", "jina-v2-code"].some((x) => pre.includes(x)) ||
    ["nomic-bert-moe", "jina-bert-v3"].some((x) => arch.includes(x))
  ) {
    setAttr("<mask>", TokenAttr.LStrip, true);
  } else if (name.includes("phi-3") || name.includes("phi3")) {
    // Phi-3's template puts a newline after each special token; its tokenizer drops it.
    for (const id of specialTokens) attrs[id] |= TokenAttr.RStrip;
    setAttr("</s>", TokenAttr.RStrip, true);
    for (const t of ["<unk>", "<s>", "<|endoftext|>"]) setAttr(t, TokenAttr.RStrip, false);
  } else if (name.includes("modern-bert")) {
    setAttr("[MASK]", TokenAttr.LStrip, true);
  }

  const types = new Uint8Array(n);
  for (let id = 0; id < n; id++) types[id] = typeOfAttr(attrs[id]);

  // Decoded bytes per token (llama.cpp's token_to_piece(special = true)).
  const pieces = PieceTable.builder(n);
  for (let id = 0; id < n; id++) {
    const t = tokens[id];
    const a = attrs[id];
    if (a & (TokenAttr.Control | TokenAttr.Unknown | TokenAttr.UserDefined)) pieces.text(t);
    else if (a & TokenAttr.Normal) {
      if (kind === "spm") pieces.text(t.replaceAll(SPACE_MARK, " "));
      else decodeByteLevel(t, pieces);
    } else if (a & TokenAttr.Byte) pieces.byte(byteOfByteToken(t));
    pieces.endToken();
  }

  return {
    kind,
    pre,
    preTokenizer,
    tokens,
    scores,
    types,
    attrs,
    tokenToId,
    maxTokenLength,
    mergeRanks,
    byteToToken,
    pieces: pieces.finish(),
    specialTokens,
    eogIds,
    bosId,
    eosId,
    eotId,
    eomId,
    unkId,
    sepId,
    padId,
    maskId,
    nlId,
    nlFromText: kind === "bpe",
    addBos,
    addEos,
    addSpacePrefix,
    ignoreMerges,
    cleanSpaces,
  };
}

/** "<0xAB>" -> 0xAB, as llama.cpp reads byte tokens (hex digits at positions 3 and 4). */
function byteOfByteToken(text: string): number {
  const v = parseInt(text.substring(3, 5), 16);
  return Number.isNaN(v) ? 0 : v & 0xff;
}

/**
 * Byte-level BPE token text -> bytes. A character outside the GPT-2 byte alphabet cannot come from
 * a well-formed vocabulary; llama.cpp renders it as "[UNK_BYTE_0x<hex><token text>]" and so do we,
 * so that the output is the same.
 */
function decodeByteLevel(text: string, out: PieceTableBuilder): void {
  for (const ch of text) {
    const b = gpt2UnicodeToByte(ch);
    if (b >= 0) {
      out.byte(b);
    } else {
      const hex = Array.from(utf8Encode(ch), (x) => x.toString(16).padStart(2, "0")).join("");
      out.text(`[UNK_BYTE_0x${hex}${text}]`);
    }
  }
}
