/**
 * The plan search: probe the machine (probe.ts), read the store's shapes (store-shape.ts) and
 * firing rates (firing-rates.ts), search the runtime's knobs with the cost model (cost-model.ts),
 * calibrated by real runs (calibrate.ts) when asked, and make the best a plan (plan-file.ts) that
 * `run` turns into load options (apply-plan.ts).
 *
 * Knobs searched: threads, read queue depth, the hot share of the neuron cache (the hot set: the
 * first stored neurons of each layer, hot-first when the store was converted with a profile),
 * resident gate rows or gate pages read per token, and the I/O-compute pipeline. The cache size is
 * what the budget leaves (more cache never costs decode time); read size and cluster shape are
 * fixed by the store (one bundle per neuron, one hot cluster per layer) and reported, not chosen.
 *
 * A plan is valid for one machine (machine.ts fingerprint), one store (model-fingerprint.ts: size
 * and manifest checksum), one budget and one context size; applyPlan refuses (or, for a plan
 * found next to the model, ignores with a note) any other.
 */
import { NeuronStore } from "../format/store/index.js";
import { readerDepthLimit } from "../io/flash-reader.js";
import { hitProfile, type Firing, type HitProfile } from "../io/hit-model.js";
import { DEFAULT_HOT_FRACTION } from "../io/neuron-cache.js";
import { readConfig } from "../model/config.js";
import { HOT_CLUSTER } from "../model/offload/neuron-lists.js";
import { sparsityFor } from "../model/offload/predictor.js";
import { calibrated, calibration, type Calibration, type CalibrationJob, type CalibrationRun } from "./calibrate.js";
import { layoutFor, predict } from "./cost-model.js";
import type { SparsityMode } from "../model/offload/layout.js";
import { activationThresholds } from "../model/activation-thresholds.js";
import { firingOf, firingSum } from "./firing-rates.js";
import type { Hardware } from "./hardware.js";
import { hardwareFromProbe } from "./hardware-from-probe.js";
import {
  ASSUMED_READ_AHEAD,
  EXACT_READ_AHEAD,
  type Knobs,
  type PlannedKnobs,
  type ReadAheadRates,
  type Workload,
} from "./knobs.js";
import { machineFingerprint } from "./machine.js";
import { median } from "./median.js";
import { modelFingerprint } from "./model-fingerprint.js";
import { pickStable, sameKnobs, summary } from "./plan-choice.js";
import { PLAN_FORMAT, PLAN_VERSION, type PlanFile } from "./plan-file.js";
import { knobsText } from "./plan-text.js";
import type { Prediction } from "./prediction.js";
import {
  candidateQueueDepths,
  defaultQueueDepths,
  defaultThreadCounts,
  probeMachine,
  type ProbeOptions,
} from "./probe.js";
import type { ProbeResult } from "./probe-results.js";
import { measureRuntimeBase, type BaseJob, type RuntimeBase } from "./runtime-base.js";
import { hasModelledAttention, shapeOfStore } from "./store-shape.js";

/** What `run` does without a plan (src/cli/model-flags.ts LOAD_FLAGS' defaults, which cli/plan.ts passes in): the baseline a plan must beat. */
export function defaultKnobs(): Pick<Knobs, "hotFraction" | "queueDepth" | "pipeline"> {
  // OffloadOptions' own defaults: hot share 0.5 (with a profile in the store the runtime sets it
  // from the rates, defaultHotFraction: makePlan does the same), reads in flight as the reader
  // takes them (native AIO: the disk queue, 256; libuv: its pool), pipelined
  return { hotFraction: DEFAULT_HOT_FRACTION, queueDepth: readerDepthLimit(), pipeline: true };
}

// ---------------------------------------------------------------------------------------------
// Search

export interface PlanOptions {
  modelPath: string;
  /** bytes */
  budget: number;
  /** fix the thread count instead of searching it */
  threads?: number;
  /** KV positions (default 256, as `run` under a budget) */
  contextSize?: number;
  batchSize?: number;
  /** prompt and decode lengths the prediction assumes (default 32 and 128) */
  promptTokens?: number;
  decodeTokens?: number;
  /** override the firing rate of every neuron (no profile: e.g. run's "x% of neurons computed") */
  firing?: number;
  probe?: ProbeOptions;
  /** the runtime's defaults the plan is compared with (default defaultKnobs(); cli/plan.ts passes the CLI's flag defaults) */
  defaults?: Partial<Pick<Knobs, "hotFraction" | "queueDepth" | "pipeline">>;
  /** the sparsity mode to plan (default: the one `run` uses: sparsityFor) */
  sparsity?: SparsityMode;
  /**
   * resident bytes of the runtime before any weight loads, per thread count: a number, or how to
   * measure it (default measureRuntimeBase: a fresh process made as `run` makes it)
   */
  runtimeBase?: number | ((job: BaseJob) => Promise<RuntimeBase>);
  /**
   * Calibrate the model with a real run of the defaults (calibrate.ts): runCalibration, or a
   * stand-in (tests). Omitted: the probe's figures alone.
   */
  calibrate?: (job: CalibrationJob) => Promise<CalibrationRun>;
  /** decode steps the calibration run measures (default 8) */
  calibrationTokens?: number;
  onProgress?: (message: string) => void;
}

export interface PlanResult {
  plan: PlanFile;
  best: Prediction;
  defaults: Prediction;
  /** every candidate evaluated, best first */
  candidates: Prediction[];
  probe: ProbeResult;
  firing: Firing;
  calibration?: Calibration;
}

const HOT_FRACTIONS = Array.from({ length: 21 }, (_, i) => i / 20);

export async function makePlan(o: PlanOptions): Promise<PlanResult> {
  if (!(o.budget > 0)) throw new RangeError(`plan: the memory budget must be positive, got ${o.budget}`);
  const model = modelFingerprint(o.modelPath);
  const store = NeuronStore.open(o.modelPath);
  try {
    const cfg = readConfig(store);
    if (!hasModelledAttention(store)) {
      throw new Error(
        `${o.modelPath}: the planner models llama-style attention (blk.N.attn_q/k/v/output); this store lacks them`,
      );
    }
    // the mode `run` will use: predictors when the store has them
    const { sparsity, withPredictors } = sparsityFor(
      store,
      cfg,
      o.sparsity,
      activationThresholds(store, cfg.nLayer, undefined) !== null,
    );
    if (sparsity === "predictor" && !withPredictors) {
      throw new Error(`${o.modelPath}: predictor sparsity needs activation predictors, and this store has none`);
    }
    const contextSize = o.contextSize ?? 256;
    const batchSize = o.batchSize ?? 256;
    const workload: Workload = { contextSize, promptTokens: o.promptTokens ?? 32, decodeTokens: o.decodeTokens ?? 128 };
    if (workload.promptTokens + workload.decodeTokens > contextSize) {
      throw new RangeError(
        `plan: ${workload.promptTokens} prompt + ${workload.decodeTokens} decode tokens do not fit a context of ${contextSize}`,
      );
    }
    const shape = shapeOfStore(store, cfg, sparsity, batchSize, contextSize);
    const cores = machineFingerprint(o.modelPath).cores;
    const threadList = o.threads !== undefined ? [o.threads] : defaultThreadCounts(cores);
    const depthLimit = readerDepthLimit();
    const probe = await probeMachine(store, {
      ...o.probe,
      threads: threadList,
      queueDepths: o.probe?.queueDepths ?? defaultQueueDepths(depthLimit),
      onProgress: o.onProgress ?? o.probe?.onProgress,
    });
    const firing = firingOf(store, cfg, o.firing);
    const depths = candidateQueueDepths(depthLimit);
    // The runtime's base per thread count, as a `run` process measures it.
    const baseOf = new Map<number, RuntimeBase>();
    for (const threads of threadList) {
      baseOf.set(
        threads,
        typeof o.runtimeBase === "number"
          ? { base: o.runtimeBase, memories: 1 }
          : await (o.runtimeBase ?? measureRuntimeBase)({
              store: o.modelPath,
              threads,
              contextSize,
              batchSize,
              sparsity,
              budget: o.budget,
            }),
      );
    }
    const hardware = (threads: number) => hardwareFromProbe(probe, shape, threads, baseOf.get(threads)!);

    // Search. Hits depend only on the cache split and the rates, so they are computed once per split.
    let rates = firing;
    const hitMemo = new Map<string, HitProfile>();
    const readAheadAt = new Map<number, ReadAheadRates>();
    const evaluate = (hw: Hardware, knobs: Knobs): Prediction => {
      const layout = layoutFor(shape, hw, knobs, o.budget);
      const key = `${layout.hotPerGroup.join(",")}:${layout.coldSlots}`;
      let hp = hitMemo.get(key);
      if (!hp && layout.fits) {
        hp = hitProfile(rates, layout.hotPerGroup, layout.coldSlots, workload.promptTokens, workload.decodeTokens);
        hitMemo.set(key, hp);
      }
      return predict(
        shape,
        rates,
        hw,
        knobs,
        workload,
        o.budget,
        hp,
        readAheadAt.get(hw.threads) ?? ASSUMED_READ_AHEAD,
      );
    };
    const grid: Knobs[] = [];
    for (const threads of threadList) {
      for (const residentGates of sparsity === "gate" ? [true, false] : [undefined]) {
        for (const pipeline of [true, false]) {
          for (const queueDepth of depths) {
            for (const hotFraction of HOT_FRACTIONS)
              grid.push({ sparsity, threads, queueDepth, hotFraction, residentGates, pipeline });
          }
        }
      }
    }
    // The runtime's defaults: all cores, the reader's queue depth, the hot share the store's
    // profile gives (half without one), resident gate rows when they fit, pipelined.
    const dThreads = threadList.includes(o.threads ?? cores) ? (o.threads ?? cores) : threadList[threadList.length - 1];
    const defaultsAt = (threads: number): Knobs => ({ ...defaultKnobs(), ...o.defaults, sparsity, threads });
    let defaults = evaluate(hardware(dThreads), defaultsAt(dThreads));
    if (!grid.some((k) => evaluate(hardware(k.threads), k).layout.fits) && !defaults.layout.fits) {
      throw new Error(
        `memory budget ${mib(o.budget)} is too small for ${o.modelPath}: the part that stays in memory needs more; ` +
          `at least ${mib(defaults.layout.minBudget)} would run`,
      );
    }
    // One real run of the defaults per thread count searched, and every prediction at that thread
    // count scaled to what it measured: how much a thread count gains depends on what else the
    // machine runs, which the probe's seconds-long measurements see only in part.
    const cals = new Map<number, Calibration>();
    // A real run of `knobs` under the budget (o.calibrate), of `steps` decode tokens after the workload's prompt.
    const steps = Math.max(2, o.calibrationTokens ?? 8);
    const calibrate = (knobs: PlannedKnobs) =>
      o.calibrate!({
        store: o.modelPath,
        budget: o.budget,
        knobs,
        contextSize,
        batchSize,
        promptTokens: workload.promptTokens,
        decodeTokens: steps,
      });
    // The model for the very steps a run measured: after the prompt and the first generated token.
    const predictRun = (hw: Hardware, knobs: Knobs, run: CalibrationRun, readAhead: ReadAheadRates | undefined) =>
      predict(
        shape,
        rates,
        hw,
        knobs,
        { contextSize, promptTokens: run.promptTokens + 1, decodeTokens: run.steps },
        o.budget,
        undefined,
        readAhead,
      );
    if (o.calibrate) {
      const runs = new Map<number, CalibrationRun>();
      for (const threads of threadList) {
        const knobs = evaluate(hardware(threads), defaultsAt(threads)).knobs;
        if (!layoutFor(shape, hardware(threads), knobs, o.budget).fits) continue;
        o.onProgress?.(
          `calibrating: a ${steps}-token decode of the store under the budget with the default knobs (${knobsText(knobs)})`,
        );
        const run = await calibrate(knobs);
        runs.set(threads, run);
        // predictor mode: the read-ahead as measured
        if (run.readAhead) readAheadAt.set(threads, run.readAhead);
      }
      // Predictor mode: the predictor picks a little more than fires (its false alarms): the
      // rates as picked, scaled by what the runs measured against the rates' own sum.
      const picked = [...runs.values()]
        .map((r) => r.picksPerToken)
        .filter((x): x is number => x !== undefined && x > 0);
      if (sparsity === "predictor" && picked.length > 0) {
        const per = firingSum(firing);
        const scale = median(picked) / per;
        rates = {
          layers: firing.layers.map((p) => p.map((v) => Math.min(1, v * scale))),
          source: `${firing.source}, scaled by ${scale.toFixed(3)} to the picks the calibration runs measured`,
        };
        hitMemo.clear();
      }
      for (const [threads, run] of runs) {
        const same = predictRun(hardware(threads), run.knobs, run, readAheadAt.get(threads));
        const cal = calibration(run, same);
        cals.set(threads, cal);
        o.onProgress?.(
          `calibration at ${threads} thread(s): measured ${(1 / run.secondsPerToken).toFixed(2)} tok/s (${ms(run.ioWaitPerToken)} ms/token waiting for reads), ` +
            `the probe's model said ${same.tokensPerSecond.toFixed(2)} (${ms(cal.predictedIoWaitPerToken)} ms): compute x${cal.computeFactor.toFixed(2)}, reads x${cal.ioFactor.toFixed(2)}`,
        );
      }
      defaults = evaluate(hardware(dThreads), defaultsAt(dThreads));
    }
    let candidates = grid.map((k) => evaluate(hardware(k.threads), k)).filter((p) => p.layout.fits);
    if (cals.size > 0) {
      // Only candidates at a calibrated thread count, and (gate mode) with the way of getting the
      // gates the calibration measured (resident rows, or streamed from flash): the other mode's
      // costs differ in kind (sequential streams against random reads), and the model alone
      // misjudged them by up to 60% here (docs/planner.md).
      candidates = candidates
        .filter(
          (p) =>
            cals.has(p.knobs.threads) && p.knobs.residentGates === cals.get(p.knobs.threads)!.run.knobs.residentGates,
        )
        .map((p) => calibrated(p, cals.get(p.knobs.threads)!));
      const dc = cals.get(dThreads);
      if (dc) defaults = calibrated(defaults, dc);
    }
    // the defaults compete too (their hot share is not on the grid when the profile sets it)
    if (defaults.layout.fits) candidates.push(defaults);
    candidates.sort((a, b) => b.tokensPerSecond - a.tokensPerSecond);
    // A cold region smaller than a layer's misses serves them in rounds (read, compute, read...):
    // each round drains the queue and overlaps nothing, which the model captures only roughly,
    // for the gain of a few more pinned neurons per layer. Keep one round per layer where possible.
    const oneRound = candidates.filter((p) => p.maxRounds <= 1);
    // Prefer the defaults' values among near-equal candidates: an unmeasurable gain is not worth a change.
    let best = pickStable(oneRound.length > 0 ? oneRound : candidates, defaults);
    // The finalist, when its knobs are not the ones a calibration ran: one more short run of the
    // finalist itself, its prediction scaled to what that measured. The model ranks the
    // candidates; how fast the chosen one runs is best told by running it (the hit model's rates
    // are the profile's, not the predictor's picks neuron by neuron, and a few points of hit rate
    // move a token's time by tens of percent near a thrashing cold region).
    const measured = cals.get(best.knobs.threads);
    if (o.calibrate && measured && !sameKnobs(best.knobs, measured.run.knobs)) {
      o.onProgress?.(`checking the finalist: a ${steps}-token decode with ${knobsText(best.knobs)}`);
      const run = await calibrate(best.knobs);
      const hw = hardware(best.knobs.threads);
      const same = predictRun(hw, best.knobs, run, run.readAhead ?? readAheadAt.get(best.knobs.threads));
      const cal = calibration(run, same);
      cals.set(best.knobs.threads, cal);
      best = calibrated(evaluate(hw, best.knobs), cal);
      o.onProgress?.(
        `finalist: measured ${(1 / run.secondsPerToken).toFixed(2)} tok/s, predicted now ${best.tokensPerSecond.toFixed(2)} over the workload`,
      );
    }
    // never a plan predicted slower than what runs without one
    if (defaults.layout.fits && best.tokensPerSecond < defaults.tokensPerSecond) best = defaults;
    const plan: PlanFile = {
      format: PLAN_FORMAT,
      version: PLAN_VERSION,
      created: new Date().toISOString(),
      machine: probe.fingerprint,
      model,
      budget: o.budget,
      contextSize,
      batchSize,
      workload,
      knobs: best.knobs,
      derived: {
        cacheBytes: best.layout.cacheBytes,
        hotPerLayer: best.layout.hotPerLayer,
        coldSlots: best.layout.coldSlots,
        readBytes: shape.bundleBytes,
        gateReadBytes: shape.gateReadBytes,
        hotClusterNeurons: sparsity === "predictor" ? HOT_CLUSTER : best.layout.hotPerLayer,
        minBudget: best.layout.minBudget,
      },
      layout: best.layout,
      prediction: summary(best),
      defaults: summary(defaults),
      firing: {
        source: rates.source,
        meanFiring: firingSum(rates) / rates.layers.reduce((a, p) => a + p.length, 0),
      },
      readAhead:
        sparsity === "predictor"
          ? (readAheadAt.get(best.knobs.threads) ?? ASSUMED_READ_AHEAD)
          : sparsity === "dense"
            ? EXACT_READ_AHEAD
            : undefined,
      probe: { file: null, loadAverage: Object.values(probe.notes)[0]?.loadAverage ?? null, seconds: probe.seconds },
      ...(cals.has(best.knobs.threads)
        ? {
            calibration: (({ run, ...factors }) => ({ ...run, ...factors }))(cals.get(best.knobs.threads)!),
          }
        : {}),
    };
    return { plan, best, defaults, candidates, probe, firing: rates, calibration: cals.get(best.knobs.threads) };
  } finally {
    store.close();
  }
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
const ms = (s: number) => (s * 1000).toFixed(1);
