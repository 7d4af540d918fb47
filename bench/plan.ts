/**
 * Does the planner predict what `run` measures, and is its plan never slower than the defaults?
 * For each budget and repetition: `powerinfer plan --reprobe`, then a decode run of the store with
 * that plan applied (applyPlan, as `run --plan` does) and one with the runtime's defaults, each in
 * a fresh process; prints predicted vs measured decode tok/s (medians over repetitions, and each
 * run against the prediction made just before it) and the hit rates, and records it all as JSON.
 *
 *   node dist/bench/plan.js -m STORE.pi --budgets 3GiB,3.5GiB,3.75GiB [-n 16] [--reps 1]
 *                           [--prompt TEXT] [--skip-defaults] [--cached-probe] [--out FILE.json]
 *
 * Each plan re-probes the machine (a few seconds) unless --cached-probe: on a shared machine the
 * load, and with it the read and compute rates, changes from minute to minute.
 * The measured hit rate is of the decode steps alone (counters read after the prompt's prefill).
 */
import { offloadFigures, statsSince } from "../src/model/offload/stats.js";
import { spawnSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { loadavg, tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { loadModel, type LoadModelOptions } from "../src/index.js";
import { NeuronStore } from "../src/format/store/index.js";
import { Tokenizer } from "../src/tokenizer/index.js";
import { parseSize } from "../src/cli/args.js";
import { applyPlan } from "../src/planner/apply-plan.js";
import { readPlan, type PlanFile } from "../src/planner/plan-file.js";
import { knobsText, sizeText } from "../src/planner/plan-text.js";
import { ROOT_DIR } from "./paths.js";
import { median } from "../src/planner/median.js";

const BIN = join(ROOT_DIR, "bin", "powerinfer.cjs");
const PROMPT =
  "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker who repaired every clock in the valley.";

interface ChildJob {
  model: string;
  budget: number;
  plan: string | null;
  contextSize: number;
  prompt: string;
  n: number;
}

interface ChildResult {
  decodeTokensPerSecond: number;
  decodeTokens: number;
  promptTokens: number;
  hitRate: number;
  readBytesPerToken: number;
  ioWaitShare: number;
  loadAverage: [number, number];
  /** the neuron cache the runtime made (the planner predicts it from the budget) */
  cacheBytes: number;
  hotPerLayer: number;
}

function arg(name: string, fallback?: string): string | undefined {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

/** One run in this (child) process: load with the plan or the defaults, generate, report decode figures. */
async function child(job: ChildJob): Promise<ChildResult> {
  const la0 = loadavg()[0];
  // The runtime's defaults (as `run` without flags): the sparsity mode the store gets (predictor
  // when it has predictors), the hot share from the store's profile, the reader's queue depth,
  // pipelined, all cores. Nothing else set here: applyPlan lets options given explicitly win over
  // the plan's knobs.
  let opts: LoadModelOptions = {
    modelPath: job.model,
    memoryBudget: job.budget,
    contextSize: job.contextSize,
    batchSize: 256,
  };
  if (job.plan) opts = applyPlan({ ...opts, contextSize: undefined }, job.plan);
  const model = await loadModel(opts);
  // the cache the runtime made, for comparison with the plan's prediction of it
  const layout = model.offloadLayout!;
  try {
    const gen = model.generate(job.prompt, { maxTokens: job.n, temperature: 0, ignoreEos: true });
    let after: ReturnType<typeof model.offloadStats> | undefined;
    for await (const _ of gen) {
      // the first piece comes right after the prompt's prefill, before the first decode step
      after ??= model.offloadStats();
    }
    const d = statsSince(after!, model.offloadStats()!);
    const s = gen.stats!;
    const steps = Math.max(1, s.generatedTokens - 1);
    return {
      decodeTokensPerSecond: s.decodeTokensPerSecond,
      decodeTokens: s.generatedTokens,
      promptTokens: s.promptTokens,
      hitRate: offloadFigures(d).hitRate,
      readBytesPerToken: d.bytesRead / steps,
      ioWaitShare: d.ioWaitMs / Math.max(1, s.decodeMs),
      loadAverage: [la0, loadavg()[0]],
      cacheBytes: layout.cacheBytes,
      hotPerLayer: layout.hotPerLayer,
    };
  } finally {
    await model.dispose();
  }
}

function spawnChild(job: ChildJob): ChildResult {
  const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url), "--child", JSON.stringify(job)], {
    encoding: "utf8",
    maxBuffer: 16 << 20,
    env: { ...process.env, UV_THREADPOOL_SIZE: process.env.UV_THREADPOOL_SIZE ?? "64" },
  });
  const line = (r.stdout ?? "").trim().split("\n").pop() ?? "";
  if (r.status !== 0 || !line.startsWith("{")) throw new Error(`run failed (exit ${r.status}):\n${r.stderr}`);
  return JSON.parse(line) as ChildResult;
}

async function main(): Promise<void> {
  const model = arg("-m");
  if (!model) throw new Error("give the store with -m STORE.pi");
  const budgets = (arg("--budgets") ?? "").split(",").filter(Boolean).map(parseSize);
  if (budgets.length === 0) throw new Error("give budgets with --budgets 3GiB,3.5GiB");
  const n = Number(arg("-n", "16"));
  const reps = Number(arg("--reps", "1"));
  const prompt = arg("--prompt", PROMPT)!;
  const ctx = Number(arg("-c", "256"));
  const skipDefaults = process.argv.includes("--skip-defaults");
  // The machine's load changes by the minute: measure it again right before each run.
  const reprobe = !process.argv.includes("--cached-probe");
  const store = NeuronStore.open(model);
  const promptTokens = Tokenizer.fromGGUF(store).encode(prompt, { addBos: true, parseSpecial: false }).length;
  store.close();
  const dir = mkdtempSync(join(tmpdir(), "powerinfer-plan-bench-"));
  const rows: Record<string, unknown>[] = [];
  try {
    for (const budget of budgets) {
      // Per repetition: plan (re-probing), then the plan's run and the defaults' run. Each run is
      // compared with the prediction made just before it: the load drifts over minutes.
      const runs: { plan: ChildResult[]; defaults: ChildResult[] } = { plan: [], defaults: [] };
      const plans: PlanFile[] = [];
      for (let r = 0; r < reps; r++) {
        const planPath = join(dir, `plan-${budget}-${r}.json`);
        // n tokens generated = n - 1 decode forward passes, after the prompt's prefill
        const p = spawnSync(
          process.execPath,
          [
            BIN,
            "plan",
            "-m",
            model,
            "--memory-budget",
            String(budget),
            "-c",
            String(ctx),
            "-o",
            planPath,
            "--prompt-tokens",
            String(promptTokens),
            "--decode-tokens",
            String(Math.max(1, n - 1)),
            ...(reprobe ? ["--reprobe"] : []),
          ],
          { encoding: "utf8" },
        );
        if (p.status !== 0) throw new Error(`plan failed:\n${p.stderr}`);
        if (r === 0) process.stderr.write(p.stdout);
        plans.push(readPlan(planPath));
        runs.plan.push(spawnChild({ model, budget, plan: planPath, contextSize: ctx, prompt, n }));
        if (!skipDefaults) runs.defaults.push(spawnChild({ model, budget, plan: null, contextSize: ctx, prompt, n }));
        const last = runs.plan[runs.plan.length - 1];
        process.stderr.write(
          `  ${sizeText(budget)} #${r + 1}: predicted ${plans[r].prediction.tokensPerSecond.toFixed(2)}, measured ${last.decodeTokensPerSecond.toFixed(2)} tok/s` +
            (skipDefaults
              ? ""
              : `; defaults predicted ${plans[r].defaults.tokensPerSecond.toFixed(2)}, measured ${runs.defaults[runs.defaults.length - 1].decodeTokensPerSecond.toFixed(2)}`) +
            (plans[r].calibration
              ? `; calibrated compute x${plans[r].calibration!.computeFactor.toFixed(2)}, reads x${plans[r].calibration!.ioFactor.toFixed(2)}`
              : "") +
            ` (load ${last.loadAverage.map((x) => x.toFixed(1)).join("-")})\n`,
        );
      }
      const plan = plans[0];
      const mPlan = median(runs.plan.map((x) => x.decodeTokensPerSecond));
      const mDef = skipDefaults ? NaN : median(runs.defaults.map((x) => x.decodeTokensPerSecond));
      const row = {
        budget: sizeText(budget),
        knobs: plan.knobs,
        predicted: median(plans.map((p) => p.prediction.tokensPerSecond)),
        measured: mPlan,
        error: median(plans.map((p) => p.prediction.tokensPerSecond)) / mPlan - 1,
        /** every run against the prediction made just before it */
        errors: runs.plan.map((x, i) => plans[i].prediction.tokensPerSecond / x.decodeTokensPerSecond - 1),
        knobsPerRep: plans.map((p) => p.knobs),
        predictedHitRate: plan.prediction.hitRate,
        measuredHitRate: median(runs.plan.map((x) => x.hitRate)),
        predictedCacheBytes: plan.derived.cacheBytes,
        measuredCacheBytes: runs.plan[0].cacheBytes,
        predictedReadPerToken: plan.prediction.readBytesPerToken,
        measuredReadPerToken: median(runs.plan.map((x) => x.readBytesPerToken)),
        defaultsPredicted: median(plans.map((p) => p.defaults.tokensPerSecond)),
        defaultsMeasured: mDef,
        defaultsHitRate: skipDefaults ? NaN : median(runs.defaults.map((x) => x.hitRate)),
        loadAverage: [...runs.plan, ...runs.defaults].flatMap((x) => x.loadAverage),
        runs,
        breakdown: plan.prediction.breakdown,
      };
      rows.push(row);
      process.stderr.write(
        `${row.budget}: predicted ${row.predicted.toFixed(2)}, measured ${mPlan.toFixed(2)} tok/s (${(100 * row.error).toFixed(0)}%); defaults ${mDef.toFixed(2)}\n`,
      );
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
  const f = (x: number, d = 2) => (Number.isFinite(x) ? x.toFixed(d) : "-");
  const pc = (x: number) => (Number.isFinite(x) ? `${(100 * x).toFixed(0)}%` : "-");
  console.log(`plan vs run: ${model}, prompt ${promptTokens} tokens, ${n} generated, ${reps} run(s) each, medians`);
  console.log(
    "| budget | plan knobs | predicted tok/s | measured tok/s | error (each run) | cache MiB pred / made | hit rate pred / meas | MB read per token pred / meas | defaults pred / meas tok/s | plan / defaults measured | load avg |",
  );
  console.log("|---|---|---|---|---|---|---|---|---|---|---|");
  for (const r of rows as any[]) {
    const k = r.knobs;
    const la = r.loadAverage as number[];
    console.log(
      `| ${r.budget} | ${knobsText(k)} | ${f(r.predicted)} | ${f(r.measured)} | ${pc(r.error)} (${(r.errors as number[]).map(pc).join(", ")}) | ` +
        `${f(r.predictedCacheBytes / 2 ** 20, 0)} / ${f(r.measuredCacheBytes / 2 ** 20, 0)} | ` +
        `${pc(r.predictedHitRate)} / ${pc(r.measuredHitRate)} | ${f(r.predictedReadPerToken / 1e6, 1)} / ${f(r.measuredReadPerToken / 1e6, 1)} | ${f(r.defaultsPredicted)} / ${f(r.defaultsMeasured)} | ` +
        `${f(r.measured / r.defaultsMeasured)}x | ${f(Math.min(...la), 1)}-${f(Math.max(...la), 1)} |`,
    );
  }
  const out = arg("--out");
  if (out)
    writeFileSync(
      out,
      JSON.stringify({ model, promptTokens, n, reps, at: new Date().toISOString(), rows }, null, 1) + "\n",
    );
}

if (process.argv[2] === "--child") {
  child(JSON.parse(process.argv[3]) as ChildJob).then(
    (r) => console.log(JSON.stringify(r)),
    (e) => {
      console.error(e instanceof Error ? e.stack : e);
      process.exitCode = 1;
    },
  );
} else if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((e) => {
    console.error(`bench plan: ${e instanceof Error ? e.message : e}`);
    process.exitCode = 1;
  });
}
