/**
 * The library's lifecycle and its one set of errors: `await using` disposes a Model and a
 * ChatSession at the end of a scope; a disposed model, a busy model and a prompt too long fail
 * with the same class and fields through `generate`, `ChatSession` and the facade.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import {
  ApiError,
  ChatSession,
  ModelBusyError,
  ModelDisposedError,
  PromptTooLongError,
  createChatCompletion,
  createCompletion,
  loadModel,
  type Model,
} from "../src/index.js";
import { SHARED } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const LONG = "Once upon a time there was a little girl who loved to play in the park with her friends. ".repeat(3);

test("await using: a Model and a ChatSession are disposed at the end of their scope", async () => {
  let outer: Model;
  let session: ChatSession;
  {
    await using model = await loadModel({ modelPath: STORIES, threads: 1 });
    await using chat = new ChatSession(model, { defaults: { temperature: 0, maxTokens: 4 } });
    outer = model;
    session = chat;
    assert.equal((await chat.prompt("Hi")).stopReason, "maxTokens");
    assert.equal(model.isDisposed, false);
  }
  assert.equal(outer.isDisposed, true);
  await assert.rejects(
    session.prompt("again"),
    (e: unknown) => e instanceof ModelDisposedError && /chat session/.test(e.message),
  );
  assert.throws(() => outer.generate("Hi"), ModelDisposedError);
});

test("a disposed model: ModelDisposedError (503, model_disposed) from generate, ChatSession and the facade", async () => {
  const model = await loadModel({ modelPath: STORIES, threads: 1 });
  const chat = new ChatSession(model);
  await model.dispose();
  const errors: unknown[] = [];
  try {
    model.generate("Hi");
  } catch (e) {
    errors.push(e);
  }
  await chat.prompt("Hi").catch((e) => errors.push(e));
  await createCompletion(model, { prompt: "Hi", max_tokens: 2 }).catch((e) => errors.push(e));
  await createChatCompletion(model, { messages: [{ role: "user", content: "Hi" }] }).catch((e) => errors.push(e));
  assert.equal(errors.length, 4);
  for (const e of errors) {
    assert.ok(e instanceof ModelDisposedError && e instanceof ApiError, String(e));
    assert.deepEqual([e.status, e.code, e.message], [503, "model_disposed", "the model has been disposed"]);
  }
});

test("a busy model: ModelBusyError (409, model_busy) for a generation beside a direct one, through every surface", async () => {
  const model = await loadModel({ modelPath: STORIES, threads: 1 });
  try {
    const first = model.generate("Once upon a time", { maxTokens: -1, ignoreEos: true, temperature: 0 });
    const it = first[Symbol.asyncIterator]();
    await it.next(); // holds the model
    const errors: unknown[] = [];
    await model
      .generate("Hi")
      .text()
      .catch((e) => errors.push(e));
    await new ChatSession(model).prompt("Hi").catch((e) => errors.push(e));
    await createCompletion(model, { prompt: "Hi", max_tokens: 2 }).catch((e) => errors.push(e));
    assert.equal(errors.length, 3);
    for (const e of errors) {
      assert.ok(e instanceof ModelBusyError && e instanceof ApiError, String(e));
      assert.deepEqual([e.status, e.code], [409, "model_busy"]);
    }
    await it.return!();
    // free again
    assert.ok((await model.generate("Hi", { maxTokens: 2 }).text()).length > 0);
  } finally {
    await model.dispose();
  }
});

test("a prompt too long: PromptTooLongError with the same fields from generate, ChatSession and the facade", async () => {
  const model = await loadModel({ modelPath: STORIES, threads: 1, contextSize: 32 });
  try {
    const errors: PromptTooLongError[] = [];
    const keep = (e: unknown) => {
      assert.ok(e instanceof PromptTooLongError, String(e));
      errors.push(e);
    };
    await model.generate(LONG).text().catch(keep);
    await new ChatSession(model).prompt(LONG).catch(keep);
    await createCompletion(model, { prompt: LONG }).catch(keep);
    await createChatCompletion(model, { messages: [{ role: "user", content: LONG }] }).catch(keep);
    assert.equal(errors.length, 4);
    for (const e of errors) {
      assert.equal(e.status, 400);
      assert.equal(e.code, "context_length_exceeded");
      assert.equal(e.contextSize, 32);
      assert.ok(e.promptTokens >= 32);
      // a text far past the context is refused by its length before tokenizing: then a lower bound
      assert.match(
        e.message,
        new RegExp(
          `is ${e.exact ? "" : "at least "}${e.promptTokens} tokens long.*, but the model's context holds 32 tokens`,
        ),
      );
    }
    assert.deepEqual(
      errors.map((e) => e.param),
      ["prompt", "messages", "prompt", "messages"],
    );
  } finally {
    await model.dispose();
  }
});

test("dispose during a generation stops it (even from inside its own loop) before the memory goes", async () => {
  const model = await loadModel({ modelPath: STORIES, threads: 1 });
  const gen = model.generate("Once upon a time", { maxTokens: -1, ignoreEos: true });
  let pieces = 0;
  for await (const _ of gen) {
    if (++pieces === 3) await model.dispose();
  }
  assert.equal(gen.stats!.stopReason, "abort");
  assert.equal(model.isDisposed, true);

  // a session's turn in progress stops when the session is disposed; the model stays usable
  const model2 = await loadModel({ modelPath: STORIES, threads: 1 });
  try {
    const chat = new ChatSession(model2, { defaults: { maxTokens: -1, ignoreEos: true } });
    let disposing: Promise<void> | undefined;
    const reply = await chat.prompt("Tell me a story.", {
      onText: (_piece, n) => {
        if (n >= 3) disposing ??= chat.dispose();
      },
    });
    await disposing;
    assert.equal(reply.stopReason, "abort");
    assert.ok((await model2.generate("Hi", { maxTokens: 2 }).text()).length > 0);
  } finally {
    await model2.dispose();
  }
});
