// Compiles the AssemblyScript kernels (assembly/) into two modules from the same source:
//   build/kernels.wasm          SIMD128, which every supported Node runs
//   build/kernels-relaxed.wasm  SIMD128 + relaxed SIMD (on by default from Node 22); kernels that
//                               gain from it branch on the compile-time ASC_FEATURE_RELAXED_SIMD
// src/runtime/wasm.ts picks one at run time by feature detection.
// Run by `npm install` (through `prepare`) and `npm run build`; skipped when assembly/, this
// script and the compiler are what the modules were last built from (build-stamp.mjs).
// The modules import one shared memory and hold no GC objects: --runtime stub, no static data
// beyond the first 64 KiB (the JS arena starts above that).
import { execFile } from "node:child_process";
import { promisify } from "node:util";
import { mkdirSync, readFileSync, renameSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";
import { buildStep } from "./build-stamp.mjs";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
mkdirSync(join(root, "build"), { recursive: true });
const asc = join(root, "node_modules", "assemblyscript", "bin", "asc.js");
const step = buildStep(root, "wasm", {
  inputs: ["assembly", "scripts/build-wasm.mjs"],
  extra: [readFileSync(join(root, "node_modules", "assemblyscript", "package.json"), "utf8")],
  outputs: ["build/kernels.wasm", "build/kernels-relaxed.wasm"],
});
if (step.upToDate()) {
  console.log("build/kernels.wasm, build/kernels-relaxed.wasm: up to date");
  process.exit(0);
}
const common = [
  "--runtime",
  "stub",
  "--importMemory",
  "--sharedMemory",
  "--initialMemory",
  "17",
  "--maximumMemory",
  "65536",
  "--enable",
  "simd",
  "--enable",
  "threads",
  "-O3",
  "--noAssert",
  "--converge",
];
// both at once: asc is single-threaded and the machines have 2 cores
await Promise.all(
  [
    ["kernels", []],
    ["kernels-relaxed", ["--enable", "relaxed-simd"]],
  ].map(async ([name, extra]) => {
    const { stdout, stderr } = await promisify(execFile)(process.execPath, [
      asc,
      join(root, "assembly", "index.ts"),
      ...common,
      ...extra,
      "-o",
      join(root, "build", `${name}.wasm.next`),
      "-t",
      join(root, "build", `${name}.wat`),
    ]);
    process.stdout.write(stdout);
    process.stderr.write(stderr);
    // a process starting meanwhile reads the old module or the new one, never half of one
    renameSync(join(root, "build", `${name}.wasm.next`), join(root, "build", `${name}.wasm`));
    console.log(`built build/${name}.wasm`);
  }),
);
step.done();
