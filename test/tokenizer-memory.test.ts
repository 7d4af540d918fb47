/**
 * A tokenizer's memory stays within what a memory budget sets aside for it
 * (TOKENIZER_BYTES_PER_TOKEN a vocabulary entry, src/model/offload/layout.ts): on the real
 * vocabularies, the heap and array buffers a built tokenizer keeps alive once it has encoded, and
 * the trie constrained decoding walks (token-trie.ts, built on the first JSON-constrained
 * request), measured after full collections. A representation that costs an object per token (a
 * Uint8Array per token was ~190 bytes each, a trie node of Maps ~700) fails here before it takes
 * the neuron cache's memory in a run.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { Tokenizer } from "../src/tokenizer/index.js";
import { TOKENIZER_BYTES_PER_TOKEN } from "../src/model/offload/layout.js";
import { tokenTrie } from "../src/generate/token-trie.js";
import { collectGarbage } from "../src/runtime/memory.js";
import { REAL_VOCABS, vocabMetadata } from "./tokenizer-fixtures.js";

/** Heap and array buffers alive after full collections. */
function live(): number {
  collectGarbage();
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

for (const name of ["llama3", "qwen3", "gemma3", "gptoss"]) {
  test(`${name}: the tokenizer and its JSON trie keep at most ${TOKENIZER_BYTES_PER_TOKEN} bytes a vocabulary entry alive`, () => {
    const entry = REAL_VOCABS.find((e) => e.name === name);
    assert.ok(entry, `${name} is one of the fixtures' vocabularies`);
    const metadata = vocabMetadata(entry);
    const before = live();
    const tokenizer = Tokenizer.fromGGUF({ metadata });
    // first use builds what encoding needs lazily
    assert.ok(tokenizer.encode("Hello world, and a few more words to tokenize.").length > 3);
    const trie = tokenTrie(tokenizer);
    const kept = live() - before;
    const perToken = kept / tokenizer.vocabSize;
    assert.ok(
      perToken <= TOKENIZER_BYTES_PER_TOKEN,
      `${name}: ${(kept / 2 ** 20).toFixed(1)} MiB for ${tokenizer.vocabSize} tokens, ${perToken.toFixed(0)} bytes each`,
    );
    // both are alive up to here
    assert.equal(tokenizer.decode(tokenizer.encode("memory")), "memory");
    assert.equal(trie.vocabSize, tokenizer.vocabSize);
  });
}
