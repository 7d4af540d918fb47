/**
 * A context of fewer than 2 tokens cannot hold BOS and one more token, so no generation can ever
 * run in it: it is refused when the model loads, naming where the size came from (the option, or
 * the file's context_length), instead of loading and failing at the first prompt.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { loadModel } from "../src/index.js";
import { rewrite } from "./rewrite.js";
import { SHARED } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;

test("contextSize 1 is refused at load", async () => {
  await assert.rejects(
    loadModel({ modelPath: STORIES, threads: 1, contextSize: 1 }),
    /contextSize 1 is too small: a context must hold at least 2 tokens/,
  );
});

test("a file whose context_length is 1 is refused at load unless a context size is given", async () => {
  const path = await rewrite(STORIES, "ctx1", { metadata: { "llama.context_length": 1 } });
  await assert.rejects(
    loadModel({ modelPath: path, threads: 1 }),
    /ctx1\.gguf: metadata "llama\.context_length" = 1 makes a context of 1 token; a context must hold at least 2 tokens: give a context size/,
  );
  const m = await loadModel({ modelPath: path, threads: 1, contextSize: 64 });
  try {
    assert.equal(m.contextSize, 64);
    assert.ok((await m.generate("Once", { maxTokens: 4, temperature: 0 }).text()).length > 0);
  } finally {
    await m.dispose();
  }
});
