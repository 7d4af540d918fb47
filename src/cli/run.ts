/**
 * `powerinfer run -m MODEL -p PROMPT [-n N] ...`: the generated text alone on stdout (not the
 * prompt); load and speed statistics on stderr, ending with the line scripts read:
 *   prefill: 12 tokens, 345.6 tok/s; decode: 64 tokens, 36.1 tok/s
 */
import { readFileSync } from "node:fs";
import { loadModel } from "../index.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { StatusLine, TokenRate, formatStats } from "./progress.js";
import { peakResidentBytes } from "../runtime/memory.js";
import type { SparsityMode } from "../model/offloaded-ffn.js";

const FLAGS: FlagSpec[] = [
  { names: ["-m", "--model"], key: "model", type: "string", help: "model file (GGUF)" },
  { names: ["-p", "--prompt"], key: "prompt", type: "string", help: "prompt text" },
  { names: ["-f", "--file"], key: "file", type: "string", help: "read the prompt from a file" },
  { names: ["-n", "--n-predict"], key: "n", type: "int", help: "tokens to generate (-1 = until end or full context)", default: 128 },
  { names: ["-t", "--threads"], key: "threads", type: "int", help: "compute threads (default: all cores)" },
  { names: ["-c", "--ctx-size"], key: "ctx", type: "int", help: "context size in tokens (default: the model's, capped to what fits)" },
  { names: ["-b", "--batch-size"], key: "batch", type: "int", help: "prompt tokens per forward pass", default: 256 },
  { names: ["--temp"], key: "temp", type: "float", help: "temperature (0 = greedy)", default: 0.8 },
  { names: ["--top-k"], key: "topK", type: "int", help: "top-k sampling (0 = off)", default: 40 },
  { names: ["--top-p"], key: "topP", type: "float", help: "top-p sampling (1 = off)", default: 0.95 },
  { names: ["--min-p"], key: "minP", type: "float", help: "min-p sampling (0 = off)", default: 0.05 },
  { names: ["--repeat-penalty"], key: "repeatPenalty", type: "float", help: "penalize repeated tokens (1 = off)", default: 1.0 },
  { names: ["--repeat-last-n"], key: "repeatLastN", type: "int", help: "tokens the repeat penalty looks back", default: 64 },
  { names: ["-s", "--seed"], key: "seed", type: "int", help: "random seed (default: random)" },
  { names: ["--ignore-eos"], key: "ignoreEos", type: "bool", help: "keep generating after end-of-generation tokens" },
  { names: ["--no-bos"], key: "noBos", type: "bool", help: "do not add the BOS token" },
  { names: ["--memory-budget"], key: "budget", type: "size", help: "for a neuron store (.pi): everything resident fits in this (e.g. 1.5GiB)" },
  { names: ["--sparsity"], key: "sparsity", type: "string", help: "for a store: dense | gate | predictor (default: predictor when the model has predictors, else gate)" },
  { names: ["--cache-size"], key: "cacheSize", type: "size", help: "neuron cache size for a store (default: what the budget leaves)" },
  { names: ["--hot-fraction"], key: "hotFraction", type: "float", help: "share of the neuron cache pinned to hot neurons", default: 0.5 },
  { names: ["--io-queue-depth"], key: "queueDepth", type: "int", help: "reads from flash in flight", default: 32 },
  { names: ["--no-pipeline"], key: "noPipeline", type: "bool", help: "wait for reads before computing (ablation)" },
  { names: ["--stats"], key: "stats", type: "bool", help: "a live status line while generating (tok/s, cache hit rate, MB/s read, resident memory)" },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(usage("run -m MODEL -p PROMPT [options]", "Generate text. The text goes to stdout, statistics to stderr.", FLAGS));
    return 0;
  }
  if (typeof args.model !== "string") throw new UsageError("run: -m MODEL is required (see powerinfer run --help)");
  let prompt = args.prompt as string | undefined;
  if (typeof args.file === "string") prompt = readFileSync(args.file, "utf8");
  if (prompt === undefined) throw new UsageError("run: give a prompt with -p TEXT or -f FILE");
  const n = args.n as number;
  if (n < -1) throw new UsageError(`run: -n must be -1 or more, got ${n}`);
  if (args.threads !== undefined && (args.threads as number) < 1) throw new UsageError("run: -t must be at least 1");
  if (args.ctx !== undefined && (args.ctx as number) < 1) throw new UsageError("run: -c must be at least 1");
  if ((args.batch as number) < 1) throw new UsageError("run: -b must be at least 1");
  if (args.sparsity !== undefined && !["dense", "gate", "predictor"].includes(args.sparsity as string)) {
    throw new UsageError(`run: --sparsity must be dense, gate or predictor, got "${args.sparsity}"`);
  }

  const t0 = performance.now();
  const model = await loadModel({
    modelPath: args.model,
    threads: args.threads as number | undefined,
    contextSize: args.ctx as number | undefined,
    batchSize: args.batch as number,
    memoryBudget: args.budget as number | undefined,
    offload: {
      sparsity: args.sparsity as SparsityMode | undefined,
      cacheBytes: args.cacheSize as number | undefined,
      hotFraction: args.hotFraction as number,
      queueDepth: args.queueDepth as number,
      pipeline: !args.noPipeline,
    },
  });
  const cfg = model.config;
  process.stderr.write(
    `loaded ${args.model}: ${cfg.architecture}, ${cfg.nLayer} layers, dim ${cfg.nEmbd}, ffn ${cfg.nFF} (${cfg.activation}), ` +
      `vocab ${cfg.nVocab}; context ${model.contextSize}, ${model.threads} thread(s), ` +
      `${(model.residentBytes / 2 ** 20).toFixed(1)} MiB resident, in ${((performance.now() - t0) / 1000).toFixed(2)} s\n`,
  );
  const controller = new AbortController();
  const onSigint = () => controller.abort();
  process.once("SIGINT", onSigint);
  try {
    const gen = model.generate(prompt, {
      maxTokens: n,
      temperature: args.temp as number,
      topK: args.topK as number,
      topP: args.topP as number,
      minP: args.minP as number,
      repeatPenalty: args.repeatPenalty as number,
      repeatLastN: args.repeatLastN as number,
      seed: args.seed as number | undefined,
      addBos: args.noBos ? false : undefined,
      ignoreEos: Boolean(args.ignoreEos),
      signal: controller.signal,
    });
    const status = args.stats ? new StatusLine() : undefined;
    const rate = new TokenRate();
    const genStart = performance.now();
    status?.start();
    try {
      for await (const piece of gen) {
        process.stdout.write(piece);
        if (status) {
          rate.mark(gen.tokens.length);
          const off = model.offloadStats();
          const seconds = (performance.now() - genStart) / 1000;
          status.update(
            formatStats({
              tokensPerSecond: rate.perSecond,
              cacheHitRate: off ? (off.hotHits + off.coldHits) / Math.max(1, off.hotHits + off.coldHits + off.misses) : undefined,
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
    process.stdout.write("\n");
    const s = gen.stats!;
    const off = model.offloadStats();
    if (off) {
      const hits = off.hotHits + off.coldHits;
      process.stderr.write(
        `ffn: ${((100 * off.neuronsComputed) / Math.max(1, off.neuronsTotal)).toFixed(1)}% of neurons computed; ` +
          `cache hit rate ${((100 * hits) / Math.max(1, hits + off.misses)).toFixed(1)}% (hot ${off.hotHits}, cold ${off.coldHits}, misses ${off.misses}); ` +
          `read ${(off.bytesRead / 1e6).toFixed(1)} MB, I/O wait ${(off.ioWaitMs / 1000).toFixed(2)} s; peak RSS ${(peakResidentBytes() / 2 ** 20).toFixed(1)} MiB\n`,
      );
    }
    process.stderr.write(
      `stop: ${s.stopReason}\n` +
        `prefill: ${s.promptTokens} tokens, ${s.prefillTokensPerSecond.toFixed(1)} tok/s; ` +
        `decode: ${s.generatedTokens} tokens, ${s.decodeTokensPerSecond.toFixed(1)} tok/s\n`,
    );
  } finally {
    process.off("SIGINT", onSigint);
    await model.dispose();
  }
  return 0;
}
