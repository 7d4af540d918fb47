/**
 * The README as a newcomer runs it: every command in its `sh` blocks names a command that exists
 * with flags that parse (npm scripts included), and the outputs it shows for the first run are
 * what the program prints (the text exactly; timings by their shape).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { parseArgs } from "../src/cli/args.js";
import { COMMANDS } from "../src/cli/commands.js";
import { stripLlamaCppFlags } from "../src/cli/llama-compat-flags.js";
import { CLI, ROOT, SHARED, tempDir } from "./helpers.js";

const README = readFileSync(join(ROOT, "README.md"), "utf8");
const PACKAGE = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8"));

/** The fenced blocks of a markdown text: language and body, in order. */
function blocks(md: string): { lang: string; body: string; line: number }[] {
  const out: { lang: string; body: string; line: number }[] = [];
  const re = /^```(\S*)\n([\s\S]*?)^```$/gm;
  for (let m; (m = re.exec(md));) out.push({ lang: m[1], body: m[2], line: md.slice(0, m.index).split("\n").length });
  return out;
}

/** Words of one shell command line, as sh would split them (quotes, `$VAR` from `vars`; no globbing). */
function words(line: string, vars: Map<string, string>): string[] {
  const out: string[] = [];
  let cur = "";
  let any = false;
  for (let i = 0; i < line.length; i++) {
    const c = line[i];
    if (c === "'") {
      const j = line.indexOf("'", i + 1);
      cur += line.slice(i + 1, j);
      any = true;
      i = j;
    } else if (c === '"') {
      let j = i + 1;
      for (; line[j] !== '"'; j++) cur += line[j] === "\\" ? line[++j] : line[j];
      any = true;
      i = j;
    } else if (c === "$") {
      const m = /^\$(\w+)/.exec(line.slice(i))!;
      cur += vars.get(m[1]) ?? "";
      i += m[0].length - 1;
    } else if (c === " " || c === "\t") {
      if (cur || any) out.push(cur);
      cur = "";
      any = false;
    } else cur += c;
  }
  if (cur || any) out.push(cur);
  return out;
}

/** The command lines of the README's sh blocks: continuations joined, comments and assignments taken out. */
function commandLines(): { words: string[]; text: string; line: number }[] {
  const out: { words: string[]; text: string; line: number }[] = [];
  for (const b of blocks(README)) {
    if (b.lang !== "sh") continue;
    const vars = new Map<string, string>();
    const lines = b.body.replace(/\\\n\s*/g, " ").split("\n");
    lines.forEach((raw, i) => {
      const text = raw.replace(/(^|\s)#.*$/, "").trim();
      if (!text) return;
      const assign = /^(\w+)=(\S*)$/.exec(text);
      if (assign) return void vars.set(assign[1], assign[2]);
      for (const part of text.split(/\s*(?:&&|\|\||;)\s*/))
        out.push({ words: words(part, vars), text: part, line: b.line + 1 + i });
    });
  }
  return out;
}

/** The powerinfer command of a line (npx in a clone, the registry's npx -p form, node bin/...), or null. */
function powerinferArgs(line: string[]): string[] | null {
  const w = line.slice(line.findIndex((x) => !/^\w+=/.test(x))); // without VAR=value before the command
  if (w[0] === "npx" && w[1] === "powerinfer") return w.slice(2);
  if (w[0] === "npx" && w[1] === "-p" && w[3] === "powerinfer") return w.slice(4);
  if (w[0] === "node" && w[1] === "bin/powerinfer.cjs") return w.slice(2);
  return null;
}

test("README: every command in its sh blocks exists and its flags parse", async () => {
  const lines = commandLines();
  let checked = 0;
  for (const { words: w, text, line } of lines) {
    const where = `README.md:${line}: ${text}`;
    const args = powerinferArgs(w);
    if (args) {
      const [name, ...rest] = args;
      assert.ok(Object.hasOwn(COMMANDS, name), `${where}: no command "${name}"`);
      const mod = await COMMANDS[name].load();
      assert.doesNotThrow(() => parseArgs(stripLlamaCppFlags(rest).argv, mod.FLAGS), where);
      checked++;
    } else if (w[0] === "npm") {
      if (w[1] === "run") assert.ok(w[2] in PACKAGE.scripts, `${where}: no npm script "${w[2]}"`);
      else assert.ok(["install", "ci", "test", "pack"].includes(w[1]), `${where}: npm ${w[1]}?`);
      checked++;
    } else {
      // anything else is a download or a shell step the README explains (curl, git, cd, ls)
      assert.ok(["curl", "git", "cd", "ls", "export"].includes(w[0]), `${where}: a command this test does not know`);
    }
  }
  assert.ok(checked >= 25, `only ${checked} commands found: did the README's blocks change form?`);
});

test("README: the first run prints the continuation shown, and the stats lines in the form shown", () => {
  const section = README.indexOf("\n## Run\n");
  const sectionLine = README.slice(0, section).split("\n").length;
  const cmd = commandLines().find((c) => powerinferArgs(c.words)?.[0] === "run" && c.line > sectionLine)!;
  // the README's ../shared is wherever the tests find it
  const args = powerinferArgs(cmd.words)!.map((a) => a.replace(/^\.\.\/shared\//, `${SHARED}/`));
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8", cwd: ROOT, timeout: 60_000 });
  assert.equal(r.status, 0, r.stderr);
  const after = README.slice(README.indexOf("\n```\n", README.indexOf(cmd.text, section)) + 5);
  const [text, stderr] = blocks(after).filter((b) => b.lang === "");
  assert.equal(r.stdout, text.body, "the continuation the README shows");
  // the same lines, with every number free
  const shape = (s: string) =>
    s
      .replace(/\d+(\.\d+)?/g, "N")
      .trim()
      .split("\n");
  assert.deepEqual(shape(r.stderr.replaceAll(`${SHARED}/`, "../shared/")).slice(-3), shape(stderr.body));
});

test("README: run --json prints the fields shown, its timings rounded as shown", () => {
  const shown = blocks(README).find((b) => b.lang === "" && b.body.startsWith('{"text"'))!;
  const want = JSON.parse(shown.body);
  const r = spawnSync(
    process.execPath,
    [
      CLI,
      "run",
      "-m",
      `${SHARED}/models/stories260K.gguf`,
      "-p",
      "Once upon a time",
      "-n",
      String(want.tokens.length),
      "--temp",
      "0",
      "--json",
    ],
    { encoding: "utf8", cwd: ROOT, timeout: 60_000 },
  );
  assert.equal(r.status, 0, r.stderr);
  const got = JSON.parse(r.stdout);
  assert.equal(got.text, want.text);
  assert.deepEqual(got.tokens, want.tokens);
  assert.deepEqual(Object.keys(got.stats), Object.keys(want.stats));
  // as written in the JSON: at most 2 decimals for times, 1 for rates
  const decimals = (k: string) => /\.(\d+)$/.exec(String(got.stats[k]))?.[1].length ?? 0;
  for (const k of ["prefillMs", "decodeMs"]) assert.ok(decimals(k) <= 2, `${k} ${got.stats[k]}`);
  for (const k of ["prefillTokensPerSecond", "decodeTokensPerSecond"])
    assert.ok(decimals(k) <= 1, `${k} ${got.stats[k]}`);
});

test("README: demo prints the lines the README shows, in order", () => {
  const shown = blocks(README).find((b) => b.lang === "" && b.body.startsWith("model:"))!;
  const labels = (s: string) =>
    s
      .split("\n")
      .map((l) => /^(\w+):/.exec(l)?.[1])
      .filter(Boolean);
  const r = spawnSync(process.execPath, [CLI, "demo", "--shape", "tiny", "-n", "4"], {
    encoding: "utf8",
    cwd: ROOT,
    timeout: 120_000,
    env: { ...process.env, XDG_CACHE_HOME: tempDir() },
  });
  assert.equal(r.status, 0, r.stderr);
  const got = labels(r.stdout);
  for (const l of labels(shown.body)) assert.ok(got.includes(l), `demo prints no "${l}:" line:\n${r.stdout}`);
});
