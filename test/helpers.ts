/** Paths and small utilities shared by the tests. */
import { fileURLToPath } from "node:url";
import { dirname, join, resolve } from "node:path";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";

/** The repository root (tests run from dist/test). */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** ../shared beside the repository: real tiny models, references, corpora. */
export const SHARED = process.env.POWERINFER_SHARED ?? resolve(ROOT, "..", "shared");
/** The `powerinfer` command as npm installs it (it loads the compiled CLI). */
export const CLI = join(ROOT, "bin", "powerinfer.cjs");

export function tempDir(prefix = "powerinfer-test-"): string {
  return mkdtempSync(join(tmpdir(), prefix));
}
