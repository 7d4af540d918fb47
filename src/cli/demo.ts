/**
 * `powerinfer demo`: a model larger than its memory budget, with no model at hand.
 *
 * 1. Synthesizes, once, a sparse ReLU model of random weights (planted activation sparsity that
 *    emerges from the weights, made predictable from a low-rank view of the input as on trained
 *    ReLU models: src/offline/synth.ts, "Predictable firing") with the activation predictors the
 *    construction implies, and converts both to a .pi neuron store, cached
 *    under $XDG_CACHE_HOME/powerinfer-ts (or ~/.cache/powerinfer-ts); the intermediate GGUF is
 *    and predictor files are deleted unless --keep DIR asks for all files in DIR.
 * 2. Runs it under a memory budget smaller than the model, in a child process: the budget is
 *    measured against the process's resident memory, and the parent has just held synthesis and
 *    conversion buffers, so a fresh process is what a user's `powerinfer run` would see (and its
 *    peak RSS is the run's alone).
 * 3. Prints tok/s, the neuron cache's hit rate, flash read MB/s and the model's size against the
 *    budget, and says that the weights are synthetic.
 *
 * Output: the header, the generated text and the summary on stdout; progress bars and the
 * engine's own messages on stderr.
 */
import { offloadFigures } from "../model/offload/stats.js";
import { fork } from "node:child_process";
import { existsSync, mkdirSync, rmSync, statfsSync, statSync } from "node:fs";
import { availableParallelism, homedir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { ProgressBar, formatBytes } from "./progress.js";
import { NeuronStore } from "../format/store/index.js";
import {
  plannedFiring,
  SHAPE_SPECS,
  synthesize,
  synthFileSize,
  type SynthShape,
  type SynthShapeSpec,
  type SynthType,
} from "../offline/synth.js";
import { convertToStore } from "../offline/convert.js";
import { loadModel } from "../index.js";
import { peakResidentBytes } from "../runtime/memory.js";
import { BUDGET_ROOM, offloadLayout, storeFacts } from "../model/offload/layout.js";
import { readConfig } from "../model/config.js";
import { residentBytes } from "../model/resident-bytes.js";
import { RANGE } from "./flag-ranges.js";

/** Bumped when the demo model's recipe changes, so an old cached store is not reused for it. */
const RECIPE_VERSION = 4;
const SPARSITY = 0.9;
const TYPE: SynthType = "q4_1";
const SEED = 1;
/** KV cache length of the run (the budget pays for it) */
const CONTEXT = 256;

/**
 * The default demo shape: FFN-heavy (ffn = 8 x dim, grouped-query attention) because the
 * attention weights stay in memory while the FFN lives on flash (the predictor picks the neurons,
 * their bundles are read unless cached); the more of the model is FFN, the further under the
 * model's size the budget can go. dim 2048 makes a Q4_1 bundle (3 x 1280 bytes) fill one 4 KiB page with
 * 6% padding. About 840 MB: synthesis and conversion take well under a minute on two cores.
 */
const DEMO_SPEC: Partial<SynthShapeSpec> = {
  like: "the powerinfer demo (FFN-heavy llama)",
  dim: 2048,
  layers: 12,
  ffn: 16384,
  heads: 16,
  kvHeads: 4,
  vocab: 4096,
  context: 512,
};

/**
 * The mixture-of-experts demo: Mixtral's layout (8 experts, 2 used per token) at the demo's scale.
 * A token's FFN is the two routed experts (a quarter of the FFN weights), and the predictors pick
 * within them. dim 2048 for the same reason as the dense demo (a Q4_1 bundle fills a 4 KiB page;
 * at dim 1024 the store would be twice the model). About 330 MB.
 */
const MOE_SPEC: Partial<SynthShapeSpec> = {
  like: "the powerinfer mixture-of-experts demo (Mixtral-like)",
  dim: 2048,
  layers: 8,
  ffn: 1024,
  heads: 16,
  kvHeads: 4,
  vocab: 4096,
  context: 512,
  experts: 8,
  expertsUsed: 2,
};

type DemoShape = "demo" | "moe" | SynthShape;

/** Gate rank of the demo model (synth --gate-rank): 32 at dim 2048 (predictors of 29 MB in all), 8 for toy shapes. */
const gateRankOf = (dim: number) => Math.max(8, Math.min(64, dim / 64));
const SHAPES: readonly DemoShape[] = ["demo", "moe", "tiny", "mixtral-tiny", "1b", "7b", "13b"];

/**
 * The default budget leaves this share of the neuron bundles' bytes for the cache, on top of what
 * must stay resident; the rest of Up and Down is read from flash as neurons fire.
 */
const DEFAULT_CACHE_SHARE = 0.08;
/**
 * What the run's process holds before any weight loads (node, the engine, the worker threads, the
 * store's manifest), with room for the tokenizer and the generator: measured ~62 MiB with 2
 * threads on a small store.
 */
const RUNTIME_BASE = 96 * 2 ** 20;

export const FLAGS: FlagSpec[] = [
  {
    names: ["--budget"],
    key: "budget",
    type: "size",
    help: `memory budget for the run (default: what must stay resident plus ${DEFAULT_CACHE_SHARE * 100}% of the bundles, see above)`,
    range: RANGE.bytes,
  },
  { names: ["--shape"], key: "shape", type: "string", help: `model shape: ${SHAPES.join(", ")}`, default: "demo" },
  { names: ["-n", "--n-predict"], key: "n", type: "int", help: "tokens to generate", default: 32, range: RANGE.count },
  { names: ["-p", "--prompt"], key: "prompt", type: "string", help: "prompt text", default: "Once upon a time" },
  {
    names: ["-t", "--threads"],
    key: "threads",
    type: "int",
    help: "compute threads (default: all cores)",
    range: RANGE.threads,
  },
  {
    names: ["--keep"],
    key: "keep",
    type: "string",
    help: "keep the synthetic GGUF and the .pi store in DIR (instead of the cache; reused from there)",
  },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const SUMMARY =
  "Synthesize (once, cached) a sparse ReLU model of random weights that is larger than the memory budget, with activation " +
  "predictors, convert it to a .pi neuron store and generate from it under the budget: tok/s, neuron cache hit rate and flash " +
  `read speed. The default budget holds the attention weights, the predictors, the KV cache and ${DEFAULT_CACHE_SHARE * 100}% of the FFN ` +
  "neuron bundles; each token the predictors pick the neurons that will fire and only their bundles are read from flash.";

/** What the child process reports back over IPC. */
interface ChildResult {
  promptTokens: number;
  generatedTokens: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  seconds: number;
  neuronsComputed: number;
  neuronsTotal: number;
  hotHits: number;
  coldHits: number;
  misses: number;
  bytesRead: number;
  ioWaitMs: number;
  peakRss: number;
  threads: number;
  sparsity: string;
}

interface ChildJob {
  store: string;
  budget: number;
  /** a fixed neuron cache size instead of what the budget leaves */
  cacheBytes?: number;
  n: number;
  prompt: string;
  threads?: number;
}

export function cacheDir(env: NodeJS.ProcessEnv = process.env): string {
  const base =
    env.XDG_CACHE_HOME && env.XDG_CACHE_HOME.startsWith("/") ? env.XDG_CACHE_HOME : join(homedir(), ".cache");
  return join(base, "powerinfer-ts");
}

function specOf(shape: DemoShape): {
  synthShape: SynthShape;
  overrides?: Partial<SynthShapeSpec>;
  spec: SynthShapeSpec;
} {
  if (shape === "demo") return { synthShape: "1b", overrides: DEMO_SPEC, spec: { ...SHAPE_SPECS["1b"], ...DEMO_SPEC } };
  if (shape === "moe")
    return { synthShape: "mixtral", overrides: MOE_SPEC, spec: { ...SHAPE_SPECS.mixtral, ...MOE_SPEC } };
  return { synthShape: shape, spec: SHAPE_SPECS[shape] };
}

const MB = 1e6;
const mb = (n: number) => `${(n / MB).toFixed(n < 10 * MB ? 1 : 0)} MB`;

/** The store if it exists and opens as one; a damaged or outdated one is removed. */
function usableStore(path: string): boolean {
  if (!existsSync(path)) return false;
  try {
    NeuronStore.open(path).close();
    return true;
  } catch (e) {
    process.stderr.write(`demo: the cached store ${path} cannot be used (${(e as Error).message}); making it again\n`);
    rmSync(path, { force: true });
    return false;
  }
}

async function makeStore(
  shape: DemoShape,
  dir: string,
  storePath: string,
  ggufPath: string,
  keepGguf: boolean,
  signal: AbortSignal,
): Promise<void> {
  const { synthShape, overrides, spec } = specOf(shape);
  const synthOpts = {
    shape: synthShape,
    overrides,
    act: "relu" as const,
    type: TYPE,
    seed: SEED,
    sparsity: SPARSITY,
    gateRank: gateRankOf(spec.dim),
  };
  const predictorsPath = ggufPath.replace(/\.gguf$/, ".predictors.gguf");
  const ggufBytes = synthFileSize(synthOpts);
  // The GGUF and the store exist side by side for a moment; say so before filling the disk.
  const need = 2.2 * ggufBytes;
  try {
    const fs = statfsSync(dir);
    const free = fs.bavail * fs.bsize;
    if (free < need)
      throw new Error(
        `demo: ${dir} has ${formatBytes(free)} free, the demo model needs about ${formatBytes(need)} while it is made (use --keep DIR elsewhere)`,
      );
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === undefined) throw e;
  }
  process.stderr.write(
    `demo: making the demo model once (${mb(ggufBytes)}, ${spec.layers} layers, dim ${spec.dim}, ${spec.experts > 0 ? `${spec.experts} experts of ` : ""}ffn ${spec.ffn}); later runs reuse ${storePath}\n`,
  );

  let predictors = predictorsPath;
  if (!existsSync(ggufPath) || !existsSync(predictorsPath)) {
    const tmp = keepGguf ? ggufPath : `${ggufPath}.${process.pid}`;
    predictors = keepGguf ? predictorsPath : `${predictorsPath}.${process.pid}`;
    const bar = new ProgressBar({ label: "synthesize", total: ggufBytes, unit: "bytes" });
    try {
      await synthesize({
        ...synthOpts,
        out: tmp,
        predictorsOut: predictors,
        signal,
        fsync: false,
        onProgress: (p) => bar.update(p.bytesWritten),
      });
      bar.finish();
    } catch (e) {
      bar.abandon();
      if (!keepGguf) rmSync(predictors, { force: true });
      throw e;
    }
    ggufPath = tmp;
  }

  // Neurons are stored hot-first by the firing rates the generator planted: a stand-in for the
  // measured activation profile a real model would come with. It decides only the order on
  // flash (which neurons the hot region pins); what runs is still what the weights fire. A
  // mixture's profile has an entry per (layer, expert), each expert with its own planted rates.
  const experts = spec.experts;
  const profile = {
    layers: Array.from({ length: spec.layers * Math.max(1, experts) }, (_, g) => ({
      frequency:
        experts > 0
          ? plannedFiring(SEED, Math.floor(g / experts), spec.ffn, SPARSITY, undefined, g % experts)
          : plannedFiring(SEED, g, spec.ffn, SPARSITY),
    })),
  };
  const bar = new ProgressBar({ label: "convert", total: 0, unit: "bytes" });
  try {
    await convertToStore({
      input: ggufPath,
      output: storePath,
      profile,
      predictors,
      signal,
      onProgress: (p) => {
        bar.setTotal(p.bytesTotal);
        bar.update(p.bytesDone);
      },
    });
    bar.finish();
  } catch (e) {
    bar.abandon();
    throw e;
  } finally {
    if (!keepGguf) {
      rmSync(ggufPath, { force: true });
      rmSync(predictors, { force: true });
    }
  }
}

/**
 * Default budget for `store`: what stays resident as the engine lays it out (layout.ts: no gate
 * row stays in memory, predictors pick a token's neurons and prompts stream the gate rows through
 * a staging area; that is what lets the budget sit a few times under the model's size) plus
 * `cacheShare` of the neuron bundles for the cache, rounded up to 16 MiB. The runtime's own memory
 * is estimated (RUNTIME_BASE); the engine measures it when it loads.
 */
export function defaultBudget(
  storePath: string,
  cacheShare = DEFAULT_CACHE_SHARE,
  threads = availableParallelism(),
): number {
  const store = NeuronStore.open(storePath);
  try {
    const cfg = readConfig(store);
    const r = residentBytes(store, cfg, { batchSize: 256, contextSize: CONTEXT, predictors: true });
    const layout = offloadLayout(
      storeFacts(store, cfg),
      { base: RUNTIME_BASE, weights: r.weights, buffers: r.buffers, kv: r.kv },
      undefined,
      { sparsity: "predictor", threads, cacheBytes: 0 },
    );
    // every expert's bundles (a mixture's store has a group of nFF per layer and expert)
    const bundles = store.ffn.layers.reduce((s, l) => s + l.neurons, 0) * store.ffn.bundleBytes;
    const bytes = (layout.fixed + cacheShare * bundles) / BUDGET_ROOM;
    return Math.ceil(bytes / (16 * 2 ** 20)) * 16 * 2 ** 20;
  } finally {
    store.close();
  }
}

/** The run, in a fresh process: generate, stream the text, report the counters. */
async function child(job: ChildJob): Promise<number> {
  const model = await loadModel({
    modelPath: job.store,
    threads: job.threads,
    contextSize: CONTEXT,
    memoryBudget: job.budget,
    offload: job.cacheBytes !== undefined ? { cacheBytes: job.cacheBytes } : undefined,
  });
  try {
    const t0 = performance.now();
    const gen = model.generate(job.prompt, { maxTokens: job.n, temperature: 0, ignoreEos: true });
    for await (const piece of gen) process.stdout.write(piece.replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, "\ufffd"));
    process.stdout.write("\n");
    const seconds = (performance.now() - t0) / 1000;
    const s = gen.stats!;
    const off = model.offloadStats();
    if (!off) throw new Error(`${job.store} ran without an offloaded FFN`);
    const result: ChildResult = {
      promptTokens: s.promptTokens,
      generatedTokens: s.generatedTokens,
      prefillTokensPerSecond: s.prefillTokensPerSecond,
      decodeTokensPerSecond: s.decodeTokensPerSecond,
      seconds,
      neuronsComputed: off.neuronsComputed,
      neuronsTotal: off.neuronsTotal,
      hotHits: off.hotHits,
      coldHits: off.coldHits,
      misses: off.misses,
      bytesRead: off.bytesRead,
      ioWaitMs: off.ioWaitMs,
      peakRss: peakResidentBytes(),
      threads: model.threads,
      sparsity: model.offloadMode ?? "dense",
    };
    await new Promise<void>((res, rej) => process.send!(result, undefined, {}, (e) => (e ? rej(e) : res())));
  } finally {
    await model.dispose();
  }
  return 0;
}

/** Runs the child and waits for its report; its stdout and stderr are this process's. */
function runChild(job: ChildJob): Promise<ChildResult> {
  const bin = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "bin", "powerinfer.cjs");
  return new Promise((res, rej) => {
    let result: ChildResult | undefined;
    const p = fork(bin, ["demo", "--child", JSON.stringify(job)], { stdio: ["ignore", "inherit", "inherit", "ipc"] });
    const onSigint = () => p.kill("SIGINT");
    process.once("SIGINT", onSigint);
    p.on("message", (m) => (result = m as ChildResult));
    p.on("error", rej);
    p.on("exit", (code, signal) => {
      process.off("SIGINT", onSigint);
      if (result && code === 0) res(result);
      else
        rej(new Error(`demo: the run failed (${signal ? `signal ${signal}` : `exit ${code}`}; its message is above)`));
    });
  });
}

export async function main(argv: string[]): Promise<number> {
  if (argv[0] === "--child") {
    if (!process.send) throw new UsageError("demo --child is internal (run by powerinfer demo over IPC)");
    return child(JSON.parse(argv[1]) as ChildJob);
  }
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(usage(`demo [--budget SIZE] [--shape ${SHAPES.join("|")}] [-n N] [--keep DIR]`, SUMMARY, FLAGS));
    return 0;
  }
  if (args._.length > 0) throw new UsageError(`demo: unexpected argument "${args._[0]}"`);
  const shape = String(args.shape).toLowerCase() as DemoShape;
  if (!SHAPES.includes(shape)) throw new UsageError(`--shape must be one of ${SHAPES.join(", ")}, got "${args.shape}"`);
  const n = args.n as number;
  if (!(n >= 1)) throw new UsageError(`demo: -n must be at least 1, got ${n}`);
  if (args.threads !== undefined && (args.threads as number) < 1) throw new UsageError("demo: -t must be at least 1");
  const prompt = String(args.prompt);

  const keep = typeof args.keep === "string" ? resolve(args.keep) : undefined;
  const dir = keep ?? cacheDir();
  mkdirSync(dir, { recursive: true });
  const name = `demo-v${RECIPE_VERSION}-${shape}-relu${SPARSITY}-${TYPE}-seed${SEED}`;
  const storePath = join(dir, `${name}.pi`);
  const ggufPath = join(dir, `${name}.gguf`);

  const controller = new AbortController();
  const onSignal = () => controller.abort(new Error("interrupted"));
  process.once("SIGINT", onSignal);
  let cached: boolean;
  try {
    cached = usableStore(storePath);
    if (cached) process.stderr.write(`demo: using the cached demo model ${storePath}\n`);
    else await makeStore(shape, dir, storePath, ggufPath, keep !== undefined, controller.signal);
  } catch (e) {
    if (controller.signal.aborted) {
      process.stderr.write("demo: interrupted, partial files removed\n");
      return 130;
    }
    throw e;
  } finally {
    process.off("SIGINT", onSignal);
  }

  const store = NeuronStore.open(storePath);
  const storeBytes = store.fileSize;
  const sourceBytes = store.manifest.source.bytes;
  const bundleBytes = store.ffn.bundleBytes;
  const allBundles = store.ffn.layers.reduce((s, l) => s + l.neurons, 0) * bundleBytes;
  const experts = store.ffn.experts;
  const nLayer = store.ffn.layers.length / Math.max(1, experts);
  const cfgLine =
    experts > 0
      ? `${nLayer} layers, dim ${store.ffn.nEmbd}, ${experts} experts of ffn ${store.ffn.layers[0].neurons} (${readConfig(store).nExpertUsed} used per token), ReLU, ${TYPE.toUpperCase()}`
      : `${nLayer} layers, dim ${store.ffn.nEmbd}, ffn ${store.ffn.layers[0].neurons}, ReLU, ${TYPE.toUpperCase()}`;
  store.close();
  const budget = (args.budget as number | undefined) ?? defaultBudget(storePath);
  const ratio = sourceBytes / budget;

  const out = process.stdout;
  out.write(
    `model:   synthetic ${shape} model (${cfgLine}): ${mb(sourceBytes)} of weights, ${mb(storeBytes)} as a store on flash\n`,
  );
  // A model smaller than its default budget (a toy shape) would sit in the cache whole and read
  // nothing: its cache gets the default share of the bundles, so that it reads from flash too.
  const cacheBytes = ratio < 1 && args.budget === undefined ? Math.ceil(DEFAULT_CACHE_SHARE * allBundles) : undefined;
  const versus =
    ratio >= 1
      ? `the model is ${ratio.toFixed(1)}x the budget`
      : cacheBytes !== undefined
        ? `the model is smaller than the budget (a tiny shape; the default demo model is not), so its neuron cache holds ${DEFAULT_CACHE_SHARE * 100}% of the FFN's bundles (${formatBytes(cacheBytes)}) and the rest is read from flash`
        : "the model is smaller than the budget (a tiny shape; the default demo model is not)";
  out.write(`budget:  ${formatBytes(budget)}${args.budget === undefined ? " (default)" : ""}: ${versus}\n`);
  out.write(`prompt:  ${JSON.stringify(prompt)}, ${n} tokens, greedy\n`);
  out.write("text:    ");
  const r = await runChild({
    store: storePath,
    budget,
    cacheBytes,
    n,
    prompt,
    threads: args.threads as number | undefined,
  });

  const f = offloadFigures(r);
  out.write(
    [
      `speed:   prefill ${r.prefillTokensPerSecond.toFixed(2)} tok/s (${r.promptTokens} tokens), decode ${r.decodeTokensPerSecond.toFixed(2)} tok/s (${r.generatedTokens} tokens), ${r.threads} thread(s)`,
      `ffn:     ${(100 * f.computedShare).toFixed(1)}% of neurons computed (${r.sparsity === "predictor" ? "those the predictor picked" : "those that fired"}); ` +
        `neuron cache hit rate ${(100 * f.hitRate).toFixed(1)}% (hot ${r.hotHits}, cold ${r.coldHits}, misses ${r.misses})`,
      `flash:   read ${mb(r.bytesRead)} at ${(r.bytesRead / MB / r.seconds).toFixed(1)} MB/s; waiting for reads ${((100 * r.ioWaitMs) / 1000 / r.seconds).toFixed(0)}% of the time` +
        // Reads beyond the misses' bundles are gate rows: the budget does not hold them.
        (r.bytesRead > r.misses * bundleBytes
          ? `; ${mb(r.bytesRead - r.misses * bundleBytes)} of it gate rows (${r.sparsity === "predictor" ? "streamed once for the prompt's batch" : "not resident under this budget: streamed each token"})`
          : ""),
      `memory:  peak resident ${formatBytes(r.peakRss)} of the ${formatBytes(budget)} budget (model ${mb(sourceBytes)})`,
      "note:    the weights are synthetic: random numbers with planted activation sparsity (90% of FFN neurons at zero), " +
        "so the text above is meaningless. The predictors were planted by the generator, not trained; neurons are stored " +
        "hot-first by the firing rates it planted, standing in for a measured activation profile.",
      `files:   ${cached ? "reused" : "made"} ${storePath}${keep ? ` (and ${ggufPath})` : ""}; run it yourself: powerinfer run -m ${storePath} --memory-budget ${formatBytes(budget).replace(" ", "")} -p "..."`,
    ].join("\n") + "\n",
  );
  return 0;
}
