// npm links the bin at install time; make sure the compiled entry point is executable.
import { chmodSync, existsSync } from "node:fs";
const bin = new URL("../dist/src/cli/main.js", import.meta.url);
if (existsSync(bin)) chmodSync(bin, 0o755);
