/** "powerinfer-ts 0.1.0 (node v20.20.2, linux x64)": the build a server reports in /props. */
import { readFileSync } from "node:fs";
import { fileURLToPath } from "node:url";

let cached: string | undefined;

export function buildInfo(): string {
  if (cached) return cached;
  let version = "unknown";
  try {
    // dist/src/server/build-info.js is three folders below the package root
    const pkg = JSON.parse(readFileSync(fileURLToPath(new URL("../../../package.json", import.meta.url)), "utf8"));
    if (pkg.name === "powerinfer-ts") version = pkg.version;
  } catch {
    // a bundled copy without package.json: the version stays unknown
  }
  return (cached = `powerinfer-ts ${version} (node ${process.version}, ${process.platform} ${process.arch})`);
}
