/**
 * The table of `powerinfer` commands: each lives in its own file, exporting main(argv) -> exit
 * code and FLAGS, the options it parses (the README's test reads them to check every command the
 * README shows).
 */
import type { FlagSpec } from "./args.js";

export interface CommandModule {
  main(argv: string[]): Promise<number>;
  FLAGS: FlagSpec[];
}

export const COMMANDS: Record<string, { summary: string; load: () => Promise<CommandModule> }> = {
  run: { summary: "generate text from a model (llama.cpp-style flags)", load: () => import("./run.js") },
  bench: {
    summary: "prompt processing and generation speed over repetitions, as llama-bench (table or --json)",
    load: () => import("./bench.js"),
  },
  tokenize: { summary: "print the token ids of a text as a JSON array", load: () => import("./tokenize.js") },
  inspect: { summary: "show a model file's metadata and tensor table", load: () => import("./inspect.js") },
  convert: {
    summary: "turn a GGUF model into a .pi neuron store for flash offloading",
    load: () => import("./convert.js"),
  },
  synth: { summary: "write a synthetic model of random weights (for benchmarks)", load: () => import("./synth.js") },
  serve: { summary: "serve a model over an OpenAI-compatible HTTP API", load: () => import("./serve.js") },
  web: {
    summary: "serve a page that runs a model in the browser (WebAssembly workers, OPFS)",
    load: () => import("./web.js"),
  },
  chat: { summary: "chat with a model in the terminal", load: () => import("./chat.js") },
  profile: {
    summary: "record how often each FFN neuron fires over a text corpus (and calibrate SiLU thresholds)",
    load: () => import("./profile.js"),
  },
  perplexity: {
    summary: "perplexity of a model on a text file, as llama.cpp's llama-perplexity computes it",
    load: () => import("./perplexity.js"),
  },
  "train-predictors": {
    summary: "train PowerInfer activation predictors (fc1/fc2) on a corpus; write a PWRI GGUF or add them to a store",
    load: () => import("./train-predictors.js"),
  },
  demo: {
    summary: "run a synthetic model larger than its memory budget from flash (no model needed)",
    load: () => import("./demo.js"),
  },
  plan: {
    summary: "probe this machine and choose the fastest settings for a store under a memory budget",
    load: () => import("./plan.js"),
  },
};
