// Skips a build step whose inputs have not changed since it last ran: the step's outputs exist
// and build/.stamp-<name> holds the sha-256 of its inputs (file names and contents, and whatever
// else decides the output, such as the compiler's version), written after a build succeeds.
import { createHash } from "node:crypto";
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from "node:fs";
import { join, relative } from "node:path";

/**
 * Every file under each of `paths` (a folder, walked, or a file), sorted; in folders only names
 * that `include` accepts, and no hidden folders (bench/.models holds GB-sized models).
 */
function files(root, paths, include) {
  const out = [];
  const walk = (p, top) => {
    if (!existsSync(p)) return;
    if (statSync(p).isDirectory()) {
      for (const e of readdirSync(p).sort()) if (!e.startsWith(".")) walk(join(p, e), false);
    } else if (top || include.test(p)) out.push(p);
  };
  for (const p of paths) walk(join(root, p), true);
  return out.sort();
}

/** The digest of the inputs: files under `paths` and `extra` strings. */
function digest(root, paths, extra, include) {
  const h = createHash("sha256");
  for (const f of files(root, paths, include))
    h.update(relative(root, f)).update("\0").update(readFileSync(f)).update("\0");
  for (const x of extra) h.update(x).update("\0");
  return h.digest("hex");
}

/**
 * A build step: `upToDate()` when its outputs exist and its inputs are those it was last built
 * from (then the caller skips it), `done()` after it was built.
 */
export function buildStep(root, name, { inputs, extra = [], outputs, include = /(?:)/ }) {
  const stampFile = join(root, "build", `.stamp-${name}`);
  const d = digest(root, inputs, extra, include);
  return {
    upToDate: () =>
      outputs.every((o) => existsSync(join(root, o))) && existsSync(stampFile) && readFileSync(stampFile, "utf8") === d,
    done: () => writeFileSync(stampFile, d),
  };
}
