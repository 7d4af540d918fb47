// Skips a build step whose inputs have not changed since it last ran: the step's outputs exist
// and build/.stamp-<name> holds the sha-256 of its inputs (file names and contents, and whatever
// else decides the output, such as the compiler's version), written after a build succeeds.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";

/** Every file under each of `paths` (a folder, walked, or a file), sorted. */
function files(root, paths) {
  const out = [];
  const walk = (p) => {
    if (!existsSync(p)) return;
    if (statSync(p).isDirectory()) for (const e of readdirSync(p).sort()) walk(join(p, e));
    else out.push(p);
  };
  for (const p of paths) walk(join(root, p));
  return out.sort();
}

/** The digest of the inputs: files under `paths` and `extra` strings. */
function digest(root, paths, extra) {
  const h = createHash("sha256");
  for (const f of files(root, paths)) h.update(relative(root, f)).update("\0").update(readFileSync(f)).update("\0");
  for (const x of extra) h.update(x).update("\0");
  return h.digest("hex");
}

/**
 * A build step: `upToDate()` when its outputs exist and its inputs are those it was last built
 * from (then the caller skips it), `done()` after it was built.
 */
export function buildStep(root, name, { inputs, extra = [], outputs }) {
  const stampFile = join(root, "build", `.stamp-${name}`);
  const d = digest(root, inputs, extra);
  return {
    upToDate: () =>
      outputs.every((o) => existsSync(join(root, o))) && existsSync(stampFile) && readFileSync(stampFile, "utf8") === d,
    done: () => writeFileSync(stampFile, d),
  };
}
