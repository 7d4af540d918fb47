import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../src/format/gguf.js";
import {
  Tokenizer,
  StreamingDecoder,
  TokenizerError,
  preTokenize,
  preTokenizerConfig,
} from "../src/tokenizer/index.js";
import { rng, SHARED } from "./helpers.js";

const MODEL = join(SHARED, "models", "stories260K.gguf");
const REF = join(SHARED, "reference", "stories260K.llamacpp.json");

interface Ref {
  tokenize: { text: string; ids: number[]; detokenized: string }[];
  greedy: { prompt: string; promptIds: number[]; ids: number[]; text: string; continuation: string }[];
}

const ref = JSON.parse(readFileSync(REF, "utf8")) as Ref;
const file = GGUFFile.open(MODEL);
const spm = Tokenizer.fromGGUF(file);
file.close();

// ---------------------------------------------------------------- SentencePiece (stories260K)

test("stories260K: metadata", () => {
  assert.equal(spm.vocabSize, 512);
  assert.equal(spm.kind, "spm");
  assert.equal(spm.bosId, 1);
  assert.equal(spm.eosId, 2);
  assert.equal(spm.unkId, 0);
  assert.equal(spm.addBos, true);
  assert.equal(spm.addSpacePrefix, true);
  assert.equal(spm.nlId, 13);
  assert.equal(spm.isEog(2), true);
  assert.equal(spm.isEog(1), false);
  assert.equal(spm.isEog(13), false);
  assert.equal(spm.tokenText(13), "<0x0A>");
});

test("stories260K: every reference string tokenizes and detokenizes as llama.cpp", () => {
  for (const e of ref.tokenize) {
    assert.deepEqual(spm.encode(e.text), e.ids, `ids of ${JSON.stringify(e.text)}`);
    assert.equal(spm.decode(e.ids, { removeLeadingSpace: true }), e.detokenized, `text of ${JSON.stringify(e.text)}`);
  }
});

test("stories260K: prompt ids (BOS first), generated text and streamed continuation", () => {
  for (const g of ref.greedy) {
    assert.deepEqual(spm.encode(g.prompt, { addBos: true }), g.promptIds, `prompt ${JSON.stringify(g.prompt)}`);
    assert.equal(spm.decode(g.ids, { removeLeadingSpace: true }), g.text, `text after ${JSON.stringify(g.prompt)}`);
    const sd = new StreamingDecoder(spm);
    let s = "";
    for (const id of g.ids) s += sd.push(id);
    s += sd.flush();
    assert.equal(s, g.continuation, `continuation after ${JSON.stringify(g.prompt)}`);
  }
});

test("stories260K: the space strip is used up by a leading BOS, as in llama.cpp", () => {
  const ids = spm.encode("Once upon", { addBos: true });
  assert.equal(spm.decode(ids, { removeLeadingSpace: true }), " Once upon");
  assert.equal(spm.decode(ids.slice(1), { removeLeadingSpace: true }), "Once upon");
  assert.equal(spm.decode(ids.slice(1)), " Once upon");
  assert.equal(spm.decode(ids, { special: true }), "<s> Once upon");
});

test("stories260K: characters outside the vocabulary fall back to byte tokens", () => {
  const ids = spm.encode("héllo 😀 世界");
  const texts = ids.map((id) => spm.tokenText(id));
  // 😀 = F0 9F 98 80, 世 = E4 B8 96, 界 = E7 95 8C
  for (const b of [
    "<0xF0>",
    "<0x9F>",
    "<0x98>",
    "<0x80>",
    "<0xE4>",
    "<0xB8>",
    "<0x96>",
    "<0xE7>",
    "<0x95>",
    "<0x8C>",
  ]) {
    assert.ok(texts.includes(b), `expected byte token ${b} in ${texts.join(" ")}`);
  }
  assert.deepEqual(Array.from(spm.piece(spm.encode("😀").at(-1)!)), [0x80]);
  assert.equal(spm.decode(ids, { removeLeadingSpace: true }), "héllo 😀 世界");
});

test("stories260K: streaming never splits a UTF-8 character", () => {
  const text = "héllo 😀 世界";
  const ids = spm.encode(text);
  const sd = new StreamingDecoder(spm, { removeLeadingSpace: true });
  const chunks = ids.map((id) => sd.push(id));
  const rest = sd.flush();
  assert.equal(rest, "");
  assert.equal(chunks.join(""), text);
  for (const c of chunks) assert.ok(!c.includes("\uFFFD"), `chunk ${JSON.stringify(c)} has a replacement character`);
  // the 4 byte tokens of 😀: three print nothing, the fourth prints the whole character
  const at = ids.findIndex((id) => spm.tokenText(id) === "<0xF0>");
  assert.deepEqual(chunks.slice(at, at + 4), ["", "", "", "😀"]);
  // without the strip the leading space of the first token is kept
  const sd2 = new StreamingDecoder(spm);
  assert.equal(ids.map((id) => sd2.push(id)).join("") + sd2.flush(), " " + text);
});

test("stories260K: an incomplete character left at flush becomes U+FFFD", () => {
  const sd = new StreamingDecoder(spm);
  const f0 = spm.encode("😀").find((id) => spm.tokenText(id) === "<0xF0>")!;
  assert.equal(sd.push(f0), "");
  assert.equal(sd.flush(), "\uFFFD");
});

test("stories260K: special tokens are parsed only when asked", () => {
  assert.deepEqual(spm.encode("<s>Once", { parseSpecial: true }), [1, 403]);
  const plain = spm.encode("<s>Once");
  assert.ok(!plain.includes(1));
  assert.equal(spm.decode(plain, { removeLeadingSpace: true }), "<s>Once");
  // text after a special token gets the space prefix again
  const mixed = spm.encode("Once</s>Once", { parseSpecial: true });
  assert.deepEqual(mixed, [403, 2, 403]);
  assert.deepEqual(spm.encode("Once", { addBos: true, addEos: true }), [1, 403, 2]);
  assert.deepEqual(spm.encode(""), []);
  assert.deepEqual(spm.encode("", { addBos: true }), [1]);
});

test("stories260K: pieces", () => {
  assert.equal(new TextDecoder().decode(spm.piece(403)), " Once");
  assert.equal(spm.piece(1).length, 0);
  assert.equal(new TextDecoder().decode(spm.specialPiece(1)), "<s>");
  assert.deepEqual(Array.from(spm.piece(13)), [10]);
});

test("invalid ids give a RangeError naming the id and the vocabulary size", () => {
  assert.throws(
    () => spm.decode([5, 999]),
    (e: unknown) => e instanceof RangeError && /999/.test(e.message) && /512/.test(e.message),
  );
  assert.throws(
    () => spm.piece(-1),
    (e: unknown) => e instanceof RangeError && /-1/.test(e.message) && /512/.test(e.message),
  );
  assert.throws(() => spm.piece(1.5), RangeError);
  assert.throws(() => spm.tokenText(512), RangeError);
});

test("stories260K: a 2 MB corpus round-trips", () => {
  const parts = ref.tokenize
    .map((e) => e.text)
    .concat(
      ref.greedy.map((g) => g.text),
      ["héllo 😀 世界\n"],
    );
  let corpus = "";
  while (corpus.length < 2_000_000) corpus += parts.join("\n") + "\n";
  const ids = spm.encode(corpus);
  assert.ok(ids.length > 300_000);
  assert.equal(spm.decode(ids, { removeLeadingSpace: true }), corpus);
});

/**
 * The SentencePiece merge rule written the slow, obvious way: among adjacent symbols whose
 * concatenation is a token, merge the one with the highest score, leftmost on ties; repeat.
 * Unknown single characters become their UTF-8 byte tokens.
 */
function naiveSpm(tok: Tokenizer, scores: ArrayLike<number>, text: string): number[] {
  const ids = new Map<string, number>();
  for (let i = 0; i < tok.vocabSize; i++) ids.set(tok.tokenText(i), i);
  const syms = Array.from((" " + text).replaceAll(" ", "\u2581"));
  for (;;) {
    let best = -1,
      bestScore = -Infinity;
    for (let i = 0; i + 1 < syms.length; i++) {
      const id = ids.get(syms[i] + syms[i + 1]);
      if (id !== undefined && scores[id] > bestScore) {
        best = i;
        bestScore = scores[id];
      }
    }
    if (best < 0) break;
    syms.splice(best, 2, syms[best] + syms[best + 1]);
  }
  const out: number[] = [];
  for (const s of syms) {
    const id = ids.get(s);
    if (id !== undefined) out.push(id);
    else
      for (const b of new TextEncoder().encode(s))
        out.push(ids.get(`<0x${b.toString(16).toUpperCase().padStart(2, "0")}>`)!);
  }
  return out;
}

test("stories260K: the fast encoder agrees with the obvious merge rule on random text", () => {
  const f = GGUFFile.open(MODEL);
  const scores = f.metadata.get("tokenizer.ggml.scores") as Float32Array;
  f.close();
  const alphabet = Array.from("eeeeaaaooottthhnnsirldlyumwgpcbfk,.'\"!?  \n\tTSLHOI0123éñ世😀─");
  const next = rng(12345);
  for (let n = 0; n < 300; n++) {
    let text = "";
    const len = 1 + Math.floor(next() * 120);
    for (let i = 0; i < len; i++) text += alphabet[Math.floor(next() * alphabet.length)];
    assert.deepEqual(spm.encode(text), naiveSpm(spm, scores, text), `text ${JSON.stringify(text)}`);
  }
});

test("SPM: equal scores merge the leftmost pair first; no byte token falls back to <unk>", () => {
  const tokens = ["<unk>", "<s>", "</s>", "\u2581", "a", "b", "ab", "ba", "\u2581a"];
  const meta = new Map<string, unknown>([
    ["tokenizer.ggml.model", "llama"],
    ["tokenizer.ggml.tokens", tokens],
    ["tokenizer.ggml.scores", new Float32Array([0, 0, 0, -5, -5, -5, -1, -1, -10])],
    ["tokenizer.ggml.token_type", new Int32Array([2, 3, 3, 1, 1, 1, 1, 1, 1])],
  ]);
  const t = Tokenizer.fromGGUF({ metadata: meta });
  // "▁aba": a+b and b+a both score -1; a+b is leftmost, then nothing else can merge
  assert.deepEqual(t.encode("aba"), [3, 6, 4]);
  // "x" is in no token and there are no byte tokens: one <unk>
  assert.deepEqual(t.encode("axb"), [8, 0, 5]);
  assert.equal(t.decode([3, 6, 4], { removeLeadingSpace: true }), "aba");
  // add_space_prefix = false in metadata turns the prefix off
  meta.set("tokenizer.ggml.add_space_prefix", false);
  assert.deepEqual(Tokenizer.fromGGUF({ metadata: meta }).encode("aba"), [6, 4]);
});

// ---------------------------------------------------------------- byte-level BPE, hand-built

/** GPT-2 byte alphabet, written out independently: printable Latin-1 stands for itself. */
function byteChar(b: number): string {
  const printable = (x: number) => (x >= 0x21 && x <= 0x7e) || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff);
  if (printable(b)) return String.fromCharCode(b);
  let k = 0;
  for (let x = 0; x < b; x++) if (!printable(x)) k++;
  return String.fromCharCode(256 + k);
}

const BPE_EXTRA = [
  "Ġt", // 256
  "he", // 257
  "Ġthe", // 258
  "we", // 259
  "lo", // 260
  "low", // 261
  "er", // 262
  "Ġl", // 263
  "Ġlower", // 264: reachable only by taking the word whole (llama-bpe's ignore_merges)
  "<|endoftext|>", // 265 control
  "<|im_start|>", // 266 control
  "<tool>", // 267 user-defined
  "oo", // 268
];
const BPE_MERGES = ["Ġ t", "h e", "Ġt he", "w e", "l o", "lo w", "e r", "Ġ l", "o o"];

function bpeMetadata(pre: string | undefined, extra: Record<string, unknown> = {}): Map<string, unknown> {
  const tokens: string[] = [];
  for (let b = 0; b < 256; b++) tokens.push(byteChar(b)); // id = byte value
  tokens.push(...BPE_EXTRA);
  const types = new Int32Array(tokens.length).fill(1);
  types[265] = 3;
  types[266] = 3;
  types[267] = 4;
  const m = new Map<string, unknown>([
    ["tokenizer.ggml.model", "gpt2"],
    ["tokenizer.ggml.tokens", tokens],
    ["tokenizer.ggml.token_type", types],
    ["tokenizer.ggml.merges", BPE_MERGES],
    ["tokenizer.ggml.bos_token_id", 265],
    ["tokenizer.ggml.eos_token_id", 265],
  ]);
  if (pre !== undefined) m.set("tokenizer.ggml.pre", pre);
  for (const [k, v] of Object.entries(extra)) m.set(k, v);
  return m;
}

const gpt2 = Tokenizer.fromGGUF({ metadata: bpeMetadata("gpt-2") });
const llama3 = Tokenizer.fromGGUF({ metadata: bpeMetadata("llama-bpe") });
const qwen2 = Tokenizer.fromGGUF({ metadata: bpeMetadata("qwen2") });
const bytesOf = (s: string) => Array.from(new TextEncoder().encode(s));

test("BPE: merges by rank, not by position", () => {
  // "the": only h+e merges. " lower" = Ġ l o w e r: ranks w+e (3) < l+o (4) < e+r (6) < Ġ+l (7);
  // after w+e and l+o, e+r and Ġ+l are stale and lo+w can no longer happen.
  assert.deepEqual(gpt2.encode("the lower"), [116, 257, 32, 260, 259, 114]);
  // Ġ+t (0), h+e (1), then Ġt+he (2)
  assert.deepEqual(gpt2.encode(" the"), [258]);
  // equal ranks: the leftmost pair merges first
  assert.deepEqual(gpt2.encode("ooo"), [268, 111]);
  assert.equal(gpt2.kind, "bpe");
  assert.equal(gpt2.addBos, false);
  assert.equal(gpt2.addSpacePrefix, false);
});

test("BPE: bytes outside ASCII go through the GPT-2 byte alphabet", () => {
  // with no merges among them, ids are the UTF-8 bytes (the vocabulary puts byte b at id b)
  assert.deepEqual(gpt2.encode("é"), [0xc3, 0xa9]);
  assert.deepEqual(gpt2.encode(" 😀"), bytesOf(" 😀"));
  assert.deepEqual(gpt2.encode("世界\n"), bytesOf("世界\n"));
  assert.equal(gpt2.decode(gpt2.encode("héllo 😀 世界")), "héllo 😀 世界");
  assert.equal(gpt2.decode([0xf0, 0x9f]), "\uFFFD");
});

test("BPE: llama-bpe takes a word that is a token whole (ignore_merges) and wants BOS", () => {
  assert.deepEqual(llama3.encode("the lower"), [116, 257, 264]);
  assert.deepEqual(gpt2.encode(" lower"), [32, 260, 259, 114]);
  assert.equal(llama3.addBos, true);
  assert.deepEqual(llama3.encode("the", { addBos: true }), [265, 116, 257]);
});

test("BPE: special tokens", () => {
  assert.deepEqual(gpt2.encode("<|im_start|>the", { parseSpecial: true }), [266, 116, 257]);
  // as plain text: "<|", "im", "_", "start", "|>", "the"
  assert.deepEqual(gpt2.encode("<|im_start|>the"), [...bytesOf("<|im_start|>"), 116, 257]);
  // user-defined tokens are matched even without parseSpecial
  assert.deepEqual(gpt2.encode("a<tool>b"), [97, 267, 98]);
  assert.equal(gpt2.isEog(265), true); // EOS, and <|endoftext|> by text
  assert.equal(gpt2.eotId, 265);
  assert.equal(gpt2.isEog(266), false);
  assert.equal(gpt2.piece(266).length, 0);
  assert.equal(new TextDecoder().decode(gpt2.specialPiece(266)), "<|im_start|>");
  assert.equal(new TextDecoder().decode(gpt2.piece(267)), "<tool>");
  assert.equal(gpt2.decode([266, 116, 257], { special: true }), "<|im_start|>the");
});

test("BPE: decode cleans spaces before punctuation where the pre-tokenizer says so", () => {
  assert.equal(gpt2.decode([258, 32, 260, 259, 114]), " the lower");
  const ids = [...bytesOf("it 's a 't , ok . ' x")];
  assert.equal(gpt2.decode(ids), "it's a 't, ok.'x");
  assert.equal(qwen2.decode(ids), "it 's a 't , ok . ' x");
  // removeLeadingSpace only applies to models with a space prefix
  assert.equal(gpt2.decode([258], { removeLeadingSpace: true }), " the");
});

test("BPE streaming decoder joins a character split over byte tokens", () => {
  const sd = new StreamingDecoder(gpt2);
  const out = bytesOf("a😀").map((id) => sd.push(id));
  assert.deepEqual(out, ["a", "", "", "", "😀"]);
  assert.equal(sd.flush(), "");
});

/** BPE the obvious way: per pre-tokenizer word, merge the lowest-ranked pair, leftmost on ties. */
function naiveBpe(tok: Tokenizer, text: string): number[] {
  const ids = new Map<string, number>();
  for (let i = 0; i < tok.vocabSize; i++) ids.set(tok.tokenText(i), i);
  const rank = new Map(BPE_MERGES.map((m, i) => [m, i]));
  const out: number[] = [];
  for (const word of preTokenize(text, preTokenizerConfig(tok.pre)!.regexes)) {
    const syms = Array.from(new TextEncoder().encode(word), byteChar);
    for (;;) {
      let best = -1,
        bestRank = Infinity;
      for (let i = 0; i + 1 < syms.length; i++) {
        const r = rank.get(syms[i] + " " + syms[i + 1]);
        if (r !== undefined && r < bestRank) {
          best = i;
          bestRank = r;
        }
      }
      if (best < 0) break;
      syms.splice(best, 2, syms[best] + syms[best + 1]);
    }
    for (const sym of syms) out.push(ids.get(sym)!);
  }
  return out;
}

test("BPE: the encoder agrees with the obvious merge rule on random text", () => {
  const alphabet = Array.from("theloworhe  lower o oo ,.'!\n1é😀");
  const next = rng(777);
  for (let n = 0; n < 300; n++) {
    let text = "";
    const len = 1 + Math.floor(next() * 60);
    for (let i = 0; i < len; i++) text += alphabet[Math.floor(next() * alphabet.length)];
    assert.deepEqual(gpt2.encode(text), naiveBpe(gpt2, text), `text ${JSON.stringify(text)}`);
    // qwen2 does not clean up spaces, so its decode gives the text back exactly
    assert.equal(qwen2.decode(qwen2.encode(text)), text, `round trip of ${JSON.stringify(text)}`);
  }
});

// ---------------------------------------------------------------- pre-tokenizers

function split(pre: string, text: string): string[] {
  const cfg = preTokenizerConfig(pre);
  assert.ok(cfg, `pre-tokenizer ${pre}`);
  return preTokenize(text, cfg.regexes);
}

test("pre-tokenizer gpt-2", () => {
  assert.deepEqual(split("gpt-2", "Hello world's 123  foo\n\nbar 😀!"), [
    "Hello",
    " world",
    "'s",
    " 123",
    " ",
    " foo",
    "\n",
    "\n",
    "bar",
    " 😀!",
  ]);
  assert.deepEqual(split("gpt-2", "DON'T don't"), ["DON", "'", "T", " don", "'t"]);
  assert.deepEqual(split("gpt-2", "a  "), ["a", "  "]);
  assert.deepEqual(split("gpt-2", "a\tb"), ["a", "\t", "b"]);
  assert.deepEqual(split("gpt-2", "abc123def"), ["abc", "123", "def"]);
  assert.deepEqual(split("gpt-2", "we'll've"), ["we", "'ll", "'ve"]);
  // U+00A0 is whitespace, U+FEFF is not (llama.cpp's tables follow Unicode's White_Space)
  assert.deepEqual(split("gpt-2", "a\u00a0\u00a0b"), ["a", "\u00a0", "\u00a0", "b"]);
  assert.deepEqual(split("gpt-2", "\ufeffa"), ["\ufeff", "a"]);
});

test("pre-tokenizer llama3", () => {
  assert.deepEqual(split("llama-bpe", "Hello world's 123456  foo\n\nbar 😀!"), [
    "Hello",
    " world",
    "'s",
    " ",
    "123",
    "456",
    " ",
    " foo",
    "\n\n",
    "bar",
    " 😀!",
  ]);
  assert.deepEqual(split("llama-bpe", "DON'T"), ["DON", "'T"]);
  assert.deepEqual(split("llama-bpe", "a\r\n\r\n  b"), ["a", "\r\n\r\n", " ", " b"]);
  assert.deepEqual(split("llama-bpe", "a\tb"), ["a", "\tb"]);
  assert.deepEqual(split("llama-bpe", "x?!\n\ny"), ["x", "?!\n\n", "y"]);
  assert.deepEqual(split("llama-bpe", "世界 hi"), ["世界", " hi"]);
});

test("pre-tokenizer qwen2 splits every digit", () => {
  assert.deepEqual(split("qwen2", "x12345"), ["x", "1", "2", "3", "4", "5"]);
});

test("pre-tokenizer default refines punctuation, numbers and digit triples", () => {
  assert.deepEqual(split("default", "Hello, world!!! 1234"), ["Hello", ",", " world", "!!!", " ", "123", "4"]);
  assert.deepEqual(preTokenizerConfig("")?.family, "default");
  assert.equal(preTokenizerConfig("no-such-pre"), null);
});

// ---------------------------------------------------------------- bad metadata

function throwsNaming(meta: Map<string, unknown>, key: string | RegExp): void {
  assert.throws(
    () => Tokenizer.fromGGUF({ metadata: meta }),
    (e: unknown) =>
      e instanceof TokenizerError && (typeof key === "string" ? e.message.includes(key) : key.test(e.message)),
  );
}

test("bad metadata gives a clear error naming the key", () => {
  const without = (k: string) => {
    const m = bpeMetadata("gpt-2");
    m.delete(k);
    return m;
  };
  throwsNaming(without("tokenizer.ggml.model"), "tokenizer.ggml.model");
  throwsNaming(without("tokenizer.ggml.tokens"), "tokenizer.ggml.tokens");
  throwsNaming(without("tokenizer.ggml.merges"), "tokenizer.ggml.merges");
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.tokens": ["a", 5] }), /tokenizer\.ggml\.tokens"\[1\]/);
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.tokens": "abc" }), "tokenizer.ggml.tokens");
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.tokens": [] }), "tokenizer.ggml.tokens");
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.token_type": new Int32Array(3) }), "tokenizer.ggml.token_type");
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.scores": new Float32Array(3) }), "tokenizer.ggml.scores");
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.add_bos_token": 1 }), "tokenizer.ggml.add_bos_token");
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.bos_token_id": "1" }), "tokenizer.ggml.bos_token_id");
  throwsNaming(bpeMetadata("tekken"), "tokenizer.ggml.pre");
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.model": "t5" }), "tokenizer.ggml.model");
  throwsNaming(bpeMetadata("gpt-2", { "tokenizer.ggml.model": "whatever" }), "tokenizer.ggml.model");
  throwsNaming(
    bpeMetadata("gpt-2", {
      "tokenizer.ggml.tokens": [...(bpeMetadata("gpt-2").get("tokenizer.ggml.tokens") as string[])].fill("x", 260, 262),
    }),
    /same text/,
  );
  assert.throws(() => Tokenizer.fromGGUF({} as never), TokenizerError);
});

test("the gpt-4o and deepseek-v3 pre-tokenizers load and round-trip; an unknown one is refused by name", () => {
  for (const pre of ["gpt-4o", "deepseek-v3"]) {
    const t = Tokenizer.fromGGUF({ metadata: bpeMetadata(pre) });
    assert.equal(t.pre, pre);
    const text = "The lower HELLOworld 12345 日本語 é\u0301 😀\n\n  x";
    assert.equal(t.decode(t.encode(text)), text);
  }
  throwsNaming(bpeMetadata("no-such-pre"), /"no-such-pre" is a pre-tokenizer this engine does not implement/);
});

test("out-of-range special ids in metadata are ignored, as llama.cpp does", () => {
  const t = Tokenizer.fromGGUF({
    metadata: bpeMetadata("gpt-2", {
      "tokenizer.ggml.padding_token_id": 0xffffffff,
      "tokenizer.ggml.eot_token_id": 266,
    }),
  });
  assert.equal(t.padId, -1);
  assert.equal(t.eotId, 266);
  assert.equal(t.isEog(266), true);
});
