/**
 * The chat layer: templates (Jinja from the GGUF, the plain fallback), the FIFO queue, the
 * in-process OpenAI-shaped facade, ChatSession's history, the `powerinfer chat` command driven
 * through a pipe (history, Ctrl-C stopping an answer but not the program), and the progress /
 * live-stats helpers the commands use.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { join } from "node:path";
import { loadModel, type Model } from "../src/index.js";
import { GGUFFile } from "../src/format/gguf.js";
import { GGUFWriter } from "../src/format/gguf-writer.js";
import { convertToStore } from "../src/offline/convert.js";
import {
  ApiError,
  ChatSession,
  ChatTemplate,
  createChatCompletion,
  createCompletion,
  GenerationQueue,
  templateForModel,
  tokenizeChatPrompt,
  type ChatMessage,
} from "../src/chat/index.js";
import { formatBytes, formatDuration, formatStats, ProgressBar, StatusLine, TokenRate } from "../src/cli/progress.js";
import { CLI, SHARED, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;

/** A template written for these tests: role tags on lines, BOS first. */
const TAGS_TEMPLATE =
  "{{ bos_token }}{% for m in messages %}{% if loop.first and m.role != 'system' and m.role != 'user' %}" +
  "{{ raise_exception('the first message must come from the user or the system') }}{% endif %}" +
  "{{ '[' + m.role + '] ' + m.content + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '[assistant]' }}{% endif %}";

let model: Model;

before(async () => {
  model = await loadModel({ modelPath: STORIES, threads: 1 });
});

after(async () => {
  await model?.dispose();
});

/** stories260K with `tokenizer.chat_template` added (metadata and tensors copied as they are). */
async function storiesWithTemplate(template: string): Promise<string> {
  const src = GGUFFile.open(STORIES);
  const out = join(tempDir(), "stories-chat.gguf");
  try {
    const w = new GGUFWriter(out, { fsync: false });
    for (const [k, v] of src.metadata) {
      if (k === "general.alignment") continue;
      w.setMetadata(k, v as Parameters<GGUFWriter["setMetadata"]>[1]);
    }
    w.setMetadata("tokenizer.chat_template", template);
    for (const t of src.tensors.values()) w.addTensor(t.name, t.dims, t.type);
    for (const t of src.tensors.values()) await w.writeTensorData(t.name, src.tensorData(t.name));
    await w.finish();
  } finally {
    src.close();
  }
  return out;
}

test("plain template: a transcript ending in the assistant cue, with a stop string for the next user line", () => {
  const t = ChatTemplate.plain();
  assert.equal(t.kind, "plain");
  const msgs: ChatMessage[] = [
    { role: "system", content: "Be kind." },
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Hello!" },
    { role: "user", content: "Story?" },
  ];
  assert.equal(t.render(msgs), "Be kind.\n\nUser: Hi\nAssistant: Hello!\nUser: Story?\nAssistant:");
  assert.equal(
    t.render(msgs, { addGenerationPrompt: false }),
    "Be kind.\n\nUser: Hi\nAssistant: Hello!\nUser: Story?\n",
  );
  assert.deepEqual(t.stop, ["\nUser:"]);
  assert.equal(t.trimAnswerStart, true);
});

test("Jinja template: rendered with bos/eos, BOS not doubled, raise_exception -> ApiError 400, broken source fails at load", () => {
  const t = ChatTemplate.jinja(TAGS_TEMPLATE, { bosToken: "<s>", eosToken: "</s>" });
  const text = t.render([
    { role: "user", content: "Hi" },
    { role: "assistant", content: "Yo" },
    { role: "user", content: "More" },
  ]);
  assert.equal(text, "<s>[user] Hi\n[assistant] Yo\n[user] More\n[assistant]");
  const ids = tokenizeChatPrompt(model.tokenizer, text);
  assert.equal(ids[0], model.tokenizer.bosId);
  assert.notEqual(ids[1], model.tokenizer.bosId, "the BOS the template wrote is not added a second time");
  assert.deepEqual(ids, model.tokenizer.encode(text, { addBos: false, parseSpecial: true }));
  // Without a BOS in the text, the model's own setting adds one.
  assert.deepEqual(tokenizeChatPrompt(model.tokenizer, "User: x"), model.tokenize("User: x", { addBos: true }));

  assert.throws(
    () => t.render([{ role: "assistant", content: "first" }]),
    (e: unknown) =>
      e instanceof ApiError &&
      e.status === 400 &&
      e.code === "chat_template_error" &&
      /first message must come from the user/.test(e.message),
  );
  assert.throws(() => ChatTemplate.jinja("{% for m in messages %}"), /chat template does not parse/);
  assert.throws(() => ChatTemplate.jinja("  "), /empty/);
});

test("the template comes from the GGUF's tokenizer.chat_template, else the plain format", async () => {
  assert.equal(ChatTemplate.fromModelFile(STORIES).kind, "plain");
  assert.equal(templateForModel(model).kind, "plain");
  const file = await storiesWithTemplate(TAGS_TEMPLATE);
  const t = ChatTemplate.fromModelFile(file, model.tokenizer);
  assert.equal(t.kind, "jinja");
  assert.equal(t.source, TAGS_TEMPLATE);
  assert.equal(t.tokens.bosToken, "<s>");
  assert.equal(t.render([{ role: "user", content: "a" }]), "<s>[user] a\n[assistant]");
  // a neuron store carries the GGUF's metadata: the same template from its manifest
  const pi = join(tempDir(), "with-template.pi");
  await convertToStore({ input: file, output: pi, fsync: false });
  assert.equal(ChatTemplate.fromModelFile(pi, model.tokenizer).source, TAGS_TEMPLATE);
  // A model object that exposes its metadata gets its template without being told.
  const withMeta = {
    tokenizer: model.tokenizer,
    contextSize: model.contextSize,
    generate: model.generate.bind(model),
    metadata: new Map([["tokenizer.chat_template", TAGS_TEMPLATE]]),
  };
  assert.equal(templateForModel(withMeta).kind, "jinja");

  // The chat command finds it in the file: its answer is the library's for that rendering.
  const r = spawnSync(process.execPath, [CLI, "chat", "-m", file, "-t", "1", "--temp", "0", "-n", "12"], {
    input: "Hello\n",
    encoding: "utf8",
    timeout: 60_000,
  });
  assert.equal(r.status, 0, r.stderr);
  const ids = tokenizeChatPrompt(model.tokenizer, t.render([{ role: "user", content: "Hello" }]));
  assert.equal(r.stdout, (await model.generate(ids, { temperature: 0, maxTokens: 12 }).text()) + "\n");
});

test("GenerationQueue: first in, first out; an abort while waiting leaves the queue; release is once", async () => {
  const q = new GenerationQueue();
  const order: string[] = [];
  const r1 = await q.acquire();
  assert.equal(q.busy, true);
  const ac = new AbortController();
  const p2 = q.acquire().then((rel) => (order.push("2"), rel));
  const p3 = q.acquire(ac.signal).then((rel) => (order.push("3"), rel));
  const p4 = q.acquire().then((rel) => (order.push("4"), rel));
  assert.equal(q.waiting, 3);
  ac.abort(new Error("gone"));
  await assert.rejects(p3, /gone/);
  assert.equal(q.waiting, 2);
  r1();
  r1(); // a second call must not release someone else's turn
  const r2 = await p2;
  assert.deepEqual(order, ["2"]);
  assert.equal(q.waiting, 1);
  r2();
  const r4 = await p4;
  assert.deepEqual(order, ["2", "4"]);
  r4();
  assert.equal(q.busy, false);
  const pre = new AbortController();
  pre.abort(new Error("already"));
  await assert.rejects(q.acquire(pre.signal), /already/);
});

test("createChatCompletion / createCompletion: OpenAI-shaped, equal to the library, streamed and not", async () => {
  const messages: ChatMessage[] = [{ role: "user", content: "Tell me a story" }];
  const ids = tokenizeChatPrompt(model.tokenizer, ChatTemplate.plain().render(messages));
  const expected = (await model.generate(ids, { temperature: 0, maxTokens: 20, stop: ["\nUser:"] }).text()).trimStart();

  const c = await createChatCompletion(model, { messages, max_tokens: 20, temperature: 0 });
  assert.equal(c.object, "chat.completion");
  assert.match(c.id, /^chatcmpl-/);
  assert.equal(c.model, "local");
  assert.equal(c.choices[0].message.content, expected);
  assert.equal(c.usage.prompt_tokens, ids.length);
  assert.equal(c.usage.completion_tokens, 20);

  const stream = await createChatCompletion(model, {
    messages,
    max_tokens: 20,
    temperature: 0,
    stream: true,
    model: "mine",
  });
  let text = "";
  let last;
  for await (const chunk of stream) {
    assert.equal(chunk.object, "chat.completion.chunk");
    assert.equal(chunk.model, "mine");
    text += chunk.choices[0]?.delta.content ?? "";
    last = chunk;
  }
  assert.equal(text, expected);
  assert.equal(last!.choices[0].finish_reason, "length");
  assert.equal(last!.usage!.completion_tokens, 20);

  const t = await createCompletion(
    model,
    { prompt: "Once upon a time", max_tokens: 16, temperature: 0 },
    { modelName: "stories" },
  );
  assert.equal(t.model, "stories");
  assert.equal(t.choices[0].text, await model.generate("Once upon a time", { temperature: 0, maxTokens: 16 }).text());
  // Token ids are used as they are.
  const promptIds = model.tokenize("Once upon a time", { addBos: true });
  const byIds = await createCompletion(model, { prompt: promptIds, max_tokens: 16, temperature: 0 });
  assert.equal(byIds.choices[0].text, t.choices[0].text);

  // Defaults sit under the request's own fields.
  const d = await createCompletion(
    model,
    { prompt: "Once upon a time", temperature: 0 },
    { defaults: { maxTokens: 5 } },
  );
  assert.equal(d.usage!.completion_tokens, 5);
});

test("the facade serializes concurrent calls through the model's queue", async () => {
  const prompts = ["Lily", "Tom", "The cat", "A big dog"];
  const expected = [];
  for (const p of prompts) expected.push(await model.generate(p, { temperature: 0, maxTokens: 12 }).text());
  const got = await Promise.all(
    prompts.map((p) => createCompletion(model, { prompt: p, max_tokens: 12, temperature: 0 })),
  );
  assert.deepEqual(
    got.map((r) => r.choices[0].text),
    expected,
  );
});

test("the facade: bad requests reject with ApiError naming the field; an abort rejects with its reason", async () => {
  await assert.rejects(
    createChatCompletion(model, {
      messages: [{ role: "user", content: "x" }],
      temperature: "hot" as unknown as number,
    }),
    (e: unknown) => e instanceof ApiError && e.status === 400 && e.param === "temperature",
  );
  await assert.rejects(
    createCompletion(model, { prompt: "Lily ".repeat(3000) }),
    (e: unknown) =>
      e instanceof ApiError && e.code === "context_length_exceeded" && /context holds 2048/.test(e.message),
  );
  await assert.rejects(
    createCompletion(model, { prompt: [] }),
    (e: unknown) => e instanceof ApiError && e.param === "prompt",
  );
  const ac = new AbortController();
  const stream = await createCompletion(
    model,
    { prompt: "Once upon a time", max_tokens: -1, ignore_eos: true, temperature: 0, stream: true },
    { signal: ac.signal },
  );
  let pieces = 0;
  await assert.rejects(
    (async () => {
      for await (const _ of stream) if (++pieces === 5) ac.abort(new Error("enough"));
    })(),
    /enough/,
  );
  assert.ok(pieces >= 5 && pieces < 100);
  // The model is free again.
  const ok = await createCompletion(model, { prompt: "Lily", max_tokens: 3, temperature: 0 });
  assert.equal(ok.usage!.completion_tokens, 3);
});

test("ChatSession: history carries over turns and equals the library's output for the whole conversation", async () => {
  const s = new ChatSession(model, { systemPrompt: "Stories.", defaults: { temperature: 0, maxTokens: 16 } });
  const seen: string[] = [];
  const a1 = await s.prompt("Hi", { onText: (p) => seen.push(p) });
  assert.equal(seen.join(""), a1.text);
  const a2 = await s.prompt("Go on");
  assert.deepEqual(s.history, [
    { role: "system", content: "Stories." },
    { role: "user", content: "Hi" },
    { role: "assistant", content: a1.text },
    { role: "user", content: "Go on" },
    { role: "assistant", content: a2.text },
  ]);
  // The second turn saw the first: same prompt as rendering the history by hand.
  const t = ChatTemplate.plain();
  const ids = tokenizeChatPrompt(model.tokenizer, t.render(s.history.slice(0, 4)));
  assert.equal(a2.stats.promptTokens, ids.length);
  assert.equal(
    a2.text,
    (await model.generate(ids, { temperature: 0, maxTokens: 16, stop: [...t.stop] }).text()).trimStart(),
  );
  // Turns sent together run in order.
  const s2 = new ChatSession(model, { defaults: { temperature: 0, maxTokens: 8 } });
  const [x, y] = await Promise.all([s2.prompt("One"), s2.prompt("Two")]);
  assert.deepEqual(
    s2.history.map((m) => m.content),
    ["One", x.text, "Two", y.text],
  );
  s.reset();
  assert.deepEqual(s.history, [{ role: "system", content: "Stories." }]);
});

test("ChatSession: an abort keeps the partial answer; an abort before the start changes nothing", async () => {
  const s = new ChatSession(model, { defaults: { temperature: 0, maxTokens: -1, ignoreEos: true } });
  const ac = new AbortController();
  let n = 0;
  const r = await s.prompt("Hi", {
    signal: ac.signal,
    onText: () => {
      if (++n === 4) ac.abort();
    },
  });
  assert.equal(r.stopReason, "abort");
  assert.ok(r.text.length > 0);
  assert.deepEqual(s.history, [
    { role: "user", content: "Hi" },
    { role: "assistant", content: r.text },
  ]);
  const pre = new AbortController();
  pre.abort(new Error("never mind"));
  await assert.rejects(s.prompt("Again", { signal: pre.signal }), /never mind/);
  assert.equal(s.history.length, 2);
});

test("ChatSession: the oldest exchanges are dropped when the conversation outgrows the context; a message too long alone is refused", async () => {
  const small = await loadModel({ modelPath: STORIES, threads: 1, contextSize: 96 });
  try {
    const s = new ChatSession(small, { systemPrompt: "Be brief.", defaults: { temperature: 0, maxTokens: 16 } });
    let dropped = 0;
    for (let i = 0; i < 6; i++) dropped += (await s.prompt(`Tell me about the little dog number ${i}`)).droppedMessages;
    assert.ok(dropped > 0, "some history was dropped");
    const h = s.history;
    assert.deepEqual(h[0], { role: "system", content: "Be brief." });
    assert.equal(h.at(-2)!.content, "Tell me about the little dog number 5");
    assert.ok(!h.some((m) => m.content === "Tell me about the little dog number 0"));
    await assert.rejects(
      s.prompt("dog ".repeat(200)),
      (e: unknown) => e instanceof ApiError && e.code === "context_length_exceeded",
    );
    assert.equal(s.history.length, h.length, "a refused message leaves the history alone");
  } finally {
    await small.dispose();
  }
});

/** Runs `powerinfer chat` with the given stdin lines, returning stdout, stderr and the exit code. */
function chatCli(args: string[], input: string) {
  const r = spawnSync(process.execPath, [CLI, "chat", "-m", STORIES, "-t", "1", ...args], {
    input,
    encoding: "utf8",
    timeout: 60_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test("chat command through a pipe: one answer per line, with history, equal to ChatSession's", async () => {
  const r = chatCli(["--temp", "0", "-n", "20", "-sys", "You tell stories."], "Hello\n\nWhat happened next?\n");
  assert.equal(r.code, 0, r.stderr);
  const s = new ChatSession(model, { systemPrompt: "You tell stories.", defaults: { temperature: 0, maxTokens: 20 } });
  const a = await s.prompt("Hello");
  const b = await s.prompt("What happened next?");
  assert.equal(r.stdout, `${a.text}\n${b.text}\n`);
  // --stats prints a summary line per answer on stderr, never on stdout.
  const st = chatCli(["--temp", "0", "-n", "8", "--stats"], "Hi\n");
  assert.equal(st.code, 0, st.stderr);
  assert.match(st.stderr, /prompt \d+ tokens.*tok\/s \| answer 8 tokens, [\d.]+ tok\/s \| rss [\d.]+ MiB/);
  assert.doesNotMatch(st.stdout, /tok\/s/);
  // Bad flags are usage errors.
  const bad = spawnSync(process.execPath, [CLI, "chat"], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /-m MODEL is required/);
});

test("chat command: SIGINT (Ctrl-C) stops the answer, not the program; the next message sees the partial answer", async () => {
  const args = [CLI, "chat", "-m", STORIES, "-t", "1", "-c", "512", "--temp", "0", "--ignore-eos", "-n", "-1"];
  const child = spawn(process.execPath, args, { stdio: ["pipe", "pipe", "pipe"] });
  let stdout = "";
  let stderr = "";
  let interrupted = false;
  child.stdout.setEncoding("utf8").on("data", (d: string) => {
    stdout += d;
    if (!interrupted && stdout.length > 30) {
      interrupted = true;
      child.kill("SIGINT");
      // The next message once the first answer has been cut.
      const wait = setInterval(() => {
        if (stderr.includes("(stopped)")) {
          clearInterval(wait);
          child.stdin.end("And then?\n");
        }
      }, 10);
    }
  });
  child.stderr.setEncoding("utf8").on("data", (d: string) => (stderr += d));
  const killer = setTimeout(() => child.kill("SIGKILL"), 60_000);
  child.stdin.write("Hello\n");
  const code = await new Promise<number | null>((resolve) => child.on("exit", resolve));
  clearTimeout(killer);
  assert.equal(code, 0, stderr);
  assert.equal(stderr.match(/\(stopped\)/g)?.length, 1, stderr);

  // The same conversation in process: the first answer in full, then the partial's continuation.
  const small = await loadModel({ modelPath: STORIES, threads: 1, contextSize: 512 });
  try {
    const opts = { temperature: 0, maxTokens: -1, ignoreEos: true };
    const full = (await new ChatSession(small, { defaults: opts }).prompt("Hello")).text;
    // stdout is PARTIAL + "\n" + SECOND + "\n" with PARTIAL a proper prefix of the full answer.
    let matched = false;
    for (let i = stdout.indexOf("\n"); i >= 0 && !matched; i = stdout.indexOf("\n", i + 1)) {
      const partial = stdout.slice(0, i);
      if (!full.startsWith(partial) || partial.length >= full.length) continue;
      const s = new ChatSession(small, {
        defaults: opts,
        history: [
          { role: "user", content: "Hello" },
          { role: "assistant", content: partial },
        ],
      });
      const second = await s.prompt("And then?");
      matched = stdout === `${partial}\n${second.text}\n`;
    }
    assert.ok(matched, `stdout is a cut first answer and the full second one:\n${stdout.slice(0, 300)}`);
  } finally {
    await small.dispose();
  }
});

test("progress helpers: a bar drawn in place on a terminal, one summary line elsewhere", () => {
  const out: string[] = [];
  let now = 0;
  const tty = { isTTY: true, columns: 100, write: (s: string) => out.push(s) };
  const bar = new ProgressBar({ label: "loading", total: 4 * 2 ** 20, unit: "bytes", stream: tty, now: () => now });
  now = 1000;
  bar.update(2 ** 20);
  assert.match(
    out.at(-1)!,
    /^\rloading {2}\[#{8}·{22}\] {3}25% {2}1\.0 MiB\/4\.0 MiB {2}1\.0 MiB\/s {2}ETA 3s\x1b\[K$/,
  );
  now = 1050;
  bar.update(2 * 2 ** 20);
  assert.equal(out.length, 1, "no redraw within 100 ms");
  now = 2000;
  bar.finish();
  assert.equal(out.at(-1), "\r\x1b[Kloading: 2.0 MiB in 2.0 s (1.0 MiB/s)\n");

  const pipe: string[] = [];
  const quiet = new ProgressBar({
    label: "converting",
    total: 10,
    stream: { isTTY: false, write: (s: string) => pipe.push(s) },
    now: () => now,
  });
  for (let i = 0; i <= 10; i++) quiet.update(i);
  now = 3000;
  quiet.finish();
  assert.deepEqual(pipe, ["converting: 10 in 1.0 s (10.0/s)\n"]);

  assert.equal(formatBytes(1536), "1.5 KiB");
  assert.equal(formatBytes(512), "512 B");
  assert.equal(formatDuration(75), "1m15s");
  assert.equal(
    formatStats({
      tokensPerSecond: 12.34,
      cacheHitRate: 0.875,
      readBytesPerSecond: 45.6e6,
      residentBytes: 2 ** 30,
      extra: "2 active",
    }),
    "12.3 tok/s | cache 87.5% | read 45.6 MB/s | rss 1.0 GiB | 2 active",
  );
  assert.equal(formatStats({ tokensPerSecond: 5 }), "5.0 tok/s");

  let t = 0;
  const rate = new TokenRate(4, () => t);
  for (let i = 1; i <= 10; i++) {
    t = i * 100; // 10 tok/s
    rate.mark(i);
  }
  assert.equal(Math.round(rate.perSecond), 10);
});

test("StatusLine: reserves the bottom row with a scroll region and gives it back", () => {
  const out: string[] = [];
  const term = {
    isTTY: true,
    columns: 40,
    rows: 10,
    write: (s: string) => out.push(s),
    on: () => undefined,
    off: () => undefined,
  };
  const line = new StatusLine({ stream: term, intervalMs: 0 });
  assert.equal(line.isLive, true);
  line.start();
  line.update("12.0 tok/s | rss 10 MiB");
  line.stop();
  const all = out.join("");
  assert.ok(all.includes("\x1b[1;9r"), "scroll region = rows 1..9");
  assert.ok(all.includes("\x1b[10;1H\x1b[2K\x1b[2m12.0 tok/s | rss 10 MiB"), "the line is drawn on row 10");
  assert.ok(all.endsWith("\x1b7\x1b[r\x1b[10;1H\x1b[2K\x1b8"), "the region is reset and the row cleared");
  const off = new StatusLine({ stream: { isTTY: false, write: () => assert.fail("nothing is drawn off a terminal") } });
  off.start();
  off.update("x");
  off.stop();
});
