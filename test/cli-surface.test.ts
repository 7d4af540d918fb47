/**
 * The command line's scripting surface: `run --json` (one object: text, token ids, stats, and a
 * store's cache and read figures), llama.cpp's GPU and format flags accepted with a note, `run
 * --json-schema`, and `powerinfer bench` (llama-bench's table, JSON and JSON lines).
 */
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { Ajv } from "ajv";
import { convertToStore } from "../src/offline/convert.js";
import { CLI, SHARED, tempDir } from "./helpers.js";
import { kernelBuild } from "../src/runtime/wasm.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const RELU = `${SHARED}/models/relu-stories.gguf`;
let dir: string;

before(() => {
  dir = tempDir();
});

function cli(...args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8", timeout: 120_000 });
}

const GREEDY = ["-p", "Once upon a time", "-n", "16", "--temp", "0", "-t", "1"];

test("run --json: one object with the text the plain run prints, the token ids and the stats", () => {
  const plain = cli("run", "-m", STORIES, ...GREEDY);
  assert.equal(plain.status, 0, plain.stderr);
  const r = cli("run", "-m", STORIES, ...GREEDY, "--json");
  assert.equal(r.status, 0, r.stderr);
  const lines = r.stdout.trim().split("\n");
  assert.equal(lines.length, 1, "exactly one line on stdout");
  const out = JSON.parse(lines[0]) as { text: string; tokens: number[]; stats: Record<string, unknown> };
  assert.equal(out.text + "\n", plain.stdout);
  assert.equal(out.tokens.length, 16);
  assert.ok(out.tokens.every((t) => Number.isInteger(t) && t >= 0 && t < 512));
  for (const k of [
    "promptTokens",
    "cachedPromptTokens",
    "generatedTokens",
    "prefillMs",
    "decodeMs",
    "prefillTokensPerSecond",
    "decodeTokensPerSecond",
  ])
    assert.equal(typeof out.stats[k], "number", k);
  assert.equal(out.stats.stopReason, "maxTokens");
  assert.equal(out.stats.generatedTokens, 16);
  // a model in memory has no cache figures
  assert.equal(out.stats.cacheHitRate, undefined);
  // the stats line stays on stderr
  assert.match(r.stderr, /prefill: \d+ tokens, [\d.]+ tok\/s; decode: 16 tokens/);
});

test("run --json from a store: the neuron cache's and the reads' figures", async () => {
  const store = join(dir, "relu.pi");
  await convertToStore({ input: RELU, output: store, fsync: false });
  const r = cli("run", "-m", store, "--cache-size", "2MiB", ...GREEDY, "--json");
  assert.equal(r.status, 0, r.stderr);
  const s = JSON.parse(r.stdout).stats as Record<string, number>;
  for (const k of [
    "hotHits",
    "coldHits",
    "misses",
    "bytesRead",
    "ioWaitMs",
    "neuronsComputed",
    "neuronsTotal",
    "peakResidentBytes",
  ])
    assert.ok(Number.isFinite(s[k]) && s[k] >= 0, k);
  assert.ok(s.misses > 0 && s.bytesRead > 0);
  assert.ok(s.cacheHitRate > 0 && s.cacheHitRate < 1);
  // shares to 4 places, as the README shows them
  const share = (x: number) => Math.round(x * 1e4) / 1e4;
  assert.equal(s.cacheHitRate, share((s.hotHits + s.coldHits) / (s.hotHits + s.coldHits + s.misses)));
  assert.equal(s.neuronsComputedShare, share(s.neuronsComputed / s.neuronsTotal));
  // the kernel build that ran: the CLI runs on this Node with this environment
  assert.equal((s as unknown as { kernels: string }).kernels, kernelBuild());
});

test("llama.cpp's GPU and format flags are accepted with a one-line note each, and change nothing", () => {
  const plain = cli("run", "-m", STORIES, ...GREEDY);
  const pasted = cli(
    "run",
    "-m",
    STORIES,
    ...GREEDY,
    "-ngl",
    "99",
    "-fa",
    "on",
    "--jinja",
    "--no-mmap",
    "-ub",
    "512",
    "--n-gpu-layers=33",
    "-ctk",
    "q8_0",
    "-fa",
  );
  assert.equal(pasted.status, 0, pasted.stderr);
  assert.equal(pasted.stdout, plain.stdout);
  const notes = pasted.stderr.split("\n").filter((l) => l.startsWith("powerinfer run: note: "));
  assert.deepEqual(
    notes.map((l) => l.replace(/^powerinfer run: note: (.*?) ignored: .*$/, "$1")),
    ["-ngl 99", "-fa on", "--jinja", "--no-mmap", "-ub 512", "--n-gpu-layers=33", "-ctk q8_0", "-fa"],
  );
  assert.match(notes[0], /no GPU here/);
  // serve and bench accept them too
  const help = cli("bench", "-ngl", "99", "--help");
  assert.equal(help.status, 0);
  assert.match(help.stderr, /note: -ngl 99 ignored/);
});

test("-ctk/-ctv f16|f32 choose the KV cache's types (no note); an unknown type is an error naming the flag", () => {
  const f32 = cli("run", "-m", STORIES, ...GREEDY, "-ctk", "f32", "--cache-type-v=f32");
  assert.equal(f32.status, 0, f32.stderr);
  assert.doesNotMatch(f32.stderr, /note:/);
  const f16 = cli("run", "-m", STORIES, ...GREEDY, "-ctk", "F16");
  assert.equal(f16.status, 0, f16.stderr);
  assert.equal(f16.stdout, f32.stdout, "greedy text with either cache");
  const bad = cli("run", "-m", STORIES, ...GREEDY, "-ctv", "f8");
  assert.notEqual(bad.status, 0);
  assert.match(bad.stderr, /--cache-type-v must be f16 or f32, got "f8"/);
});

test("run --json-schema FILE (or the schema itself): the answer validates; a schema it cannot enforce fails naming the keyword", () => {
  const schema = {
    type: "object",
    properties: { name: { type: "string", maxLength: 12 }, age: { type: "integer" }, pet: { enum: ["cat", "dog"] } },
    required: ["name", "age", "pet"],
    additionalProperties: false,
  };
  const file = join(dir, "schema.json");
  writeFileSync(file, JSON.stringify(schema));
  const validate = new Ajv().compile(schema);
  for (const args of [
    ["--json-schema", file, "--temp", "0"],
    ["-j", JSON.stringify(schema), "--temp", "0.8", "--seed", "4"],
    ["--json-schema-file", file, "--temp", "0.8", "--seed", "5"],
  ]) {
    const r = cli("run", "-m", STORIES, "-p", "Once upon a time", "-n", "80", "-t", "1", ...args);
    assert.equal(r.status, 0, r.stderr);
    assert.ok(validate(JSON.parse(r.stdout)), r.stdout);
  }
  const bad = cli("run", "-m", STORIES, "-p", "x", "-j", '{"type":"string","pattern":"^a"}');
  assert.equal(bad.status, 2);
  assert.match(
    bad.stderr,
    /--json-schema: the JSON schema uses keywords constrained decoding cannot enforce: "pattern" \(at schema\)/,
  );
  const missing = cli("run", "-m", STORIES, "-p", "x", "--json-schema", join(dir, "nope.json"));
  assert.equal(missing.status, 2);
  assert.match(missing.stderr, /cannot read the JSON schema file .*nope\.json/);
});

test("bench: llama-bench's table, JSON and JSON lines, pp and tg over repetitions", () => {
  const md = cli("bench", "-m", STORIES, "-p", "32", "-n", "8", "-r", "2", "-t", "1");
  assert.equal(md.status, 0, md.stderr);
  const rows = md.stdout.split("\n").filter((l) => l.startsWith("| llama"));
  assert.equal(rows.length, 2);
  assert.match(md.stdout, /^\| model \| size \| params \| backend \| threads \| test \| t\/s \|$/m);
  assert.match(
    rows[0],
    /\| llama 292\.80 K F32 \| 1\.1 MiB \| 292\.80 K \| WASM (SIMD128|relaxed SIMD) \| 1 \| pp32 \| [\d.]+ ± [\d.]+ \|$/,
  );
  assert.match(rows[1], /\| tg8 \| [\d.]+ ± [\d.]+ \|$/);
  assert.match(md.stdout, /^build: powerinfer-ts \d/m);

  const json = cli("bench", "-m", STORIES, "-p", "16,32", "-n", "0", "-r", "3", "-t", "1", "--json");
  assert.equal(json.status, 0, json.stderr);
  const results = JSON.parse(json.stdout) as {
    n_prompt: number;
    n_gen: number;
    avg_ts: number;
    samples_ts: number[];
    stddev_ts: number;
  }[];
  assert.deepEqual(
    results.map((r) => [r.n_prompt, r.n_gen, r.samples_ts.length]),
    [
      [16, 0, 3],
      [32, 0, 3],
    ],
  );
  for (const r of results) {
    assert.ok(r.avg_ts > 0 && r.stddev_ts >= 0);
    assert.ok(Math.abs(r.avg_ts - r.samples_ts.reduce((a, b) => a + b) / 3) < 1e-9);
  }
  const jsonl = cli("bench", "-m", STORIES, "-p", "0", "-n", "4", "-r", "1", "-t", "1", "-o", "jsonl");
  assert.equal(jsonl.status, 0, jsonl.stderr);
  assert.equal(JSON.parse(jsonl.stdout.trim()).n_gen, 4);
  const none = cli("bench", "-m", STORIES, "-p", "0", "-n", "0");
  assert.equal(none.status, 2);
  assert.match(none.stderr, /nothing to time/);
});
