// `npm install` / `npm ci` run this (the package's `prepare`): Node 22 for the kernel tests, then
// the build, which skips every step whose inputs did not change (build-stamp.mjs).
//
// `npx powerinfer` in a clone runs it too: npm installs the clone itself into its npx cache as a
// folder link and prepares it (npm_command is "exec" then). The link points at this very folder,
// so once `npm install` has built it there is nothing to do: rebuilding there only cost seconds
// on every first `npx`, and two first calls at once each started a build over the same dist/.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const built = ["dist/src/cli/main.js", "build/kernels.wasm", "build/kernels-relaxed.wasm"].every((f) =>
  existsSync(join(root, f)),
);
if (process.env.npm_command === "exec" && built) process.exit(0);

const run = (script) =>
  execFileSync(process.execPath, [join(root, "scripts", script)], { cwd: root, stdio: "inherit" });
const npm = process.env.npm_execpath;
run("install-node22.mjs");
if (npm && npm.endsWith(".js")) execFileSync(process.execPath, [npm, "run", "build"], { cwd: root, stdio: "inherit" });
else execFileSync(process.platform === "win32" ? "npm.cmd" : "npm", ["run", "build"], { cwd: root, stdio: "inherit" });
