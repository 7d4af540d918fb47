/** The architectures the engine runs, by GGUF's general.architecture. */
import type { Architecture } from "./architecture.js";
import { bamboo } from "./bamboo.js";
import { llama } from "./llama.js";
import { mistral } from "./mistral.js";
import { qwen2 } from "./qwen2.js";

export type { Architecture } from "./architecture.js";

export const ARCHITECTURES: ReadonlyMap<string, Architecture> = new Map(
  [llama, mistral, qwen2, bamboo].map((a) => [a.name, a]),
);
