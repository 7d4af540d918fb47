/**
 * `powerinfer perplexity -m MODEL -f FILE [-c CTX] [--chunks N] [--sparsity ...] [--thresholds F]`:
 * perplexity as llama.cpp's llama-perplexity computes it (src/offline/perplexity.ts). The running
 * estimate per chunk and the final line go to stdout, as there:
 *   [1]4.1234,[2]4.0567,...
 *   Final estimate: PPL = 4.0312 +/- 0.01234
 */
import { existsSync } from "node:fs";
import { GGUFFile, type ModelFile } from "../format/gguf.js";
import { NeuronStore } from "../format/store/index.js";
import { readConfig } from "../model/config.js";
import { isNeuronStore, LlamaModel } from "../model/model.js";
import { corpusTokens, readCorpus } from "../offline/corpus.js";
import { perplexity } from "../offline/perplexity.js";
import { Tokenizer } from "../tokenizer/index.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { formatDuration } from "./progress.js";
import { CONTEXT_FLAGS, MODEL_FLAG, STORE_FLAGS, loadOptions } from "./model-flags.js";
import { RANGE } from "./flag-ranges.js";

export const FLAGS: FlagSpec[] = [
  MODEL_FLAG,
  ...CONTEXT_FLAGS,
  { names: ["-f", "--file"], key: "file", type: "string", help: "text file to score (UTF-8)" },
  {
    names: ["--chunks"],
    key: "chunks",
    type: "int",
    help: "score at most this many chunks (default: all)",
    range: RANGE.positive,
  },
  {
    names: ["--sparsity-stats"],
    key: "sparsityStats",
    type: "bool",
    help: "also measure the FFN sparsity of the run (a dense model: through the FFN observer, slower)",
  },
  ...STORE_FLAGS,
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const SUMMARY =
  "Perplexity of a model on a text file, computed as llama.cpp's llama-perplexity does by default: the file is " +
  "tokenized with BOS, cut into chunks of -c tokens (each starting with BOS), and the second half of each chunk is " +
  "scored. -c defaults to 512 as there, capped at the model's training context. A neuron store (.pi) is scored " +
  "through its sparse path, one token at a time (--sparsity gate | predictor | dense); --thresholds applies " +
  "calibrated SiLU thresholds (powerinfer profile --target-sparsity).";

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "perplexity -m MODEL -f FILE [-c CTX] [-b BATCH] [--chunks N] [--thresholds PROFILE] [--sparsity MODE]",
        SUMMARY,
        FLAGS,
      ),
    );
    return 0;
  }
  if (args._.length > 0)
    throw new UsageError(`perplexity: unexpected argument "${args._[0]}" (the text file goes after -f)`);
  if (typeof args.file !== "string") throw new UsageError("perplexity: -f FILE (the text to score) is required");
  if (typeof args.model === "string" && !existsSync(args.model))
    throw new UsageError(`perplexity: model ${args.model} does not exist`);
  const chunks = args.chunks as number | undefined;
  const load = loadOptions("perplexity", args);
  if (args.ctx !== undefined && (args.ctx as number) < 4)
    throw new UsageError(`perplexity: -c must be at least 4, got ${args.ctx}`);

  // The text first: a bad file fails before the model loads.
  const text = readCorpus(args.file);
  const file: ModelFile = isNeuronStore(load.modelPath)
    ? NeuronStore.open(load.modelPath)
    : GGUFFile.open(load.modelPath);
  let nCtx: number, tokens: Int32Array, bos: number;
  try {
    const cfg = readConfig(file);
    const tokenizer = Tokenizer.fromGGUF(file);
    nCtx = (args.ctx as number | undefined) ?? Math.min(512, cfg.nCtxTrain);
    if (nCtx > cfg.nCtxTrain)
      process.stderr.write(
        `perplexity: warning: the model was trained on ${cfg.nCtxTrain} context tokens (-c ${nCtx} given)\n`,
      );
    tokens = corpusTokens(tokenizer, text);
    bos = tokenizer.addBos && tokenizer.bosId >= 0 ? tokenizer.bosId : -1;
  } finally {
    file.close();
  }
  if (tokens.length < 2 * nCtx) {
    throw new UsageError(
      `perplexity: ${args.file} tokenizes to only ${tokens.length} tokens; a context of ${nCtx} needs at least ${2 * nCtx} (2 * n_ctx, as llama-perplexity): use a longer text or a smaller -c`,
    );
  }

  const t0 = performance.now();
  const model = await LlamaModel.load(load.modelPath, {
    threads: load.threads === "auto" ? undefined : load.threads,
    contextSize: nCtx,
    batchSize: Math.min(load.batchSize ?? 256, nCtx),
    memoryBudget: load.memoryBudget,
    offload: load.offload,
    activationThresholds: load.activationThresholds,
  });
  const controller = new AbortController();
  const onSigint = () => controller.abort(new Error("interrupted"));
  process.once("SIGINT", onSigint);
  try {
    const cfg = model.config;
    const how = model.offloaded
      ? `neuron store, sparsity ${load.offload?.sparsity ?? "(default)"}, scored token by token`
      : "dense, batched";
    process.stderr.write(
      `perplexity: ${args.model}: ${cfg.nLayer} layers, dim ${cfg.nEmbd}, ffn ${cfg.nFF} (${cfg.activation}); ${how}` +
        `${model.thresholds ? `; activation thresholds [${Array.from(model.thresholds, (t) => t.toPrecision(3)).join(", ")}]` : ""}; ` +
        `loaded in ${((performance.now() - t0) / 1000).toFixed(2)} s\n` +
        `perplexity: ${tokens.length} tokens, ${Math.floor(tokens.length / nCtx)} chunks of ${nCtx}` +
        `${chunks !== undefined ? ` (scoring ${Math.min(chunks, Math.floor(tokens.length / nCtx))})` : ""}, batch ${model.batchSize}\n`,
    );
    const r = await perplexity(model, tokens, {
      contextSize: nCtx,
      batchSize: model.batchSize,
      chunks,
      bos,
      signal: controller.signal,
      measureSparsity: args.sparsityStats === true || model.offloaded !== undefined,
      onChunk: (c, n, ppl, seconds) => {
        if (c === 1)
          process.stderr.write(
            `perplexity: ${seconds.toFixed(2)} seconds per pass - ETA ${formatDuration(seconds * n)}\n`,
          );
        process.stdout.write(`[${c}]${ppl.toFixed(4)},`);
      },
    });
    process.stdout.write("\n");
    const pm = Number.isNaN(r.stdError) ? "" : ` +/- ${r.stdError.toFixed(5)}`;
    process.stdout.write(`Final estimate: PPL = ${r.ppl.toFixed(4)}${pm}\n`);
    process.stderr.write(
      `perplexity: ${r.count} tokens scored in ${r.chunks} chunks, ${r.seconds.toFixed(1)} s` +
        (r.sparsity !== undefined
          ? `; FFN sparsity ${(100 * r.sparsity).toFixed(1)}% of neuron activations skipped or zero`
          : "") +
        "\n",
    );
    return 0;
  } catch (err) {
    if (controller.signal.aborted) {
      process.stdout.write("\n");
      process.stderr.write("perplexity: interrupted\n");
      return 130;
    }
    throw err;
  } finally {
    process.off("SIGINT", onSigint);
    await model.dispose();
  }
}
