/** The architectures the engine runs, by GGUF's general.architecture. */
import type { Architecture } from "./architecture.js";
import { bamboo } from "./bamboo.js";
import { gemma3 } from "./gemma3.js";
import { gptOss } from "./gpt-oss.js";
import { llama } from "./llama.js";
import { mistral } from "./mistral.js";
import { phi3 } from "./phi3.js";
import { qwen2 } from "./qwen2.js";
import { qwen3 } from "./qwen3.js";
import { qwen3moe } from "./qwen3moe.js";
import { smallthinker } from "./smallthinker.js";

export type { Architecture } from "./architecture.js";

export const ARCHITECTURES: ReadonlyMap<string, Architecture> = new Map(
  [llama, mistral, qwen2, qwen3, qwen3moe, smallthinker, gptOss, phi3, gemma3, bamboo].map((a) => [a.name, a]),
);
