import { fileURLToPath } from "node:url";
import { dirname, resolve } from "node:path";
/** The repository root (bench scripts run from dist/bench). */
export const ROOT_DIR = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
