// `npm run build:ts`: tsc into the staging folder (dist-stage.mjs), then dist/ replaced at once.
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { readFileSync } from "node:fs";
import { buildStep } from "./build-stamp.mjs";
import { STAGE, publishDist } from "./dist-stage.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");
// tsc's own incremental check still parses every file (seconds): skip it when no input changed
const step = buildStep(root, "ts", {
  inputs: ["src", "test", "bench", "tsconfig.json", "scripts/build-ts.mjs"],
  extra: [readFileSync(join(root, "node_modules", "typescript", "package.json"), "utf8")],
  include: /\.m?ts$/,
  outputs: [join(STAGE, "src", "index.js"), join("dist", "src", "index.js")],
});
if (step.upToDate()) {
  console.log("dist/ (TypeScript): up to date");
  process.exit(0);
}
try {
  execFileSync(
    process.execPath,
    [tsc, "-p", "tsconfig.json", "--outDir", STAGE, "--tsBuildInfoFile", join(STAGE, "tsconfig.tsbuildinfo")],
    { cwd: root, stdio: "inherit" },
  );
} catch {
  process.exit(1); // tsc printed the errors
}
if (publishDist(root)) console.log("dist/: updated");
step.done();
