// Compiles native/flash_aio.c (Linux AIO for the flash reader) into build/flash_aio.node.
// Run by `npm install` (through `prepare`) and `npm run build` (skipped when native/, this script,
// the compiler and Node's headers are what it was last built with: build-stamp.mjs). Optional: where there is no C
// compiler, no Node-API headers or no Linux, it says so and the reader uses libuv's thread pool
// (src/io/aio.ts), so the install never fails for want of it.
import { execFileSync } from "node:child_process";
import { existsSync, mkdirSync, readFileSync, rmSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { buildStep } from "./build-stamp.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "build", "flash_aio.node");
mkdirSync(join(root, "build"), { recursive: true });

function skip(why) {
  rmSync(out, { force: true });
  console.log(
    `native flash reader not built (${why}): reads will go through libuv's thread pool, which costs more CPU per read`,
  );
  process.exit(0);
}

if (process.platform !== "linux") skip(`Linux AIO is Linux-only; this is ${process.platform}`);
const includes = [
  process.env.NODE_API_INCLUDE,
  join(dirname(process.execPath), "..", "include", "node"),
  "/usr/include/node",
  "/usr/local/include/node",
].filter(Boolean);
const include = includes.find((d) => existsSync(join(d, "node_api.h")));
if (!include) skip(`no node_api.h in ${includes.join(", ")}; set NODE_API_INCLUDE to a folder holding it`);
const cc = process.env.CC || "cc";
const step = buildStep(root, "native", {
  inputs: ["native", "scripts/build-native.mjs"],
  extra: [cc, process.version, readFileSync(join(include, "node_api.h"), "utf8")],
  outputs: ["build/flash_aio.node"],
});
if (step.upToDate()) {
  console.log("build/flash_aio.node: up to date");
  process.exit(0);
}
try {
  execFileSync(
    cc,
    [
      "-O2",
      "-shared",
      "-fPIC",
      "-pthread",
      "-Wall",
      "-DNODE_GYP_MODULE_NAME=flash_aio",
      `-I${include}`,
      join(root, "native", "flash_aio.c"),
      "-ldl",
      "-o",
      out,
    ],
    { stdio: ["ignore", "inherit", "inherit"] },
  );
} catch (e) {
  skip(`${cc} failed: ${e.message.split("\n")[0]}`);
}
step.done();
console.log("built build/flash_aio.node");
