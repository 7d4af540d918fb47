/**
 * The real vocabularies of Llama 3, Qwen3, Gemma 3, gpt-oss and DeepSeek V3, converted at run time
 * from their Hugging Face files (test/fixtures/tokenizers/), and Phi-3's as llama.cpp converted it,
 * checked against what llama.cpp does with the same vocabulary (test/fixtures/tokenizers/<name>/llamacpp.json, made by
 * scripts/tokenizer-llamacpp-reference.mjs).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { StreamingDecoder, TokenAttr, Tokenizer } from "../src/tokenizer/index.js";
import { HARD_STRINGS, REAL_VOCABS, TOKENIZER_FIXTURES, metadataDigest, vocabMetadata } from "./tokenizer-fixtures.js";

interface Ref {
  convert_options: object | null;
  metadata_sha256: string;
  vocab: {
    n_tokens: number;
    bos: number;
    eos: number;
    eot: number;
    nl: number;
    add_bos: boolean;
    add_eos: boolean;
    eog: number[];
    attributes_not_normal: [number, number, number][];
    pieces_sha256: string;
    pieces_special_sha256: string;
  };
  strings: { text: string; ids: number[]; ids_special: number[]; detokenized: string; detokenized_special: string }[];
}

const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/** Length of the longest prefix of well-formed UTF-8 bytes that does not end inside a character. */
function completePrefix(bytes: readonly number[]): number {
  let i = bytes.length - 1;
  while (i >= 0 && bytes.length - i < 4 && (bytes[i] & 0xc0) === 0x80) i--;
  if (i < 0) return bytes.length;
  const lead = bytes[i];
  const need = lead >= 0xf0 ? 4 : lead >= 0xe0 ? 3 : lead >= 0xc0 ? 2 : 1;
  return bytes.length - i < need ? i : bytes.length;
}

for (const entry of REAL_VOCABS) {
  const { name, options } = entry;
  const ref = JSON.parse(readFileSync(join(TOKENIZER_FIXTURES, name, "llamacpp.json"), "utf8")) as Ref;
  let tok: Tokenizer | undefined;
  const tokenizer = (): Tokenizer => {
    if (!tok) throw new Error(`${name}: the vocabulary was not converted`);
    return tok;
  };

  test(`${name}: the converted vocabulary is the one llama.cpp's reference was made from`, () => {
    const t0 = performance.now();
    const meta = vocabMetadata(entry);
    const t1 = performance.now();
    tok = Tokenizer.fromGGUF({ metadata: meta });
    const t2 = performance.now();
    assert.deepEqual(options ?? null, ref.convert_options);
    assert.equal(metadataDigest(meta), ref.metadata_sha256, "convert again: scripts/tokenizer-llamacpp-reference.mjs");
    process.stderr.write(`# ${name}: converted in ${(t1 - t0).toFixed(0)} ms, loaded in ${(t2 - t1).toFixed(0)} ms\n`);
  });

  test(`${name}: special ids, end-of-generation tokens and token attributes as llama.cpp reads them`, () => {
    const t = tokenizer();
    const v = ref.vocab;
    assert.equal(t.vocabSize, v.n_tokens);
    // node-llama-cpp reports BOS and EOS only when they are control tokens, EOT and newline
    // unless they are unknown tokens, and -1 otherwise.
    const control = (id: number) => (id >= 0 && t.tokenAttributes(id) & TokenAttr.Control ? id : -1);
    const known = (id: number) => (id >= 0 && !(t.tokenAttributes(id) & TokenAttr.Unknown) ? id : -1);
    assert.equal(control(t.bosId), v.bos);
    assert.equal(control(t.eosId), v.eos);
    assert.equal(known(t.nlId), v.nl);
    if (name === "gptoss") {
      // Two end-of-turn candidates, <|endoftext|> and <|end|>: llama.cpp takes the first its hash
      // map yields, this engine the first of its list (see vocab.ts). Both end generation or
      // neither does the same way; only the reported EOT id differs.
      assert.equal(t.tokenText(v.eot), "<|endoftext|>");
      assert.equal(t.tokenText(t.eotId), "<|end|>");
    } else assert.equal(known(t.eotId), v.eot);
    assert.equal(t.addBos, v.add_bos);
    assert.equal(t.addEos, v.add_eos);
    assert.deepEqual(t.eogIds, v.eog);
    const runs: [number, number, number][] = [];
    for (let id = 0; id < t.vocabSize; id++) {
      const a = t.tokenAttributes(id);
      if (a === TokenAttr.Normal) continue;
      const last = runs[runs.length - 1];
      if (last && last[1] === id - 1 && last[2] === a) last[1] = id;
      else runs.push([id, id, a]);
    }
    assert.deepEqual(runs, v.attributes_not_normal);
  });

  test(`${name}: every token on its own detokenizes as llama.cpp's, special tokens hidden and shown`, () => {
    const t = tokenizer();
    const plain = createHash("sha256");
    const shown = createHash("sha256");
    for (let id = 0; id < t.vocabSize; id++) {
      plain.update(t.decode([id], { removeLeadingSpace: true }) + "\u0000");
      shown.update(t.decode([id], { removeLeadingSpace: true, special: true }) + "\u0000");
    }
    assert.equal(plain.digest("hex"), ref.vocab.pieces_sha256);
    assert.equal(shown.digest("hex"), ref.vocab.pieces_special_sha256);
  });

  test(`${name}: ${ref.strings.length} hard strings tokenize as llama.cpp's, special-token parsing off and on`, () => {
    const t = tokenizer();
    assert.deepEqual(
      ref.strings.map((s) => s.text),
      HARD_STRINGS,
      "the reference is for another list of strings: make it again",
    );
    const bad: string[] = [];
    let equal = 0;
    for (const s of ref.strings) {
      for (const [parseSpecial, want] of [
        [false, s.ids],
        [true, s.ids_special],
      ] as const) {
        const got = t.encode(s.text, { parseSpecial });
        if (JSON.stringify(got) === JSON.stringify(want)) equal++;
        else
          bad.push(
            `${JSON.stringify(s.text)} parseSpecial=${parseSpecial}: ${JSON.stringify(got)} != ${JSON.stringify(want)}`,
          );
      }
    }
    process.stderr.write(`# ${name}: ${equal} of ${2 * ref.strings.length} tokenizations equal llama.cpp's\n`);
    assert.deepEqual(bad, []);
  });

  test(`${name}: detokenization is llama.cpp's, and round-trips wherever llama.cpp's does`, () => {
    const t = tokenizer();
    const bad: string[] = [];
    let roundTrips = 0;
    for (const s of ref.strings) {
      const got = t.decode(s.ids, { removeLeadingSpace: true });
      const gotSpecial = t.decode(s.ids_special, { removeLeadingSpace: true, special: true });
      if (got !== s.detokenized)
        bad.push(`${JSON.stringify(s.text)}: ${JSON.stringify(got)} != ${JSON.stringify(s.detokenized)}`);
      if (gotSpecial !== s.detokenized_special)
        bad.push(
          `${JSON.stringify(s.text)} (special): ${JSON.stringify(gotSpecial)} != ${JSON.stringify(s.detokenized_special)}`,
        );
      // decode(encode(text)) gives the text back exactly where llama.cpp's does.
      if (s.detokenized === s.text) {
        const back = t.decode(t.encode(s.text), { removeLeadingSpace: true });
        if (back !== s.text) bad.push(`${JSON.stringify(s.text)} does not round-trip: ${JSON.stringify(back)}`);
        roundTrips++;
      }
    }
    assert.deepEqual(bad, []);
    const notRoundTrip = ref.strings.filter((s) => s.detokenized !== s.text).map((s) => JSON.stringify(s.text));
    process.stderr.write(
      `# ${name}: ${roundTrips} of ${ref.strings.length} strings round-trip (as llama.cpp); not: ${notRoundTrip.join(" ") || "none"}\n`,
    );
  });

  test(`${name}: streaming emits each UTF-8 character once it is complete, never a part of one`, () => {
    const t = tokenizer();
    let split = 0;
    for (const s of ref.strings) {
      const sd = new StreamingDecoder(t);
      let out = "";
      const bytes: number[] = [];
      for (const id of s.ids) {
        const chunk = sd.push(id);
        for (const b of t.piece(id)) bytes.push(b);
        // What has been emitted is exactly the complete characters among the bytes so far.
        const complete = completePrefix(bytes);
        if (complete < bytes.length) split++;
        out += chunk;
        assert.equal(
          out,
          utf8.decode(Uint8Array.from(bytes.slice(0, complete))),
          `${JSON.stringify(s.text)} after ${id}`,
        );
        assert.ok(
          !chunk.includes("\ufffd") || s.text.includes("\ufffd"),
          `a replacement character for ${JSON.stringify(s.text)}`,
        );
      }
      out += sd.flush();
      assert.equal(out, utf8.decode(Uint8Array.from(bytes)));
    }
    // The strings do split characters across tokens (emoji, rare scripts); otherwise the test proves nothing.
    assert.ok(split > 0, `${name}: no string split a character across tokens`);
    process.stderr.write(`# ${name}: ${split} tokens ended inside a UTF-8 character\n`);
    // The last test of this vocabulary: let it go before the next one is built.
    tok = undefined;
  });
}
