/**
 * Hugging Face tokenizer files (tokenizer.json, tokenizer_config.json) -> GGUF vocabulary
 * metadata (`tokenizer.ggml.*`, `tokenizer.chat_template`), written the way llama.cpp's
 * convert_hf_to_gguf.py writes it, so that llama.cpp and this engine read the same vocabulary
 * out of a converted file.
 *
 * Two kinds of tokenizer.json are understood:
 *
 *  - byte-level BPE (GPT-2, Llama 3, Qwen, gpt-oss, DeepSeek V3): written as `gpt2` with the
 *    merges. Added tokens become control tokens when marked special or when they look like
 *    control tokens ("<|...|>", "<unused..>"), else user-defined. The pre-tokenizer name that
 *    llama.cpp finds by hashing the tokenization of a test string is found here from the
 *    pre-tokenizer's expressions instead; an unknown one is refused, naming it.
 *  - SentencePiece BPE exported to tokenizer.json (byte fallback, "▁" for spaces: Gemma, Llama 2,
 *    Phi-3): written as `llama` with scores. llama.cpp's converter takes the scores from
 *    tokenizer.model; tokenizer.json has no scores, but its merges are SentencePiece's pieces in
 *    score order (that is how they are exported), so the order in which the merges first produce
 *    each token is the scores' order, and SentencePiece merging (highest score first) by those
 *    scores is the same as BPE merging by rank.
 *
 * The special token ids and add_bos/add_eos come from tokenizer_config.json and the
 * post-processor as in llama.cpp's gguf-py SpecialVocab; config.json's `*_token_id` fill what
 * is still missing, and its `vocab_size` pads the vocabulary to the model's embedding rows.
 */
import type { GGUFValue } from "./gguf.js";
import { gpt2UnicodeToByte } from "../tokenizer/unicode.js";
import { errorText } from "./printable.js";

export class HFTokenizerError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HFTokenizerError";
  }
}

export interface HFVocabOptions {
  /**
   * config.json's `vocab_size`: the model's embedding rows. Ids the tokenizer does not name are
   * written as "[PAD<id>]" unused tokens, as llama.cpp does. Default: just the tokenizer's ids.
   */
  vocabSize?: number;
  /** config.json, whose `bos_token_id`, `eos_token_id`, ... fill ids tokenizer_config.json leaves unset. */
  config?: unknown;
  /** The chat template from chat_template.jinja (or .json), used when tokenizer_config.json has none. */
  chatTemplate?: string | readonly { name: string; template: string }[];
}

/** llama.cpp's token types, as written in `tokenizer.ggml.token_type`. */
const NORMAL = 1,
  UNKNOWN = 2,
  CONTROL = 3,
  USER_DEFINED = 4,
  UNUSED = 5,
  BYTE = 6;

type Json = Record<string, unknown>;

interface AddedToken {
  id: number;
  content: string;
  special: boolean;
  normalized: boolean;
}

function fail(message: string): never {
  throw new HFTokenizerError(message);
}

function isObject(v: unknown): v is Json {
  return typeof v === "object" && v !== null && !Array.isArray(v);
}

function parse(v: unknown, what: string): Json {
  if (typeof v === "string") {
    try {
      v = JSON.parse(v);
    } catch (e) {
      fail(`${what} is not valid JSON: ${errorText(e)}`);
    }
  }
  if (!isObject(v)) fail(`${what} should be a JSON object`);
  return v;
}

/** tokenizer.json's pieces, checked. */
interface HFModel {
  json: Json;
  vocab: Map<string, number>;
  /** Merges as "left right" with spaces inside a part written as U+0120, as llama.cpp stores them. */
  merges: string[];
  added: AddedToken[];
  byteFallback: boolean;
}

function readModel(tj: Json, tc: Json | null): HFModel {
  const model = tj.model;
  if (!isObject(model)) fail(`tokenizer.json has no "model" object`);
  const type = model.type;
  if (type === undefined) fail(`tokenizer.json: "model.type" is missing`);
  if (type !== "BPE")
    fail(
      `tokenizer.json: model type ${JSON.stringify(type)} is not supported (only "BPE": byte-level as in ` +
        `GPT-2, Llama 3, Qwen, or SentencePiece-style with byte fallback as in Gemma, Llama 2)`,
    );
  if (!isObject(model.vocab)) fail(`tokenizer.json: "model.vocab" should be an object of token -> id`);
  const vocab = new Map<string, number>();
  for (const [text, id] of Object.entries(model.vocab)) {
    if (!Number.isInteger(id) || (id as number) < 0)
      fail(`tokenizer.json: "model.vocab" gives ${JSON.stringify(text)} the id ${JSON.stringify(id)}`);
    vocab.set(text, id as number);
  }
  if (vocab.size === 0) fail(`tokenizer.json: "model.vocab" is empty`);
  const merges: string[] = [];
  if (model.merges !== undefined) {
    if (!Array.isArray(model.merges)) fail(`tokenizer.json: "model.merges" should be an array`);
    const list = model.merges as unknown[];
    for (let i = 0; i < list.length; i++) {
      const m = list[i];
      if (typeof m === "string") merges.push(m);
      else if (Array.isArray(m) && m.length === 2 && typeof m[0] === "string" && typeof m[1] === "string") {
        // The pair form exists to allow spaces inside a part; the string form cannot hold them,
        // so llama.cpp writes them as the byte-level space.
        merges.push(`${m[0].replaceAll(" ", "\u0120")} ${m[1].replaceAll(" ", "\u0120")}`);
      } else fail(`tokenizer.json: "model.merges"[${i}] should be "a b" or ["a", "b"], found ${JSON.stringify(m)}`);
    }
  }
  // Added tokens: tokenizer.json's list, with tokenizer_config.json's added_tokens_decoder
  // taking precedence, as transformers loads them.
  const byId = new Map<number, AddedToken>();
  const addEntry = (id: unknown, e: unknown, where: string) => {
    if (!isObject(e) || typeof e.content !== "string") fail(`${where} should have a string "content"`);
    const n = typeof id === "string" ? Number(id) : id;
    if (!Number.isInteger(n) || (n as number) < 0) fail(`${where} has no valid id (${JSON.stringify(id)})`);
    byId.set(n as number, {
      id: n as number,
      content: e.content,
      special: e.special === true,
      normalized: e.normalized === true,
    });
  };
  if (tj.added_tokens !== undefined) {
    if (!Array.isArray(tj.added_tokens)) fail(`tokenizer.json: "added_tokens" should be an array`);
    (tj.added_tokens as unknown[]).forEach((e, i) =>
      addEntry(isObject(e) ? e.id : undefined, e, `tokenizer.json: "added_tokens"[${i}]`),
    );
  }
  const atd = tc?.added_tokens_decoder;
  if (atd !== undefined) {
    if (!isObject(atd)) fail(`tokenizer_config.json: "added_tokens_decoder" should be an object of id -> token`);
    for (const [id, e] of Object.entries(atd)) addEntry(id, e, `tokenizer_config.json: "added_tokens_decoder"[${id}]`);
  }
  const added = [...byId.values()].sort((a, b) => a.id - b.id);
  return { json: model, vocab, merges, added, byteFallback: model.byte_fallback === true };
}

// ------------------------------------------------------------------ pre-tokenizer names

const CASE_FREE = "(?i:'s|'t|'re|'ve|'m|'ll|'d)";
/** The pre-tokenizer expressions of known tokenizers, as tokenizer.json writes them. */
const KNOWN_SPLITS: { name: string; patterns: string[]; needsIgnoreMerges?: boolean }[] = [
  {
    name: "llama-bpe",
    patterns: [
      `${CASE_FREE}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
    ],
    needsIgnoreMerges: true,
  },
  {
    name: "qwen2",
    patterns: [
      `${CASE_FREE}|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
    ],
  },
  {
    name: "gpt-4o",
    patterns: [
      `[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]*[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]+${CASE_FREE}?` +
        `|[^\\r\\n\\p{L}\\p{N}]?[\\p{Lu}\\p{Lt}\\p{Lm}\\p{Lo}\\p{M}]+[\\p{Ll}\\p{Lm}\\p{Lo}\\p{M}]*${CASE_FREE}?` +
        `|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+`,
    ],
  },
  {
    name: "deepseek-v3",
    patterns: [
      "\\p{N}{1,3}",
      "[一-龥぀-ゟ゠-ヿ]+",
      "[!\"#$%&'()*+,\\-./:;<=>?@\\[\\\\\\]^_`{|}~][A-Za-z]+|[^\r\n\\p{L}\\p{P}\\p{S}]?[\\p{L}\\p{M}]+| ?[\\p{P}\\p{S}]+[\r\n]*|\\s*[\r\n]+|\\s+(?!\\S)|\\s+",
    ],
  },
];

function describePre(pre: unknown): string {
  const s = JSON.stringify(pre);
  return s.length > 300 ? s.slice(0, 300) + "..." : s;
}

/**
 * The llama.cpp pre-tokenizer name (`tokenizer.ggml.pre`) for a byte-level BPE tokenizer.json,
 * found from its pre-tokenizer's expressions. Throws an HFTokenizerError for one this engine does
 * not know, naming what it found.
 */
export function hfPreTokenizerName(tokenizerJson: unknown): string {
  const tj = parse(tokenizerJson, "tokenizer.json");
  const pre = tj.pre_tokenizer;
  if (!isObject(pre)) fail(`tokenizer.json: "pre_tokenizer" is missing; cannot tell which pre-tokenizer it uses`);
  if (pre.type === "ByteLevel") {
    // ByteLevel splitting on its own expression is GPT-2's.
    if (pre.use_regex !== false) return "gpt-2";
    fail(`tokenizer.json: a ByteLevel pre-tokenizer that splits nothing (use_regex false) is not a known one`);
  }
  if (pre.type !== "Sequence" || !Array.isArray(pre.pretokenizers))
    fail(`tokenizer.json: pre-tokenizer ${describePre(pre)} is not one this engine knows`);
  const patterns: string[] = [];
  let byteLevel = false;
  for (const p of pre.pretokenizers as unknown[]) {
    if (!isObject(p)) fail(`tokenizer.json: pre-tokenizer ${describePre(pre)} is not one this engine knows`);
    if (p.type === "ByteLevel" && !byteLevel) {
      byteLevel = true;
      if (p.use_regex === true) patterns.push("<GPT-2 expression>");
      continue;
    }
    const pattern = isObject(p.pattern) ? p.pattern.Regex : undefined;
    if (
      p.type !== "Split" ||
      typeof pattern !== "string" ||
      p.behavior !== "Isolated" ||
      p.invert === true ||
      byteLevel
    )
      fail(`tokenizer.json: pre-tokenizer step ${describePre(p)} is not one this engine knows`);
    patterns.push(pattern);
  }
  if (!byteLevel) fail(`tokenizer.json: pre-tokenizer ${describePre(pre)} has no ByteLevel step`);
  const ignoreMerges = isObject(tj.model) && tj.model.ignore_merges === true;
  for (const k of KNOWN_SPLITS) {
    if (k.patterns.length !== patterns.length || !k.patterns.every((p, i) => p === patterns[i])) continue;
    if (k.needsIgnoreMerges && !ignoreMerges) continue;
    return k.name;
  }
  fail(
    `tokenizer.json: the pre-tokenizer splits by ${patterns.map((p) => JSON.stringify(p)).join(", then ")}` +
      `${ignoreMerges ? " (with ignore_merges)" : ""}, which is not one this engine knows ` +
      `(known: ${KNOWN_SPLITS.map((k) => k.name).join(", ")}, gpt-2)`,
  );
}

/** Which GGUF tokenizer model a tokenizer.json becomes: "gpt2" (byte-level BPE) or "llama" (SentencePiece). */
export function hfTokenizerKind(tokenizerJson: unknown): "gpt2" | "llama" {
  const tj = parse(tokenizerJson, "tokenizer.json");
  const model = tj.model;
  if (!isObject(model)) fail(`tokenizer.json has no "model" object`);
  if (model.type !== "BPE")
    fail(
      `tokenizer.json: model type ${JSON.stringify(model.type)} is not supported (only "BPE": byte-level as in ` +
        `GPT-2, Llama 3, Qwen, or SentencePiece-style with byte fallback as in Gemma, Llama 2)`,
    );
  const decoder = isObject(tj.decoder) ? tj.decoder : null;
  const decoders = decoder?.type === "Sequence" && Array.isArray(decoder.decoders) ? decoder.decoders : [decoder];
  const has = (t: string) => decoders.some((d) => isObject(d) && d.type === t);
  if (model.byte_fallback === true) {
    if (has("ByteFallback")) return "llama";
    fail(`tokenizer.json: a BPE model with byte fallback but no ByteFallback decoder is not a known kind`);
  }
  if (has("ByteLevel")) return "gpt2";
  fail(
    `tokenizer.json: a BPE model that is neither byte-level (ByteLevel decoder) nor SentencePiece-style ` +
      `(byte_fallback) is not supported; decoder: ${describePre(tj.decoder)}`,
  );
}

// ------------------------------------------------------------------ token types

/** Added tokens that some models forget to mark special but that are control tokens all the same. */
function looksSpecial(t: string): boolean {
  return (
    t === "<pad>" ||
    t === "<mask>" ||
    t === "<2mass>" ||
    t === "[@BOS@]" ||
    (t.startsWith("<|") && t.endsWith("|>")) ||
    (t.startsWith("<｜") && t.endsWith("｜>")) ||
    (t.startsWith("<unused") && t.endsWith(">"))
  );
}

/**
 * llama.cpp stores a non-normalized added token as the tokenizer decodes it (encode, then
 * decode). That changes only text written in the byte-level alphabet ("Ġhi" -> " hi"); text
 * with any other character passes through the byte-level decoder unchanged.
 */
function byteLevelRoundTrip(content: string): string {
  const bytes: number[] = [];
  for (const ch of content) {
    const b = gpt2UnicodeToByte(ch);
    if (b < 0) return content;
    bytes.push(b);
  }
  return new TextDecoder("utf-8", { fatal: false }).decode(Uint8Array.from(bytes));
}

function checkedVocabSize(opts: HFVocabOptions, needed: number, fallback: number): number {
  const v = opts.vocabSize;
  if (v === undefined) return fallback;
  if (!Number.isInteger(v) || v < 1) fail(`vocabSize should be a positive integer, got ${v}`);
  if (v < needed) fail(`vocabSize ${v} is smaller than the tokenizer, whose largest id is ${needed - 1}`);
  return v;
}

// ------------------------------------------------------------------ special tokens

const SPECIAL_TYPES = ["bos", "eos", "unk", "sep", "pad", "cls", "mask"];
const ID_KEY: Record<string, string> = {
  bos: "tokenizer.ggml.bos_token_id",
  eos: "tokenizer.ggml.eos_token_id",
  eot: "tokenizer.ggml.eot_token_id",
  eom: "tokenizer.ggml.eom_token_id",
  unk: "tokenizer.ggml.unknown_token_id",
  sep: "tokenizer.ggml.seperator_token_id",
  pad: "tokenizer.ggml.padding_token_id",
  mask: "tokenizer.ggml.mask_token_id",
};
const ADD_KEY: Record<string, string> = {
  bos: "tokenizer.ggml.add_bos_token",
  eos: "tokenizer.ggml.add_eos_token",
  sep: "tokenizer.ggml.add_sep_token",
};

/** What SpecialVocab finds: ids by type, add_* flags, the chat template, normalizer flags. */
interface Specials {
  ids: Map<string, number>;
  add: Map<string, boolean>;
  chatTemplate: string | readonly { name: string; template: string }[] | undefined;
  lowercase?: boolean;
  stripAccents?: boolean;
}

function specials(tj: Json, tcIn: Json | null, nVocab: number | undefined, opts: HFVocabOptions): Specials {
  const out: Specials = { ids: new Map(), add: new Map(), chatTemplate: undefined };
  const types = [...SPECIAL_TYPES];
  const setId = (typ: string, id: unknown) => {
    if (typeof id !== "number" || !Number.isInteger(id)) return;
    if (id < 0) fail(`special token ${typ} has the invalid id ${id}`);
    if (nVocab !== undefined && id >= nVocab) return;
    if (!out.ids.has(typ)) out.ids.set(typ, id);
  };
  const parseNormalizer = (n: unknown) => {
    if (!isObject(n)) return;
    if (n.type === "Lowercase") out.lowercase = true;
    else if (n.type === "StripAccents") out.stripAccents = true;
    else if (n.type === "BertNormalizer") {
      if (typeof n.lowercase === "boolean") out.lowercase = n.lowercase;
      if (typeof n.strip_accents === "boolean") out.stripAccents = n.strip_accents;
    } else if (n.type === "Sequence" && Array.isArray(n.normalizers)) n.normalizers.forEach(parseNormalizer);
  };
  parseNormalizer(tj.normalizer);

  // Work on a copy: the post-processor fills in tokens the config does not name.
  const tc: Json | null = tcIn ? { ...tcIn } : null;
  let bos = tc?.bos_token,
    cls = tc?.cls_token,
    eos = tc?.eos_token,
    sep = tc?.sep_token;
  // Comparisons as Python's: a token given as an object never equals a token name.
  const eq = (a: unknown, b: unknown) => typeof a === "string" && a === b;
  if (!bos && cls && tc) tc.bos_token = bos = cls;
  if (!eos && sep && tc) tc.eos_token = eos = sep;
  const post = tj.post_processor;
  if (isObject(post)) {
    const processors = Array.isArray(post.processors) ? (post.processors as unknown[]) : [post];
    for (const p of processors) {
      if (!isObject(p)) continue;
      if (p.type === "RobertaProcessing") {
        out.add.set("bos", true);
        out.add.set("eos", true);
        out.add.set("sep", true);
        if (!cls && tc) tc.cls_token = cls = Array.isArray(p.cls) ? p.cls[0] : bos;
        if (!sep && tc) tc.sep_token = sep = Array.isArray(p.sep) ? p.sep[0] : eos;
        continue;
      }
      if (p.type !== "TemplateProcessing") continue;
      const single = Array.isArray(p.single) ? (p.single as unknown[]) : [];
      const pair = Array.isArray(p.pair) ? (p.pair as unknown[]) : [];
      const specialId = (e: unknown): unknown =>
        isObject(e) && isObject(e.SpecialToken) ? e.SpecialToken.id || undefined : undefined;
      const seqId = (e: unknown): unknown => (isObject(e) && isObject(e.Sequence) ? e.Sequence.id : undefined);
      let first: unknown, last: unknown;
      if (single.length > 1) {
        first = specialId(single[0]);
        if (first) {
          if (!tc) bos = first;
          else if (!eq(first, bos) && !eq(first, cls)) {
            if (!bos) tc.bos_token = bos = first;
            if (!cls) tc.cls_token = cls = first;
          }
          out.add.set("bos", eq(first, bos) || eq(first, cls));
        }
        last = specialId(single[single.length - 1]);
        if (last) {
          if (!tc) eos = last;
          else if (!eq(last, eos)) {
            // A template that ends in another token: EOS becomes that one, the old EOS is kept as EOT.
            if (!types.includes("eot")) {
              types.push("eot");
              tc.eot_token = eos;
            } else if (!types.includes("eom")) {
              types.push("eom");
              tc.eom_token = eos;
            }
            tc.eos_token = eos = last;
          }
          out.add.set("eos", eq(last, eos));
        }
      }
      if (pair.length > 0) {
        const start = first && eq(specialId(pair[0]), first) ? 1 : 0;
        const stop = last && eq(specialId(pair[pair.length - 1]), last) ? pair.length - 1 : pair.length;
        let inner = pair.slice(start, stop);
        if (inner.length > 0 && seqId(inner[0]) === "A" && seqId(inner[inner.length - 1]) === "B") {
          inner = inner.slice(1, -1);
          if (inner.length > 0) {
            let addSep = false;
            const entry = specialId(inner[0]);
            if (entry && (eq(entry, sep) || eq(entry, eos)) && !last) addSep = true;
            if (inner.length === 2) {
              const entry2 = specialId(inner[1]);
              if (entry2 && (eq(entry2, sep) || eq(entry2, eos))) addSep = true;
            }
            out.add.set("sep", addSep);
            if (addSep && !sep && tc) tc.sep_token = eos;
          }
        }
      }
    }
  }
  if (tc) {
    // A config that has the key, even as null, says there is no template.
    const template = "chat_template" in tc ? tc.chat_template : opts.chatTemplate;
    if (typeof template === "string" || Array.isArray(template))
      out.chatTemplate = template as Specials["chatTemplate"];
    else if (template !== undefined && template !== null)
      fail(`tokenizer_config.json: "chat_template" should be a string or a list of {name, template}`);
    const added = Array.isArray(tj.added_tokens) ? (tj.added_tokens as unknown[]) : [];
    for (const typ of types) {
      const flag = tc[`add_${typ}_token`];
      if (typeof flag === "boolean") out.add.set(typ, flag);
      const entry = tc[`${typ}_token`];
      const content = typeof entry === "string" ? entry : isObject(entry) ? entry.content : undefined;
      if (typeof content !== "string") continue;
      // Only added tokens are looked up, and the first with that text wins.
      const hit = added.find((a) => isObject(a) && a.content === content);
      setId(typ, isObject(hit) ? hit.id : undefined);
    }
  }
  if (isObject(opts.config)) {
    const cfg = opts.config;
    for (const typ of types) {
      let id = cfg[`${typ}_token_id`];
      if (id === undefined && isObject(cfg.text_config)) id = cfg.text_config[`${typ}_token_id`];
      setId(typ, id);
    }
  }
  return out;
}

function writeSpecials(out: Map<string, GGUFValue>, s: Specials): void {
  for (const [typ, id] of s.ids) {
    // llama.cpp has no key for cls (it only stands in for bos); its writer skips it too.
    const key = ID_KEY[typ];
    if (key) out.set(key, id);
  }
  for (const [typ, on] of s.add) {
    const key = ADD_KEY[typ];
    if (key) out.set(key, on);
  }
  if (typeof s.chatTemplate === "string") out.set("tokenizer.chat_template", s.chatTemplate);
  else if (s.chatTemplate) {
    const names: string[] = [];
    for (const { name, template } of s.chatTemplate) {
      if (typeof name !== "string" || typeof template !== "string")
        fail(`chat templates should be {name, template} strings, found ${JSON.stringify({ name, template })}`);
      if (name === "default") out.set("tokenizer.chat_template", template);
      else {
        names.push(name);
        out.set(`tokenizer.chat_template.${name}`, template);
      }
    }
    if (names.length > 0) out.set("tokenizer.chat_templates", names);
  }
  if (s.lowercase !== undefined) out.set("tokenizer.ggml.normalizer.lowercase", s.lowercase);
  if (s.stripAccents !== undefined) out.set("tokenizer.ggml.normalizer.strip_accents", s.stripAccents);
}

// ------------------------------------------------------------------ the two kinds

function byteLevelVocab(tj: Json, tc: Json | null, m: HFModel, opts: HFVocabOptions): Map<string, GGUFValue> {
  const pre = hfPreTokenizerName(tj);
  if (m.merges.length === 0) fail(`tokenizer.json: "model.merges" is missing or empty (byte-level BPE needs them)`);
  // The full vocabulary is the model's plus the added tokens.
  const byId = new Map<number, string>();
  for (const [text, id] of m.vocab) byId.set(id, text);
  const addedByText = new Map<string, AddedToken>();
  for (const a of m.added) {
    byId.set(a.id, a.content);
    addedByText.set(a.content, a);
  }
  let maxId = 0;
  for (const id of byId.keys()) if (id > maxId) maxId = id;
  const n = checkedVocabSize(opts, maxId + 1, maxId + 1);
  const tokens: string[] = new Array(n);
  const types = new Int32Array(n);
  for (let i = 0; i < n; i++) {
    let text = byId.get(i);
    if (text === undefined) {
      tokens[i] = `[PAD${i}]`;
      types[i] = UNUSED;
      continue;
    }
    const a = addedByText.get(text);
    if (a) {
      if (!a.normalized) text = byteLevelRoundTrip(text);
      if (a.special || looksSpecial(text)) types[i] = CONTROL;
      else {
        // llama.cpp matches user-defined tokens in raw text, so SentencePiece's "▁" is written as the space it stands for.
        text = text.replaceAll("\u2581", " ");
        types[i] = USER_DEFINED;
      }
    } else types[i] = NORMAL;
    tokens[i] = text;
  }
  const out = new Map<string, GGUFValue>();
  out.set("tokenizer.ggml.model", "gpt2");
  out.set("tokenizer.ggml.pre", pre);
  out.set("tokenizer.ggml.tokens", tokens);
  out.set("tokenizer.ggml.token_type", types);
  out.set("tokenizer.ggml.merges", m.merges);
  writeSpecials(out, specials(tj, tc, undefined, opts));
  return out;
}

const BYTE_TOKEN = /^<0x[0-9A-Fa-f]{2}>$/;

function sentencePieceVocab(tj: Json, tc: Json | null, m: HFModel, opts: HFVocabOptions): Map<string, GGUFValue> {
  if (m.merges.length === 0)
    fail(
      `tokenizer.json: "model.merges" is missing or empty; a SentencePiece-style vocabulary needs them for its scores`,
    );
  // SentencePiece's pieces are the model's vocabulary; ids past it exist only as added tokens.
  let pieces = 0;
  for (const id of m.vocab.values()) if (id + 1 > pieces) pieces = id + 1;
  const n = checkedVocabSize(opts, pieces, pieces);
  const tokens: string[] = new Array(n);
  const scores = new Float32Array(n).fill(-10000);
  const types = new Int32Array(n).fill(UNUSED);
  for (let i = 0; i < n; i++) tokens[i] = `[PAD${i}]`;

  // Scores: the negated order in which the merges first make each token.
  const rank = new Map<string, number>();
  for (const mg of m.merges) {
    const sp = mg.indexOf(" ", 1);
    if (sp < 0) continue;
    const t = mg.slice(0, sp) + mg.slice(sp + 1);
    if (!rank.has(t) && m.vocab.has(t)) rank.set(t, rank.size + 1);
  }
  // Tokens no merge makes score below all that one does: a single character never competes,
  // and a longer one that the merges never make should not be made first.
  const floor = -(rank.size + 1);
  const unk = typeof m.json.unk_token === "string" ? m.json.unk_token : undefined;
  for (const [text, id] of m.vocab) {
    if (id >= n) continue;
    tokens[id] = text;
    if (text === unk) {
      types[id] = UNKNOWN;
      scores[id] = 0;
    } else if (BYTE_TOKEN.test(text)) {
      types[id] = BYTE;
      scores[id] = 0;
    } else {
      types[id] = NORMAL;
      const r = rank.get(text);
      scores[id] = r !== undefined ? -r : floor;
    }
  }
  for (const a of m.added) {
    if (a.id >= n) continue;
    let text = a.content;
    if (a.special || looksSpecial(text)) types[a.id] = CONTROL;
    else {
      text = text.replaceAll("\u2581", " ");
      types[a.id] = USER_DEFINED;
    }
    scores[a.id] = -1000;
    tokens[a.id] = text;
  }
  const out = new Map<string, GGUFValue>();
  out.set("tokenizer.ggml.model", "llama");
  out.set("tokenizer.ggml.pre", "default");
  out.set("tokenizer.ggml.tokens", tokens);
  out.set("tokenizer.ggml.scores", scores);
  out.set("tokenizer.ggml.token_type", types);
  writeSpecials(out, specials(tj, tc, n, opts));
  out.set("tokenizer.ggml.add_space_prefix", addsSpacePrefix(tj, tc));
  return out;
}

/**
 * Whether SentencePiece puts "▁" before the text: the tokenizer.json normalizer prepends it (or a
 * Metaspace pre-tokenizer does); tokenizer_config.json's add_prefix_space overrides, as in
 * llama.cpp's Llama conversion. Gemma prepends nothing.
 */
function addsSpacePrefix(tj: Json, tc: Json | null): boolean {
  if (typeof tc?.add_prefix_space === "boolean") return tc.add_prefix_space;
  let prepends = false;
  const walk = (n: unknown) => {
    if (!isObject(n)) return;
    if (n.type === "Prepend" && n.prepend === "\u2581") prepends = true;
    if (
      n.type === "Metaspace" &&
      (n.prepend_scheme === "always" || n.prepend_scheme === "first" || n.add_prefix_space === true)
    )
      prepends = true;
    for (const k of ["normalizers", "pretokenizers"]) if (Array.isArray(n[k])) (n[k] as unknown[]).forEach(walk);
  };
  walk(tj.normalizer);
  walk(tj.pre_tokenizer);
  return prepends;
}

/**
 * GGUF vocabulary metadata from a Hugging Face tokenizer.json and tokenizer_config.json (parsed
 * objects or their text). The values are typed as GGUFWriter writes what llama.cpp expects:
 * token_type an Int32Array, scores a Float32Array, ids non-negative integers (UINT32), flags
 * booleans. Throws an HFTokenizerError naming what it cannot convert.
 */
export function ggufVocabFromHF(
  tokenizerJson: unknown,
  tokenizerConfigJson?: unknown,
  opts: HFVocabOptions = {},
): Map<string, GGUFValue> {
  const tj = parse(tokenizerJson, "tokenizer.json");
  let tc =
    tokenizerConfigJson === undefined || tokenizerConfigJson === null
      ? null
      : parse(tokenizerConfigJson, "tokenizer_config.json");
  // llama.cpp's converter (Python) takes an empty config for no config at all.
  if (tc && Object.keys(tc).length === 0) tc = null;
  const kind = hfTokenizerKind(tj);
  const m = readModel(tj, tc);
  return kind === "gpt2" ? byteLevelVocab(tj, tc, m, opts) : sentencePieceVocab(tj, tc, m, opts);
}
