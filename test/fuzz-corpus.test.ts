/**
 * The fuzz regression corpus (test/fuzz/corpus): every case that once crashed, hung, blew up or
 * gave a wrong answer, and one per defect of issue 14, replayed through the fuzzer's own executor.
 * Each must now end in success or a clean error (docs/fuzzing.md says how to add one).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { corpusFiles } from "./fuzz/corpus.js";
import { replay, DEFAULT_LIMITS, type CaseFile } from "./fuzz/runner.js";
import { FAILURES } from "./fuzz/outcome.js";

test("every corpus case ends in success or a clean error", { timeout: 300_000 }, async () => {
  const paths = corpusFiles();
  assert.ok(paths.length >= 10, `only ${paths.length} corpus cases`);
  const files = paths.map((p) => JSON.parse(readFileSync(p, "utf8")) as CaseFile);
  const results = await replay(files, DEFAULT_LIMITS);
  const failed = results.flatMap((r, i) =>
    FAILURES.includes(r.outcome) ? [`${paths[i]}: ${r.outcome}: ${r.detail}`] : [],
  );
  assert.deepEqual(failed, []);
});
