/**
 * `powerinfer run -m MODEL -p PROMPT [-n N] ...`: the generated text alone on stdout (not the
 * prompt); load and speed statistics on stderr, ending with the line scripts read:
 *   prefill: 12 tokens, 345.6 tok/s; decode: 64 tokens, 36.1 tok/s
 * With --json, stdout is instead one JSON object: {text, tokens, stats} (run-json.ts).
 */
import { offloadFigures } from "../model/offload/stats.js";
import { readFileSync } from "node:fs";
import { loadModel } from "../index.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { StatusLine, TokenRate, formatStats } from "./progress.js";
import { peakResidentBytes } from "../runtime/memory.js";
import { CONTEXT_FLAGS, MODEL_FLAG, SAMPLING_FLAGS, STORE_FLAGS, loadOptions, samplingOptions } from "./model-flags.js";
import { RANGE } from "./flag-ranges.js";
import { BUDGET_ROOM, fixedPartsText } from "../model/offload/layout.js";
import { acceptLlamaCppFlags } from "./llama-compat-flags.js";
import { JSON_SCHEMA_FLAGS, responseFormatFromFlags } from "./json-schema-flag.js";
import { finishTrace, startTrace, TRACE_FLAG } from "./trace-flag.js";
import { runResult } from "./run-json.js";
import { expertStatsText } from "./expert-stats.js";
import { processEscapes } from "./escapes.js";

export const FLAGS: FlagSpec[] = [
  MODEL_FLAG,
  { names: ["-p", "--prompt"], key: "prompt", type: "string", help: "prompt text" },
  { names: ["-f", "--file"], key: "file", type: "string", help: "read the prompt from a file" },
  {
    names: ["-e", "--escape"],
    key: "escape",
    type: "bool",
    help: "turn \\n \\r \\t \\' \\\" \\\\ and \\xHH in the prompt into the characters they name, as llama.cpp (--no-escape: keep them as written)",
    default: true,
  },
  { names: ["--no-escape"], key: "noEscape", type: "bool", help: "keep backslash sequences in the prompt as written" },
  {
    names: ["-n", "--n-predict"],
    key: "n",
    type: "int",
    help: "tokens to generate (-1 = until end or full context)",
    default: 128,
    range: RANGE.predict,
  },
  ...CONTEXT_FLAGS,
  ...SAMPLING_FLAGS,
  { section: "output", names: ["--no-bos"], key: "noBos", type: "bool", help: "do not add the BOS token" },
  ...JSON_SCHEMA_FLAGS,
  {
    names: ["--json"],
    key: "json",
    type: "bool",
    help: "write one JSON object to stdout: text, tokens (the generated ids), stats (speeds, stop reason; a store's cache and read figures)",
  },
  TRACE_FLAG,
  {
    names: ["--stats"],
    key: "stats",
    type: "bool",
    help: "a live status line while generating (tok/s, cache hit rate, MB/s read, resident memory); for a mixture of experts from a store, per-expert figures at the end",
  },
  {
    names: ["--stats-experts"],
    key: "statsExperts",
    type: "bool",
    help: "a mixture of experts from a store: the per-expert figures and a layer x expert table (tokens routed, hit rate) at the end",
  },
  ...STORE_FLAGS,
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

export async function main(argv: string[]): Promise<number> {
  argv = acceptLlamaCppFlags("run", argv);
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage("run -m MODEL -p PROMPT [options]", "Generate text. The text goes to stdout, statistics to stderr.", FLAGS),
    );
    return 0;
  }
  const load = loadOptions("run", args);
  let prompt = args.prompt as string | undefined;
  if (typeof args.file === "string") prompt = readFileSync(args.file, "utf8");
  if (prompt === undefined) throw new UsageError("run: give a prompt with -p TEXT or -f FILE");
  if (args.escape && !args.noEscape) prompt = processEscapes(prompt);
  const n = args.n as number;
  const responseFormat = responseFormatFromFlags("run", args);
  const trace = startTrace("run", argv, args);

  const t0 = performance.now();
  const model = await loadModel({ ...load, tracer: trace });
  const cfg = model.config;
  process.stderr.write(
    `loaded ${args.model}: ${cfg.architecture}, ${cfg.nLayer} layers, dim ${cfg.nEmbd}, ffn ${cfg.nFF} (${cfg.activation}), ` +
      `vocab ${cfg.nVocab}; context ${model.contextSize}, ${model.threads} thread(s), ` +
      `${(model.residentBytes / 2 ** 20).toFixed(1)} MiB resident${model.wasmMemories > 1 ? ` in ${model.wasmMemories} wasm memories` : ""}, in ${((performance.now() - t0) / 1000).toFixed(2)} s\n`,
  );
  if (model.contextNote) process.stderr.write(`note: ${model.contextNote}\n`);
  const layout = model.offloadLayout;
  if (layout) {
    process.stderr.write(
      `ffn from flash: ${model.offloadMode} sparsity; neuron cache ${(layout.cacheBytes / 2 ** 20).toFixed(1)} MiB` +
        `${layout.shards ? ` split among ${layout.shards.length} memories` : ""}, ` +
        `${layout.hotPerLayer} hot neurons per layer pinned (hot share ${+layout.hotFraction.toFixed(3)}); ` +
        `gate rows ${model.offloadMode === "predictor" ? "not needed per token" : model.offloadMode === "dense" ? "not needed (every neuron runs, each bundle whole)" : layout.residentGates ? "in memory" : "streamed from flash"}\n`,
    );
    if (layout.budget !== undefined)
      process.stderr.write(
        `memory: budget ${(layout.budget / 2 ** 20).toFixed(1)} MiB = ${fixedPartsText(layout)}, ` +
          `neuron cache ${(layout.cacheBytes / 2 ** 20).toFixed(1)} MiB, ${(100 * (1 - BUDGET_ROOM)).toFixed(0)}% kept free\n`,
      );
  }
  const controller = new AbortController();
  const onSigint = () => controller.abort();
  process.once("SIGINT", onSigint);
  try {
    const gen = model.generate(prompt, {
      ...samplingOptions(args),
      maxTokens: n,
      addBos: args.noBos ? false : undefined,
      signal: controller.signal,
      responseFormat,
    });
    const json = Boolean(args.json);
    let text = "";
    const status = args.stats ? new StatusLine() : undefined;
    const rate = new TokenRate();
    const genStart = performance.now();
    status?.start();
    try {
      for await (const piece of gen) {
        if (json) text += piece;
        else process.stdout.write(piece);
        if (status) {
          rate.mark(gen.tokens.length);
          const off = model.offloadStats();
          const seconds = (performance.now() - genStart) / 1000;
          status.update(
            formatStats({
              tokensPerSecond: rate.perSecond,
              cacheHitRate: off ? offloadFigures(off).hitRate : undefined,
              readBytesPerSecond: off ? off.bytesRead / Math.max(seconds, 1e-3) : undefined,
              residentBytes: process.memoryUsage.rss(),
              extra: `${gen.tokens.length} tokens`,
            }),
          );
        }
      }
    } finally {
      status?.stop();
    }
    const s = gen.stats!;
    const off = model.offloadStats();
    process.stdout.write(json ? JSON.stringify(runResult(text, gen.tokens, s, off)) + "\n" : "\n");
    if (off) {
      const f = offloadFigures(off);
      process.stderr.write(
        `ffn: ${(100 * f.computedShare).toFixed(1)}% of neurons computed; ` +
          `cache hit rate ${(100 * f.hitRate).toFixed(1)}% (hot ${off.hotHits}, cold ${off.coldHits}, misses ${off.misses}); ` +
          `read ${(off.bytesRead / 1e6).toFixed(1)} MB, I/O wait ${(off.ioWaitMs / 1000).toFixed(2)} s (${((100 * off.ioWaitMs) / Math.max(1, s.prefillMs + s.decodeMs)).toFixed(0)}% of the run); peak RSS ${(peakResidentBytes() / 2 ** 20).toFixed(1)} MiB\n`,
      );
      if (off.readAhead > 0)
        process.stderr.write(
          `read-ahead: ${off.readAhead} bundles, ${off.readAheadUsed} used` +
            (off.readAheadExact !== undefined
              ? ` (routed experts, exact: ${off.readAheadExact}, ${off.readAheadExactUsed} used; ` +
                (off.readAheadRouted
                  ? `routed experts before attention: ${off.readAheadRouted}`
                  : `next layer's likely experts: ${off.readAhead - off.readAheadExact}`) +
                `, ${off.readAheadUsed - (off.readAheadExactUsed ?? 0)} used)`
              : "") +
            "\n",
        );
      if (off.flash)
        process.stderr.write(
          `flash: ${off.flash.reads} reads since the store opened; ${off.flash.bridged} bundles bridged into another's read, ${(off.flash.gapBytes / 1e6).toFixed(1)} MB read between them\n`,
        );
      const verbose = Boolean(args.statsExperts);
      if (off.groups && off.groups.experts > 0 && (args.stats || verbose))
        process.stderr.write(expertStatsText(off.groups, verbose));
    }
    process.stderr.write(
      `stop: ${s.stopReason}\n` +
        `prefill: ${s.promptTokens} tokens, ${speed(s.prefillTokensPerSecond)} tok/s; ` +
        `decode: ${s.generatedTokens} tokens, ${speed(s.decodeTokensPerSecond)} tok/s\n`,
    );
  } finally {
    process.off("SIGINT", onSigint);
    await model.dispose();
    finishTrace(trace);
  }
  return 0;
}

/** A speed with one decimal, or three significant digits below 10 (a model read from flash may run at 0.05 tok/s). */
function speed(v: number): string {
  return v >= 10 || v === 0 ? v.toFixed(1) : v.toPrecision(3);
}
