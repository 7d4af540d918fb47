/**
 * Calibrating the cost model with one real run: the probe measures kernels and reads for seconds
 * each, and a minute-long decode on the same machine runs slower than those parts add up to
 * (docs/planner.md: 11-32% on the 7B, always in that direction). So the planner runs the store
 * once, in a fresh process, under the budget with the runtime's default knobs, and measures the
 * decode steps alone: seconds per token and how much of it waited for reads (medians over the
 * steps, so that another process's burst during a few of them does not set the factors). Two
 * factors follow, for the compute and for the waiting, against what the model predicts for the
 * same steps; every candidate's prediction is scaled by them before the search picks one. A
 * plan's prediction is then this machine's measured speed for the defaults times the model's
 * predicted gain.
 */
import { runPlanChild } from "./child-run.js";
import type { PlannedKnobs, ReadAheadRates } from "./knobs.js";
import { breakdownSeconds, type Breakdown, type Prediction } from "./prediction.js";

/** What one calibration run measured, per decode step (prefill and the first token excluded; medians over the steps). */
export interface CalibrationRun {
  knobs: PlannedKnobs;
  promptTokens: number;
  /** decode steps measured */
  steps: number;
  secondsPerToken: number;
  ioWaitPerToken: number;
  loadAverage: number;
  /** predictor mode: the read-ahead measured over the steps */
  readAhead?: ReadAheadRates;
  /** neurons picked (predictor) or firing (gate) per decode token, summed over the layers */
  picksPerToken?: number;
}

export interface Calibration {
  run: CalibrationRun;
  /** the model's figures for the same knobs and steps */
  predictedSecondsPerToken: number;
  predictedIoWaitPerToken: number;
  /** measured / predicted: compute (everything but waiting for reads), and waiting for reads */
  computeFactor: number;
  ioFactor: number;
}

/** Factors are kept within this range: a run disturbed beyond it says more about the run than the model. */
const FACTOR_MIN = 0.1,
  FACTOR_MAX = 10;
const clamp = (x: number) => Math.min(FACTOR_MAX, Math.max(FACTOR_MIN, Number.isFinite(x) ? x : 1));

/** The parts of a decode token that wait for flash; the rest is compute (and JS). */
const IO_PARTS: (keyof Breakdown)[] = ["ioWait", "gateReads"];
const ioOf = (b: Breakdown) => IO_PARTS.reduce((a, k) => a + b[k], 0);

export function calibration(run: CalibrationRun, predicted: Prediction): Calibration {
  const pio = ioOf(predicted.breakdown);
  const pcompute = predicted.secondsPerToken - pio;
  const mcompute = Math.max(0, run.secondsPerToken - run.ioWaitPerToken);
  return {
    run,
    predictedSecondsPerToken: predicted.secondsPerToken,
    predictedIoWaitPerToken: pio,
    computeFactor: clamp(pcompute > 0 ? mcompute / pcompute : 1),
    // nothing predicted to wait for: nothing to scale
    ioFactor: pio > 1e-6 ? clamp(run.ioWaitPerToken / pio) : 1,
  };
}

/** A prediction with its compute and its waiting for reads scaled by the calibration's factors. */
export function calibrated(p: Prediction, c: Calibration): Prediction {
  if (!Number.isFinite(p.secondsPerToken)) return p;
  const breakdown = { ...p.breakdown };
  for (const k of Object.keys(breakdown) as (keyof Breakdown)[])
    breakdown[k] *= IO_PARTS.includes(k) ? c.ioFactor : c.computeFactor;
  const secondsPerToken = breakdownSeconds(breakdown);
  return { ...p, breakdown, secondsPerToken, tokensPerSecond: 1 / secondsPerToken };
}

/** The job a calibration child runs. */
export interface CalibrationJob {
  store: string;
  budget: number;
  knobs: PlannedKnobs;
  contextSize: number;
  batchSize: number;
  promptTokens: number;
  decodeTokens: number;
}

/**
 * Run `job` in a fresh process (the budget is measured against a process's resident memory, and
 * the planner's own has held probe buffers): `powerinfer plan --calibrate-child JOB`.
 */
export function runCalibration(job: CalibrationJob): Promise<CalibrationRun> {
  return runPlanChild("--calibrate-child", job, (m) => m as CalibrationRun, "the calibration run");
}
