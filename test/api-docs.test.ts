/**
 * docs/api.md is a set of runnable programs: every ```js block is written into the package (so
 * that `import ... from "powerinfer-ts"` resolves to this package by self-reference, as it would
 * for a user) and run with the real tiny model in the working directory. A block that fails, or
 * prints nothing, fails the test; so does an example whose `// prints` comment a run contradicts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { ROOT, SHARED } from "./helpers.js";

const DOC = join(ROOT, "docs", "api.md");
const MODELS = join(SHARED, "models");

interface Example {
  line: number;
  code: string;
  heading: string;
}

function examples(): Example[] {
  const lines = readFileSync(DOC, "utf8").split("\n");
  const out: Example[] = [];
  let heading = "";
  for (let i = 0; i < lines.length; i++) {
    if (lines[i].startsWith("## ")) heading = lines[i].slice(3);
    if (lines[i].trim() !== "```js") continue;
    const start = i + 1;
    let end = start;
    while (end < lines.length && lines[end].trim() !== "```") end++;
    assert.ok(end < lines.length, `docs/api.md:${i + 1}: unterminated code block`);
    out.push({ line: i + 1, code: lines.slice(start, end).join("\n"), heading });
    i = end;
  }
  return out;
}

const all = examples();

test("docs/api.md has runnable examples for every part of the API", () => {
  assert.ok(all.length >= 10, `found ${all.length} examples`);
  const code = all.map((e) => e.code).join("\n");
  for (const name of [
    "loadModel",
    "ChatSession",
    "createChatCompletion",
    "createCompletion",
    "ChatTemplate",
    "startServer",
    "ApiError",
    "AbortController",
    "memoryBudget",
    "offload",
    "responseFormat",
    "logprobs",
    "Tracer",
  ]) {
    assert.ok(code.includes(name), `no example uses ${name}`);
  }
  for (const e of all)
    assert.match(e.code, /from "powerinfer-ts"/, `docs/api.md:${e.line}: examples import the package by name`);
});

// Inside the package, so the package name resolves to this package (self-reference through "exports").
const dir = join(ROOT, "dist", "test", "api-docs-examples");
rmSync(dir, { recursive: true, force: true });
mkdirSync(dir, { recursive: true });

for (const [i, e] of all.entries()) {
  test(`docs/api.md:${e.line} (${e.heading}) runs`, () => {
    const file = join(dir, `example-${i + 1}.mjs`);
    writeFileSync(file, e.code + "\n");
    const r = spawnSync(process.execPath, [file], { cwd: MODELS, encoding: "utf8", timeout: 60_000 });
    assert.equal(r.status, 0, `docs/api.md:${e.line} failed:\n${r.stderr}`);
    assert.ok(r.stdout.trim().length > 0, `docs/api.md:${e.line} printed nothing`);
    // A `console.log(...); // a b c` comment states what that line prints; check the literal words.
    for (const m of e.code.matchAll(/console\.log\(.*\); \/\/ ([\w' [\],]+)$/gm)) {
      const words = m[1].trim();
      if (/^[a-z]+( \d+)?$/.test(words) || /^\[/.test(words)) {
        assert.ok(
          r.stdout.includes(words) || r.stdout.replace(/\s+/g, " ").includes(words),
          `docs/api.md:${e.line}: the output lacks "${words}":\n${r.stdout}`,
        );
      }
    }
  });
}
