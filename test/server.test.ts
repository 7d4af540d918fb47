/**
 * The OpenAI-compatible server, driven by the real `openai` npm client (and raw fetch where the
 * client would hide what is tested) against a server on 127.0.0.1 with an ephemeral port: answers
 * equal the library's greedy output, streaming and not, chat and completion; bad requests get the
 * right status and a message naming the problem; 16 concurrent clients all get complete answers;
 * a client that disconnects mid-stream aborts its generation and the server keeps serving.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { connect } from "node:net";
import { once } from "node:events";
import { loadModel, type Model } from "../src/index.js";
import { OpenAIServer, startServer } from "../src/server/index.js";
import { ChatTemplate, templateForModel, tokenizeChatPrompt, type ChatMessage } from "../src/chat/index.js";
import { spawn, spawnSync } from "node:child_process";
import { join } from "node:path";
import { convertToStore } from "../src/offline/convert.js";
import { convertHFToGGUF } from "../src/format/hf/hf-to-gguf.js";
import { CLI, hfFixtureDir, SHARED, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const NAME = "stories260K";

let model: Model;
let server: OpenAIServer;
let client: OpenAI;

/** The library's greedy continuation of a text prompt. */
async function libText(prompt: string, maxTokens: number): Promise<string> {
  return model.generate(prompt, { temperature: 0, maxTokens }).text();
}

/** The library's greedy answer to a conversation, through the plain template the server uses. */
async function libChat(messages: ChatMessage[], maxTokens: number): Promise<string> {
  const t = ChatTemplate.plain();
  const ids = tokenizeChatPrompt(model.tokenizer, t.render(messages));
  const text = await model.generate(ids, { temperature: 0, maxTokens, stop: [...t.stop] }).text();
  return text.trimStart();
}

/** Polls `cond` every 10 ms for at most `ms` (bounded: tests never hang on it). */
async function waitFor(cond: () => boolean, ms = 5000): Promise<void> {
  for (let waited = 0; !cond(); waited += 10) {
    if (waited >= ms)
      throw new Error(`condition not met within ${ms} ms; server metrics ${JSON.stringify(server?.metrics)}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

function newClient(s: OpenAIServer): OpenAI {
  return new OpenAI({ baseURL: `${s.url}/v1`, apiKey: "not-needed", maxRetries: 0, timeout: 30_000 });
}

before(async () => {
  model = await loadModel({ modelPath: STORIES, threads: 1 });
  server = await startServer({ model, host: "127.0.0.1", port: 0, modelName: NAME });
  client = newClient(server);
});

after(async () => {
  await server?.close({ timeoutMs: 2000 });
  await model?.dispose();
});

test("the server listens on loopback at an ephemeral port; health and models", async () => {
  assert.equal(server.host, "127.0.0.1");
  assert.ok(server.port > 0 && server.port !== 8080);
  const health = await fetch(`${server.url}/health`);
  assert.equal(health.status, 200);
  assert.deepEqual(await health.json(), { status: "ok" });
  const list = await client.models.list();
  assert.deepEqual(
    list.data.map((m) => [m.id, m.object]),
    [[NAME, "model"]],
  );
  const one = await client.models.retrieve(NAME);
  assert.equal(one.id, NAME);
  // one model is served: any id names it (apps hard-code model names)
  assert.equal((await client.models.retrieve("gpt-4")).id, NAME);
});

test("completion, not streamed: the library's greedy output, usage and finish reason", async () => {
  const prompt = "Once upon a time";
  const expected = await libText(prompt, 24);
  const r = await client.completions.create({ model: NAME, prompt, max_tokens: 24, temperature: 0 });
  assert.equal(r.object, "text_completion");
  assert.equal(r.model, NAME);
  assert.equal(r.choices.length, 1);
  assert.equal(r.choices[0].text, expected);
  assert.equal(r.choices[0].finish_reason, "length");
  assert.equal(r.usage?.prompt_tokens, model.tokenize(prompt, { addBos: true }).length);
  assert.equal(r.usage?.completion_tokens, 24);
  assert.equal(r.usage?.total_tokens, r.usage!.prompt_tokens + 24);
});

test("chat, not streamed: the library's greedy answer through the plain template", async () => {
  const messages: ChatMessage[] = [
    { role: "system", content: "You tell short stories." },
    { role: "user", content: "Tell me about a cat." },
  ];
  const expected = await libChat(messages, 32);
  const r = await client.chat.completions.create({ model: NAME, messages, max_tokens: 32, temperature: 0 });
  assert.equal(r.object, "chat.completion");
  assert.equal(r.choices[0].message.role, "assistant");
  assert.equal(r.choices[0].message.content, expected);
  assert.ok(expected.length > 0);
  assert.ok(["stop", "length"].includes(r.choices[0].finish_reason));
  assert.ok(r.usage!.completion_tokens > 0);
});

test("chat and completion streamed: the same text in pieces, usage in the last chunk", async () => {
  const prompt = "Lily and Ben went to the park";
  const expected = await libText(prompt, 40);
  const stream = await client.completions.create({ model: NAME, prompt, max_tokens: 40, temperature: 0, stream: true });
  let text = "";
  const chunks = [];
  for await (const c of stream) {
    chunks.push(c);
    text += c.choices[0]?.text ?? "";
  }
  assert.equal(text, expected);
  assert.ok(chunks.length > 5, "the answer came in pieces");
  const last = chunks.at(-1)!;
  assert.equal(last.choices[0].finish_reason, "length");
  assert.equal(last.usage?.completion_tokens, 40);
  for (const c of chunks.slice(0, -1)) assert.equal(c.usage, undefined);

  const messages: ChatMessage[] = [{ role: "user", content: "What did the dog do?" }];
  const expectedChat = await libChat(messages, 30);
  const chat = await client.chat.completions.create({
    model: NAME,
    messages,
    max_tokens: 30,
    temperature: 0,
    stream: true,
  });
  let answer = "";
  const chatChunks = [];
  for await (const c of chat) {
    chatChunks.push(c);
    answer += c.choices[0]?.delta?.content ?? "";
  }
  assert.equal(answer, expectedChat);
  assert.equal(chatChunks[0].choices[0].delta.role, "assistant");
  const end = chatChunks.at(-1)!;
  assert.ok(end.choices[0].finish_reason !== null);
  assert.ok(end.usage!.prompt_tokens > 0);
  assert.equal(end.usage!.total_tokens, end.usage!.prompt_tokens + end.usage!.completion_tokens);
});

test("stream_options.include_usage: a final chunk with empty choices carries the usage", async () => {
  const stream = await client.chat.completions.create({
    model: NAME,
    messages: [{ role: "user", content: "Hi" }],
    max_tokens: 8,
    temperature: 0,
    stream: true,
    stream_options: { include_usage: true },
  });
  const chunks = [];
  for await (const c of stream) chunks.push(c);
  const last = chunks.at(-1)!;
  assert.deepEqual(last.choices, []);
  assert.equal(last.usage?.completion_tokens, 8);
  assert.equal(chunks.at(-2)!.choices[0].finish_reason, "length");
  assert.equal(chunks.at(-2)!.usage, undefined);
});

test("the raw SSE wire: data: lines, [DONE] last, event-stream content type", async () => {
  const res = await fetch(`${server.url}/v1/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 5, temperature: 0, stream: true }),
  });
  assert.equal(res.status, 200);
  assert.match(res.headers.get("content-type")!, /^text\/event-stream/);
  const events = (await res.text()).split("\n\n").filter((e) => e !== "");
  assert.equal(events.at(-1), "data: [DONE]");
  for (const e of events) assert.match(e, /^data: /);
  const text = events
    .slice(0, -1)
    .map((e) => JSON.parse(e.slice(6)).choices[0].text)
    .join("");
  assert.equal(text, await libText("Once upon a time", 5));
});

test("sampling fields are honoured: stop strings, seed, top_k/min_p/repeat_penalty extensions", async () => {
  const prompt = "Once upon a time";
  const full = await libText(prompt, 30);
  const cut = full.indexOf("Lily");
  assert.ok(cut > 0, `the reference continuation mentions Lily: ${full}`);
  const r = await client.completions.create({
    model: NAME,
    prompt,
    max_tokens: 30,
    temperature: 0,
    stop: ["Lily", "zzz"],
  });
  assert.equal(r.choices[0].text, full.slice(0, cut));
  assert.equal(r.choices[0].finish_reason, "stop");
  const one = await client.completions.create({ model: NAME, prompt, max_tokens: 30, temperature: 0, stop: "Lily" });
  assert.equal(one.choices[0].text, full.slice(0, cut));

  // A seed makes sampling repeatable, and the server samples as the library does.
  const params = {
    temperature: 0.9,
    top_p: 0.9,
    top_k: 20,
    min_p: 0.02,
    repeat_penalty: 1.1,
    seed: 1234,
    frequency_penalty: 0.1,
    presence_penalty: 0.1,
  };
  const a = await client.completions.create({
    model: NAME,
    prompt,
    max_tokens: 20,
    ...params,
  } as OpenAI.CompletionCreateParamsNonStreaming);
  const b = await client.completions.create({
    model: NAME,
    prompt,
    max_tokens: 20,
    ...params,
  } as OpenAI.CompletionCreateParamsNonStreaming);
  assert.equal(a.choices[0].text, b.choices[0].text);
  const lib = await model
    .generate(prompt, {
      maxTokens: 20,
      temperature: 0.9,
      topP: 0.9,
      topK: 20,
      minP: 0.02,
      repeatPenalty: 1.1,
      seed: 1234,
      frequencyPenalty: 0.1,
      presencePenalty: 0.1,
    })
    .text();
  assert.equal(a.choices[0].text, lib);
});

/** The APIError the client throws for a request, checked for status and a message pattern. */
async function rejects(p: Promise<unknown>, status: number, message: RegExp, param?: string): Promise<void> {
  await assert.rejects(p, (e: unknown) => {
    assert.ok(e instanceof OpenAI.APIError, `expected an APIError, got ${String(e)}`);
    assert.equal(e.status, status, e.message);
    assert.match(e.message, message);
    if (param !== undefined) assert.equal(e.param, param);
    return true;
  });
}

test("wrong field types and values: 400 naming the field", async () => {
  const bad = (extra: Record<string, unknown>) =>
    client.chat.completions.create({
      model: NAME,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 4,
      ...extra,
    } as unknown as OpenAI.ChatCompletionCreateParamsNonStreaming);
  await rejects(bad({ temperature: "hot" }), 400, /temperature must be a number, got string/, "temperature");
  await rejects(bad({ max_tokens: 2.5 }), 400, /max_tokens must be an integer/, "max_tokens");
  await rejects(bad({ top_p: 1.5 }), 400, /top_p must be between 0 and 1, got 1\.5/, "top_p");
  await rejects(bad({ top_k: -3 }), 400, /top_k must be an integer between 0 and \d+, got -3/, "top_k");
  await rejects(bad({ stop: [1, 2] }), 400, /stop\[0\] must be a string, got number/, "stop[0]");
  await rejects(bad({ stream: "yes" }), 400, /stream must be true or false/, "stream");
  await rejects(bad({ n: 3 }), 400, /n = 3 .* not supported/, "n");
  await rejects(bad({ messages: "Hi" }), 400, /messages must be an array, got string/, "messages");
  await rejects(bad({ messages: [] }), 400, /at least one message/, "messages");
  await rejects(
    bad({ messages: [{ role: "wizard", content: "x" }] }),
    400,
    /messages\[0\]\.role must be one of/,
    "messages[0].role",
  );
  await rejects(
    bad({ messages: [{ role: "user", content: 42 }] }),
    400,
    /messages\[0\]\.content must be a string/,
    "messages[0].content",
  );
  await rejects(
    bad({ messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }] }),
    400,
    /only text content parts are supported/,
  );
  await rejects(
    client.completions.create({ model: NAME, prompt: 7 } as unknown as OpenAI.CompletionCreateParamsNonStreaming),
    400,
    /prompt must be a string/,
    "prompt",
  );
  await rejects(
    client.completions.create({ model: NAME, prompt: [1, 99999] }),
    400,
    /prompt\[1\] = 99999 is not a token id/,
    "prompt[1]",
  );
  await rejects(client.completions.create({ model: NAME, prompt: ["a", "b"] }), 400, /only one prompt per request/);
  // Text content parts are joined, as OpenAI's.
  const parts = await client.chat.completions.create({
    model: NAME,
    messages: [
      {
        role: "user",
        content: [
          { type: "text", text: "Tell me " },
          { type: "text", text: "a story." },
        ],
      },
    ],
    max_tokens: 12,
    temperature: 0,
  });
  assert.equal(parts.choices[0].message.content, await libChat([{ role: "user", content: "Tell me a story." }], 12));
});

test("a prompt longer than the context: 400 context_length_exceeded with both lengths", async () => {
  const long = "Once upon a time there was a big dog. ".repeat(300);
  const n = model.tokenize(long).length;
  assert.ok(n > model.contextSize);
  await rejects(
    client.completions.create({ model: NAME, prompt: long, max_tokens: 4 }),
    400,
    new RegExp(`${n + 1} tokens long, but the model's context holds ${model.contextSize}`),
    "prompt",
  );
  await rejects(
    client.chat.completions.create({ model: NAME, messages: [{ role: "user", content: long }] }),
    400,
    /context holds 2048 tokens/,
    "messages",
  );
  await assert.rejects(
    client.completions.create({ model: NAME, prompt: long }),
    (e: unknown) => e instanceof OpenAI.APIError && e.code === "context_length_exceeded",
  );
});

test("malformed JSON, non-object bodies, unknown routes, wrong methods: status and an OpenAI error object; any model name is served", async () => {
  const post = (path: string, body: string) =>
    fetch(`${server.url}${path}`, { method: "POST", headers: { "Content-Type": "application/json" }, body });
  const check = async (res: Response, status: number, message: RegExp) => {
    assert.equal(res.status, status);
    assert.match(res.headers.get("content-type")!, /^application\/json/);
    const j = (await res.json()) as { error: { message: string; type: string; param: unknown; code: unknown } };
    assert.deepEqual(Object.keys(j.error).sort(), ["code", "message", "param", "type"]);
    assert.match(j.error.message, message);
    return j.error;
  };
  const e1 = await check(
    await post("/v1/chat/completions", '{"messages": [{"role": "user", "content": "Hi"}'),
    400,
    /not valid JSON/,
  );
  assert.equal(e1.type, "invalid_request_error");
  // V8's message quotes the input: its newlines and other control characters come back escaped,
  // the message one line (found by the server fuzzer: a chunked body starting "K\n...")
  const e2 = await check(await post("/v1/chat/completions", "K\n\u0001\u2028x"), 400, /not valid JSON/);
  assert.doesNotMatch(e2.message, /[\u0000-\u001f\u007f\u2028\u2029]/);
  assert.match(e2.message, /K\\u000a\\u0001\\u2028x/);
  await check(await post("/v1/completions", ""), 400, /body is empty/);
  await check(await post("/v1/completions", "[1, 2]"), 400, /must be a JSON object, got array/);
  await check(await post("/v1/completions", '"hello"'), 400, /must be a JSON object, got string/);
  await check(await fetch(`${server.url}/v1/engines`), 404, /no route for GET \/v1\/engines/);
  // any model name is accepted, and the answer names the model served
  const named = await post("/v1/completions", JSON.stringify({ model: "gpt-4o", prompt: "Hi", max_tokens: 2 }));
  assert.equal(named.status, 200);
  assert.equal(((await named.json()) as { model: string }).model, NAME);
  const e3 = await check(await fetch(`${server.url}/v1/chat/completions`), 405, /GET is not allowed/);
  assert.equal(e3.code, "method_not_allowed");
  // The routes answer without the /v1 prefix too, as llama-server's do.
  const plain = await post(
    "/completions",
    JSON.stringify({ prompt: "Once upon a time", max_tokens: 3, temperature: 0 }),
  );
  assert.equal(plain.status, 200);
  // The server is still fine.
  const ok = await client.completions.create({
    model: NAME,
    prompt: "Once upon a time",
    max_tokens: 4,
    temperature: 0,
  });
  assert.equal(ok.choices[0].text, await libText("Once upon a time", 4));
});

test("16 concurrent clients: every one gets the complete answer the library gives alone", async () => {
  const prompts = [
    "Once upon a time",
    "Lily",
    "The dog",
    "One day",
    "Tom had a ball",
    "The sun was",
    "Mom said",
    "A bird",
  ];
  const jobs = Array.from({ length: 16 }, (_, i) => {
    const prompt = prompts[i % prompts.length];
    const maxTokens = 16 + i;
    const kind = (["chat", "text"] as const)[i % 2];
    const stream = Math.floor(i / 2) % 2 === 1;
    return { prompt, maxTokens, kind, stream };
  });
  // The library's answers first: the model runs one generation at a time.
  const expected: string[] = [];
  for (const j of jobs)
    expected.push(
      j.kind === "chat"
        ? await libChat([{ role: "user", content: j.prompt }], j.maxTokens)
        : await libText(j.prompt, j.maxTokens),
    );
  const before = { ...server.metrics };
  const clients = jobs.map(() => newClient(server));
  const answers = await Promise.all(
    jobs.map(async (j, i) => {
      const c = clients[i];
      if (j.kind === "chat") {
        const base = {
          model: NAME,
          messages: [{ role: "user" as const, content: j.prompt }],
          max_tokens: j.maxTokens,
          temperature: 0,
        };
        if (!j.stream) return (await c.chat.completions.create(base)).choices[0].message.content;
        let s = "";
        for await (const ch of await c.chat.completions.create({ ...base, stream: true }))
          s += ch.choices[0]?.delta?.content ?? "";
        return s;
      }
      const base = { model: NAME, prompt: j.prompt, max_tokens: j.maxTokens, temperature: 0 };
      if (!j.stream) return (await c.completions.create(base)).choices[0].text;
      let s = "";
      for await (const ch of await c.completions.create({ ...base, stream: true })) s += ch.choices[0]?.text ?? "";
      return s;
    }),
  );
  assert.deepEqual(answers, expected);
  assert.equal(server.metrics.completed - before.completed, 16);
  assert.equal(server.metrics.rejected, before.rejected);
  assert.equal(server.metrics.active, 0);
});

test("a client disconnecting mid-stream aborts its generation; the server keeps serving", async () => {
  const before = { ...server.metrics };
  const controller = new AbortController();
  // Without a length limit and past end-of-text, this would run to the full 2048-token context.
  const stream = await client.completions.create(
    {
      model: NAME,
      prompt: "Once upon a time",
      max_tokens: -1,
      temperature: 0,
      stream: true,
      ignore_eos: true,
    } as OpenAI.CompletionCreateParamsStreaming,
    { signal: controller.signal },
  );
  let received = "";
  let sawEnd = false;
  try {
    for await (const c of stream) {
      received += c.choices[0]?.text ?? "";
      if (c.choices[0]?.finish_reason) sawEnd = true;
      if (received.length > 20) controller.abort();
    }
  } catch (e) {
    // The client ends the iteration quietly or with an abort error, depending on its version.
    assert.ok(e instanceof OpenAI.APIUserAbortError || (e instanceof Error && e.name === "AbortError"), String(e));
  }
  assert.ok(received.length > 20 && !sawEnd, "the client left in the middle of the answer");
  await waitFor(() => server.metrics.aborted === before.aborted + 1 && server.metrics.active === 0);
  assert.equal(server.metrics.completed, before.completed, "the aborted request did not run to its end");

  // A raw client that vanishes: it sends the request, reads the first bytes and drops the socket.
  const body = JSON.stringify({
    messages: [{ role: "user", content: "Hi" }],
    max_tokens: -1,
    temperature: 0,
    stream: true,
    ignore_eos: true,
  });
  const sock = connect(server.port, "127.0.0.1");
  sock.write(
    `POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\n\r\n${body}`,
  );
  const [first] = (await once(sock, "data")) as [Buffer];
  assert.match(first.toString(), /^HTTP\/1\.1 200/);
  sock.destroy();
  await waitFor(() => server.metrics.aborted === before.aborted + 2 && server.metrics.active === 0);
  assert.equal(server.metrics.completed, before.completed);

  // The openai client breaking out of its loop: whether its socket closes at once or not, the
  // server does not stall on it.
  const s3 = await client.chat.completions.create({
    model: NAME,
    messages: [{ role: "user", content: "Hi" }],
    max_tokens: -1,
    temperature: 0,
    stream: true,
    ignore_eos: true,
  } as OpenAI.ChatCompletionCreateParamsStreaming);
  let n = 0;
  for await (const _ of s3) if (++n === 3) break;
  await waitFor(() => server.metrics.active === 0);

  const r = await client.completions.create({
    model: NAME,
    prompt: "Once upon a time",
    max_tokens: 20,
    temperature: 0,
  });
  assert.equal(r.choices[0].text, await libText("Once upon a time", 20));
});

test("a full queue answers 429; a waiting client that leaves is dropped from the queue", async () => {
  const s = await startServer({ model, port: 0, modelName: NAME, maxQueue: 1 });
  try {
    const long = JSON.stringify({
      prompt: "Once upon a time",
      max_tokens: -1,
      temperature: 0,
      stream: true,
      ignore_eos: true,
    });
    const post = (body: string, signal?: AbortSignal) =>
      fetch(`${s.url}/v1/completions`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body,
        signal,
      });
    const runner = new AbortController();
    const a = await post(long, runner.signal); // generating
    const reader = a.body!.getReader();
    await reader.read(); // it has started
    const leaver = new AbortController();
    const waiting = post(JSON.stringify({ prompt: "Lily", max_tokens: 4, temperature: 0 }), leaver.signal);
    await waitFor(() => s.metrics.active === 2);
    const full = await post(JSON.stringify({ prompt: "Lily", max_tokens: 4 }));
    assert.equal(full.status, 429);
    assert.equal(full.headers.get("retry-after"), "1");
    const err = (await full.json()) as { error: { code: string; message: string } };
    assert.equal(err.error.code, "queue_full");
    assert.match(err.error.message, /busy/);
    // The waiting client gives up: its place frees without it ever generating.
    leaver.abort();
    await assert.rejects(waiting);
    await waitFor(() => s.metrics.active === 1);
    // Now there is room again.
    const third = post(JSON.stringify({ prompt: "Lily", max_tokens: 6, temperature: 0 }));
    await waitFor(() => s.metrics.active === 2);
    runner.abort();
    const r = await third;
    assert.equal(r.status, 200);
    const j = (await r.json()) as { choices: { text: string }[] };
    assert.equal(j.choices[0].text, await libText("Lily", 6));
    await waitFor(() => s.metrics.active === 0);
    assert.equal(s.metrics.aborted, 2);
    assert.equal(s.metrics.rejected, 1);
  } finally {
    await s.close({ timeoutMs: 1000 });
  }
});

test("413 for a body over the limit; the server keeps serving", async () => {
  const s = await startServer({ model, port: 0, modelName: NAME, maxBodyBytes: 1024 });
  try {
    const body = JSON.stringify({ prompt: "x".repeat(4000), max_tokens: 1 });
    const res = await fetch(`${s.url}/v1/completions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body,
    });
    assert.equal(res.status, 413);
    const j = (await res.json()) as { error: { message: string; code: string } };
    assert.match(j.error.message, /larger than the server's limit of 1024 bytes/);
    assert.equal(j.error.code, "request_too_large");
    const ok = await newClient(s).completions.create({ model: NAME, prompt: "Lily", max_tokens: 3, temperature: 0 });
    assert.equal(ok.choices[0].text, await libText("Lily", 3));
  } finally {
    await s.close();
  }
});

test("503 while the model loads and after a failed load; then serving once set", async () => {
  const s = await startServer({ port: 0, modelName: NAME });
  try {
    assert.equal(s.state, "loading");
    const h = await fetch(`${s.url}/health`);
    assert.equal(h.status, 503);
    assert.equal(((await h.json()) as { error: { code: string } }).error.code, "model_loading");
    await rejects(
      newClient(s).completions.create({ model: NAME, prompt: "Lily", max_tokens: 2 }),
      503,
      /still loading/,
    );
    s.setModel(model);
    assert.equal((await fetch(`${s.url}/health`)).status, 200);
    const ok = await newClient(s).completions.create({ model: NAME, prompt: "Lily", max_tokens: 3, temperature: 0 });
    assert.equal(ok.choices[0].text, await libText("Lily", 3));
  } finally {
    await s.close();
  }
  const f = await startServer({ port: 0 });
  try {
    f.setLoadError("no such file: x.gguf");
    const h = await fetch(`${f.url}/health`);
    assert.equal(h.status, 503);
    assert.match(((await h.json()) as { error: { message: string } }).error.message, /failed to load: no such file/);
  } finally {
    await f.close();
  }
});

test("graceful shutdown: an answer in progress completes, new connections are refused", async () => {
  const s = await startServer({ model, port: 0, modelName: NAME });
  const c = newClient(s);
  const stream = await c.completions.create({
    model: NAME,
    prompt: "Once upon a time",
    max_tokens: 200,
    temperature: 0,
    stream: true,
    ignore_eos: true,
  } as OpenAI.CompletionCreateParamsStreaming);
  const it = stream[Symbol.asyncIterator]();
  let text = (await it.next()).value?.choices[0]?.text ?? "";
  const closing = s.close({ timeoutMs: 10_000 });
  assert.equal(s.state, "closing");
  for (let r = await it.next(); !r.done; r = await it.next()) text += r.value.choices[0]?.text ?? "";
  await closing;
  assert.equal(s.state, "closed");
  assert.equal(
    text,
    await model.generate("Once upon a time", { maxTokens: 200, temperature: 0, ignoreEos: true }).text(),
  );
  await assert.rejects(fetch(`${s.url}/health`));
});

test("shutdown past its timeout aborts the answers still running", async () => {
  const s = await startServer({ model, port: 0, modelName: NAME });
  const res = await fetch(`${s.url}/v1/completions`, {
    method: "POST",
    body: JSON.stringify({
      prompt: "Once upon a time",
      max_tokens: -1,
      temperature: 0,
      stream: true,
      ignore_eos: true,
    }),
  });
  const reader = res.body!.getReader();
  await reader.read();
  await s.close({ timeoutMs: 0 });
  assert.equal(s.metrics.aborted, 1);
  assert.equal(s.metrics.completed, 0);
  // The stream ends (without [DONE]) rather than hanging.
  for (let i = 0; i < 100_000; i++) if ((await reader.read().catch(() => ({ done: true }))).done) break;
});

test("powerinfer serve: listens, loads, answers the openai client, shuts down on SIGTERM", async () => {
  const child = spawn(process.execPath, [CLI, "serve", "-m", STORIES, "--port", "0", "-t", "1", "--alias", "tiny"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  const exited = new Promise<number | null>((resolve) => child.on("exit", resolve));
  try {
    await waitFor(() => /ready: model "tiny"/.test(stderr) || child.exitCode !== null, 30_000);
    const url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stderr)?.[1];
    assert.ok(url, stderr);
    assert.match(stderr, /the plain chat format/);
    const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: "x", maxRetries: 0 });
    assert.deepEqual(
      (await c.models.list()).data.map((m) => m.id),
      ["tiny"],
    );
    const r = await c.completions.create({ model: "tiny", prompt: "Once upon a time", max_tokens: 12, temperature: 0 });
    assert.equal(r.choices[0].text, await libText("Once upon a time", 12));
    // The file name works as the model's name too.
    const byFile = await c.chat.completions.create({
      model: "stories260K.gguf",
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 6,
      temperature: 0,
    });
    assert.equal(byFile.choices[0].message.content, await libChat([{ role: "user", content: "Hi" }], 6));
    assert.match(stderr, /POST \/v1\/completions 200 \d+\+12 tokens/);
    child.kill("SIGTERM");
    assert.equal(await exited, 0, stderr);
    assert.match(stderr, /SIGTERM: shutting down/);
    assert.match(stderr, /stopped\n$/);
  } finally {
    clearTimeout(killer);
    child.kill("SIGKILL");
  }
});

test("powerinfer serve: a neuron store under a memory budget (its chat template read from the store's metadata)", async () => {
  const pi = join(tempDir(), "stories.pi");
  await convertToStore({ input: STORIES, output: pi, fsync: false });
  const child = spawn(
    process.execPath,
    [CLI, "serve", "-m", pi, "--port", "0", "-t", "1", "--memory-budget", "128MiB"],
    {
      stdio: ["ignore", "pipe", "pipe"],
    },
  );
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  let stderr = "";
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  try {
    await waitFor(() => /ready: model "stories"/.test(stderr) || child.exitCode !== null, 30_000);
    const url = /listening on (http:\/\/127\.0\.0\.1:\d+)/.exec(stderr)?.[1];
    assert.ok(url && child.exitCode === null, stderr);
    const c = new OpenAI({ baseURL: `${url}/v1`, apiKey: "x", maxRetries: 0 });
    const r = await c.completions.create({
      model: "stories",
      prompt: "Once upon a time",
      max_tokens: 12,
      temperature: 0,
    });
    assert.equal(r.choices[0].text, await libText("Once upon a time", 12));
    const chat = await c.chat.completions.create({
      model: "stories",
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 6,
      temperature: 0,
    });
    assert.equal(chat.choices[0].message.content, await libChat([{ role: "user", content: "Hi" }], 6));
  } finally {
    clearTimeout(killer);
    child.kill("SIGKILL");
  }
});

for (const arch of ["qwen3", "gemma3"]) {
  test(`a ${arch} converted from a Hugging Face directory: its own chat template and real vocabulary, streamed and not`, async () => {
    const d = tempDir();
    const gguf = join(d, `${arch}.gguf`);
    await convertHFToGGUF({ input: hfFixtureDir(arch, join(d, "hf")), output: gguf, type: "f32", fsync: false });
    const m = await loadModel({ modelPath: gguf, threads: 2 });
    const s = await startServer({ model: m, host: "127.0.0.1", port: 0, modelName: arch });
    try {
      const c = newClient(s);
      const messages: ChatMessage[] = [
        { role: "system", content: "Answer in one line." },
        { role: "user", content: "Wie heißt die Hauptstadt? 日本語で" },
        { role: "assistant", content: "Berlin." },
        { role: "user", content: "Und Frankreich? 🇫🇷" },
      ];
      // the library's answer through the model's own template (the GGUF's tokenizer.chat_template)
      const template = templateForModel(m);
      const rendered = template.render(messages);
      assert.match(rendered, arch === "qwen3" ? /<\|im_start\|>assistant\n$/ : /<start_of_turn>model\n$/);
      const ids = tokenizeChatPrompt(m.tokenizer, rendered);
      const expected = await m.generate(ids, { temperature: 0, maxTokens: 24, stop: [...template.stop] }).text();
      const r = await c.chat.completions.create({ model: arch, messages, max_tokens: 24, temperature: 0 });
      assert.equal(r.choices[0].message.content, template.trimAnswerStart ? expected.trimStart() : expected);
      assert.equal(r.usage!.prompt_tokens, ids.length, "the server rendered the model's template");
      // random weights over a 150-260k vocabulary: pieces of multi-byte characters, streamed whole
      const stream = await c.chat.completions.create({
        model: arch,
        messages,
        max_tokens: 24,
        temperature: 0,
        stream: true,
      });
      let answer = "";
      for await (const chunk of stream) {
        const piece = chunk.choices[0]?.delta?.content ?? "";
        assert.ok(!piece.includes("\ufffd") || r.choices[0].message.content!.includes("\ufffd"), "no half characters");
        answer += piece;
      }
      assert.equal(answer, r.choices[0].message.content);
      const prompt = "Once upon a time, ein Mädchen 🐱";
      const done = await c.completions.create({ model: arch, prompt, max_tokens: 12, temperature: 0 });
      assert.equal(done.choices[0].text, await m.generate(prompt, { temperature: 0, maxTokens: 12 }).text());
    } finally {
      await s.close({ timeoutMs: 2000 });
      await m.dispose();
    }
  });
}

test("powerinfer serve: clear failures for a missing model flag, a busy port, a missing file", async () => {
  const run = (...args: string[]) =>
    spawnSync(process.execPath, [CLI, "serve", ...args], { encoding: "utf8", timeout: 60_000 });
  const noModel = run();
  assert.equal(noModel.status, 2);
  assert.match(noModel.stderr, /-m MODEL is required/);
  const busy = run("-m", STORIES, "--port", String(server.port), "-t", "1");
  assert.equal(busy.status, 1);
  assert.match(
    busy.stderr,
    new RegExp(`127\\.0\\.0\\.1:${server.port} is already in use; choose another port with --port`),
  );
  const missing = run("-m", "/nonexistent/model.gguf", "--port", "0", "-t", "1");
  assert.equal(missing.status, 1);
  assert.match(missing.stderr, /nonexistent\/model\.gguf/);
  assert.equal(run("-m", STORIES, "--port", "70000").status, 2);
});
