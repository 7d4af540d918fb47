/**
 * `powerinfer plan -m MODEL.pi --memory-budget SIZE [-o PLAN] [--reprobe] [-t N]`: probe this
 * machine (cached), predict decode speed for the store under the budget with every combination of
 * the runtime's knobs, write the best as a plan file (default MODEL.pi.plan.json, where `run`
 * looks for one), and print the prediction and where the time goes.
 */
import { offloadFigures, statsSince } from "../model/offload/stats.js";
import { loadavg } from "node:os";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { makePlan } from "../planner/plan-search.js";
import { defaultPlanPath, writePlan, type PlanPrediction } from "../planner/plan-file.js";
import { knobsText, sizeText } from "../planner/plan-text.js";
import { defaultCacheDir, probeCachePath } from "../planner/probe-cache.js";
import { runCalibration, type CalibrationJob, type CalibrationRun } from "../planner/calibrate.js";
import type { BaseJob, RuntimeBase } from "../planner/runtime-base.js";
import { LlamaModel } from "../model/model.js";
import { BudgetError } from "../model/offload/layout.js";
import { LOAD_FLAGS } from "./model-flags.js";
import { RANGE } from "./flag-ranges.js";

export const FLAGS: FlagSpec[] = [
  { names: ["-m", "--model"], key: "model", type: "string", help: "the neuron store (.pi) to plan for" },
  {
    names: ["--memory-budget"],
    key: "budget",
    type: "size",
    help: "everything resident fits in this (e.g. 3.75GiB), as for run",
    range: RANGE.bytes,
  },
  {
    names: ["-o", "--output"],
    key: "output",
    type: "string",
    help: "plan file to write (default: MODEL.plan.json next to the model, where run finds it)",
  },
  {
    names: ["-t", "--threads"],
    key: "threads",
    type: "int",
    help: "use this many threads (default: the fastest predicted, 1..cores)",
    range: RANGE.threads,
  },
  {
    names: ["-c", "--ctx-size"],
    key: "ctx",
    type: "int",
    help: "context size of the runs (its KV cache is part of the budget)",
    default: 256,
    range: RANGE.context,
  },
  {
    names: ["-b", "--batch-size"],
    key: "batch",
    type: "int",
    help: "prompt tokens per forward pass, as for run",
    default: 256,
    range: RANGE.batch,
  },
  {
    names: ["--prompt-tokens"],
    key: "prompt",
    type: "int",
    help: "prompt length the prediction assumes (its prefill warms the cache)",
    default: 32,
    range: RANGE.positive,
  },
  {
    names: ["--decode-tokens"],
    key: "decode",
    type: "int",
    help: "generated tokens the predicted tok/s averages over",
    default: 128,
    range: RANGE.positive,
  },
  {
    names: ["--sparsity"],
    key: "sparsity",
    type: "string",
    help: "the sparsity mode to plan: gate, predictor or dense (default: the one run uses: predictor when the store has predictors, else gate where gates skip neurons, else dense)",
  },
  {
    names: ["--firing"],
    key: "firing",
    type: "float",
    help: "assume every neuron fires with this probability (default: the store's profile, else planted rates of a synthetic model, else 0.1)",
    range: RANGE.share,
  },
  {
    names: ["--reprobe"],
    key: "reprobe",
    type: "bool",
    help: "measure the machine again instead of using the cached probe",
  },
  {
    names: ["--probe-scale"],
    key: "scale",
    type: "float",
    help: "multiply the probe's measuring time (1 = a few seconds)",
    default: 1,
    range: RANGE.timeScale,
  },
  {
    names: ["--no-calibrate"],
    key: "noCalibrate",
    type: "bool",
    help: "skip the calibration run (a short decode of the store with the default knobs that scales every prediction to this machine under load)",
  },
  {
    names: ["--calibration-tokens"],
    key: "calTokens",
    type: "int",
    help: "decode steps the calibration run measures",
    default: 8,
    range: RANGE.positive,
  },
  {
    names: ["--json"],
    key: "json",
    type: "bool",
    help: "print the plan as JSON on stdout (it is written to the file as well)",
  },
  { names: ["-q", "--quiet"], key: "quiet", type: "bool", help: "no progress messages" },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const ms = (s: number) => (s * 1000).toFixed(s < 0.01 ? 2 : 1);
const mb = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
const pct = (x: number) => `${(100 * x).toFixed(1)}%`;

/** The mean of xs leaving out the step that was slowest by `by` (all of them for fewer than 3). */
function meanBut(xs: number[], by: number[]): number {
  if (xs.length < 3) return xs.reduce((a, v) => a + v, 0) / xs.length;
  const slowest = by.indexOf(Math.max(...by));
  return xs.reduce((a, v, i) => (i === slowest ? a : a + v), 0) / (xs.length - 1);
}

/** The calibration run's child (src/planner/calibrate.ts runCalibration): decode under the budget, report per step. */
async function calibrationChild(job: CalibrationJob): Promise<number> {
  const k = job.knobs;
  const model = await LlamaModel.load(job.store, {
    threads: k.threads,
    contextSize: job.contextSize,
    batchSize: job.batchSize,
    memoryBudget: job.budget,
    // the knobs as applyPlan would set them
    offload: {
      sparsity: k.sparsity,
      hotFraction: k.hotFraction,
      queueDepth: k.queueDepth,
      pipeline: k.pipeline,
      residentGates: k.residentGates ? undefined : false,
    },
  });
  try {
    const { nVocab } = model.config;
    // a fixed prompt of ordinary token ids (what they say does not matter to the timing)
    const prompt = [
      1,
      ...Array.from({ length: Math.max(1, job.promptTokens) - 1 }, (_, i) => 3 + ((i * 7919 + 13) % (nVocab - 3))),
    ];
    const argmax = (l: Float32Array) => {
      let b = 0;
      for (let v = 1; v < l.length; v++) if (l[v] > l[b]) b = v;
      return b;
    };
    let pos = 0;
    let logits = await model.forwardAsync(prompt, prompt.length, pos);
    pos += prompt.length;
    // the first generated token warms what the prompt did not touch; then the measured steps
    logits = await model.forwardAsync([argmax(logits)], 1, pos++);
    const off = model.offloaded!;
    const seconds: number[] = [],
      waits: number[] = [];
    const before = off.snapshot();
    for (let i = 0; i < job.decodeTokens; i++) {
      const wait0 = off.ioWaitMs;
      const t0 = performance.now();
      logits = await model.forwardAsync([argmax(logits)], 1, pos++);
      seconds.push((performance.now() - t0) / 1000);
      waits.push((off.ioWaitMs - wait0) / 1000);
    }
    // predictor mode: how much of a layer's misses the read-ahead covered, and how much of what it read was used
    const d = statsSince(before, off.snapshot());
    const missed = d.misses;
    const read = d.readAhead;
    const used = d.readAheadUsed;
    const readAhead =
      k.sparsity === "predictor" && missed > 0 && read > 0 ? { coverage: used / missed, used: used / read } : undefined;
    // neurons asked for per token (hits of either region, and misses, those read ahead included)
    const picks = offloadFigures(d).lookups;
    // Means without the slowest step: another process's burst slows a step by half a second or
    // more on this shared machine, and a plan is for the machine as it usually is; but a decode's
    // speed is its mean step, and the median of steps whose reads vary undercounts it (plans
    // predicted from medians ran 10-20% slower than predicted).
    const run: CalibrationRun = {
      readAhead,
      picksPerToken: picks / job.decodeTokens,
      knobs: k,
      promptTokens: prompt.length,
      steps: job.decodeTokens,
      secondsPerToken: meanBut(seconds, seconds),
      ioWaitPerToken: meanBut(waits, seconds),
      loadAverage: loadavg()[0],
    };
    await new Promise<void>((res, rej) => process.send!(run, undefined, {}, (e) => (e ? rej(e) : res())));
  } finally {
    await model.dispose();
  }
  return 0;
}

/**
 * The runtime-base child (src/planner/runtime-base.ts): the library loaded as `run` loads it, the
 * store's layout made as load makes it (the pool created, nothing loaded); reports its base.
 */
async function baseChild(job: BaseJob): Promise<number> {
  await import("../index.js");
  const opts = {
    threads: job.threads,
    contextSize: job.contextSize,
    batchSize: job.batchSize,
    offload: { sparsity: job.sparsity },
  };
  // under the budget, as `run` makes its memories; a budget the defaults do not fit (the plan may
  // still find knobs that do) is measured as one memory's base
  const layout = await LlamaModel.layoutOf(job.store, { ...opts, memoryBudget: job.budget }).catch((e: unknown) => {
    if (e instanceof BudgetError) return LlamaModel.layoutOf(job.store, opts);
    throw e;
  });
  const base: RuntimeBase = { base: layout.fixedResident.base, memories: layout.shards?.length ?? 1 };
  await new Promise<void>((res, rej) => process.send!(base, undefined, {}, (e) => (e ? rej(e) : res())));
  return 0;
}

export async function main(argv: string[]): Promise<number> {
  if (argv[0] === "--calibrate-child") {
    if (!process.send) throw new UsageError("plan --calibrate-child is internal (run by powerinfer plan over IPC)");
    return calibrationChild(JSON.parse(argv[1]) as CalibrationJob);
  }
  if (argv[0] === "--base-child") {
    if (!process.send) throw new UsageError("plan --base-child is internal (run by powerinfer plan over IPC)");
    return baseChild(JSON.parse(argv[1]) as BaseJob);
  }
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "plan -m MODEL.pi --memory-budget SIZE [options]",
        "Probe this machine (kernel speed, memory bandwidth, direct-read rates of the store's device; cached in " +
          `${defaultCacheDir()}), predict decode speed for the store under the budget, and write the fastest knobs ` +
          "(threads, read queue depth, hot share of the neuron cache, resident gate rows, pipeline) for the sparsity mode run uses as a plan that run uses.",
        FLAGS,
      ),
    );
    return 0;
  }
  const model = (args.model as string | undefined) ?? args._[0];
  if (typeof model !== "string") throw new UsageError("plan: -m MODEL.pi is required (see powerinfer plan --help)");
  if (typeof args.budget !== "number")
    throw new UsageError("plan: --memory-budget SIZE is required (the plan is for one budget)");
  const positive = (key: string, flag: string) => {
    const v = args[key];
    if (v !== undefined && !((v as number) >= 1)) throw new UsageError(`plan: ${flag} must be at least 1, got ${v}`);
  };
  positive("threads", "-t");
  positive("ctx", "-c");
  positive("batch", "-b");
  positive("decode", "--decode-tokens");
  if (!((args.calTokens as number) >= 2))
    throw new UsageError(`plan: --calibration-tokens must be at least 2, got ${args.calTokens}`);
  if ((args.prompt as number) < 0) throw new UsageError(`plan: --prompt-tokens must be 0 or more`);
  const firing = args.firing as number | undefined;
  if (firing !== undefined && !(firing > 0 && firing <= 1))
    throw new UsageError(`plan: --firing must be in (0, 1], got ${firing}`);
  const sparsity = args.sparsity as string | undefined;
  if (sparsity !== undefined && sparsity !== "gate" && sparsity !== "predictor" && sparsity !== "dense")
    throw new UsageError(`plan: --sparsity must be gate, predictor or dense, got ${JSON.stringify(sparsity)}`);
  const scale = args.scale as number;
  if (!(scale > 0)) throw new UsageError(`plan: --probe-scale must be positive`);
  const out = (args.output as string | undefined) ?? defaultPlanPath(model);
  const say = args.quiet ? () => {} : (m: string) => process.stderr.write(`plan: ${m}\n`);

  const r = await makePlan({
    modelPath: model,
    budget: args.budget,
    threads: args.threads as number | undefined,
    contextSize: args.ctx as number,
    batchSize: args.batch as number,
    promptTokens: args.prompt as number,
    decodeTokens: args.decode as number,
    firing,
    sparsity,
    probe: { reprobe: Boolean(args.reprobe), scale },
    defaults: flagDefaults(),
    calibrate: args.noCalibrate ? undefined : runCalibration,
    calibrationTokens: args.calTokens as number,
    onProgress: say,
  });
  const plan = r.plan;
  plan.probe.file = probeCachePath(defaultCacheDir(), plan.machine);
  writePlan(out, plan);
  if (args.json) {
    console.log(JSON.stringify(plan, null, 2));
    return 0;
  }

  const m = plan.machine;
  const s = r.best.layout;
  const fr = s.fixedResident;
  const k = plan.knobs;
  const lines: string[] = [];
  lines.push(`plan for ${model} under --memory-budget ${sizeText(plan.budget)}, context ${plan.contextSize}`);
  lines.push(
    `machine: ${m.hostname}, ${m.cpuModel}, ${m.cores} cores, ${(m.totalMemory / 2 ** 30).toFixed(1)} GiB; store on ${m.device}; load average now ${loadavg()[0].toFixed(1)}`,
  );
  const notes = Object.entries(r.probe.notes).map(
    ([part, n]) => `${part} ${n.at.slice(0, 16)} (load ${n.loadAverage.toFixed(1)})`,
  );
  lines.push(`probe: ${plan.probe.file} [${notes.join("; ")}] (--reprobe measures again)`);
  const then = Object.values(r.probe.notes).map((n) => n.loadAverage);
  const now = loadavg()[0];
  if (then.length && Math.abs(now - then[0]) > Math.max(2, 0.5 * m.cores)) {
    lines.push(
      `note: the load average was ${then[0].toFixed(1)} when this machine was probed and is ${now.toFixed(1)} now; speeds change with it (--reprobe predicts for now)`,
    );
  }
  lines.push(`firing: ${r.firing.source}; mean ${pct(plan.firing.meanFiring)} of neurons per token`);
  const c = plan.calibration;
  lines.push(
    c
      ? `calibration: a ${c.steps}-token decode with these knobs measured ${(1 / c.secondsPerToken).toFixed(2)} tok/s (load ${c.loadAverage.toFixed(1)}), ` +
          `the probe's figures predicted ${(1 / c.predictedSecondsPerToken).toFixed(2)}: every prediction below has its compute scaled x${c.computeFactor.toFixed(2)} and its waiting for reads x${c.ioFactor.toFixed(2)}`
      : "calibration: none (--no-calibrate): the predictions are the probe's figures alone (on this machine they ran 10-30% optimistic)",
  );
  lines.push(
    `memory: runtime ${mb(fr.base)} (measured as run measures it) + weights ${mb(fr.weights)} + buffers ${mb(fr.buffers + s.ffnBuffers)} + KV cache ${mb(fr.kv)} + ` +
      `${s.gateBytes > 0 ? `${s.residentGates ? "gate rows" : "gate staging"} ${mb(s.gateBytes)} + ` : ""}runtime growth ${mb(s.runtimeGrowth)}; neuron cache ${mb(s.cacheBytes)} ` +
      `(${s.slots} bundles: ${s.hotPerLayer} hot per layer, ${s.coldSlots} cold); smallest budget that runs ${mb(s.minBudget)}`,
  );
  lines.push(
    `knobs: ${k.sparsity} sparsity, ${k.threads} thread(s), read queue depth ${k.queueDepth}, hot share ${+k.hotFraction.toFixed(3)}, ` +
      `${k.sparsity === "gate" ? `gate rows ${k.residentGates ? "resident" : "read from flash each token"}, ` : ""}pipeline ${k.pipeline ? "on" : "off"}` +
      `${k.sparsity === "dense" && k.pipeline ? " (read-ahead: exact, every bundle not in memory)" : ""}` +
      `${k.sparsity === "predictor" && k.pipeline && plan.readAhead ? ` (read-ahead: ${pct(plan.readAhead.coverage)} of misses read a layer early, ${pct(plan.readAhead.used)} of it used${plan.calibration ? ", as measured" : ", assumed"})` : ""}`,
  );
  lines.push(
    `reads: ${plan.derived.readBytes >> 10} KiB per missed neuron (one bundle; fixed by the store)${k.sparsity === "gate" && !k.residentGates ? `, ${plan.derived.gateReadBytes >> 10} KiB gate pages` : ""}; ` +
      (k.sparsity === "predictor"
        ? `clusters: hot neurons in runs of ${plan.derived.hotClusterNeurons}, computed whole when the predictor picks most of one; cold neurons one by one`
        : k.sparsity === "dense"
          ? `clusters: every neuron computed whole, hot ones in runs of ${plan.derived.hotClusterNeurons}; cold neurons one by one`
          : `clusters: one hot cluster of ${plan.derived.hotClusterNeurons} neurons per layer, cold neurons one by one`),
  );
  const d = plan.defaults;
  const gain = plan.prediction.tokensPerSecond / d.tokensPerSecond;
  const versus =
    d.tokensPerSecond > 0
      ? `${d.tokensPerSecond.toFixed(2)} tok/s${gain >= 1.005 ? `, the plan is ${gain.toFixed(2)}x` : ", the plan keeps them"}`
      : "do not fit this budget (run without the plan refuses it)";
  lines.push(
    `predicted decode: ${plan.prediction.tokensPerSecond.toFixed(2)} tok/s (averaged over ${plan.workload.decodeTokens} tokens after a ${plan.workload.promptTokens}-token prompt); ` +
      `the defaults (${knobsText(d.knobs)}): ${versus}`,
  );
  lines.push(`where a decode token's time goes (ms):`);
  lines.push(breakdown(plan.prediction));
  lines.push(
    `cache: ${pct(plan.prediction.hitRate)} of firing neurons hit; ${Math.round(plan.prediction.firingPerToken)} fire per token, ${Math.round(plan.prediction.missesPerToken)} missed, ` +
      `${(plan.prediction.readBytesPerToken / 1e6).toFixed(1)} MB read per token`,
  );
  lines.push(
    `wrote ${out}; run picks it up with --plan ${out}${out === defaultPlanPath(model) ? ` (or by itself when run with --memory-budget ${sizeText(plan.budget)})` : ""}`,
  );
  console.log(lines.join("\n"));
  return 0;
}

/** The knobs `run` uses when no flag sets them: the plan is compared with these. */
function flagDefaults(): { hotFraction?: number; queueDepth?: number } {
  const def = (key: string) => LOAD_FLAGS.find((f) => f.key === key)?.default;
  const hot = def("hotFraction"),
    qd = def("queueDepth");
  return {
    ...(typeof hot === "number" ? { hotFraction: hot } : {}),
    ...(typeof qd === "number" ? { queueDepth: qd } : {}),
  };
}

function breakdown(p: PlanPrediction): string {
  const b = p.breakdown;
  const rows: [string, number][] = [
    ["attention (matvecs, KV cache)", b.attention],
    [
      p.knobs.sparsity === "predictor"
        ? "predictor (this layer's and the read-ahead's)"
        : p.knobs.sparsity === "dense"
          ? "router (dense mode picks every neuron)"
          : "gate (resident rows' matvec, or from bundles)",
      b.gate,
    ],
    ["waiting for gate pages", b.gateReads],
    ["JS: filing neurons, submitting reads", b.scan],
    [p.knobs.sparsity === "gate" ? "up/down of firing neurons" : "gate/up/down of picked neurons", b.ffnCompute],
    ["waiting for missed bundles' reads", b.ioWait],
    ["output matvec", b.output],
  ];
  return rows
    .filter(([, v]) => v > 0)
    .map(([name, v]) => `  ${name.padEnd(46)} ${ms(v).padStart(8)}  ${pct(v / p.secondsPerToken).padStart(6)}`)
    .concat([`  ${"total".padEnd(46)} ${ms(p.secondsPerToken).padStart(8)}`])
    .join("\n");
}
