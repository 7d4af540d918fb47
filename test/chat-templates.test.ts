/**
 * Real chat templates (Qwen3, Llama 3 / 3.1 / 3.2, Gemma 3, DeepSeek V3, gpt-oss, Phi-3.5) rendered
 * by the engine must equal what Hugging Face transformers' apply_chat_template renders for the same
 * conversation: test/fixtures/chat-templates/expected.json, written once by
 * scripts/chat-template-reference.py (see the README there). Also: the kwargs a caller passes
 * (enable_thinking, date_string...) on each surface, continue_final_message, a template's own
 * refusal as the API's 400, and the prompt ids' BOS/EOS as llama.cpp makes them.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import {
  ApiError,
  ChatTemplate,
  prepareChatCompletion,
  tokenizeChatPrompt,
  type ChatMessage,
  type ChatModel,
  type RenderOptions,
} from "../src/chat/index.js";
import { strftime } from "../src/chat/strftime.js";
import { Tokenizer } from "../src/tokenizer/index.js";
import { gpt2ByteToUnicode } from "../src/tokenizer/unicode.js";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..", "..");
const FIXTURES = join(ROOT, "test", "fixtures", "chat-templates");
const read = (name: string) => JSON.parse(readFileSync(join(FIXTURES, name), "utf8"));

interface Fixture {
  name: string;
  chat_template: string;
  bos_token: string | null;
  eos_token: string | null;
}
interface Case {
  id: string;
  templates: "all" | string[];
  messages: ChatMessage[];
  add_generation_prompt: boolean;
  continue_final_message?: boolean;
  kwargs?: Record<string, unknown>;
  tools?: unknown[];
}
interface Result {
  template: string;
  case: string;
  text?: string;
  error?: string;
}

const conversations: { now: string; cases: Case[] } = read("conversations.json");
const expected: { results: Result[] } = read("expected.json");
const TEMPLATES = [
  "qwen3",
  "gemma3",
  "llama3",
  "llama3.1",
  "llama3.2",
  "deepseek-v3",
  "gpt-oss",
  "phi3.5",
  "jinja-features",
];
const fixtures = new Map<string, Fixture>(TEMPLATES.map((n) => [n, read(`${n}.json`)]));
const cases = new Map(conversations.cases.map((c) => [c.id, c]));
/** The clock transformers' strftime_now was pinned to (a local time, as Python's datetime.now()). */
const NOW = new Date(conversations.now);

function templateOf(name: string): ChatTemplate {
  const f = fixtures.get(name)!;
  return ChatTemplate.jinja(f.chat_template, {
    bosToken: f.bos_token ?? undefined,
    eosToken: f.eos_token ?? undefined,
  });
}

function optionsOf(c: Case): RenderOptions {
  return {
    addGenerationPrompt: c.add_generation_prompt,
    continueFinalMessage: c.continue_final_message,
    kwargs: c.kwargs,
    tools: c.tools,
    now: NOW,
  };
}

function expectedText(template: string, id: string): string {
  const r = expected.results.find((x) => x.template === template && x.case === id);
  assert.ok(r?.text !== undefined, `expected.json has a rendering of ${id} by ${template}`);
  return r.text;
}

test("expected.json covers every case with every template it names, and every template nine times or more", () => {
  let n = 0;
  for (const c of conversations.cases) {
    for (const t of c.templates === "all" ? TEMPLATES : c.templates) {
      assert.ok(
        expected.results.some((r) => r.template === t && r.case === c.id),
        `${c.id} x ${t} is in expected.json (run scripts/chat-template-reference.py render)`,
      );
      n++;
    }
  }
  assert.equal(expected.results.length, n, "expected.json holds nothing that conversations.json does not ask for");
  for (const t of TEMPLATES)
    assert.ok(expected.results.filter((r) => r.template === t).length >= 9, `${t} is compared on 9 cases or more`);
});

for (const name of TEMPLATES) {
  test(`${name}: every conversation renders exactly as transformers' apply_chat_template renders it`, () => {
    const template = templateOf(name);
    const results = expected.results.filter((r) => r.template === name);
    for (const r of results) {
      const c = cases.get(r.case)!;
      if (r.error !== undefined) {
        // The template's own raise_exception: the API's 400 with transformers' words in it.
        assert.throws(
          () => template.render(c.messages, optionsOf(c)),
          (e: unknown) =>
            e instanceof ApiError &&
            e.status === 400 &&
            e.code === "chat_template_error" &&
            e.message === `the model's chat template rejected the messages: ${r.error}`,
          `${name} / ${r.case}: refused with ${JSON.stringify(r.error)}`,
        );
      } else {
        assert.equal(template.render(c.messages, optionsOf(c)), r.text, `${name} / ${r.case}`);
      }
    }
  });
}

test("the fixtures hold the cases the issue names: Gemma 3 folding the system prompt, Qwen3's thinking switch, the dates, the role error", () => {
  const gemma = expectedText("gemma3", "system-multi-turn");
  assert.match(gemma, /^<bos><start_of_turn>user\nYou are a concise assistant\.\n\nWhat is the capital/);
  assert.ok(expectedText("qwen3", "thinking-off").endsWith("<|im_start|>assistant\n<think>\n\n</think>\n\n"));
  assert.ok(expectedText("qwen3", "thinking-on").endsWith("<|im_start|>assistant\n"));
  assert.match(expectedText("llama3.1", "date-string"), /Today Date: 15 Mar 2025\n/);
  assert.match(expectedText("llama3.1", "single-user"), /Today Date: 26 Jul 2024\n/);
  assert.match(expectedText("llama3.2", "single-user"), /Today Date: 07 Mar 2025\n/);
  const refused = expected.results.find((r) => r.template === "gemma3" && r.case === "roles-must-alternate");
  assert.equal(refused?.error, "Conversation roles must alternate user/assistant/user/assistant/...");
});

test("withKwargs: a template's standing kwargs render as the same kwargs given per call; a call's own win", () => {
  const qwen = templateOf("qwen3");
  const c = cases.get("thinking-off")!;
  const noThinking = qwen.withKwargs({ enable_thinking: false });
  assert.deepEqual(noThinking.kwargs, { enable_thinking: false });
  assert.equal(noThinking.render(c.messages, { now: NOW }), expectedText("qwen3", "thinking-off"));
  const on = cases.get("thinking-on")!;
  assert.equal(
    noThinking.render(on.messages, { kwargs: { enable_thinking: true }, now: NOW }),
    expectedText("qwen3", "thinking-on"),
  );
  assert.equal(qwen.kwargs.enable_thinking, undefined, "withKwargs leaves the template it was called on alone");
  for (const reserved of ["messages", "add_generation_prompt", "tools", "documents"]) {
    assert.throws(() => qwen.withKwargs({ [reserved]: 1 }), new RegExp(`may not set "${reserved}"`));
    assert.throws(() => qwen.render(c.messages, { kwargs: { [reserved]: 1 } }), ApiError);
  }
});

test("strftime_now reads the clock at rendering unless pinned, and prints Python's C-locale names", () => {
  const llama32 = templateOf("llama3.2");
  const today = llama32.render([{ role: "user", content: "x" }]);
  const d = new Date();
  // Around midnight the clock may move between the two readings.
  const candidates = [d, new Date(d.getTime() - 60_000)].map((t) => `Today Date: ${strftime(t, "%d %b %Y")}\n`);
  assert.ok(
    candidates.some((s) => today.includes(s)),
    `the prompt has today's date: ${today.slice(0, 120)}`,
  );
  const t = new Date(2024, 11, 31, 23, 4, 5, 6);
  assert.equal(strftime(t, "%Y-%m-%d %H:%M:%S.%f"), "2024-12-31 23:04:05.006000");
  assert.equal(
    strftime(t, "%a %A %b %B %j %U %W %w %y %I%p %-d %-m %-H %e|%z|%Z|%%|%Q"),
    "Tue Tuesday Dec December 366 52 53 2 24 11PM 31 12 23 31|||%|%Q",
  );
  assert.equal(
    strftime(new Date(2025, 0, 5, 0, 0, 0), "%c|%x|%X|%U|%W|%I %p|%-I"),
    "Sun Jan  5 00:00:00 2025|01/05/25|00:00:00|01|00|12 AM|12",
  );
});

test("continue_final_message: refused with add_generation_prompt, without a message, or where the template drops it", () => {
  const llama = templateOf("llama3.1");
  const msgs: ChatMessage[] = [
    { role: "user", content: "hi" },
    { role: "assistant", content: "Hello" },
  ];
  assert.throws(
    () => llama.render(msgs, { continueFinalMessage: true, addGenerationPrompt: true }),
    (e: unknown) => e instanceof ApiError && e.status === 400 && /cannot both be true/.test(e.message),
  );
  assert.throws(() => llama.render([], { continueFinalMessage: true }), /needs a message to continue/);
  // Gemma 3 folds a system message into the first user turn: alone and last, it is never printed.
  assert.throws(
    () => templateOf("gemma3").render([{ role: "system", content: "Be brief." }], { continueFinalMessage: true }),
    /does not print the last message as it is/,
  );
  // The plain transcript leaves the last line open.
  assert.equal(ChatTemplate.plain().render(msgs, { continueFinalMessage: true }), "User: hi\nAssistant: Hello");
});

/**
 * A byte-level BPE vocabulary with the special tokens of the llama3 and qwen3 fixtures: the 256
 * byte tokens, "Ġt" (the one merge), then <|begin_of_text|> = 257 (BOS) ... <|eot_id|> = 261 (EOS).
 */
function llamaTokenizer(
  addBos: boolean,
  addEos: boolean,
  template?: string,
): { tokenizer: Tokenizer; metadata: Map<string, unknown> } {
  const tokens: string[] = [];
  for (let b = 0; b < 256; b++) tokens.push(gpt2ByteToUnicode(b));
  tokens.push("Ġt");
  const specials = ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"];
  tokens.push(...specials, "<|im_start|>", "<|im_end|>");
  const types = new Int32Array(tokens.length).fill(1);
  for (let i = 257; i < tokens.length; i++) types[i] = 3;
  const metadata = new Map<string, unknown>([
    ["tokenizer.ggml.model", "gpt2"],
    ["tokenizer.ggml.pre", "llama-bpe"],
    ["tokenizer.ggml.tokens", tokens],
    ["tokenizer.ggml.token_type", types],
    ["tokenizer.ggml.merges", ["Ġ t"]],
    ["tokenizer.ggml.bos_token_id", 257],
    ["tokenizer.ggml.eos_token_id", 261],
    ["tokenizer.ggml.add_bos_token", addBos],
    ["tokenizer.ggml.add_eos_token", addEos],
  ]);
  if (template !== undefined) metadata.set("tokenizer.chat_template", template);
  return { tokenizer: Tokenizer.fromGGUF({ metadata }), metadata };
}

test("prompt ids: BOS once whether the template prints it or not, EOS as add_eos_token says, as llama.cpp makes them", () => {
  const msgs = cases.get("system-multi-turn")!.messages;
  const { tokenizer: tk, metadata } = llamaTokenizer(true, false, fixtures.get("llama3.1")!.chat_template);
  const template = ChatTemplate.fromMetadata(metadata, tk);
  assert.equal(template.tokens.bosToken, "<|begin_of_text|>", "the template gets the GGUF's BOS text");
  const text = template.render(msgs, { now: NOW });
  assert.equal(text, expectedText("llama3.1", "system-multi-turn"));
  const ids = tokenizeChatPrompt(tk, text);
  // llama.cpp: cut the template's BOS text, then tokenize with the model's BOS added.
  const rest = tk.encode(text.slice("<|begin_of_text|>".length), { parseSpecial: true });
  assert.deepEqual(ids, [257, ...rest]);
  assert.equal(ids.filter((id) => id === 257).length, 1, "one BOS");
  assert.equal(ids[1], 259, "then <|start_header_id|>");

  // A template that prints no BOS (Phi-3.5's) gets the model's.
  const phi = templateOf("phi3.5").render(msgs);
  assert.deepEqual(tokenizeChatPrompt(tk, phi), [257, ...tk.encode(phi, { parseSpecial: true })]);
  // A model that adds none keeps what the template wrote, and adds nothing.
  const { tokenizer: noBos } = llamaTokenizer(false, false);
  assert.deepEqual(tokenizeChatPrompt(noBos, text), noBos.encode(text, { parseSpecial: true }));
  assert.equal(tokenizeChatPrompt(noBos, phi)[0], noBos.encode("<", {})[0]);

  // add_eos_token: one EOS at the end, whether the template ended with it or not.
  const { tokenizer: withEos } = llamaTokenizer(true, true);
  const closed = text + "<|eot_id|>";
  const a = tokenizeChatPrompt(withEos, closed);
  assert.deepEqual(a, [257, ...withEos.encode(closed.slice("<|begin_of_text|>".length), { parseSpecial: true })]);
  assert.equal(a.at(-1), 261);
  assert.notEqual(a.at(-2), 261, "not doubled");
  assert.deepEqual(
    tokenizeChatPrompt(withEos, text),
    [257, ...withEos.encode(text.slice("<|begin_of_text|>".length), { parseSpecial: true }), 261],
    "added where the template did not end with it",
  );
});

test("the OpenAI-shaped surface: chat_template_kwargs, add_generation_prompt and continue_final_message reach the template", () => {
  const { tokenizer, metadata } = llamaTokenizer(true, false, fixtures.get("qwen3")!.chat_template);
  const model: ChatModel & { metadata: Map<string, unknown> } = {
    tokenizer,
    metadata,
    contextSize: 4096,
    generate: () => {
      throw new Error("not run");
    },
  };
  const promptOf = (body: Record<string, unknown>) =>
    prepareChatCompletion(model, { messages: cases.get("thinking-off")!.messages, ...body }).promptIds;
  const text = (ids: number[]) => tokenizer.decode(ids, { special: true });
  const off = text(promptOf({ chat_template_kwargs: { enable_thinking: false } }));
  assert.ok(off.endsWith(expectedText("qwen3", "thinking-off")), off);
  const plain = text(promptOf({}));
  assert.ok(plain.endsWith("<|im_start|>assistant\n"), "without kwargs the template's default");
  const none = text(promptOf({ add_generation_prompt: false }));
  assert.ok(none.endsWith("What is the capital of France?<|im_end|>\n"), none);

  const haiku = cases.get("continue-final-message")!;
  const cont = prepareChatCompletion(model, { messages: haiku.messages, continue_final_message: true }).promptIds;
  assert.ok(text(cont).endsWith(expectedText("qwen3", "continue-final-message")));

  const bad = (body: Record<string, unknown>, re: RegExp) =>
    assert.throws(
      () => prepareChatCompletion(model, { messages: haiku.messages, ...body }),
      (e: unknown) => e instanceof ApiError && e.status === 400 && re.test(e.message),
    );
  bad({ chat_template_kwargs: [1] }, /chat_template_kwargs must be an object/);
  bad({ chat_template_kwargs: { messages: [] } }, /may not set "messages"/);
  bad({ add_generation_prompt: "yes" }, /add_generation_prompt must be true or false/);
  bad({ continue_final_message: true, add_generation_prompt: true }, /cannot both be true/);
});
