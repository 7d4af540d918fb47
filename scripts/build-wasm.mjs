// Compiles the AssemblyScript kernels (assembly/) into build/kernels.wasm.
// Run by `npm install` (through `prepare`) and `npm run build`.
// The module imports one shared memory and holds no GC objects: --runtime stub, no static data
// beyond the first 64 KiB (the JS arena starts above that).
import { execFileSync } from "node:child_process";
import { mkdirSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
mkdirSync(join(root, "build"), { recursive: true });
const asc = join(root, "node_modules", "assemblyscript", "bin", "asc.js");
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
execFileSync(
  process.execPath,
  [
    asc,
    join(root, "assembly", "index.ts"),
    ...common,
    "-o",
    join(root, "build", "kernels.wasm"),
    "-t",
    join(root, "build", "kernels.wat"),
  ],
  { stdio: "inherit" },
);
console.log("built build/kernels.wasm");
