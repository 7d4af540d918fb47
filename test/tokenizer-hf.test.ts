/**
 * The Hugging Face -> GGUF vocabulary converter (src/format/hf-tokenizer.ts): the rules it takes
 * from llama.cpp's converter, on small tokenizer.json files made here, and its errors. The real
 * vocabularies, and llama.cpp's reading of them, are in tokenizer-real-vocabs.test.ts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ggufVocabFromHF,
  hfPreTokenizerName,
  hfTokenizerKind,
  HFTokenizerError,
  type HFVocabOptions,
} from "../src/format/hf-tokenizer.js";
import { preTokenize, preTokenizerConfig, Tokenizer, TokenType } from "../src/tokenizer/index.js";
import { gpt2ByteToUnicode } from "../src/tokenizer/unicode.js";
import { rng } from "./helpers.js";
import { REAL_VOCABS, loadHFFiles } from "./tokenizer-fixtures.js";

type Json = Record<string, unknown>;

const LLAMA3_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const QWEN2_SPLIT =
  "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

function splitPre(...patterns: string[]): Json {
  return {
    type: "Sequence",
    pretokenizers: [
      ...patterns.map((p) => ({ type: "Split", pattern: { Regex: p }, behavior: "Isolated", invert: false })),
      { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: false },
    ],
  };
}

/** A byte-level tokenizer.json: the 256 byte characters, a few merges, the given added tokens. */
function byteLevelJson(added: Json[] = [], extra: Json = {}, model: Json = {}): Json {
  const vocab: Record<string, number> = {};
  for (let b = 0; b < 256; b++) vocab[gpt2ByteToUnicode(b)] = b;
  const merges = [
    ["Ġ", "t"],
    ["h", "e"],
    ["Ġt", "he"],
    ["i", "n"],
  ];
  for (const [a, b] of merges) vocab[a + b] = Object.keys(vocab).length;
  return {
    version: "1.0",
    added_tokens: added,
    normalizer: null,
    pre_tokenizer: splitPre(QWEN2_SPLIT),
    post_processor: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    decoder: { type: "ByteLevel", add_prefix_space: false, trim_offsets: false, use_regex: false },
    model: { type: "BPE", byte_fallback: false, ignore_merges: false, vocab, merges, ...model },
    ...extra,
  };
}

function addedToken(id: number, content: string, special: boolean, normalized = false): Json {
  return { id, content, single_word: false, lstrip: false, rstrip: false, normalized, special };
}

function throwsNaming(fn: () => unknown, ...parts: (string | RegExp)[]): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof HFTokenizerError, `not an HFTokenizerError: ${e}`);
    for (const p of parts)
      assert.ok(typeof p === "string" ? e.message.includes(p) : p.test(e.message), `"${e.message}" lacks ${p}`);
    return true;
  });
}

// ---------------------------------------------------------------- byte-level BPE

test("byte-level: added tokens become control or user-defined as llama.cpp's converter decides", () => {
  const json = byteLevelJson([
    addedToken(260, "<|special|>", true),
    addedToken(261, "<think>", false),
    addedToken(262, "<|looks_special|>", false),
    addedToken(263, "<unused7>", false),
    addedToken(264, "<｜fullwidth｜>", false, true),
    addedToken(265, "Ġhi", false),
    addedToken(266, "a\u2581b", false, true),
    addedToken(267, "<mask>", false),
  ]);
  const meta = ggufVocabFromHF(json, {});
  const tokens = meta.get("tokenizer.ggml.tokens") as string[];
  const types = meta.get("tokenizer.ggml.token_type") as Int32Array;
  assert.equal(meta.get("tokenizer.ggml.model"), "gpt2");
  assert.equal(meta.get("tokenizer.ggml.pre"), "qwen2");
  assert.equal(tokens.length, 268);
  assert.ok(types instanceof Int32Array);
  const typeOf = (text: string) => types[tokens.indexOf(text)];
  assert.equal(typeOf("<|special|>"), TokenType.Control);
  assert.equal(typeOf("<think>"), TokenType.UserDefined);
  assert.equal(typeOf("<|looks_special|>"), TokenType.Control);
  assert.equal(typeOf("<unused7>"), TokenType.Control);
  assert.equal(typeOf("<｜fullwidth｜>"), TokenType.Control);
  assert.equal(typeOf("<mask>"), TokenType.Control);
  // A non-normalized token is stored as the tokenizer decodes it: byte-level text becomes bytes.
  assert.equal(tokens[265], " hi");
  assert.equal(types[265], TokenType.UserDefined);
  // User-defined text is matched in raw text, so SentencePiece's space mark is a space.
  assert.equal(tokens[266], "a b");
  assert.equal(typeOf("Ġthe"), TokenType.Normal);
  assert.deepEqual(meta.get("tokenizer.ggml.merges"), ["Ġ t", "h e", "Ġt he", "i n"]);
  assert.equal(meta.has("tokenizer.ggml.scores"), false);
});

test("byte-level: merges given as pairs keep spaces inside a part as the byte-level space", () => {
  const json = byteLevelJson(
    [],
    {},
    {
      merges: [
        ["a b", "c"],
        ["h", "e"],
      ],
    },
  );
  assert.deepEqual(ggufVocabFromHF(json).get("tokenizer.ggml.merges"), ["aĠb c", "h e"]);
});

test("byte-level: vocabSize pads with unused [PAD<id>] tokens, and must hold the tokenizer", () => {
  const json = byteLevelJson([addedToken(262, "<|x|>", true)]);
  const meta = ggufVocabFromHF(json, {}, { vocabSize: 266 });
  const tokens = meta.get("tokenizer.ggml.tokens") as string[];
  const types = meta.get("tokenizer.ggml.token_type") as Int32Array;
  assert.equal(tokens.length, 266);
  // 260 and 261 are merged tokens; 263..265 name nothing
  assert.deepEqual(tokens.slice(262), ["<|x|>", "[PAD263]", "[PAD264]", "[PAD265]"]);
  assert.deepEqual(Array.from(types.slice(263)), [TokenType.Unused, TokenType.Unused, TokenType.Unused]);
  throwsNaming(() => ggufVocabFromHF(json, {}, { vocabSize: 100 }), "vocabSize 100", "262");
  throwsNaming(() => ggufVocabFromHF(json, {}, { vocabSize: 1.5 }), "vocabSize");
});

test("special ids come from tokenizer_config.json's token names, looked up among the added tokens", () => {
  const json = byteLevelJson([
    addedToken(260, "<|begin|>", true),
    addedToken(261, "<|end|>", true),
    addedToken(262, "<|pad|>", true),
  ]);
  const meta = ggufVocabFromHF(json, {
    bos_token: "<|begin|>",
    eos_token: { __type: "AddedToken", content: "<|end|>" },
    pad_token: "<|pad|>",
    // not an added token: llama.cpp's converter does not look in the base vocabulary
    unk_token: "h",
    add_bos_token: true,
    add_eos_token: false,
    chat_template: "{{ messages }}",
  });
  assert.equal(meta.get("tokenizer.ggml.bos_token_id"), 260);
  assert.equal(meta.get("tokenizer.ggml.eos_token_id"), 261);
  assert.equal(meta.get("tokenizer.ggml.padding_token_id"), 262);
  assert.equal(meta.has("tokenizer.ggml.unknown_token_id"), false);
  assert.equal(meta.get("tokenizer.ggml.add_bos_token"), true);
  assert.equal(meta.get("tokenizer.ggml.add_eos_token"), false);
  assert.equal(meta.get("tokenizer.chat_template"), "{{ messages }}");
  // config.json fills what is missing, never what is set
  const withConfig = ggufVocabFromHF(
    json,
    { eos_token: "<|end|>" },
    { config: { bos_token_id: 260, eos_token_id: 5, text_config: { pad_token_id: 262 } } },
  );
  assert.equal(withConfig.get("tokenizer.ggml.bos_token_id"), 260);
  assert.equal(withConfig.get("tokenizer.ggml.eos_token_id"), 261);
  assert.equal(withConfig.get("tokenizer.ggml.padding_token_id"), 262);
  // the template from chat_template.jinja when the config has none; named templates
  assert.equal(
    ggufVocabFromHF(json, { eos_token: "<|end|>" }, { chatTemplate: "T" }).get("tokenizer.chat_template"),
    "T",
  );
  const named = ggufVocabFromHF(
    json,
    { eos_token: "<|end|>" },
    {
      chatTemplate: [
        { name: "default", template: "D" },
        { name: "tool_use", template: "U" },
      ],
    },
  );
  assert.equal(named.get("tokenizer.chat_template"), "D");
  assert.equal(named.get("tokenizer.chat_template.tool_use"), "U");
  assert.deepEqual(named.get("tokenizer.chat_templates"), ["tool_use"]);
  // no tokenizer_config.json (or an empty one): no ids, no template
  assert.equal(ggufVocabFromHF(json).has("tokenizer.ggml.bos_token_id"), false);
  assert.equal(ggufVocabFromHF(json, {}, { chatTemplate: "T" }).has("tokenizer.chat_template"), false);
});

test("a template post-processor sets add_bos/add_eos; tokenizer_config.json's flags win", () => {
  const post = {
    type: "TemplateProcessing",
    single: [{ SpecialToken: { id: "<|begin|>", type_id: 0 } }, { Sequence: { id: "A", type_id: 0 } }],
    pair: [
      { SpecialToken: { id: "<|begin|>", type_id: 0 } },
      { Sequence: { id: "A", type_id: 0 } },
      { SpecialToken: { id: "<|begin|>", type_id: 1 } },
      { Sequence: { id: "B", type_id: 1 } },
    ],
  };
  const json = byteLevelJson([addedToken(260, "<|begin|>", true)], { post_processor: post });
  const meta = ggufVocabFromHF(json, { bos_token: "<|begin|>" });
  assert.equal(meta.get("tokenizer.ggml.add_bos_token"), true);
  assert.equal(meta.get("tokenizer.ggml.add_sep_token"), false);
  assert.equal(meta.get("tokenizer.ggml.bos_token_id"), 260);
  assert.equal(
    ggufVocabFromHF(json, { bos_token: "<|begin|>", add_bos_token: false }).get("tokenizer.ggml.add_bos_token"),
    false,
  );
  // the template's first token becomes the BOS when the config names none
  const noBos = ggufVocabFromHF(json, { eos_token: "<|begin|>" });
  assert.equal(noBos.get("tokenizer.ggml.bos_token_id"), 260);
  assert.equal(noBos.get("tokenizer.ggml.add_bos_token"), true);
});

test("parse_special on a converted vocabulary: user-defined tokens always match, control tokens only when asked", () => {
  const json = byteLevelJson([addedToken(260, "<|ctl|>", true), addedToken(261, "<think>", false)]);
  const tok = Tokenizer.fromGGUF({ metadata: ggufVocabFromHF(json, {}) });
  const text = "x<think>y<|ctl|>z";
  const on = tok.encode(text, { parseSpecial: true });
  const off = tok.encode(text, { parseSpecial: false });
  assert.ok(on.includes(260) && on.includes(261));
  assert.ok(off.includes(261) && !off.includes(260));
  // off, the control token's text is plain text, and reads back as it
  assert.equal(tok.decode(off), text);
  assert.equal(tok.decode(on), "x<think>yz");
  assert.equal(tok.decode(on, { special: true }), text);
});

test("pre-tokenizer names come from the expressions; an unknown one is refused, naming it", () => {
  assert.equal(hfPreTokenizerName(byteLevelJson([], { pre_tokenizer: splitPre(QWEN2_SPLIT) })), "qwen2");
  assert.equal(
    hfPreTokenizerName(byteLevelJson([], { pre_tokenizer: splitPre(LLAMA3_SPLIT) }, { ignore_merges: true })),
    "llama-bpe",
  );
  assert.equal(
    hfPreTokenizerName(byteLevelJson([], { pre_tokenizer: { type: "ByteLevel", add_prefix_space: false } })),
    "gpt-2",
  );
  for (const v of REAL_VOCABS.filter((x) => !x.gguf)) {
    const { tokenizerJson } = loadHFFiles(v.name);
    if (hfTokenizerKind(tokenizerJson) === "gpt2")
      assert.ok(
        preTokenizerConfig(hfPreTokenizerName(tokenizerJson)),
        `${v.name}: the engine implements its pre-tokenizer`,
      );
  }
  // Llama 3's expression without ignore_merges is another tokenizer (DBRX, Smaug, ...): not guessed.
  throwsNaming(
    () => hfPreTokenizerName(byteLevelJson([], { pre_tokenizer: splitPre(LLAMA3_SPLIT) })),
    "not one this engine knows",
    "(?i:'s|'t",
  );
  throwsNaming(
    () => hfPreTokenizerName(byteLevelJson([], { pre_tokenizer: splitPre("\\p{N}+", QWEN2_SPLIT) })),
    "\\\\p{N}+",
  );
  throwsNaming(() => hfPreTokenizerName(byteLevelJson([], { pre_tokenizer: { type: "Whitespace" } })), "Whitespace");
  throwsNaming(() => ggufVocabFromHF(byteLevelJson([], { pre_tokenizer: null })), "pre_tokenizer");
});

test("bad input: unsupported models and missing or malformed fields are named", () => {
  throwsNaming(() => ggufVocabFromHF({ model: { type: "Unigram", vocab: [] } }), '"Unigram"', "not supported");
  throwsNaming(() => ggufVocabFromHF({ model: { type: "WordPiece", vocab: {} } }), '"WordPiece"');
  throwsNaming(() => ggufVocabFromHF({ version: "1.0" }), '"model"');
  throwsNaming(() => ggufVocabFromHF("{not json"), "tokenizer.json", "not valid JSON");
  throwsNaming(() => ggufVocabFromHF(byteLevelJson(), "[1, 2]"), "tokenizer_config.json");
  throwsNaming(() => ggufVocabFromHF(byteLevelJson([], {}, { vocab: undefined })), "model.vocab");
  throwsNaming(() => ggufVocabFromHF(byteLevelJson([], {}, { vocab: { a: -1 } })), "model.vocab", '"a"');
  throwsNaming(() => ggufVocabFromHF(byteLevelJson([], {}, { merges: undefined })), "model.merges");
  throwsNaming(() => ggufVocabFromHF(byteLevelJson([], {}, { merges: ["a b", 7] })), 'model.merges"[1]');
  throwsNaming(() => ggufVocabFromHF(byteLevelJson([{ id: 3 }])), 'added_tokens"[0]', "content");
  throwsNaming(
    () => ggufVocabFromHF(byteLevelJson([], { decoder: { type: "Metaspace" } })),
    "neither byte-level",
    "Metaspace",
  );
  throwsNaming(
    () => ggufVocabFromHF(byteLevelJson([], { decoder: { type: "Metaspace" } }, { byte_fallback: true })),
    "ByteFallback",
  );
  throwsNaming(() => ggufVocabFromHF(byteLevelJson(), { chat_template: 5 }), "chat_template");
});

// ---------------------------------------------------------------- SentencePiece-style

/** A SentencePiece-style tokenizer.json: byte tokens, characters, and merges in score order. */
function spmJson(merges: [string, string][], normalizer: Json | null, added: Json[] = []): Json {
  const vocab: Record<string, number> = { "<unk>": 0 };
  for (let b = 0; b < 256; b++)
    vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`] = Object.keys(vocab).length;
  for (const c of "▁abcdefghijklmnopqrstuvwxyz") vocab[c] = Object.keys(vocab).length;
  for (const [a, b] of merges) if (!(a + b in vocab)) vocab[a + b] = Object.keys(vocab).length;
  return {
    added_tokens: added,
    normalizer,
    pre_tokenizer: null,
    decoder: {
      type: "Sequence",
      decoders: [
        { type: "Replace", pattern: { String: "▁" }, content: " " },
        { type: "ByteFallback" },
        { type: "Fuse" },
      ],
    },
    model: { type: "BPE", byte_fallback: true, unk_token: "<unk>", vocab, merges },
  };
}

const GEMMA_LIKE = { type: "Replace", pattern: { String: " " }, content: "▁" };
const LLAMA2_LIKE = {
  type: "Sequence",
  normalizers: [{ type: "Prepend", prepend: "▁" }, GEMMA_LIKE],
};

test("SentencePiece-style: scores follow the merges, byte/unknown/added tokens typed as llama.cpp's converter types them", () => {
  const json = spmJson(
    [
      ["▁", "t"],
      ["h", "e"],
      ["▁t", "he"],
      ["▁", "th"],
      ["t", "h"],
    ],
    GEMMA_LIKE,
    [addedToken(0, "<unk>", true), addedToken(300, "<start>", true), addedToken(301, "▁▁", false)],
  );
  assert.equal(hfTokenizerKind(json), "llama");
  const meta = ggufVocabFromHF(json, {});
  const tokens = meta.get("tokenizer.ggml.tokens") as string[];
  const scores = meta.get("tokenizer.ggml.scores") as Float32Array;
  const types = meta.get("tokenizer.ggml.token_type") as Int32Array;
  assert.equal(meta.get("tokenizer.ggml.model"), "llama");
  assert.equal(meta.get("tokenizer.ggml.pre"), "default");
  assert.ok(scores instanceof Float32Array);
  const score = (t: string) => scores[tokens.indexOf(t)];
  // earlier merge, higher score; a token made again by a later merge keeps its first rank
  assert.ok(score("▁t") > score("he") && score("he") > score("▁the") && score("▁the") > score("th"));
  assert.ok(score("th") > score("a"), "a single character is below every merged token");
  assert.equal(types[tokens.indexOf("<0x41>")], TokenType.Byte);
  assert.equal(score("<0x41>"), 0);
  assert.equal(types[tokens.indexOf("a")], TokenType.Normal);
  // the unknown token is an added special token, which makes it control
  assert.equal(types[0], TokenType.Control);
  // ids past SentencePiece's pieces exist only with vocabSize
  assert.equal(tokens.length, 256 + 1 + 27 + 5);
  const padded = ggufVocabFromHF(json, {}, { vocabSize: 305 });
  const pTokens = padded.get("tokenizer.ggml.tokens") as string[];
  const pTypes = padded.get("tokenizer.ggml.token_type") as Int32Array;
  const pScores = padded.get("tokenizer.ggml.scores") as Float32Array;
  assert.equal(pTokens[300], "<start>");
  assert.equal(pTypes[300], TokenType.Control);
  assert.equal(pScores[300], -1000);
  assert.equal(pTokens[301], "  ");
  assert.equal(pTypes[301], TokenType.UserDefined);
  assert.equal(pTokens[302], "[PAD302]");
  assert.equal(pTypes[302], TokenType.Unused);
  assert.equal(pScores[302], -10000);
  // the unknown token on its own (not an added token) is unknown
  const bare = ggufVocabFromHF(spmJson([["a", "b"]], GEMMA_LIKE), {});
  assert.equal((bare.get("tokenizer.ggml.token_type") as Int32Array)[0], TokenType.Unknown);
});

test("SentencePiece-style: the space prefix follows the normalizer, and tokenizer_config.json's add_prefix_space", () => {
  const merges: [string, string][] = [["a", "b"]];
  assert.equal(ggufVocabFromHF(spmJson(merges, GEMMA_LIKE)).get("tokenizer.ggml.add_space_prefix"), false);
  assert.equal(ggufVocabFromHF(spmJson(merges, LLAMA2_LIKE)).get("tokenizer.ggml.add_space_prefix"), true);
  assert.equal(
    ggufVocabFromHF(spmJson(merges, LLAMA2_LIKE), { add_prefix_space: false }).get("tokenizer.ggml.add_space_prefix"),
    false,
  );
  throwsNaming(() => ggufVocabFromHF(spmJson([], GEMMA_LIKE)), "model.merges", "scores");
});

/** BPE the way Hugging Face runs it: the adjacent pair with the lowest merge rank first, leftmost on ties. */
function bpeByRank(symbols: string[], ranks: Map<string, number>): string[] {
  const s = symbols.slice();
  for (;;) {
    let best = -1,
      bestRank = Infinity;
    for (let i = 0; i + 1 < s.length; i++) {
      const r = ranks.get(`${s[i]} ${s[i + 1]}`);
      if (r !== undefined && r < bestRank) {
        bestRank = r;
        best = i;
      }
    }
    if (best < 0) return s;
    s.splice(best, 2, s[best] + s[best + 1]);
  }
}

test("Gemma 3: SentencePiece merging by the derived scores is BPE merging by the tokenizer.json's ranks", () => {
  const { tokenizerJson, tokenizerConfig } = loadHFFiles("gemma3");
  const options: HFVocabOptions = REAL_VOCABS.find((v) => v.name === "gemma3")!.options!;
  const tok = Tokenizer.fromGGUF({ metadata: ggufVocabFromHF(tokenizerJson, tokenizerConfig, options) });
  const model = (tokenizerJson as Json).model as { vocab: Record<string, number>; merges: [string, string][] };
  const ranks = new Map<string, number>();
  model.merges.forEach(([a, b], i) => {
    const k = `${a} ${b}`;
    if (!ranks.has(k)) ranks.set(k, i);
  });
  // Words and single spaces in several scripts: no whitespace runs, newlines or tags, which the
  // converted vocabulary matches as user-defined tokens before merging.
  const pool = [
    ..."abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.,;:!?'\"-()",
    ..."éèàüößçñ日本語中文字のをカタ한국어мирΑλφαمرحبا😀🦙",
  ];
  const next = rng(2024);
  let checked = 0;
  for (let n = 0; n < 400; n++) {
    let text = "";
    const words = 1 + Math.floor(next() * 6);
    for (let w = 0; w < words; w++) {
      if (w > 0) text += " ";
      const len = 1 + Math.floor(next() * 10);
      for (let i = 0; i < len; i++) text += pool[Math.floor(next() * pool.length)];
    }
    const pieces = bpeByRank([...text.replaceAll(" ", "▁")], ranks);
    const want: number[] = [];
    for (const p of pieces) {
      const id = model.vocab[p];
      if (id !== undefined) want.push(id);
      else
        for (const b of new TextEncoder().encode(p))
          want.push(model.vocab[`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`]);
    }
    assert.deepEqual(tok.encode(text), want, JSON.stringify(text));
    checked++;
  }
  assert.equal(checked, 400);
});

// ---------------------------------------------------------------- pre-tokenizers on collapsed text

test("collapsed pre-tokenizers cut text into pieces that put it back together, whatever the text", () => {
  const next = rng(77);
  const pool = [..."aZ9 \t\n\r'sé日カ한😀\u0301\u200d\u00a0\u3000.,!٣ǅ𝔘"];
  for (const pre of ["gpt-4o", "deepseek-v3"]) {
    const cfg = preTokenizerConfig(pre)!;
    assert.ok(cfg.views, `${pre} runs on collapsed text`);
    for (let n = 0; n < 300; n++) {
      let text = "";
      const len = Math.floor(next() * 40);
      for (let i = 0; i < len; i++) text += pool[Math.floor(next() * pool.length)];
      const pieces = preTokenize(text, cfg);
      assert.equal(pieces.join(""), text);
      assert.ok(
        pieces.every((p) => p.length > 0),
        `${pre}: an empty piece in ${JSON.stringify(text)}`,
      );
    }
  }
});
