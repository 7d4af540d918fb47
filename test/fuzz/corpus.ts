/**
 * The regression corpus: cases that once failed (or stand for a class of inputs that did), kept
 * in test/fuzz/corpus/<target>/*.json and replayed by `npm test` (test/fuzz-corpus.test.ts) and
 * by the CI fuzz pass. Each must now end in success or a clean error.
 */
import { readdirSync } from "node:fs";
import { join, dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..");
export const CORPUS_DIR = join(ROOT, "test", "fuzz", "corpus");

export function corpusFiles(): string[] {
  const out: string[] = [];
  for (const t of readdirSync(CORPUS_DIR))
    for (const f of readdirSync(join(CORPUS_DIR, t))) if (f.endsWith(".json")) out.push(join(CORPUS_DIR, t, f));
  return out.sort();
}
