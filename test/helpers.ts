/** Paths and small utilities shared by the tests. */
import { fileURLToPath } from "node:url";
import { dirname, join, resolve } from "node:path";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";

/** The repository root (tests run from dist/test). */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** ../shared beside the repository: real tiny models, references, corpora. */
export const SHARED = process.env.POWERINFER_SHARED ?? resolve(ROOT, "..", "shared");
/** The `powerinfer` command as npm installs it (it loads the compiled CLI). */
export const CLI = join(ROOT, "bin", "powerinfer.cjs");

const made: string[] = [];
// Each test file runs in its own process: its temporary directories go when it exits (they held
// ~1 GB of stores per full run, and 300 leftover runs filled the disk).
process.on("exit", () => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

/** A fresh temporary directory, removed when the test process exits. */
export function tempDir(prefix = "powerinfer-test-"): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  made.push(d);
  return d;
}

/** BOS (id 1), then seeded pseudo-random token ids in [3, vocab) (no control tokens). */
export function randomTokens(n: number, vocab: number, seed: number): number[] {
  const out = [1];
  let s = seed >>> 0;
  while (out.length < n) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out.push(3 + Math.floor((s / 2 ** 32) * (vocab - 3)));
  }
  return out;
}
