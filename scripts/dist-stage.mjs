// The TypeScript and browser builds write into a staging folder, .build/dist, and only then
// replace dist/ as a whole (publishDist): a CLI or test run that starts while a build is under
// way loads the previous build or the next one, never files of both (a run once failed on an
// export that a half-rebuilt dist/ did not have yet). The staging folder persists, so tsc's
// incremental build keeps working; when the build changed nothing, dist/ is left as it is.
import { createHash } from "node:crypto";
import { cpSync, existsSync, readdirSync, readFileSync, renameSync, rmSync, statSync } from "node:fs";
import { join, relative } from "node:path";

export const STAGE = join(".build", "dist");

/** sha-256 over a folder's files (names and contents), or null when it does not exist. */
function digest(dir) {
  if (!existsSync(dir)) return null;
  const h = createHash("sha256");
  const walk = (d) => {
    for (const e of readdirSync(d).sort()) {
      const p = join(d, e);
      if (statSync(p).isDirectory()) walk(p);
      else if (!e.endsWith(".tsbuildinfo"))
        h.update(relative(dir, p)).update("\0").update(readFileSync(p)).update("\0");
    }
  };
  walk(dir);
  return h.digest("hex");
}

/** Replace root/dist with a copy of the staging folder, unless they already hold the same files. */
export function publishDist(root) {
  const stage = join(root, STAGE);
  const dist = join(root, "dist");
  if (digest(stage) === digest(dist)) return false;
  const next = join(root, ".build", `dist-next-${process.pid}`);
  const prev = join(root, ".build", `dist-prev-${process.pid}`);
  rmSync(next, { recursive: true, force: true });
  cpSync(stage, next, { recursive: true, filter: (src) => !src.endsWith(".tsbuildinfo") });
  if (existsSync(dist)) renameSync(dist, prev);
  renameSync(next, dist);
  rmSync(prev, { recursive: true, force: true });
  return true;
}
