/**
 * Whether a plan applies to a run (the same machine, store, budget, context and sparsity mode),
 * and load options with a plan applied.
 */
import { existsSync } from "node:fs";
import type { LoadModelOptions } from "../api/model.js";
import { machineDifference, machineFingerprint } from "./machine.js";
import { isNeuronStore } from "../format/store/index.js";
import { modelDifference, modelFingerprint } from "./model-fingerprint.js";
import { defaultPlanPath, PlanError, readPlan, type PlanFile } from "./plan-file.js";
import { sizeText } from "./plan-text.js";

/**
 * Why `plan` does not apply to a run of `modelPath` with this budget and context on this
 * machine (one sentence with the command that re-plans), or null when it does.
 */
export function checkPlan(
  plan: PlanFile,
  modelPath: string,
  budget: number | undefined,
  contextSize: number | undefined,
  planPath = "the plan",
  sparsity?: string,
): string | null {
  const replan = (b: number) => `re-plan with: powerinfer plan -m ${modelPath} --memory-budget ${sizeText(b)}`;
  const machine = machineDifference(plan.machine, machineFingerprint(modelPath));
  if (machine) return `${planPath} was made on another machine (${machine}); ${replan(budget ?? plan.budget)}`;
  const model = modelDifference(plan.model, modelFingerprint(modelPath));
  if (model) return `${planPath} does not match ${modelPath}: ${model}; ${replan(budget ?? plan.budget)}`;
  if (budget !== undefined && budget !== plan.budget)
    return `${planPath} was made for --memory-budget ${sizeText(plan.budget)}, this run has ${sizeText(budget)}; ${replan(budget)}`;
  if (contextSize !== undefined && contextSize !== plan.contextSize) {
    return `${planPath} was made for a context of ${plan.contextSize} tokens (its KV cache is part of the budget), this run asks for ${contextSize}; ${replan(budget ?? plan.budget)} -c ${contextSize}`;
  }
  if (sparsity !== undefined && sparsity !== plan.knobs.sparsity)
    return `${planPath} was made for --sparsity ${plan.knobs.sparsity}, this run asks for ${sparsity}; ${replan(budget ?? plan.budget)} --sparsity ${sparsity}`;
  return null;
}

/**
 * Load options with a plan applied. `planPath`: a plan file (an error when it does not apply to
 * this model, machine, budget or context), "none" (no plan), or undefined: use
 * MODEL.plan.json next to the model when it exists and applies, else say why not through
 * onNote and run without it.
 *
 * Applied: the sparsity mode (a plan for another mode than the options ask for does not apply);
 * hotFraction, queueDepth, pipeline and (when false) residentGates replace the options' values; threads only when the options have none; contextSize and memoryBudget are the plan's
 * (a plan without --memory-budget adopts the plan's budget). Resident gate rows are left to the
 * runtime's own check when the plan wants them (it keeps them whenever they fit).
 */
export function applyPlan(
  opts: LoadModelOptions,
  planPath?: string,
  onNote?: (message: string) => void,
): LoadModelOptions {
  if (planPath === "none") return opts;
  const explicit = planPath !== undefined;
  const path = planPath ?? defaultPlanPath(opts.modelPath);
  if (!explicit && (!existsSync(path) || !isNeuronStore(opts.modelPath))) return opts;
  let plan: PlanFile;
  try {
    plan = readPlan(path);
  } catch (e) {
    if (explicit) throw e;
    onNote?.(`${(e as Error).message}; running without it`);
    return opts;
  }
  if (explicit && !isNeuronStore(opts.modelPath))
    throw new PlanError(`${path}: a plan applies to a neuron store (.pi), and ${opts.modelPath} is not one`);
  const ctx = opts.contextSize === "auto" ? undefined : opts.contextSize;
  // A plan found next to the model applies only when the run asked for its budget.
  if (!explicit && opts.memoryBudget === undefined) return opts;
  const why = checkPlan(plan, opts.modelPath, opts.memoryBudget, ctx, path, opts.offload?.sparsity);
  if (why) {
    if (explicit) throw new PlanError(why);
    onNote?.(`not using ${why}`);
    return opts;
  }
  const k = plan.knobs;
  onNote?.(
    `using plan ${path}: ${k.sparsity} sparsity, ${k.threads} thread(s)${opts.threads !== undefined && opts.threads !== k.threads ? ` (but -t ${opts.threads} given)` : ""}, queue depth ${k.queueDepth}, ` +
      `hot share ${+k.hotFraction.toFixed(3)}${k.sparsity === "gate" ? `, gate rows ${k.residentGates ? "resident" : "read from flash"}` : ""}${k.pipeline ? "" : ", no pipeline"}; predicted ${plan.prediction.tokensPerSecond.toFixed(2)} tok/s decode`,
  );
  return {
    ...opts,
    threads: opts.threads ?? k.threads,
    contextSize: plan.contextSize,
    memoryBudget: opts.memoryBudget ?? plan.budget,
    // what the caller set explicitly wins over the plan
    offload: {
      ...opts.offload,
      sparsity: k.sparsity,
      hotFraction: opts.offload?.hotFraction ?? k.hotFraction,
      queueDepth: opts.offload?.queueDepth ?? k.queueDepth,
      pipeline: opts.offload?.pipeline ?? k.pipeline,
      residentGates: opts.offload?.residentGates ?? (k.residentGates ? undefined : false),
    },
  };
}
