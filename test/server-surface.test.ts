/**
 * llama-server's surface on our server, driven by the real `openai` npm client (and raw fetch for
 * what the client hides) on 127.0.0.1: API keys, CORS, any model name, /tokenize, /detokenize,
 * /props, /metrics, logprobs, and JSON answers by constrained decoding (json_object and
 * json_schema) that parse and validate, with ajv, at temperature 0 and 0.8 from stories260K, a
 * model that never saw JSON.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import OpenAI from "openai";
import { Ajv } from "ajv";
import { loadModel, type Model } from "../src/index.js";
import { OpenAIServer, startServer } from "../src/server/index.js";
import { join } from "node:path";
import { convertToStore } from "../src/offline/convert.js";
import { SHARED, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const NAME = "stories260K";
const KEY = "sk-test-0123456789";

let model: Model;
/** open, any origin */
let server: OpenAIServer;
/** with an API key and one allowed origin */
let locked: OpenAIServer;
let client: OpenAI;

function newClient(s: OpenAIServer, apiKey = "not-needed"): OpenAI {
  return new OpenAI({ baseURL: `${s.url}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });
}

before(async () => {
  model = await loadModel({ modelPath: STORIES, threads: 1 });
  server = await startServer({ model, port: 0, modelName: NAME, modelPath: STORIES });
  locked = await startServer({
    model,
    port: 0,
    modelName: NAME,
    apiKeys: [KEY, "second-key"],
    corsOrigins: ["https://app.example"],
  });
  client = newClient(server);
});

after(async () => {
  await server?.close({ timeoutMs: 2000 });
  await locked?.close({ timeoutMs: 2000 });
  await model?.dispose();
});

// ---- API key ----

test("--api-key: 401 with an OpenAI error object without the key or with a wrong one; /health stays open", async () => {
  await assert.rejects(
    newClient(locked, "wrong-key").chat.completions.create({
      model: NAME,
      messages: [{ role: "user", content: "Hi" }],
      max_tokens: 2,
    }),
    (e: unknown) =>
      e instanceof OpenAI.AuthenticationError &&
      e.status === 401 &&
      e.code === "invalid_api_key" &&
      /invalid API key/.test(e.message),
  );
  for (const path of ["/v1/models", "/v1/completions", "/tokenize", "/props", "/metrics", "/no/such/route"]) {
    const res = await fetch(`${locked.url}${path}`, { method: path === "/v1/completions" ? "POST" : "GET" });
    assert.equal(res.status, 401, path);
    assert.match(res.headers.get("www-authenticate") ?? "", /^Bearer/);
    const body = (await res.json()) as { error: { type: string; code: string; message: string } };
    assert.equal(body.error.type, "authentication_error");
    assert.match(body.error.message, /missing API key/);
  }
  const health = await fetch(`${locked.url}/health`);
  assert.equal(health.status, 200);
  // either key works
  for (const key of [KEY, "second-key"]) {
    const r = await newClient(locked, key).completions.create({
      model: NAME,
      prompt: "Once",
      max_tokens: 2,
      temperature: 0,
    });
    assert.equal(r.choices.length, 1);
  }
  const m = await fetch(`${locked.url}/metrics`, { headers: { Authorization: `Bearer ${KEY}` } });
  assert.equal(m.status, 200);
});

// ---- CORS ----

test("CORS: a preflight is answered 204 with the methods and headers, Allow-Origin on every response", async () => {
  const pre = await fetch(`${server.url}/v1/chat/completions`, {
    method: "OPTIONS",
    headers: {
      Origin: "https://somewhere.example",
      "Access-Control-Request-Method": "POST",
      "Access-Control-Request-Headers": "authorization, content-type, x-stainless-os",
    },
  });
  assert.equal(pre.status, 204);
  assert.equal(pre.headers.get("access-control-allow-origin"), "*");
  assert.match(pre.headers.get("access-control-allow-methods")!, /\bPOST\b/);
  assert.match(pre.headers.get("access-control-allow-methods")!, /\bGET\b/);
  const allowed = pre.headers.get("access-control-allow-headers")!.toLowerCase();
  for (const h of ["authorization", "content-type", "x-stainless-os"]) assert.ok(allowed.includes(h), allowed);
  // on a success, an error and a stream
  const ok = await fetch(`${server.url}/v1/models`, { headers: { Origin: "https://somewhere.example" } });
  assert.equal(ok.headers.get("access-control-allow-origin"), "*");
  const missing = await fetch(`${server.url}/nothing`);
  assert.equal(missing.status, 404);
  assert.equal(missing.headers.get("access-control-allow-origin"), "*");
  const stream = await fetch(`${server.url}/v1/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "Once", max_tokens: 2, stream: true }),
  });
  assert.equal(stream.headers.get("access-control-allow-origin"), "*");
  await stream.text();
});

test("--cors-origin: only the listed origin gets Allow-Origin; a preflight needs no API key", async () => {
  const pre = (origin: string) =>
    fetch(`${locked.url}/v1/chat/completions`, {
      method: "OPTIONS",
      headers: {
        Origin: origin,
        "Access-Control-Request-Method": "POST",
        "Access-Control-Request-Headers": "authorization",
      },
    });
  const yes = await pre("https://app.example");
  assert.equal(yes.status, 204);
  assert.equal(yes.headers.get("access-control-allow-origin"), "https://app.example");
  assert.match(yes.headers.get("vary")!, /Origin/);
  const no = await pre("https://evil.example");
  assert.equal(no.status, 403);
  assert.equal(no.headers.get("access-control-allow-origin"), null);
  // the 401 of a request from an allowed page still carries Allow-Origin, so the page can read it
  const denied = await fetch(`${locked.url}/v1/models`, { headers: { Origin: "https://app.example" } });
  assert.equal(denied.status, 401);
  assert.equal(denied.headers.get("access-control-allow-origin"), "https://app.example");
});

// ---- any model name ----

test("a request naming any model is served by the one model, and the answer names it", async () => {
  const r = await client.chat.completions.create({
    model: "gpt-4o-mini",
    messages: [{ role: "user", content: "Hi" }],
    max_tokens: 3,
    temperature: 0,
  });
  assert.equal(r.model, NAME);
  assert.equal((await client.models.retrieve("gpt-4o-mini")).id, NAME);
});

// ---- tokenize, detokenize, props ----

test("/tokenize and /detokenize: the library's token ids, BOS with add_special, pieces, 400 naming a bad field", async () => {
  const post = (path: string, body: unknown) =>
    fetch(`${server.url}${path}`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify(body),
    });
  const text = "Once upon a time, Lily smiled.";
  const plain = (await (await post("/tokenize", { content: text })).json()) as { tokens: number[] };
  assert.deepEqual(plain.tokens, model.tokenize(text));
  const bos = (await (await post("/tokenize", { content: text, add_special: true })).json()) as { tokens: number[] };
  assert.deepEqual(bos.tokens, model.tokenize(text, { addBos: true }));
  assert.equal(bos.tokens[0], model.tokenizer.bosId);
  const pieces = (await (await post("/tokenize", { content: "Hi é", with_pieces: true })).json()) as {
    tokens: { id: number; piece: string | number[] }[];
  };
  assert.deepEqual(
    pieces.tokens.map((t) => t.id),
    model.tokenize("Hi é"),
  );
  const back = (await (await post("/detokenize", { tokens: plain.tokens })).json()) as { content: string };
  assert.equal(back.content.trim(), text);
  // also under /v1
  assert.equal((await post("/v1/tokenize", { content: "a" })).status, 200);

  const bad = async (path: string, body: unknown, param: string) => {
    const res = await post(path, body);
    assert.equal(res.status, 400, `${path} ${JSON.stringify(body)}`);
    const e = ((await res.json()) as { error: { param: string; message: string } }).error;
    assert.equal(e.param, param);
    return e.message;
  };
  assert.match(await bad("/tokenize", {}, "content"), /content must be a string/);
  assert.match(await bad("/tokenize", { content: 5 }, "content"), /got number/);
  assert.match(await bad("/tokenize", { content: "x", add_special: "yes" }, "add_special"), /true or false/);
  assert.match(
    await bad("/detokenize", { tokens: [1, 99999] }, "tokens[1]"),
    /not a token id of this model \(0\.\.511\)/,
  );
  assert.match(await bad("/detokenize", { tokens: "1 2" }, "tokens"), /array of token ids/);
  const get = await fetch(`${server.url}/tokenize`);
  assert.equal(get.status, 405);
});

test("/props: model, context, build and the default generation settings", async () => {
  const p = (await (await fetch(`${server.url}/props`)).json()) as {
    model: string;
    model_path: string;
    n_ctx: number;
    total_slots: number;
    build_info: string;
    default_generation_settings: { n_ctx: number; params: Record<string, unknown> };
    offload: unknown;
  };
  assert.equal(p.model, NAME);
  assert.equal(p.model_path, STORIES);
  assert.equal(p.n_ctx, model.contextSize);
  assert.equal(p.default_generation_settings.n_ctx, model.contextSize);
  assert.equal(p.total_slots, 1);
  assert.match(p.build_info, /^powerinfer-ts \d+\.\d+\.\d+ \(node v\d+/);
  const params = p.default_generation_settings.params;
  assert.equal(params.temperature, 0.8);
  assert.equal(params.top_k, 40);
  assert.equal(params.top_p, 0.95);
  assert.equal(params.min_p, 0.05);
  assert.equal(params.n_predict, -1);
  assert.equal(p.offload, null);
});

// ---- metrics ----

/** Prometheus text -> sample values by name{labels}. */
function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*(?:\{[^}]*\})?) (\S+)$/.exec(line);
    assert.ok(m, `not a Prometheus sample line: ${JSON.stringify(line)}`);
    out.set(m[1], Number(m[2]));
  }
  return out;
}

test("/metrics: Prometheus text whose counters grow with each request", async () => {
  const scrape = async () => {
    const res = await fetch(`${server.url}/metrics`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type")!, /^text\/plain; version=0\.0\.4/);
    const text = await res.text();
    for (const name of ["llamacpp:prompt_tokens_total", "llamacpp:tokens_predicted_total", "powerinfer:requests_total"])
      assert.match(text, new RegExp(`# TYPE ${name} counter`));
    return parseMetrics(text);
  };
  const before = await scrape();
  const r1 = await client.completions.create({
    model: NAME,
    prompt: "Once upon a time",
    max_tokens: 6,
    temperature: 0,
  });
  const r2 = await client.chat.completions.create({
    model: NAME,
    messages: [{ role: "user", content: "Tell me a story." }],
    max_tokens: 5,
    temperature: 0,
  });
  const after = await scrape();
  const grew = (k: string) => after.get(k)! - before.get(k)!;
  assert.equal(grew("llamacpp:prompt_tokens_total"), r1.usage!.prompt_tokens + r2.usage!.prompt_tokens);
  assert.equal(grew("llamacpp:tokens_predicted_total"), r1.usage!.completion_tokens + r2.usage!.completion_tokens);
  assert.equal(grew('powerinfer:requests_total{outcome="completed"}'), 2);
  assert.ok(grew("llamacpp:prompt_seconds_total") > 0);
  assert.ok(grew("llamacpp:tokens_predicted_seconds_total") > 0);
  assert.ok(after.get("llamacpp:predicted_tokens_seconds")! > 0);
  assert.equal(after.get("llamacpp:requests_deferred"), 0);
  // a model in memory has no neuron cache to report
  assert.equal(after.has("powerinfer:neuron_cache_misses_total"), false);
});

test("/metrics of a neuron store: the neuron cache's hits and misses and the bytes read grow with requests; /props has its layout", async () => {
  const store = join(tempDir(), "relu.pi");
  await convertToStore({ input: `${SHARED}/models/relu-stories.gguf`, output: store, fsync: false });
  const storeModel = await loadModel({ modelPath: store, threads: 1, offload: { cacheBytes: 2 * 2 ** 20 } });
  const s = await startServer({ model: storeModel, port: 0, modelName: "relu" });
  try {
    const scrape = async () => parseMetrics(await (await fetch(`${s.url}/metrics`)).text());
    const before = await scrape();
    await newClient(s).completions.create({ model: "relu", prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
    const after = await scrape();
    const grew = (k: string) => after.get(k)! - (before.get(k) ?? 0);
    assert.ok(grew("powerinfer:neuron_cache_misses_total") > 0);
    assert.ok(grew('powerinfer:neuron_cache_hits_total{region="hot"}') > 0);
    assert.ok(grew("powerinfer:flash_read_bytes_total") > 0);
    const off = storeModel.offloadStats()!;
    assert.equal(after.get("powerinfer:flash_read_bytes_total"), off.bytesRead);
    assert.equal(after.get("powerinfer:neuron_cache_misses_total"), off.misses);
    const ratio = after.get("powerinfer:neuron_cache_hit_ratio")!;
    assert.ok(ratio > 0 && ratio < 1);
    const props = (await (await fetch(`${s.url}/props`)).json()) as {
      offload: { sparsity: string; neuron_cache_bytes: number };
    };
    assert.equal(props.offload.sparsity, "gate");
    assert.ok(props.offload.neuron_cache_bytes > 0);
  } finally {
    await s.close({ timeoutMs: 2000 });
    await storeModel.dispose();
  }
});

// ---- logprobs ----

test("logprobs, greedy: each token is the most probable of its top_logprobs; streamed the same; completions' form", async () => {
  const ask = {
    model: NAME,
    messages: [{ role: "user" as const, content: "Tell me a story." }],
    max_tokens: 12,
    temperature: 0,
  };
  const r = await client.chat.completions.create({ ...ask, logprobs: true, top_logprobs: 3 });
  const content = r.choices[0].logprobs!.content!;
  assert.equal(content.length, r.usage!.completion_tokens);
  for (const t of content) {
    assert.equal(t.top_logprobs.length, 3);
    assert.equal(t.top_logprobs[0].token, t.token, "the chosen token is the most probable");
    assert.equal(t.top_logprobs[0].logprob, t.logprob);
    assert.ok(
      t.logprob <= 0 &&
        t.top_logprobs[1].logprob <= t.logprob &&
        t.top_logprobs[2].logprob <= t.top_logprobs[1].logprob,
    );
    assert.deepEqual(t.bytes, [...Buffer.from(t.token)]);
  }
  assert.equal(
    content
      .map((t) => t.token)
      .join("")
      .trimStart(),
    r.choices[0].message.content,
  );
  // without top_logprobs: the tokens' own only; without logprobs: null
  const own = await client.chat.completions.create({ ...ask, logprobs: true });
  assert.deepEqual(
    own.choices[0].logprobs!.content!.map((t) => [t.token, t.logprob, t.top_logprobs.length]),
    content.map((t) => [t.token, t.logprob, 0]),
  );
  assert.equal((await client.chat.completions.create(ask)).choices[0].logprobs, null);

  // streamed: the same entries, spread over the chunks
  const stream = await client.chat.completions.create({ ...ask, logprobs: true, top_logprobs: 3, stream: true });
  const streamed: { token: string; logprob: number }[] = [];
  for await (const c of stream) streamed.push(...(c.choices[0]?.logprobs?.content ?? []));
  assert.deepEqual(
    streamed.map((t) => [t.token, t.logprob]),
    content.map((t) => [t.token, t.logprob]),
  );

  // completions: logprobs: N
  const c = await client.completions.create({
    model: NAME,
    prompt: "Once upon a time",
    max_tokens: 8,
    temperature: 0,
    logprobs: 2,
  });
  const lp = c.choices[0].logprobs!;
  assert.equal(lp.tokens!.length, 8);
  assert.equal(lp.tokens!.join(""), c.choices[0].text);
  lp.tokens!.forEach((tok, i) => {
    const top = lp.top_logprobs![i];
    assert.equal(Object.keys(top).length, 2);
    assert.equal(Math.max(...Object.values(top)), lp.token_logprobs![i]);
    assert.equal(top[tok], lp.token_logprobs![i]);
    assert.equal(lp.text_offset![i], lp.tokens!.slice(0, i).join("").length);
  });
});

test("logprobs while sampling: from the distribution drawn from (temperature, filters), summing to at most 1", async () => {
  const r = await client.completions.create({
    model: NAME,
    prompt: "Once upon a time",
    max_tokens: 16,
    temperature: 0.8,
    seed: 7,
    logprobs: 5,
  });
  const lp = r.choices[0].logprobs!;
  lp.tokens!.forEach((tok, i) => {
    const top = lp.top_logprobs![i];
    const mass = Object.values(top).reduce((s, v) => s + Math.exp(v), 0);
    assert.ok(mass <= 1 + 1e-9, `mass ${mass}`);
    assert.ok(Number.isFinite(lp.token_logprobs![i]) && lp.token_logprobs![i] <= 0);
    // the drawn token had a non-zero probability; if it is among the listed, with the same value
    if (top[tok] !== undefined) assert.equal(top[tok], lp.token_logprobs![i]);
  });
  await assert.rejects(
    client.chat.completions.create({
      model: NAME,
      messages: [{ role: "user", content: "Hi" }],
      top_logprobs: 30,
      logprobs: true,
    }),
    (e: unknown) => e instanceof OpenAI.BadRequestError && /top_logprobs must be between 0 and 20/.test(e.message),
  );
});

// ---- JSON answers ----

const STORY_SCHEMA = {
  type: "object",
  properties: {
    title: { type: "string", maxLength: 40 },
    hero: {
      type: "object",
      properties: {
        name: { type: "string", minLength: 1, maxLength: 20 },
        age: { type: "integer" },
        kind: { enum: ["girl", "boy", "cat", "dog"] },
      },
      required: ["name", "age", "kind"],
      additionalProperties: false,
    },
    friends: { type: "array", items: { type: "string", maxLength: 16 }, minItems: 1, maxItems: 3 },
    happy: { type: "boolean" },
    score: { type: ["number", "null"] },
  },
  required: ["title", "hero", "friends", "happy"],
  additionalProperties: false,
};

test("response_format json_schema: answers parse and validate at temperature 0 and 0.8 (stories260K never saw JSON)", async () => {
  const validate = new Ajv({ strict: true }).compile(STORY_SCHEMA);
  const format = { type: "json_schema" as const, json_schema: { name: "story", schema: STORY_SCHEMA, strict: true } };
  const runs: { temperature: number; seed: number }[] = [
    { temperature: 0, seed: 1 },
    ...[1, 2, 3, 4, 5].map((seed) => ({ temperature: 0.8, seed })),
  ];
  const seen = new Set<string>();
  for (const { temperature, seed } of runs) {
    const r = await client.chat.completions.create({
      model: NAME,
      messages: [{ role: "user", content: "Tell me a story about a girl and her friends." }],
      response_format: format,
      max_tokens: 200,
      temperature,
      seed,
    });
    const text = r.choices[0].message.content!;
    let value: unknown;
    assert.doesNotThrow(() => (value = JSON.parse(text)), `does not parse at temperature ${temperature}: ${text}`);
    assert.ok(validate(value), `invalid at temperature ${temperature}: ${JSON.stringify(validate.errors)} in ${text}`);
    assert.equal(r.choices[0].finish_reason, "stop");
    seen.add(text);
  }
  assert.ok(seen.size >= 3, "sampling gives different answers");

  // streamed, through the completions endpoint, with a budget that forces the value closed early
  const stream = await client.completions.create({
    model: NAME,
    prompt: "Once upon a time",
    response_format: format,
    // the shortest valid answer takes 81 tokens: the budget leaves little room to ramble
    max_tokens: 100,
    temperature: 0.8,
    seed: 11,
    stream: true,
  } as OpenAI.CompletionCreateParamsStreaming);
  let text = "";
  for await (const c of stream) text += c.choices[0]?.text ?? "";
  assert.ok(validate(JSON.parse(text)), text);
});

test("response_format json_object: a JSON object; unsupported schema keywords and a too small max_tokens get 400 naming them", async () => {
  for (const temperature of [0, 0.8]) {
    const r = await client.chat.completions.create({
      model: NAME,
      messages: [{ role: "user", content: "Hi" }],
      response_format: { type: "json_object" },
      max_tokens: 80,
      temperature,
      seed: 3,
    });
    const v = JSON.parse(r.choices[0].message.content!);
    assert.ok(typeof v === "object" && v !== null && !Array.isArray(v), r.choices[0].message.content!);
  }
  const refused = async (body: Record<string, unknown>, pattern: RegExp, param: string) => {
    const res = await fetch(`${server.url}/v1/chat/completions`, {
      method: "POST",
      headers: { "Content-Type": "application/json" },
      body: JSON.stringify({ model: NAME, messages: [{ role: "user", content: "Hi" }], ...body }),
    });
    assert.equal(res.status, 400);
    const e = ((await res.json()) as { error: { message: string; param: string } }).error;
    assert.match(e.message, pattern);
    assert.equal(e.param, param);
  };
  await refused(
    {
      response_format: {
        type: "json_schema",
        json_schema: {
          name: "x",
          schema: {
            type: "object",
            properties: { age: { type: "integer", minimum: 0 }, name: { type: "string", pattern: "^[A-Z]" } },
          },
        },
      },
    },
    /"minimum" \(at schema\.properties\.age\).*"pattern" \(at schema\.properties\.name\)/,
    "response_format",
  );
  await refused(
    { response_format: { type: "json_schema", json_schema: { name: "x", schema: { $ref: "#/$defs/a" } } } },
    /"\$ref"/,
    "response_format",
  );
  await refused(
    { response_format: { type: "json_schema", json_schema: { name: "x", schema: STORY_SCHEMA } }, max_tokens: 10 },
    /shortest JSON answer takes \d+ tokens, but only 10 may be generated/,
    "max_tokens",
  );
  await refused({ response_format: { type: "xml" } }, /response_format\.type must be/, "response_format.type");
  await refused(
    { response_format: { type: "json_schema" } },
    /needs json_schema\.schema/,
    "response_format.json_schema.schema",
  );
});
