/**
 * Real-model parity: stories260K (SiLU) against llama.cpp's greedy tokens, relu-stories (ReLU)
 * against a PyTorch reference's logits and greedy tokens, at 1 and 2 threads, and prompt prefill
 * as one batch against token-by-token decoding.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { loadModel } from "../src/index.js";
import { LlamaModel } from "../src/model/model.js";
import { greedy, SHARED } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const RELU = `${SHARED}/models/relu-stories.gguf`;
const RELU_Q8 = `${SHARED}/models/relu-stories.Q8_0.gguf`;
const llamacpp = JSON.parse(readFileSync(`${SHARED}/reference/stories260K.llamacpp.json`, "utf8"));
const reluRef = JSON.parse(readFileSync(`${SHARED}/reference/relu-stories.json`, "utf8"));

for (const threads of [1, 2]) {
  test(`stories260K: greedy 64 tokens equal llama.cpp's for every prompt (${threads} thread(s))`, async () => {
    const model = await LlamaModel.load(STORIES, { threads });
    try {
      for (const ref of llamacpp.greedy) {
        const { ids } = greedy(model, ref.promptIds, ref.ids.length);
        assert.deepEqual(ids, ref.ids, `prompt ${JSON.stringify(ref.prompt)}`);
      }
    } finally {
      await model.dispose();
    }
  });

  test(`relu-stories: logits within 1e-3 of the PyTorch reference and greedy ids equal (${threads} thread(s))`, async () => {
    const model = await LlamaModel.load(RELU, { threads });
    try {
      assert.equal(model.config.activation, "relu");
      for (const ref of reluRef.prompts) {
        const { ids, logits } = greedy(model, ref.prompt_ids, ref.greedy_ids.length);
        assert.deepEqual(ids, ref.greedy_ids, `prompt ${JSON.stringify(ref.prompt)}`);
        for (let k = 0; k < ref.logits_first3.length; k++) {
          const want: number[] = ref.logits_first3[k];
          const scale = Math.max(...want.map(Math.abs));
          let worst = 0;
          for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(logits[k][i] - want[i]));
          assert.ok(
            worst <= 1e-3 * scale,
            `prompt ${JSON.stringify(ref.prompt)} position ${k}: max |diff| ${worst} > ${1e-3 * scale}`,
          );
        }
      }
    } finally {
      await model.dispose();
    }
  });
}

test("relu-stories Q8_0: greedy ids equal the F32 reference's", async () => {
  const model = await LlamaModel.load(RELU_Q8, { threads: 2 });
  try {
    let same = 0;
    for (const ref of reluRef.prompts) {
      const { ids } = greedy(model, ref.prompt_ids, ref.greedy_ids.length);
      if (JSON.stringify(ids) === JSON.stringify(ref.greedy_ids)) same++;
    }
    // The reference's own crosscheck found all 5 prompts identical for this Q8_0 file.
    assert.equal(same, reluRef.prompts.length);
  } finally {
    await model.dispose();
  }
});

test("prompt prefill as one batch gives the same logits as token-by-token decoding", async () => {
  for (const path of [RELU, RELU_Q8]) {
    const model = await LlamaModel.load(path, { threads: 2 });
    try {
      const prompt = reluRef.prompts[1].prompt_ids as number[];
      const a = greedy(model, prompt, 4, true);
      const b = greedy(model, prompt, 4, false);
      assert.deepEqual(a.ids, b.ids);
      for (let k = 0; k < 4; k++) {
        let worst = 0;
        for (let i = 0; i < a.logits[k].length; i++) worst = Math.max(worst, Math.abs(a.logits[k][i] - b.logits[k][i]));
        assert.ok(worst < 2e-3, `${path} position ${k}: batch vs sequential differ by ${worst}`);
      }
    } finally {
      await model.dispose();
    }
  }
});

test("library: generate() streams llama.cpp's continuation text and reports stats", async () => {
  const model = await loadModel({ modelPath: STORIES, threads: 1 });
  try {
    for (const ref of llamacpp.greedy.slice(0, 3)) {
      const gen = model.generate(ref.prompt, { maxTokens: ref.ids.length, temperature: 0 });
      let text = "";
      for await (const piece of gen) text += piece;
      assert.deepEqual(gen.tokens, ref.ids);
      assert.equal(text, ref.continuation);
      assert.equal(gen.stats!.promptTokens, ref.promptIds.length);
      assert.ok(gen.stats!.decodeTokensPerSecond > 0 && gen.stats!.prefillTokensPerSecond > 0);
    }
    assert.deepEqual(model.tokenize(llamacpp.tokenize[0].text), llamacpp.tokenize[0].ids);
  } finally {
    await model.dispose();
  }
});

test("library: maxTokens, stop strings and AbortSignal end a generation", async () => {
  const model = await loadModel({ modelPath: STORIES, threads: 1 });
  try {
    const ref = llamacpp.greedy[0];
    const short = model.generate(ref.prompt, { maxTokens: 5, temperature: 0 });
    await short.text();
    assert.equal(short.tokens.length, 5);
    assert.equal(short.stats!.stopReason, "maxTokens");

    const stopped = model.generate(ref.prompt, { maxTokens: 64, temperature: 0, stop: ["Lily"] });
    const text = await stopped.text();
    assert.equal(stopped.stats!.stopReason, "stop");
    assert.equal(text, ref.continuation.slice(0, ref.continuation.indexOf("Lily")));

    const controller = new AbortController();
    const aborted = model.generate(ref.prompt, { maxTokens: 64, temperature: 0, signal: controller.signal });
    let pieces = 0;
    for await (const _ of aborted) if (++pieces === 3) controller.abort();
    assert.equal(aborted.stats!.stopReason, "abort");
    assert.ok(aborted.tokens.length < 64);
  } finally {
    await model.dispose();
  }
});

test("library: a prompt that extends the previous one reuses its KV cache and gives the same tokens", async () => {
  const model = await loadModel({ modelPath: STORIES, threads: 1 });
  try {
    const ref = llamacpp.greedy[0];
    const first = model.generate(ref.prompt, { maxTokens: 16, temperature: 0 });
    await first.text();
    assert.equal(first.stats!.cachedPromptTokens, 0);
    // The same prompt again: all but the last prompt token come from the cache.
    const again = model.generate(ref.prompt, { maxTokens: 16, temperature: 0 });
    await again.text();
    assert.equal(again.stats!.cachedPromptTokens, ref.promptIds.length - 1);
    assert.deepEqual(again.tokens, first.tokens);
    // Prompt + what was generated + more: the whole previous exchange is reused.
    const longer = [...ref.promptIds, ...ref.ids.slice(0, 20)];
    const cont = model.generate(longer, { maxTokens: 10, temperature: 0 });
    await cont.text();
    assert.equal(cont.stats!.cachedPromptTokens, ref.promptIds.length + 15);
    assert.deepEqual(cont.tokens, ref.ids.slice(20, 30));
  } finally {
    await model.dispose();
  }
});

test("KV cache f16 (default) and f32: the f16 cache takes half the bytes, both give the reference's greedy ids, logits close", async () => {
  const ref = reluRef.prompts[2];
  const runs: { arena: number; ids: number[]; logits: Float32Array[] }[] = [];
  let f32KvBytes = 0;
  for (const type of ["f16", "f32"] as const) {
    const model = await LlamaModel.load(RELU, { threads: 2, contextSize: 128, kvCache: { k: type, v: type } });
    try {
      assert.deepEqual(model.kvCache, { k: type, v: type });
      const cfg = model.config;
      f32KvBytes = 2 * cfg.nLayer * 128 * cfg.nHeadKV * cfg.headDim * 4;
      const { ids, logits } = greedy(model, ref.prompt_ids, ref.greedy_ids.length);
      assert.deepEqual(ids, ref.greedy_ids, `${type} cache`);
      runs.push({ arena: model.fixedArenaBytes, ids, logits });
    } finally {
      await model.dispose();
    }
  }
  const [f16, f32] = runs;
  // the loads differ by their KV caches alone: f32 keys and values take twice f16's bytes
  assert.equal(f32.arena - f16.arena, f32KvBytes / 2);
  for (let k = 0; k < f16.logits.length; k++) {
    const scale = Math.max(...f32.logits[k].map(Math.abs));
    let worst = 0;
    for (let i = 0; i < f32.logits[k].length; i++)
      worst = Math.max(worst, Math.abs(f16.logits[k][i] - f32.logits[k][i]));
    assert.ok(worst <= 2e-3 * scale, `position ${k}: f16 vs f32 cache logits differ by ${worst} (scale ${scale})`);
  }
  await assert.rejects(
    LlamaModel.load(RELU, { kvCache: { k: "q8_0" as "f16" } }),
    /kvCache.k must be f16 or f32, got "q8_0"/,
  );
});
