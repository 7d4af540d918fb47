/**
 * The ranges numeric flags share (FlagSpec.range), each as wide as anything the engine can use:
 * a value outside is a usage error naming the flag, instead of reaching code that allocates or
 * loops by it (`--repeat-last-n 1e9` once reserved 4 GB).
 */
import { MIN_CONTEXT } from "../model/context-size.js";

/** token counts and positions are 32-bit integers in the engine */
export const INT32_MAX = 2 ** 31 - 1;
/** a context's largest size: the most a model's metadata may claim (src/model/config.ts) */
export const MAX_CONTEXT = 2 ** 24;

export const RANGE = {
  /** -t: one compute thread per worker; more than this is never faster and costs memory per worker */
  threads: [1, 256],
  /** -c */
  context: [MIN_CONTEXT, MAX_CONTEXT],
  /** -b: prompt tokens per forward pass; the loader's largest batch */
  batch: [1, 4096],
  /** -n: tokens to generate, -1 = until the end or a full context */
  predict: [-1, INT32_MAX],
  /** a count of tokens, chunks, steps... */
  count: [0, INT32_MAX],
  /** a count that must be at least 1 */
  positive: [1, INT32_MAX],
  /** --repeat-last-n: a window of the context */
  window: [0, MAX_CONTEXT],
  /** seeds: any integer a double holds exactly */
  seed: [-Number.MAX_SAFE_INTEGER, Number.MAX_SAFE_INTEGER],
  /** byte sizes (--memory-budget, --cache-size, ...) */
  bytes: [0, Number.MAX_SAFE_INTEGER],
  /** a probability or share */
  share: [0, 1],
  /** --temp: far above any useful temperature (OpenAI's API allows 0 to 2) */
  temperature: [0, 100],
  /** --repeat-penalty: divides the logits of recent tokens; 0 would divide by zero */
  penalty: [0.01, 100],
  /** --io-queue-depth: reads in flight */
  queueDepth: [1, 65536],
  /** a TCP port (0 = any free one) */
  port: [0, 65535],
  /** seconds to wait for something (a day at most) */
  seconds: [0, 86400],
  /** a factor on a measuring time */
  timeScale: [0.01, 100],
  /** an optimizer's step size */
  learningRate: [0, 1],
} as const satisfies Record<string, readonly [number, number]>;
