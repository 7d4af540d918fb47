#!/usr/bin/env node
/**
 * `powerinfer <command> ...`: each command lives in its own file and exports main(argv) -> exit code.
 */
import { buildInfo } from "../server/build-info.js";
import { didYouMean } from "./did-you-mean.js";
import { UsageError } from "./args.js";

const COMMANDS: Record<string, { summary: string; load: () => Promise<{ main(argv: string[]): Promise<number> }> }> = {
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

function help(): string {
  const lines = ["usage: powerinfer <command> [options]", "", "commands:"];
  for (const [name, c] of Object.entries(COMMANDS)) lines.push(`  ${name.padEnd(18)} ${c.summary}`);
  lines.push("", "powerinfer <command> --help shows a command's options.");
  return lines.join("\n");
}

async function main(argv: string[]): Promise<number> {
  const [name, ...rest] = argv;
  if (!name || name === "-h" || name === "--help" || name === "help") {
    console.log(help());
    return name ? 0 : 1;
  }
  if (name === "--version" || name === "-v" || name === "version") {
    console.log(buildInfo());
    return 0;
  }
  const command = Object.hasOwn(COMMANDS, name) ? COMMANDS[name] : undefined;
  if (!command) {
    console.error(`powerinfer: unknown command "${name}"${didYouMean(name, Object.keys(COMMANDS))}\n\n${help()}`);
    return 2;
  }
  return (await command.load()).main(rest);
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exitCode = code;
  },
  (err: unknown) => {
    if (err instanceof UsageError) console.error(`powerinfer: ${err.message}`);
    else console.error(`powerinfer: ${err instanceof Error ? err.message : String(err)}`);
    if (process.env.POWERINFER_DEBUG && err instanceof Error) console.error(err.stack);
    process.exitCode = err instanceof UsageError ? 2 : 1;
  },
);
