// The browser build (powerinfer-ts/browser): src/browser's entry points bundled by esbuild into
// dist/browser/ as ES modules (through the staging folder, dist-stage.mjs), with Node's built-in modules replaced by src/browser/shims and the
// kernel modules (build/*.wasm) copied beside them. `powerinfer web` serves that folder.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, existsSync, readFileSync } from "node:fs";
import { buildStep } from "./build-stamp.mjs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { STAGE, publishDist } from "./dist-stage.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, STAGE, "browser");
const shim = (f) => join(root, "src", "browser", "shims", f);
const alias = {
  "node:fs": shim("fs.ts"),
  fs: shim("fs.ts"),
  "node:fs/promises": shim("fs-promises.ts"),
  "node:os": shim("os.ts"),
  "node:path": shim("path.ts"),
  "node:url": shim("url.ts"),
  "node:crypto": shim("crypto.ts"),
  "node:v8": shim("v8.ts"),
  "node:vm": shim("vm.ts"),
  "node:zlib": shim("unavailable.ts"),
  "node:module": shim("unavailable.ts"),
  "node:worker_threads": shim("unavailable.ts"),
  "node:child_process": shim("unavailable.ts"),
  "node:util": shim("unavailable.ts"),
  "node:process": shim("unavailable.ts"),
};
const step = buildStep(root, "browser", {
  inputs: ["src", "scripts/build-browser.mjs", "build/kernels.wasm", "build/kernels-relaxed.wasm"],
  extra: [readFileSync(join(root, "node_modules", "esbuild", "package.json"), "utf8")],
  include: /\.(ts|html)$/,
  outputs: [join(STAGE, "browser", "index.js"), join("dist", "browser", "index.js")],
});
if (step.upToDate()) {
  console.log("dist/browser: up to date");
  process.exit(0);
}
mkdirSync(out, { recursive: true });
await build({
  entryPoints: ["index", "app", "engine-worker", "pool-worker", "reader-worker"].map((e) =>
    join(root, "src", "browser", `${e}.ts`),
  ),
  outdir: out,
  bundle: true,
  format: "esm",
  platform: "browser",
  target: "es2022",
  sourcemap: true,
  alias,
  inject: [shim("env.ts")],
  logLevel: "warning",
});
copyFileSync(join(root, "src", "browser", "page.html"), join(out, "index.html"));
for (const f of ["kernels.wasm", "kernels-relaxed.wasm"]) {
  const src = join(root, "build", f);
  if (!existsSync(src)) throw new Error(`${src} is missing: run "npm run build:wasm" first`);
  copyFileSync(src, join(out, f));
}
publishDist(root);
step.done();
console.log("browser build: dist/browser");
