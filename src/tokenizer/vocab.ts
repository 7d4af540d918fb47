/**
 * Vocabulary loaded from GGUF `tokenizer.ggml.*` metadata, with llama.cpp's defaults and quirks
 * (default special ids per model type, EOG detection by token text, special-token cache order).
 *
 * Everything the encoders and decoders need is computed here once, at load: the text -> id map,
 * the byte -> token table for SentencePiece byte fallback, each token's decoded bytes, and the
 * list of special tokens that the partitioner looks for.
 */
import { gpt2UnicodeToByte, utf8Encode } from "./unicode.js";
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
  readonly types: Uint8Array;
  readonly tokenToId: Map<string, number>;
  /** Longest token text in UTF-16 code units: no merge can produce anything longer. */
  readonly maxTokenLength: number;
  /** BPE merges, keyed "left right" as in the GGUF list, valued by rank. */
  readonly mergeRanks: Map<string, number>;
  /** SPM byte fallback: byte value -> token id, or -1. */
  readonly byteToToken: Int32Array;
  /** Decoded bytes of each token as llama.cpp's token_to_piece(special = false) gives them. */
  readonly pieces: Uint8Array[];
  /** The same with special = true (control/unknown tokens render their text). */
  readonly specialPieces: Uint8Array[];
  /** Control, user-defined and unknown tokens, longest text first (llama.cpp's partition order). */
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

/** Token texts that llama.cpp treats as end-of-turn/end-of-generation whatever the metadata says. */
const EOT_TEXTS = [
  "<|eot_id|>",
  "<|im_end|>",
  "<|end|>",
  "<end_of_turn>",
  "<|endoftext|>",
  "<EOT>",
  "<｜end▁of▁sentence｜>",
];
const EOG_TEXTS = ["<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|eom_id|>", "<EOT>"];
const FIM_PAD_TEXTS = ["<|fim_pad|>", "<fim-pad>", "<PAD>"];
const FIM_REP_TEXTS = ["<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>"];
const FIM_SEP_TEXTS = ["<|file_sep|>"];

const SPACE_MARK = "\u2581";

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
  const types = new Uint8Array(n);
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
    const ty = typesIn ? typesIn[i] : TokenType.Normal;
    types[i] = ty >= TokenType.Normal && ty <= TokenType.Byte ? ty : TokenType.Undefined;
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
  bosId = idKey("bos_token_id", bosId);
  eosId = idKey("eos_token_id", eosId);
  let eotId = idKey("eot_token_id", -1);
  let eomId = idKey("eom_token_id", -1);
  unkId = idKey("unknown_token_id", unkId);
  const sepId = idKey("seperator_token_id", -1);
  const padId = idKey("padding_token_id", -1);
  const maskId = idKey("mask_token_id", -1);
  let fimPad = idKey("fim_pad_token_id", -1);
  let fimRep = idKey("fim_rep_token_id", -1);
  let fimSep = idKey("fim_sep_token_id", -1);
  if (bosId >= n) bosId = -1;
  if (eosId >= n) eosId = -1;
  if (unkId >= n) unkId = -1;
  addBos = optBool(src, `${K}add_bos_token`) ?? addBos;
  addEos = optBool(src, `${K}add_eos_token`) ?? addEos;

  // Auto-detection by text, in id order (llama.cpp walks a hash map; real vocabularies have at
  // most one token of each text, so the order only matters for the first-found EOT).
  const markControl = (id: number) => {
    types[id] = TokenType.Control;
  };
  for (let id = 0; id < n; id++) {
    const t = tokens[id];
    if (eotId < 0 && EOT_TEXTS.includes(t)) {
      eotId = id;
      markControl(id);
    }
    if (eomId < 0 && t === "<|eom_id|>") {
      eomId = id;
      markControl(id);
    }
    if (fimPad < 0 && FIM_PAD_TEXTS.includes(t)) {
      fimPad = id;
      markControl(id);
    }
    if (fimRep < 0 && FIM_REP_TEXTS.includes(t)) {
      fimRep = id;
      markControl(id);
    }
    if (fimSep < 0 && FIM_SEP_TEXTS.includes(t)) {
      fimSep = id;
      markControl(id);
    }
  }
  const eogIds = new Set<number>();
  for (const id of [fimPad, fimRep, fimSep]) if (id >= 0) eogIds.add(id);
  for (let id = 0; id < n; id++) {
    if (EOG_TEXTS.includes(tokens[id])) {
      eogIds.add(id);
      markControl(id);
    }
  }
  for (const id of [eosId, eotId, eomId]) if (id >= 0) eogIds.add(id);

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
  const nlId = kind === "spm" ? (byteToToken[10] >= 0 ? byteToToken[10] : padId) : (tokenToId.get("\u010A") ?? padId);

  // Decoded bytes per token (llama.cpp's token_to_piece).
  const pieces: Uint8Array[] = new Array(n);
  const specialPieces: Uint8Array[] = new Array(n);
  const empty = new Uint8Array(0);
  for (let id = 0; id < n; id++) {
    const t = tokens[id];
    const ty = types[id];
    let p: Uint8Array = empty;
    if (ty === TokenType.Control || ty === TokenType.Unknown || ty === TokenType.UserDefined) {
      p = utf8Encode(t);
    } else if (ty === TokenType.Normal) {
      p = kind === "spm" ? utf8Encode(t.split(SPACE_MARK).join(" ")) : decodeByteLevel(t);
    } else if (ty === TokenType.Byte && kind === "spm") {
      p = Uint8Array.of(byteOfByteToken(t));
    }
    specialPieces[id] = p;
    pieces[id] = ty === TokenType.Control || ty === TokenType.Unknown ? empty : p;
  }

  const specialTokens: number[] = [];
  for (let id = 0; id < n; id++) {
    const ty = types[id];
    if (ty === TokenType.Control || ty === TokenType.UserDefined || ty === TokenType.Unknown) specialTokens.push(id);
  }
  // Longest first so that a special token containing another wins; ties by id for determinism.
  specialTokens.sort((a, b) => tokens[b].length - tokens[a].length || a - b);

  return {
    kind,
    pre,
    preTokenizer,
    tokens,
    scores,
    types,
    tokenToId,
    maxTokenLength,
    mergeRanks,
    byteToToken,
    pieces,
    specialPieces,
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
function decodeByteLevel(text: string): Uint8Array {
  const out: number[] = [];
  for (const ch of text) {
    const b = gpt2UnicodeToByte(ch);
    if (b >= 0) {
      out.push(b);
    } else {
      const hex = Array.from(utf8Encode(ch), (x) => x.toString(16).padStart(2, "0")).join("");
      for (const x of utf8Encode(`[UNK_BYTE_0x${hex}${text}]`)) out.push(x);
    }
  }
  return Uint8Array.from(out);
}
