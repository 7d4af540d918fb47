/**
 * The flags every model-running command shares (run, chat, serve, perplexity), in llama.cpp's
 * spelling: threads, context, batch, the memory budget and neuron-store settings, calibrated
 * activation thresholds, and sampling.
 */
import type { GenerateOptions } from "../generate/generator.js";
import type { LoadModelOptions } from "../index.js";
import type { SparsityMode } from "../model/offload/layout.js";
import { EXPERT_READ_AHEAD, type ExpertReadAhead } from "../model/offload/offloaded-ffn.js";
import { thresholdsForModel } from "../offline/profile.js";
import { UsageError, type FlagSpec, type ParsedArgs } from "./args.js";
import { applyPlan } from "../planner/apply-plan.js";
import { RANGE } from "./flag-ranges.js";
import { parseKvCacheType } from "../model/kv-cache.js";

/** The model file and what every run sets first: threads and context. */
export const MODEL_FLAG: FlagSpec = {
  names: ["-m", "--model"],
  key: "model",
  type: "string",
  help: "model file (GGUF, or a neuron store .pi)",
};

/** Threads, context, batch and KV cache types. */
export const CONTEXT_FLAGS: FlagSpec[] = [
  {
    names: ["-t", "--threads"],
    key: "threads",
    type: "int",
    help: "compute threads (default: all cores)",
    range: RANGE.threads,
  },
  {
    names: ["-c", "--ctx-size"],
    key: "ctx",
    type: "int",
    help: "context size in tokens (default: the model's, at most 4096; 256 under --memory-budget)",
    range: RANGE.context,
  },
  {
    names: ["-b", "--batch-size"],
    key: "batch",
    type: "int",
    help: "prompt tokens per forward pass",
    default: 256,
    range: RANGE.batch,
  },
  {
    names: ["-ctk", "--cache-type-k"],
    key: "cacheTypeK",
    type: "string",
    help: "KV cache type for keys: f16 (default, as llama.cpp) or f32",
  },
  {
    names: ["-ctv", "--cache-type-v"],
    key: "cacheTypeV",
    type: "string",
    help: "KV cache type for values: f16 (default) or f32",
  },
];

/** A neuron store's memory budget and its tuning and ablation switches (and SiLU thresholds). */
export const STORE_FLAGS: FlagSpec[] = [
  {
    section: "memory budget and neuron store",
    names: ["--memory-budget"],
    key: "budget",
    type: "size",
    help: "for a neuron store (.pi): everything resident fits in this (e.g. 1.5GiB)",
    range: RANGE.bytes,
  },
  {
    names: ["--sparsity"],
    key: "sparsity",
    type: "string",
    help: "for a store: dense | gate | predictor (default: predictor when the model has predictors, else gate where an activation has exact zeros or thresholds are set, else dense: every neuron fires)",
  },
  {
    names: ["--cache-size"],
    key: "cacheSize",
    type: "size",
    help: "neuron cache size for a store (default: what the budget leaves)",
    range: RANGE.bytes,
  },
  {
    names: ["--hot-fraction"],
    key: "hotFraction",
    type: "float",
    help: "share of the neuron cache pinned to hot neurons (default: the plan's; else from the store's profile, the share with the most expected hits (at least 0.5); 0.5 without one)",
    range: RANGE.share,
  },
  {
    names: ["--io-queue-depth"],
    key: "queueDepth",
    type: "int",
    help: "reads from flash in flight (default: 1024 with native AIO on its own I/O thread, 256 with AIO inline; 64, libuv's pool under this command, without AIO)",
    range: RANGE.queueDepth,
  },
  { names: ["--no-pipeline"], key: "noPipeline", type: "bool", help: "wait for reads before computing (ablation)" },
  {
    names: ["--no-read-ahead"],
    key: "noReadAhead",
    type: "bool",
    help: "predictor and dense mode: do not read the next layer's bundles during this layer (a mixture of experts: nor the routed experts' once the layer has routed) (ablation)",
  },
  {
    names: ["--expert-read-ahead"],
    key: "expertReadAhead",
    type: "string",
    help: "a mixture of experts in predictor or dense mode, what is read ahead: expert (every routed expert's exact picks at once, once the layer has routed), layer (the next layer's likely experts, by its router on the current residual; where the router reads the block's input, as smallthinker's, the routed experts themselves, before attention), both; default: expert (both for smallthinker)",
  },
  {
    names: ["--verify"],
    key: "verify",
    type: "string",
    help: "bundle checksums: once (default; each chunk on its first read, and the file checked for changes every token) | always (every read)",
  },
  {
    names: ["--plan"],
    key: "plan",
    type: "string",
    help: "a plan from `powerinfer plan` (default: MODEL.plan.json beside the model when made for this --memory-budget; none: no plan)",
  },
  {
    names: ["--thresholds"],
    key: "thresholds",
    type: "string",
    help: "apply the activation thresholds of a profile (powerinfer profile --target-sparsity) of this model: SiLU sparsity for a plain GGUF",
  },
];

/** Every model-loading flag, in the order a command's help lists them. */
export const LOAD_FLAGS: FlagSpec[] = [MODEL_FLAG, ...CONTEXT_FLAGS, ...STORE_FLAGS];

export const SAMPLING_FLAGS: FlagSpec[] = [
  {
    section: "sampling",
    names: ["--temp"],
    key: "temp",
    type: "float",
    help: "temperature (0 = greedy)",
    default: 0.8,
    range: RANGE.temperature,
  },
  { names: ["--top-k"], key: "topK", type: "int", help: "top-k sampling (0 = off)", default: 40, range: RANGE.count },
  {
    names: ["--top-p"],
    key: "topP",
    type: "float",
    help: "top-p sampling (1 = off)",
    default: 0.95,
    range: RANGE.share,
  },
  {
    names: ["--min-p"],
    key: "minP",
    type: "float",
    help: "min-p sampling (0 = off)",
    default: 0.05,
    range: RANGE.share,
  },
  {
    names: ["--repeat-penalty"],
    key: "repeatPenalty",
    type: "float",
    help: "penalize repeated tokens (1 = off)",
    default: 1.0,
    range: RANGE.penalty,
  },
  {
    names: ["--repeat-last-n"],
    key: "repeatLastN",
    type: "int",
    help: "tokens the repeat penalty looks back",
    default: 64,
    range: RANGE.window,
  },
  { names: ["-s", "--seed"], key: "seed", type: "int", help: "random seed (default: random)", range: RANGE.seed },
  { names: ["--ignore-eos"], key: "ignoreEos", type: "bool", help: "keep generating after end-of-generation tokens" },
];

/** loadModel options from the LOAD_FLAGS, checked; `command` names the command in errors. */
export function loadOptions(command: string, args: ParsedArgs): LoadModelOptions {
  if (typeof args.model !== "string")
    throw new UsageError(`${command}: -m MODEL is required (see powerinfer ${command} --help)`);
  if (args.sparsity !== undefined && !["dense", "gate", "predictor"].includes(args.sparsity as string)) {
    throw new UsageError(`${command}: --sparsity must be dense, gate or predictor, got "${args.sparsity}"`);
  }
  const hot = args.hotFraction as number | undefined;
  if (args.expertReadAhead !== undefined && !EXPERT_READ_AHEAD.includes(args.expertReadAhead as ExpertReadAhead))
    throw new UsageError(
      `${command}: --expert-read-ahead must be ${EXPERT_READ_AHEAD.join(", ")}, got "${args.expertReadAhead}"`,
    );
  const cacheType = (value: unknown, flag: string) => {
    if (value === undefined) return undefined;
    try {
      return parseKvCacheType(value, `${command}: ${flag}`);
    } catch (e) {
      throw new UsageError((e as Error).message);
    }
  };
  const kvCache = { k: cacheType(args.cacheTypeK, "--cache-type-k"), v: cacheType(args.cacheTypeV, "--cache-type-v") };
  if (args.verify !== undefined && args.verify !== "once" && args.verify !== "always")
    throw new UsageError(`${command}: --verify must be once or always, got "${args.verify}"`);
  // Read (and check against the model) now, so a wrong profile fails before the model loads.
  const thresholds = typeof args.thresholds === "string" ? thresholdsForModel(args.thresholds, args.model) : undefined;
  const opts: LoadModelOptions = {
    modelPath: args.model,
    activationThresholds: thresholds,
    threads: args.threads as number | undefined,
    contextSize: args.ctx as number | undefined,
    batchSize: args.batch as number,
    kvCache,
    memoryBudget: args.budget as number | undefined,
    offload: {
      sparsity: args.sparsity as SparsityMode | undefined,
      cacheBytes: args.cacheSize as number | undefined,
      hotFraction: hot,
      queueDepth: args.queueDepth as number | undefined,
      pipeline: args.noPipeline ? false : undefined,
      lookahead: args.noReadAhead ? false : undefined,
      expertReadAhead: args.expertReadAhead as ExpertReadAhead | undefined,
      verify: args.verify as "once" | "always" | undefined,
    },
  };
  // A plan (explicit, or MODEL.plan.json made for this budget) fills in what the flags left open.
  return applyPlan(opts, args.plan as string | undefined, (m) => process.stderr.write(`${command}: ${m}\n`));
}

/** Sampling options from the SAMPLING_FLAGS. */
export function samplingOptions(args: ParsedArgs): GenerateOptions {
  return {
    temperature: args.temp as number,
    topK: args.topK as number,
    topP: args.topP as number,
    minP: args.minP as number,
    repeatPenalty: args.repeatPenalty as number,
    repeatLastN: args.repeatLastN as number,
    seed: args.seed as number | undefined,
    ignoreEos: Boolean(args.ignoreEos),
  };
}
