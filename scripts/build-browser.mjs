// The browser build (powerinfer-ts/browser): src/browser's entry points bundled by esbuild into
// dist/browser/ as ES modules, with Node's built-in modules replaced by src/browser/shims and the
// kernel modules (build/*.wasm) copied beside them. `powerinfer web` serves that folder.
import { build } from "esbuild";
import { copyFileSync, mkdirSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "dist", "browser");
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
  "node:zlib": shim("unavailable.ts"),
  "node:module": shim("unavailable.ts"),
  "node:worker_threads": shim("unavailable.ts"),
  "node:child_process": shim("unavailable.ts"),
  "node:util": shim("unavailable.ts"),
  "node:process": shim("unavailable.ts"),
};
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
console.log(`browser build: ${out}`);
