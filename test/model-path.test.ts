/**
 * A model path that is not a non-empty regular file (a FIFO, a directory, an empty file, a
 * character device) is refused at once with a message saying what it is, by `inspect`, `inspect
 * --json` and `run`, for GGUF and store names alike, and by the library: before, a FIFO hung
 * forever, a directory gave a bare EISDIR naming no file, and an empty file or /dev/zero said
 * `magic is ""`.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync, execFileSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { CLI, tempDir } from "./helpers.js";
import { GGUFFile } from "../src/format/gguf.js";
import { NeuronStore } from "../src/format/store/index.js";

const dir = tempDir("powerinfer-paths-");

function cli(...args: string[]) {
  // A hang shows up as a killed child (status null), not as a stuck test run.
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8", timeout: 20_000 });
  return { code: r.status, signal: r.signal, stderr: r.stderr };
}

function cases(): [string, string, RegExp][] {
  const out: [string, string, RegExp][] = [];
  for (const ext of ["gguf", "pi"]) {
    const fifo = join(dir, `fifo.${ext}`);
    if (!existsSync(fifo)) execFileSync("mkfifo", [fifo]);
    out.push(["FIFO", fifo, new RegExp(`fifo\\.${ext}: is a FIFO \\(named pipe\\), not a regular file`)]);
    const d = join(dir, `folder.${ext}`);
    mkdirSync(d, { recursive: true });
    out.push(["directory", d, new RegExp(`folder\\.${ext}: is a directory, not a regular file`)]);
    const empty = join(dir, `empty.${ext}`);
    writeFileSync(empty, "");
    out.push(["empty file", empty, new RegExp(`empty\\.${ext}: the file is empty \\(0 bytes\\)`)]);
  }
  if (existsSync("/dev/zero")) out.push(["/dev/zero", "/dev/zero", /zero: is a character device, not a regular file/]);
  return out;
}

test("inspect, inspect --json and run refuse a FIFO, a directory, an empty file and /dev/zero at once", () => {
  for (const [what, path, pattern] of cases()) {
    for (const args of [
      ["inspect", path],
      ["inspect", "--json", path],
      ["run", "-m", path, "-p", "x", "-n", "1"],
    ]) {
      const r = cli(...args);
      const label = `${what}: ${args.join(" ")}`;
      assert.equal(r.signal, null, `${label}: killed after 20 s (it hung)`);
      assert.equal(r.code, 1, `${label}: exit ${r.code}\n${r.stderr}`);
      assert.match(r.stderr, pattern, label);
      assert.equal(r.stderr.trim().split("\n").length, 1, `${label}: one line\n${r.stderr}`);
    }
  }
});

test("the library refuses the same paths with the format's error naming the file", () => {
  for (const [what, path, pattern] of cases()) {
    if (what === "FIFO") continue; // a blocking open would hang this process: the CLI test covers it
    assert.throws(() => GGUFFile.open(path), pattern, `GGUFFile.open: ${what}`);
    assert.throws(() => NeuronStore.open(path), pattern, `NeuronStore.open: ${what}`);
  }
});
