/**
 * Every numeric request field and CLI flag has a range, and a value outside it is a 400 (server)
 * or a usage error (CLI) naming the field and the range. Before: `GET /v1/models/%ff` gave 500 "URI
 * malformed", `repeat_last_n: 1e300` a 500 "Invalid typed array length", `run --repeat-last-n
 * 100000000000` failed the same way, and 1e9 quietly reserved 4 GB.
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { loadModel, type Model } from "../src/index.js";
import { OpenAIServer, startServer } from "../src/server/index.js";
import { Sampler } from "../src/generate/sampler.js";
import { CLI, SHARED } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
let model: Model;
let server: OpenAIServer;

before(async () => {
  model = await loadModel({ modelPath: STORIES, threads: 1, contextSize: 256 });
  server = await startServer({ model, port: 0 });
});

after(async () => {
  await server?.close({ timeoutMs: 2000 });
  await model?.dispose();
});

async function post(path: string, body: unknown): Promise<{ status: number; error: Record<string, unknown> }> {
  const res = await fetch(`${server.url}${path}`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  const j = (await res.json()) as { error: Record<string, unknown> };
  return { status: res.status, error: j.error };
}

test("GET /v1/models/%ff: 400 naming the bad path, not 500", async () => {
  for (const path of ["/v1/models/%ff", "/v1/models/%E0%A4%A", "/models/%"]) {
    const res = await fetch(`${server.url}${path}`);
    assert.equal(res.status, 400, path);
    const j = (await res.json()) as { error: { message: string; code: string } };
    assert.match(j.error.message, /is not valid percent-encoded UTF-8/, path);
    assert.equal(j.error.code, "bad_url");
  }
});

test("every numeric field out of range or absurd: 400 naming the field and its range", async () => {
  const fields: [string, unknown[]][] = [
    ["max_tokens", [1e300, -2, 2 ** 31, 1.5]],
    ["max_completion_tokens", [1e300, -2]],
    ["temperature", [1e300, -1, 101]],
    ["top_p", [1e300, -0.1, 1.01]],
    ["top_k", [1e300, -1, 2 ** 31]],
    ["min_p", [1e300, 2]],
    ["repeat_penalty", [1e300, 0, 101]],
    ["repeat_last_n", [1e300, 1e9, 100000000000, -1]],
    ["frequency_penalty", [1e300, -3]],
    ["presence_penalty", [1e300, 3]],
    ["seed", [1e300, 2 ** 60, 0.5]],
    ["n", [1e300]],
    ["best_of", [1e300]],
  ];
  for (const [field, values] of fields) {
    for (const v of values) {
      for (const [path, body] of [
        ["/v1/completions", { prompt: "Once", max_tokens: 2, [field]: v }],
        ["/v1/chat/completions", { messages: [{ role: "user", content: "Hi" }], max_tokens: 2, [field]: v }],
      ] as const) {
        const r = await post(path, body);
        assert.equal(r.status, 400, `${path} ${field}=${v}: ${JSON.stringify(r.error)}`);
        assert.equal(r.error.param, field, `${field}=${v}`);
        assert.match(String(r.error.message), new RegExp(`^${field} must be`), `${field}=${v}`);
      }
    }
  }
  // 1e300 as JSON text too (JSON.stringify would write it the same way, but be explicit)
  const r = await post("/v1/completions", '{"prompt":"Once","repeat_last_n":1e300}');
  assert.equal(r.status, 400);
  assert.match(String(r.error.message), /repeat_last_n must be an integer between 0 and \d+, got 1e\+300/);
});

test("the sampler keeps no more penalty history than the tokens it has seen", () => {
  const before = process.memoryUsage().arrayBuffers;
  const s = new Sampler({ repeatLastN: 1e9, repeatPenalty: 1.3, temperature: 0 });
  const after = process.memoryUsage().arrayBuffers;
  assert.ok(after - before < 1 << 20, `a Sampler with repeatLastN 1e9 took ${after - before} bytes`);
  // and the window still works: the penalised token loses to the next best
  const logits = new Float32Array([1, 3, 2.9]);
  assert.equal(s.sample(logits), 1);
  for (let i = 0; i < 300; i++) s.accept(1);
  assert.equal(s.sample(logits), 2);
});

function cli(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8", timeout: 60_000 });
  return { code: r.status, stderr: r.stderr };
}

test("CLI: numeric flags out of range are usage errors naming the flag and its range", () => {
  const run = ["run", "-m", STORIES, "-p", "x", "-n", "2"];
  const cases: [string[], RegExp][] = [
    [[...run, "--repeat-last-n", "100000000000"], /--repeat-last-n must be between 0 and \d+, got 100000000000/],
    [[...run, "--repeat-last-n", "1000000000"], /--repeat-last-n must be between 0 and \d+, got 1000000000/],
    [[...run, "-c", "1"], /-c must be between 2 and \d+, got 1/],
    [[...run, "-t", "100000"], /-t must be between 1 and \d+, got 100000/],
    [[...run, "-b", "100000000"], /-b must be between 1 and 4096, got 100000000/],
    [[...run, "--top-k", "1e15"], /--top-k must be between 0 and \d+, got 1000000000000000/],
    [[...run, "--temp", "1e300"], /--temp must be between 0 and 100, got 1e\+300/],
    [[...run, "--top-p", "2"], /--top-p must be between 0 and 1, got 2/],
    [[...run, "-n", "1e15"], /-n must be between -1 and \d+, got 1000000000000000/],
    [[...run, "--seed", "1e300"], /--seed must be between/],
    [[...run, "--memory-budget", "9".repeat(400)], /--memory-budget must be between/],
    [[...run, "--io-queue-depth", "1e9"], /--io-queue-depth must be between 1 and \d+/],
    [["serve", "-m", STORIES, "--port", "70000"], /--port must be between 0 and 65535, got 70000/],
    [["perplexity", "-m", STORIES, "-f", STORIES, "--chunks", "-5"], /--chunks must be between/],
  ];
  for (const [args, pattern] of cases) {
    const r = cli(...args);
    assert.equal(r.code, 2, `${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
    assert.match(r.stderr, pattern, args.join(" "));
    assert.equal(r.stderr.trim().split("\n").length, 1, r.stderr);
  }
});

test("CLI: every command's numeric flags have a range (parseArgs refuses a flag without one)", () => {
  const commands = ["run", "chat", "serve", "tokenize", "inspect", "convert", "synth", "profile"];
  for (const c of [...commands, "perplexity", "train-predictors", "demo", "plan"]) {
    const r = cli(c, "--help");
    assert.equal(r.code, 0, `${c} --help: ${r.stderr}`);
  }
});
