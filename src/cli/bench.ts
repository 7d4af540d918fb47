/**
 * `powerinfer bench -m MODEL [-p 512] [-n 128] [-r 5]`, in the manner of llama.cpp's llama-bench:
 * prompt processing (ppN: N prompt tokens from an empty context, as one prefill) and text
 * generation (tgN: N tokens decoded one by one) in tokens per second, the mean and standard
 * deviation over repetitions after one warm-up run. A markdown table by default, or llama-bench's
 * JSON (-o json, --json) and JSON lines (-o jsonl). -p and -n take comma-separated lists; 0 skips.
 *
 * The prompts are seeded random token ids (each repetition's differ, so no KV cache is reused);
 * generation is greedy with end-of-generation ignored. A neuron store runs under its flags
 * (--memory-budget, --sparsity, ...) with the neuron cache warm from the runs before.
 */
import { statSync } from "node:fs";
import { loadModel, type Model } from "../index.js";
import { Xoshiro128 } from "../generate/sampler.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { CONTEXT_FLAGS, MODEL_FLAG, STORE_FLAGS, loadOptions } from "./model-flags.js";
import { acceptLlamaCppFlags } from "./llama-compat-flags.js";
import { finishTrace, startTrace, TRACE_FLAG } from "./trace-flag.js";
import { formatBytes } from "./progress.js";
import { formatParameterCount } from "../api/model.js";
import { buildInfo } from "../server/build-info.js";
import { RANGE } from "./flag-ranges.js";
import { kernelBuild } from "../runtime/wasm.js";

export const FLAGS: FlagSpec[] = [
  MODEL_FLAG,
  ...CONTEXT_FLAGS,
  {
    names: ["-p", "--n-prompt"],
    key: "prompt",
    type: "string",
    help: "prompt lengths to time, comma-separated (0: none)",
    default: "512",
  },
  {
    names: ["-n", "--n-gen"],
    key: "gen",
    type: "string",
    help: "generation lengths to time, comma-separated (0: none)",
    default: "128",
  },
  {
    names: ["-r", "--repetitions"],
    key: "reps",
    type: "int",
    help: "timed runs of each test",
    default: 5,
    range: RANGE.positive,
  },
  { names: ["-o", "--output"], key: "output", type: "string", help: "md | json | jsonl", default: "md" },
  { names: ["--json"], key: "json", type: "bool", help: "the same as -o json" },
  {
    names: ["-s", "--seed"],
    key: "seed",
    type: "int",
    help: "seed of the random prompts",
    default: 1,
    range: RANGE.seed,
  },
  TRACE_FLAG,
  ...STORE_FLAGS,
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

interface Test {
  kind: "pp" | "tg";
  tokens: number;
}

/** One row of results, with llama-bench's JSON field names. */
interface BenchResult {
  model_filename: string;
  model_type: string;
  model_size: number;
  model_n_params: number;
  backends: string;
  n_threads: number;
  n_batch: number;
  n_ctx: number;
  n_prompt: number;
  n_gen: number;
  test_time: string;
  avg_ns: number;
  stddev_ns: number;
  avg_ts: number;
  stddev_ts: number;
  samples_ns: number[];
  samples_ts: number[];
  build_info: string;
  memory_budget: number | null;
  sparsity: string | null;
}

export async function main(argv: string[]): Promise<number> {
  argv = acceptLlamaCppFlags("bench", argv);
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "bench -m MODEL [-p 512] [-n 128] [-r 5] [-o md|json|jsonl] [options]",
        "Prompt processing (ppN) and generation (tgN) speed in tokens per second, as llama-bench measures them:\n" +
          "the mean and standard deviation over -r runs after a warm-up run. Results on stdout.",
        FLAGS,
      ),
    );
    return 0;
  }
  if (args._.length) throw new UsageError(`bench: unexpected argument "${args._[0]}"`);
  const tests = [
    ...lengths("-p", args.prompt as string).map((tokens): Test => ({ kind: "pp", tokens })),
    ...lengths("-n", args.gen as string).map((tokens): Test => ({ kind: "tg", tokens })),
  ];
  if (tests.length === 0) throw new UsageError("bench: nothing to time (-p and -n are both 0)");
  const reps = args.reps as number;
  if (!(reps >= 1)) throw new UsageError(`bench: -r must be at least 1, got ${reps}`);
  const output = args.json ? "json" : (args.output as string);
  if (!["md", "json", "jsonl"].includes(output))
    throw new UsageError(`bench: -o must be md, json or jsonl, got "${output}"`);
  const load = loadOptions("bench", args);
  // llama-bench's context: room for the longest test
  const need = Math.max(...tests.map((t) => t.tokens + 1));
  if (args.ctx !== undefined && (args.ctx as number) < need)
    throw new UsageError(`bench: -c ${args.ctx} is too small for the longest test (${need} tokens)`);
  const trace = startTrace("bench", argv, args);

  const model = await loadModel({
    ...load,
    contextSize: (args.ctx as number | undefined) ?? need,
    tracer: trace,
  });
  const facts = modelFacts(load.modelPath, model);
  const xs = new Xoshiro128(args.seed as number);
  const random = () => xs.nextFloat();
  const results: BenchResult[] = [];
  try {
    if (output === "md") {
      console.log("| model | size | params | backend | threads | test | t/s |");
      console.log("| --- | ---: | ---: | --- | ---: | ---: | ---: |");
    }
    for (const t of tests) {
      await runOnce(model, t, random); // warm-up
      const samples: number[] = [];
      for (let r = 0; r < reps; r++) samples.push(await runOnce(model, t, random));
      const r = result(facts, model, load.batchSize ?? 256, t, samples);
      results.push(r);
      if (output === "md")
        console.log(
          `| ${r.model_type} | ${formatBytes(r.model_size)} | ${formatParameterCount(r.model_n_params)} | ${r.backends} | ${r.n_threads} | ` +
            `${t.kind}${t.tokens} | ${r.avg_ts.toFixed(2)} ± ${r.stddev_ts.toFixed(2)} |`,
        );
      else if (output === "jsonl") console.log(JSON.stringify(r));
    }
    if (output === "json") console.log(JSON.stringify(results, null, 2));
    if (output === "md") {
      const layout = model.offloadLayout;
      console.log("");
      console.log(`build: ${buildInfo()}`);
      if (layout)
        console.log(
          `store: ${model.offloadMode} sparsity, neuron cache ${formatBytes(layout.cacheBytes)}` +
            (layout.budget !== undefined ? `, memory budget ${formatBytes(layout.budget)}` : ""),
        );
    }
  } finally {
    await model.dispose();
    finishTrace(trace);
  }
  return 0;
}

/** "512,128" -> [512, 128]; zeros dropped. */
function lengths(flag: string, text: string): number[] {
  const out: number[] = [];
  for (const part of text.split(",")) {
    const v = Number(part.trim());
    if (part.trim() === "" || !Number.isInteger(v) || v < 0)
      throw new UsageError(`bench: ${flag} takes token counts separated by commas, got "${text}"`);
    if (v > 0) out.push(v);
  }
  return out;
}

/** One timed run of a test: its tokens per second. */
async function runOnce(model: Model, t: Test, random: () => number): Promise<number> {
  const vocab = model.tokenizer.vocabSize;
  const ids = (n: number) => Array.from({ length: n }, () => Math.floor(random() * vocab));
  if (t.kind === "pp") {
    const gen = model.generate(ids(t.tokens), { maxTokens: 0, temperature: 0 });
    await gen.text();
    return gen.stats!.prefillTokensPerSecond;
  }
  // t.tokens decode steps: the first token comes from the one-token prefill
  const gen = model.generate(ids(1), { maxTokens: t.tokens + 1, temperature: 0, ignoreEos: true });
  await gen.text();
  return gen.stats!.decodeTokensPerSecond;
}

interface ModelFacts {
  filename: string;
  type: string;
  size: number;
  params: number;
  store: boolean;
}

/** The model's size on disk, parameter count and "arch params type" label, as llama-bench names it. */
function modelFacts(path: string, model: Model): ModelFacts {
  return {
    filename: path,
    type: model.typeDescription,
    size: statSync(path).size,
    params: model.parameterCount,
    store: model.offloadMode !== undefined,
  };
}

function result(facts: ModelFacts, model: Model, batch: number, t: Test, samples: number[]): BenchResult {
  const ts = mean(samples);
  const ns = samples.map((s) => (s > 0 ? (t.tokens / s) * 1e9 : 0));
  return {
    model_filename: facts.filename,
    model_type: facts.type,
    model_size: facts.size,
    model_n_params: facts.params,
    backends: `WASM ${kernelBuild() === "relaxed" ? "relaxed SIMD" : "SIMD128"}${facts.store ? ", flash" : ""}`,
    n_threads: model.threads,
    n_batch: batch,
    n_ctx: model.contextSize,
    n_prompt: t.kind === "pp" ? t.tokens : 0,
    n_gen: t.kind === "tg" ? t.tokens : 0,
    test_time: new Date().toISOString(),
    avg_ns: Math.round(mean(ns)),
    stddev_ns: Math.round(stddev(ns)),
    avg_ts: ts,
    stddev_ts: stddev(samples),
    samples_ns: ns.map(Math.round),
    samples_ts: samples,
    build_info: buildInfo(),
    memory_budget: model.offloadLayout?.budget ?? null,
    sparsity: model.offloadMode ?? null,
  };
}

function mean(v: number[]): number {
  return v.reduce((a, b) => a + b, 0) / v.length;
}

/** Sample standard deviation (n - 1), 0 for one sample, as llama-bench reports it. */
function stddev(v: number[]): number {
  if (v.length < 2) return 0;
  const m = mean(v);
  return Math.sqrt(v.reduce((a, b) => a + (b - m) ** 2, 0) / (v.length - 1));
}
