/**
 * The `powerinfer` command as users and scripts call it: output contracts (text alone on stdout,
 * the stats line last on stderr, token ids as JSON) and clear failures for bad input.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { closest, editDistance } from "../src/cli/did-you-mean.js";
import { CLI, ROOT, SHARED, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const ref = JSON.parse(readFileSync(`${SHARED}/reference/stories260K.llamacpp.json`, "utf8"));

function cli(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8", timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test("run: the greedy continuation alone on stdout, the stats line last on stderr", () => {
  const g = ref.greedy[0];
  const r = cli("run", "-m", STORIES, "-p", g.prompt, "-n", "64", "--temp", "0", "-t", "1");
  assert.equal(r.code, 0, r.stderr);
  assert.equal(r.stdout, g.continuation + "\n");
  const last = r.stderr.trim().split("\n").pop()!;
  assert.match(last, /^prefill: 5 tokens, \d+\.\d tok\/s; decode: 64 tokens, \d+\.\d tok\/s$/);
});

test("run: a seed makes sampling repeatable; -f reads the prompt from a file", () => {
  const a = cli("run", "-m", STORIES, "-p", "Lily", "-n", "24", "--seed", "42", "-t", "1");
  const b = cli("run", "-m", STORIES, "-p", "Lily", "-n", "24", "--seed", "42", "-t", "2");
  assert.equal(a.code, 0, a.stderr);
  assert.equal(a.stdout, b.stdout);
  const file = join(tempDir(), "prompt.txt");
  writeFileSync(file, ref.greedy[0].prompt);
  const c = cli("run", "-m", STORIES, "-f", file, "-n", "8", "--temp", "0");
  assert.equal(c.code, 0, c.stderr);
  assert.ok(ref.greedy[0].continuation.startsWith(c.stdout.trimEnd()));
});

test("tokenize: ids without BOS, as JSON", () => {
  for (const t of ref.tokenize.slice(0, 4)) {
    const r = cli("tokenize", "-m", STORIES, "-p", t.text);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(JSON.parse(r.stdout), t.ids);
  }
});

test("inspect: metadata, tensors and sizes", () => {
  const r = cli("inspect", STORIES);
  assert.equal(r.code, 0, r.stderr);
  assert.match(r.stdout, /general\.architecture = "llama"/);
  assert.match(r.stdout, /blk\.4\.ffn_down\.weight\s+F32\s+\[172, 64\]/);
  assert.match(r.stdout, /tensors \(48, /);
  const j = JSON.parse(cli("inspect", "--json", STORIES).stdout);
  assert.equal(j.metadata["llama.block_count"], 5);
});

test("bad flags and bad files fail with a clear message and a non-zero exit", () => {
  const cases: [string[], RegExp, number][] = [
    [["run", "-p", "x"], /-m MODEL is required/, 2],
    [["run", "-m", STORIES], /give a prompt/, 2],
    [["run", "-m", STORIES, "-p", "x", "-n", "abc"], /-n expects an integer, got "abc"/, 2],
    [["run", "-m", STORIES, "-p", "x", "--temp"], /--temp needs a value/, 2],
    [["run", "-m", STORIES, "-p", "x", "--bogus"], /unknown option --bogus/, 2],
    [["run", "-m", STORIES, "-p", "x", "-t", "0"], /-t must be between 1 and 256, got 0/, 2],
    [["run", "-m", STORIES, "-p", "x", "--verify", "sometimes"], /--verify must be once or always, got "sometimes"/, 2],
    [["run", "-m", "/nonexistent/model.gguf", "-p", "x"], /model\.gguf: cannot open/, 1],
    [["run", "-m", `${SHARED}/reference/README.md`, "-p", "x"], /README\.md: not a GGUF file/, 1],
    [["frobnicate"], /unknown command "frobnicate"\n/, 2],
    // a near miss names what was probably meant; a word that is a property of objects is no command
    [["rnu", "-m", STORIES], /unknown command "rnu" \(did you mean run\?\)/, 2],
    [["toString"], /unknown command "toString"/, 2],
    [["run", "-m", STORIES, "-p", "x", "--tempp", "0"], /unknown option --tempp \(did you mean --temp\?\)/, 2],
    [["inspect"], /give a model file/, 2],
  ];
  for (const [args, pattern, code] of cases) {
    const r = cli(...args);
    assert.equal(r.code, code, `${args.join(" ")}: exit ${r.code}\n${r.stderr}`);
    assert.match(r.stderr, pattern, args.join(" "));
    assert.doesNotMatch(r.stderr, /\n\s+at /, "no stack trace for user errors");
  }
});

test("--version and -v print the package's version and the Node it runs on", () => {
  const version = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")).version;
  for (const flag of ["--version", "-v"]) {
    const r = cli(flag);
    assert.equal(r.code, 0);
    assert.equal(
      r.stdout.trim(),
      `powerinfer-ts ${version} (node ${process.version}, ${process.platform} ${process.arch})`,
    );
  }
});

test("a prompt longer than the context is refused clearly", () => {
  const r = cli("run", "-m", STORIES, "-p", "Once upon a time there was a girl", "-c", "4");
  assert.equal(r.code, 1);
  assert.match(r.stderr, /the prompt is \d+ tokens long, but the model's context holds 4 tokens/);
});

test("editDistance and closest: swaps count once, a suggestion only when close", () => {
  assert.equal(editDistance("rnu", "run"), 1);
  assert.equal(editDistance("--tempp", "--temp"), 1);
  assert.equal(editDistance("kitten", "sitting"), 3);
  assert.equal(closest("rnu", ["run", "serve", "chat"]), "run");
  assert.equal(closest("frobnicate", ["run", "serve", "chat"]), undefined);
});

test("run: a memory budget on a GGUF is kept in memory or refused with the convert command; a shortened context says why", () => {
  const small = cli("run", "-m", STORIES, "--memory-budget", "10MiB", "-p", "x", "-n", "1");
  assert.equal(small.code, 1);
  assert.match(
    small.stderr,
    /a GGUF runs all in memory and needs about [\d.]+ MiB .* more than the memory budget of 10\.0 MiB/,
  );
  assert.ok(
    small.stderr.includes(`powerinfer convert ${STORIES} -o ${STORIES.replace(/\.gguf$/, ".pi")}`),
    small.stderr,
  );
  const fits = cli("run", "-m", STORIES, "--memory-budget", "512MiB", "-p", "x", "-n", "1");
  assert.equal(fits.code, 0, fits.stderr);
  assert.match(fits.stderr, /note: context 256 of the model's 2048: the default under a memory budget/);
  const asked = cli("run", "-m", STORIES, "--memory-budget", "512MiB", "-c", "128", "-p", "x", "-n", "1");
  assert.equal(asked.code, 0, asked.stderr);
  assert.doesNotMatch(asked.stderr, /note: context/);
});
