/**
 * Plan files: what `powerinfer plan` writes (JSON, next to the model by default) and `run` reads
 * back, and the structural check of one read. Whether a plan applies to a run: apply-plan.ts.
 */
import { readFileSync, renameSync, writeFileSync } from "node:fs";
import type { OffloadLayout } from "../model/offload/layout.js";
import type { Calibration, CalibrationRun } from "./calibrate.js";
import type { PlannedKnobs, ReadAheadRates, Workload } from "./knobs.js";
import type { MachineFingerprint } from "./machine.js";
import type { ModelFingerprint } from "./model-fingerprint.js";
import type { Prediction } from "./prediction.js";
import { errorText } from "../format/printable.js";

export const PLAN_FORMAT = "powerinfer-ts plan";
export const PLAN_VERSION = 2;

export interface PlanFile {
  format: typeof PLAN_FORMAT;
  version: number;
  created: string;
  machine: MachineFingerprint;
  model: ModelFingerprint;
  /** --memory-budget in bytes */
  budget: number;
  contextSize: number;
  batchSize: number;
  workload: Workload;
  /** the chosen knobs, as load options take them */
  knobs: PlannedKnobs;
  /** what the knobs imply, for the reader: cache split, read and cluster sizes */
  derived: {
    cacheBytes: number;
    hotPerLayer: number;
    coldSlots: number;
    /** bytes of one neuron bundle read on a miss (fixed by the store) */
    readBytes: number;
    /** bytes of one gate-page read (only without resident gate rows) */
    gateReadBytes: number;
    /** the hot set: one contiguous cluster of this many neurons per layer; cold neurons are single-bundle clusters */
    hotClusterNeurons: number;
    minBudget: number;
  };
  prediction: PlanPrediction;
  /** the same model and budget with the runtime's defaults, predicted the same way */
  defaults: PlanPrediction;
  firing: { source: string; meanFiring: number };
  probe: { file: string | null; loadAverage: number | null; seconds: number };
  /** the layout the chosen knobs make (layout.ts), with the runtime's base as measured for the plan */
  layout: OffloadLayout;
  /** predictor mode: the read-ahead the prediction assumed (measured by the calibration run, when there was one) */
  readAhead?: ReadAheadRates;
  /** the real run that scaled every prediction (absent: the probe's figures alone) */
  calibration?: CalibrationRun & Omit<Calibration, "run">;
}

export interface PlanPrediction {
  knobs: PlannedKnobs;
  tokensPerSecond: number;
  secondsPerToken: number;
  breakdown: Prediction["breakdown"];
  hitRate: number;
  firingPerToken: number;
  missesPerToken: number;
  readBytesPerToken: number;
  cacheBytes: number;
}

/** Where `powerinfer plan` writes by default, and where `run` looks for a plan: next to the model. */
export function defaultPlanPath(modelPath: string): string {
  return `${modelPath}.plan.json`;
}

export function writePlan(path: string, plan: PlanFile): void {
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(plan, null, 2) + "\n");
  renameSync(tmp, path);
}

export class PlanError extends Error {
  override name = "PlanError";
}

/** Read and check a plan file's structure (not whether it fits this machine: see checkPlan). */
export function readPlan(path: string): PlanFile {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch (e) {
    throw new PlanError(`cannot read plan ${path}: ${errorText(e)}`);
  }
  let p: PlanFile;
  try {
    p = JSON.parse(text) as PlanFile;
  } catch (e) {
    throw new PlanError(`${path} is not a plan file: ${errorText(e)}`);
  }
  if (!p || p.format !== PLAN_FORMAT)
    throw new PlanError(
      `${path} is not a plan file (format ${JSON.stringify(p?.format)}, expected ${JSON.stringify(PLAN_FORMAT)})`,
    );
  if (p.version !== PLAN_VERSION)
    throw new PlanError(
      `${path}: plan version ${p.version} is not supported (this engine reads version ${PLAN_VERSION}): make a new plan with powerinfer plan`,
    );
  const k = p.knobs;
  const ok =
    k &&
    Number.isInteger(k.threads) &&
    k.threads >= 1 &&
    Number.isInteger(k.queueDepth) &&
    k.queueDepth >= 1 &&
    typeof k.hotFraction === "number" &&
    k.hotFraction >= 0 &&
    k.hotFraction <= 1 &&
    typeof k.residentGates === "boolean" &&
    typeof k.pipeline === "boolean" &&
    (k.sparsity === "gate" || k.sparsity === "predictor" || k.sparsity === "dense") &&
    typeof p.budget === "number" &&
    p.budget > 0 &&
    Number.isInteger(p.contextSize) &&
    p.machine &&
    p.model;
  if (!ok)
    throw new PlanError(
      `${path}: the plan's knobs, budget or fingerprints are missing or out of range: make a new plan with powerinfer plan`,
    );
  return p;
}
