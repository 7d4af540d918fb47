#!/usr/bin/env node
/**
 * Makes test/fixtures/tokenizers/<name>/llamacpp.json: what llama.cpp does with the real
 * vocabularies of Llama 3, Qwen3, Gemma 3, gpt-oss, DeepSeek V3 and Phi-3, so that the tests can check
 * the engine's tokenizer against it.
 *
 * For each vocabulary the Hugging Face files in test/fixtures/tokenizers/<name>/ go through this
 * engine's converter (src/format/hf-tokenizer.ts) into a vocabulary-only GGUF, written with the
 * engine's GGUFWriter (Phi-3's folder holds llama.cpp's own vocabulary GGUF instead). llama.cpp
 * loads that file and records, for every string of HARD_STRINGS (test/tokenizer-fixtures.ts), its
 * token ids with special-token parsing off and on, and the text of those ids detokenized with
 * special tokens hidden and shown. It also records the vocabulary as llama.cpp reads it: special
 * ids (as node-llama-cpp reports them: BOS and EOS only when they are control tokens), the
 * end-of-generation ids, each token's attributes, and a digest of every single token's text.
 *
 * llama.cpp comes from node-llama-cpp 3.21.1 in bench/.peer (installed by bench/run; never a
 * dependency of the package, and tests never load it).
 *
 *   npx tsc -p . && node scripts/tokenizer-llamacpp-reference.mjs [NAME...]   (default: all six)
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";
import { gunzipSync } from "node:zlib";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const dist = (p) => import(pathToFileURL(join(ROOT, "dist", p)).href);
const { GGUFWriter } = await dist("src/format/gguf-writer.js");
const { REAL_VOCABS, HARD_STRINGS, vocabMetadata, metadataDigest, TOKENIZER_FIXTURES } =
  await dist("test/tokenizer-fixtures.js");

const names = process.argv.slice(2);
for (const n of names)
  if (!REAL_VOCABS.some((v) => v.name === n))
    throw new Error(`unknown vocabulary ${n} (known: ${REAL_VOCABS.map((v) => v.name).join(", ")})`);

const pkg = join(ROOT, "bench", ".peer", "node_modules", "node-llama-cpp");
const version = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
const { getLlama } = await import(pathToFileURL(join(pkg, "dist", "index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });

/** Runs of equal attributes: [first id, last id, attribute], for every token whose attribute is not "normal". */
function attributeRuns(attrs) {
  const runs = [];
  for (let id = 0; id < attrs.length; id++) {
    if (attrs[id] === 4) continue;
    const last = runs[runs.length - 1];
    if (last && last[1] === id - 1 && last[2] === attrs[id]) last[1] = id;
    else runs.push([id, id, attrs[id]]);
  }
  return runs;
}

const dir = mkdtempSync(join(tmpdir(), "tokenizer-ref-"));
try {
  for (const v of REAL_VOCABS) {
    const { name, what, options, gguf } = v;
    if (names.length && !names.includes(name)) continue;
    const meta = vocabMetadata(v);
    const path = join(dir, `${name}.gguf`);
    if (gguf) {
      writeFileSync(path, gunzipSync(readFileSync(join(TOKENIZER_FIXTURES, name, gguf))));
    } else {
      const w = new GGUFWriter(path, { fsync: false });
      // A vocabulary-only file still needs an architecture and its hyperparameters to load.
      w.setMetadata("general.architecture", "llama");
      w.setMetadata("general.name", `${name} vocabulary`);
      w.setMetadata("llama.context_length", 4096);
      w.setMetadata("llama.embedding_length", 64);
      w.setMetadata("llama.block_count", 1);
      w.setMetadata("llama.feed_forward_length", 128);
      w.setMetadata("llama.attention.head_count", 1);
      w.setMetadata("llama.attention.layer_norm_rms_epsilon", 1e-5);
      for (const [k, val] of meta) w.setMetadata(k, val);
      await w.finish();
    }

    const model = await llama.loadModel({ modelPath: path, vocabOnly: true });
    const m = model._model;
    const n = meta.get("tokenizer.ggml.tokens").length;
    const attrs = [];
    const eog = [];
    const plain = createHash("sha256");
    const shown = createHash("sha256");
    for (let id = 0; id < n; id++) {
      attrs.push(m.getTokenAttributes(id));
      if (m.isEogToken(id)) eog.push(id);
      plain.update(m.detokenize(Uint32Array.of(id), false) + "\u0000");
      shown.update(m.detokenize(Uint32Array.of(id), true) + "\u0000");
    }
    const strings = HARD_STRINGS.map((text) => {
      const ids = Array.from(m.tokenize(text, false));
      const idsSpecial = Array.from(m.tokenize(text, true));
      return {
        text,
        ids,
        ids_special: idsSpecial,
        detokenized: m.detokenize(Uint32Array.from(ids), false),
        detokenized_special: m.detokenize(Uint32Array.from(idsSpecial), true),
      };
    });
    const id = (x) => (x == null || x < 0 ? -1 : x);
    const ref = {
      description:
        `llama.cpp's tokenization of ${what}: ` +
        (gguf
          ? `llama.cpp's vocabulary-only GGUF ${gguf} (gunzipped) loaded by llama.cpp. `
          : `the vocabulary converted from this folder's Hugging Face files by src/format/hf-tokenizer.ts, ` +
            `written as a vocabulary-only GGUF and loaded by llama.cpp. `) +
        `ids: tokenize(text, parse_special = false); ids_special: parse_special = true; detokenized: ` +
        `llama_detokenize(ids, remove_special = false, unparse_special = false); detokenized_special: of ` +
        `ids_special with unparse_special = true. The test converts the files again and checks the ` +
        `metadata digest first.`,
      convert_options: options ?? null,
      metadata_sha256: metadataDigest(meta),
      peer: `llama.cpp via node-llama-cpp ${version} (prebuilt CPU build)`,
      node_llama_cpp_version: version,
      made_by: `npx tsc -p . && node scripts/tokenizer-llamacpp-reference.mjs ${name}`,
      vocab: {
        n_tokens: n,
        bos: id(m.tokenBos()),
        eos: id(m.tokenEos()),
        eot: id(m.eotToken()),
        nl: id(m.tokenNl()),
        add_bos: m.shouldPrependBosToken(),
        add_eos: m.shouldAppendEosToken(),
        eog,
        attributes_not_normal: attributeRuns(attrs),
        pieces_sha256: plain.digest("hex"),
        pieces_special_sha256: shown.digest("hex"),
      },
      strings,
    };
    await model.dispose();
    const out = join(TOKENIZER_FIXTURES, name, "llamacpp.json");
    writeFileSync(out, JSON.stringify(ref, null, 1) + "\n");
    process.stderr.write(`wrote ${out} (${strings.length} strings)\n`);
  }
} finally {
  await llama.dispose();
  rmSync(dir, { recursive: true, force: true });
}
