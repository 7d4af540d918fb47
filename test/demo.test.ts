/**
 * `powerinfer demo` on the tiny shape (the default demo model takes tens of seconds to make):
 * the report's lines, the cache (made once, reused, remade when damaged), --keep, and a budget
 * too small for the model failing with the engine's message.
 */
import { after, test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, rmSync, statSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { CLI, tempDir } from "./helpers.js";

const cacheHome = tempDir("powerinfer-demo-");
const store = join(cacheHome, "powerinfer-ts", "demo-v4-tiny-relu0.9-q4_1-seed1.pi");
const keepDir = tempDir("powerinfer-demo-keep-");
after(() => {
  rmSync(cacheHome, { recursive: true, force: true });
  rmSync(keepDir, { recursive: true, force: true });
});

function demo(...args: string[]): { code: number | null; stdout: string; stderr: string } {
  const r = spawnSync(process.execPath, [CLI, "demo", "--shape", "tiny", "-n", "8", "-t", "1", ...args], {
    encoding: "utf8",
    env: { ...process.env, XDG_CACHE_HOME: cacheHome },
    timeout: 120_000,
  });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

/** The value after `label:` on the report's line that starts with it. */
function line(stdout: string, label: string): string {
  const l = stdout.split("\n").find((s) => s.startsWith(`${label}:`));
  assert.ok(l, `no "${label}:" line in:\n${stdout}`);
  return l.slice(label.length + 1).trim();
}

test("demo: makes the model once, runs it under the budget and reports speed, cache and reads", () => {
  const first = demo();
  assert.equal(first.code, 0, first.stderr);
  assert.match(first.stderr, /making the demo model once/);
  assert.match(first.stderr, /synthesize: .* in [\d.]+ s/);
  assert.match(first.stderr, /convert: .* in [\d.]+ s/);
  assert.ok(existsSync(store), "the store is in $XDG_CACHE_HOME/powerinfer-ts");
  // Only the store stays in the cache: the intermediate GGUF is deleted.
  assert.deepEqual(readdirSync(join(cacheHome, "powerinfer-ts")), ["demo-v4-tiny-relu0.9-q4_1-seed1.pi"]);

  const out = first.stdout;
  assert.match(
    line(out, "model"),
    /synthetic tiny model \(4 layers, dim 256, ffn 768, ReLU, Q4_1\): [\d.]+ MB of weights, [\d.]+ MB as a store on flash/,
  );
  assert.match(line(out, "budget"), /^[\d.]+ MiB \(default\): /);
  assert.match(
    line(out, "speed"),
    /^prefill [\d.]+ tok\/s \(\d+ tokens\), decode [\d.]+ tok\/s \(8 tokens\), 1 thread\(s\)$/,
  );
  const ffn = line(out, "ffn");
  const computed = Number(/^([\d.]+)% of neurons computed \(those the predictor picked\)/.exec(ffn)?.[1]);
  // planted sparsity 0.9: about a tenth fire, and the planted predictor picks a few more
  assert.ok(computed > 3 && computed < 30, ffn);
  assert.match(ffn, /neuron cache hit rate [\d.]+% \(hot \d+, cold \d+, misses \d+\)/);
  assert.match(line(out, "flash"), /^read [\d.]+ MB at [\d.]+ MB\/s; waiting for reads \d+% of the time/);
  const mem = /^peak resident ([\d.]+) MiB of the ([\d.]+) MiB budget/.exec(line(out, "memory"));
  assert.ok(mem, line(out, "memory"));
  assert.ok(Number(mem[1]) <= Number(mem[2]) * 1.05, `peak ${mem[1]} MiB over the ${mem[2]} MiB budget`);
  assert.match(
    line(out, "note"),
    /weights are synthetic.*meaningless.*predictors were planted by the generator, not trained/,
  );
  assert.match(line(out, "files"), /^made /);
  assert.ok(line(out, "text").length > 0, "some text was generated");

  // Second run: the cached store as it was, same greedy text.
  const mtime = statSync(store).mtimeMs;
  const second = demo();
  assert.equal(second.code, 0, second.stderr);
  assert.match(second.stderr, /using the cached demo model/);
  assert.doesNotMatch(second.stderr, /synthesize|making the demo model/);
  assert.equal(statSync(store).mtimeMs, mtime);
  assert.match(line(second.stdout, "files"), /^reused /);
  assert.equal(line(second.stdout, "text"), line(out, "text"));
});

test("demo: a damaged cached store is made again", () => {
  if (!existsSync(store)) assert.equal(demo().code, 0);
  truncateSync(store, statSync(store).size - 4096);
  const r = demo();
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stderr, /cannot be used .*making it again/);
  assert.match(r.stderr, /synthesize: /);
  assert.match(line(r.stdout, "files"), /^made /);
});

test("demo --keep DIR keeps the GGUF, its predictors and the store there", () => {
  const dir = keepDir;
  const r = demo("--keep", dir);
  assert.equal(r.code, 0, r.stderr);
  assert.deepEqual(readdirSync(dir).sort(), [
    "demo-v4-tiny-relu0.9-q4_1-seed1.gguf",
    "demo-v4-tiny-relu0.9-q4_1-seed1.pi",
    "demo-v4-tiny-relu0.9-q4_1-seed1.predictors.gguf",
  ]);
  const again = demo("--keep", dir);
  assert.equal(again.code, 0, again.stderr);
  assert.match(again.stderr, /using the cached demo model/);
});

test("demo: a budget too small for the model fails with the engine's message", () => {
  const r = demo("--budget", "8MiB");
  assert.notEqual(r.code, 0);
  assert.match(r.stderr, /memory budget 8\.0 MiB is too small/);
  assert.match(r.stderr, /demo: the run failed/);
});

test("demo --shape mixtral-tiny: a mixture of experts (per-expert planted predictors and profile) runs end to end", () => {
  const r = spawnSync(process.execPath, [CLI, "demo", "--shape", "mixtral-tiny", "-n", "8", "-t", "1"], {
    encoding: "utf8",
    env: { ...process.env, XDG_CACHE_HOME: cacheHome },
    timeout: 120_000,
  });
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /making the demo model once \([\d.]+ MB, 2 layers, dim 128, 4 experts of ffn 256\)/);
  assert.match(
    line(r.stdout, "model"),
    /synthetic mixtral-tiny model \(2 layers, dim 128, 4 experts of ffn 256 \(2 used per token\), ReLU, Q4_1\)/,
  );
  const computed = Number(/^([\d.]+)% of neurons computed/.exec(line(r.stdout, "ffn"))![1]);
  // the predictors pick about a tenth of the routed experts' neurons, not the whole FFN
  assert.ok(computed > 2 && computed < 30, `${computed}% computed`);
  assert.match(line(r.stdout, "speed"), /decode [\d.]+ tok\/s \(8 tokens\)/);
});
