// Formats the source tree with prettier (settings in .prettierrc.json, files not in .prettierignore):
//   node scripts/format.mjs          rewrite every file that is not formatted
//   node scripts/format.mjs --check  list them and exit 1 (npm test runs this)
// AssemblyScript's function decorators (`@inline function f`) are not TypeScript, so prettier's
// parser refuses them: in assembly/ they are masked as a comment while prettier runs.
import { readFileSync, writeFileSync, readdirSync, statSync } from "node:fs";
import { join, relative, dirname, extname } from "node:path";
import { fileURLToPath } from "node:url";
import * as prettier from "prettier";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const check = process.argv.includes("--check");
const EXTENSIONS = new Set([".ts", ".mjs", ".cjs", ".js", ".json"]);
const SKIP_DIRS = new Set(["node_modules", "dist", "build", ".git", ".peer", ".models", ".cache"]);
const MASK = "/*@inline*/";

function* files(dir) {
  for (const name of readdirSync(dir)) {
    const path = join(dir, name);
    if (statSync(path).isDirectory()) {
      if (!SKIP_DIRS.has(name)) yield* files(path);
    } else if (EXTENSIONS.has(extname(name))) yield path;
  }
}

let bad = 0;
let changed = 0;
for (const path of files(root)) {
  const rel = relative(root, path);
  const info = await prettier.getFileInfo(path, { ignorePath: join(root, ".prettierignore") });
  if (info.ignored) continue;
  const options = { ...(await prettier.resolveConfig(path)), filepath: path };
  const text = readFileSync(path, "utf8");
  const assembly = rel.startsWith("assembly");
  const source = assembly ? text.replaceAll("@inline function", `${MASK} function`) : text;
  let out = await prettier.format(source, options);
  if (assembly) out = out.replaceAll(`${MASK} function`, "@inline function");
  if (out === text) continue;
  if (check) {
    console.error(`not formatted: ${rel}`);
    bad++;
  } else {
    writeFileSync(path, out);
    changed++;
  }
}
if (check && bad > 0) {
  console.error(`${bad} file(s) not formatted: run \`npm run format\``);
  process.exit(1);
}
if (!check) console.log(`formatted ${changed} file(s)`);
