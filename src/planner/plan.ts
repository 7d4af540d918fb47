/**
 * The offline planner: probe the machine (probe.ts), read the store's shapes and firing rates,
 * search the runtime's knobs with the cost model (cost-model.ts), and write the best as a plan
 * file that `run` (through applyPlan) turns into load options.
 *
 * Knobs searched: threads, read queue depth, the hot share of the neuron cache (the hot set: the
 * first stored neurons of each layer, hot-first when the store was converted with a profile),
 * resident gate rows or gate pages read per token, and the I/O-compute pipeline. The cache size is
 * what the budget leaves (more cache never costs decode time); read size and cluster shape are
 * fixed by the store (one bundle per neuron, one hot cluster per layer) and reported, not chosen.
 *
 * A plan is valid for one machine (probe.ts fingerprint), one store (size and manifest checksum),
 * one budget and one context size; applyPlan refuses (or, for a plan found next to the model,
 * ignores with a note) any other.
 */
import { closeSync, existsSync, openSync, readFileSync, readSync, renameSync, statSync, writeFileSync } from "node:fs";
import { resolve } from "node:path";
import { GGMLType, typeName } from "../format/ggml-types.js";
import {
  crcHex,
  isNeuronStore,
  NeuronStore,
  readHeaderFields,
  startsWithStoreMagic,
  STORE_HEADER_FIELD_BYTES,
} from "../format/store/index.js";
import { readerDepthLimit } from "../io/flash-reader.js";
import type { LoadModelOptions } from "../api/model.js";
import { readConfig, type ModelConfig } from "../model/config.js";
import { plannedFiring } from "../model/firing.js";
import { hasWeightKernel } from "../runtime/weight-kernels.js";
import { DEFAULT_HOT_FRACTION } from "../io/neuron-cache.js";
import { aio } from "../io/aio.js";
import { storeFacts, type OffloadLayout } from "../model/offload/layout.js";
import { HOT_CLUSTER } from "../model/offload/neuron-lists.js";
import { hasPredictors } from "../model/offload/predictor.js";
import { residentBytes } from "../model/resident-bytes.js";
import { calibrated, calibration, type Calibration, type CalibrationJob, type CalibrationRun } from "./calibrate.js";
import { measureRuntimeBase, type BaseJob } from "./runtime-base.js";
import { median } from "./median.js";
import { evenRoutingShare } from "../io/hit-model.js";
import {
  hitProfile,
  predict,
  layoutFor,
  ASSUMED_READ_AHEAD,
  type ReadAheadRates,
  type Firing,
  type Hardware,
  type HitProfile,
  type Knobs,
  type PlannedKnobs,
  type ModelShape,
  type Prediction,
  type Workload,
} from "./cost-model.js";
import {
  defaultQueueDepths,
  defaultThreadCounts,
  gatePageBytes,
  gateStreamOf,
  streamKey,
  batchSecondsAt,
  candidateQueueDepths,
  iopsAt,
  submitAt,
  ioKey,
  machineDifference,
  machineFingerprint,
  matvecKey,
  predictorKey,
  probeMachine,
  sparseKey,
  storePredictor,
  type MachineFingerprint,
  type ProbeOptions,
  type IoTable,
  type ProbeResult,
} from "./probe.js";

export const PLAN_FORMAT = "powerinfer-ts plan";
export const PLAN_VERSION = 2;

/** What `run` does without a plan (src/cli/model-flags.ts LOAD_FLAGS' defaults, which cli/plan.ts passes in): the baseline a plan must beat. */
export function defaultKnobs(): Pick<Knobs, "hotFraction" | "queueDepth" | "pipeline"> {
  // OffloadOptions' own defaults: hot share 0.5 (with a profile in the store the runtime sets it
  // from the rates, defaultHotFraction: makePlan does the same), reads in flight as the reader
  // takes them (native AIO: the disk queue, 256; libuv: its pool), pipelined
  return { hotFraction: DEFAULT_HOT_FRACTION, queueDepth: readerDepthLimit(), pipeline: true };
}

/** Identifies a store's content: its size and its manifest's checksum (a copy elsewhere still matches). */
export interface ModelFingerprint {
  path: string;
  bytes: number;
  mtimeMs: number;
  manifestCrc32: string;
}

export function modelFingerprint(path: string): ModelFingerprint {
  const st = statSync(path);
  const fd = openSync(path, "r");
  try {
    const head = Buffer.alloc(STORE_HEADER_FIELD_BYTES);
    if (readSync(fd, head, 0, head.length, 0) !== head.length || !startsWithStoreMagic(head)) {
      throw new Error(
        `${path}: not a .pi neuron store (the planner plans stores: convert the model first with "powerinfer convert")`,
      );
    }
    return {
      path: resolve(path),
      bytes: st.size,
      mtimeMs: Math.round(st.mtimeMs),
      manifestCrc32: crcHex(readHeaderFields(head).manifestCrc32),
    };
  } finally {
    closeSync(fd);
  }
}

/** null when the plan's model is this store, else what differs. */
export function modelDifference(planned: ModelFingerprint, here: ModelFingerprint): string | null {
  if (planned.bytes !== here.bytes)
    return `the plan is for a store of ${planned.bytes} bytes (${planned.path}), this one has ${here.bytes}`;
  if (planned.manifestCrc32 !== here.manifestCrc32)
    return `the plan is for another store (manifest checksum ${planned.manifestCrc32}, this one ${here.manifestCrc32}; ${planned.path})`;
  return null;
}

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

// ---------------------------------------------------------------------------------------------
// Model facts

/**
 * The store's shapes and what loading it in `sparsity` mode keeps resident besides the offloaded
 * FFN: the runtime's own functions (layout.ts storeFacts, resident-bytes.ts residentBytes), so
 * that the layout the planner predicts is the one the runtime makes.
 */
export function shapeOfStore(
  store: NeuronStore,
  cfg: ModelConfig,
  sparsity: "gate" | "predictor",
  batchSize = 256,
  contextSize = 256,
): ModelShape {
  const mat = (name: string): { type: GGMLType; rows: number; cols: number } => {
    const t = store.tensor(name);
    if (!hasWeightKernel(t.type))
      throw new Error(`${store.path}: a ${typeName(t.type)} matrix has no kernel in this engine`);
    return { type: t.type, rows: t.dims[1], cols: t.dims[0] };
  };
  const r = residentBytes(store, cfg, { batchSize, contextSize, predictors: sparsity === "predictor" });
  return {
    facts: storeFacts(store, cfg),
    resident: { weights: r.weights, buffers: r.buffers, kv: r.kv },
    nLayer: cfg.nLayer,
    experts: store.ffn.experts,
    expertsUsed: store.ffn.experts > 0 ? cfg.nExpertUsed : 1,
    routed: routedShares(store),
    nEmbd: cfg.nEmbd,
    nFF: cfg.nFF,
    nHead: cfg.nHead,
    nHeadKV: cfg.nHeadKV,
    headDim: cfg.headDim,
    nVocab: cfg.nVocab,
    ffnType: store.ffn.type,
    bundleBytes: store.ffn.bundleBytes,
    gateReadBytes: gatePageBytes(store),
    layerMatrices: ["attn_q", "attn_k", "attn_v", "attn_output"].map((n) => mat(`blk.0.${n}.weight`)),
    output: mat(store.tensors.has("output.weight") ? "output.weight" : "token_embd.weight"),
    gateStream: gateStreamOf(store),
    predictor: storePredictor(store),
  };
}

/**
 * A mixture's routing share per (layer, expert) group, from the profile the store was ordered by
 * (manifest `profile.routed`); null for a dense store, or when the store does not say (or says
 * something that is not one share in [0, 1] per group).
 */
function routedShares(store: NeuronStore): Float64Array | null {
  const r = store.manifest.profile?.routed;
  const groups = store.ffn.layers.length;
  if (store.ffn.experts === 0 || !Array.isArray(r) || r.length !== groups) return null;
  if (!r.every((v) => typeof v === "number" && v >= 0 && v <= 1)) return null;
  return Float64Array.from(r);
}

/** Firing assumed per neuron when a store has no profile (a ReLU-fied model's typical ~90% sparsity). */
export const ASSUMED_FIRING = 0.1;

/**
 * Per-neuron firing probability per token, in stored order: the profile's frequencies when the
 * store was converted with one; else, for a synthetic model (synth metadata), the rates its
 * generator planted; else every neuron alike at `assumed` (SiLU without thresholds: 1, since no
 * activation is exactly zero).
 */
export function firingOf(store: NeuronStore, cfg: ModelConfig, assumed?: number): Firing {
  // per group: the layers, or a mixture's (layer, expert) groups, each with its per-token rates
  const L = store.ffn.layers.length;
  const layers: Float64Array[] = [];
  if (assumed === undefined && store.ffn.layers.every((l) => l.frequency !== null)) {
    for (let l = 0; l < L; l++) {
      const Ls = store.layer(l);
      const p = new Float64Array(Ls.neurons);
      for (let k = 0; k < Ls.neurons; k++) p[k] = Math.min(1, Math.max(0, Ls.frequency![Ls.order[k]]));
      layers.push(p);
    }
    const prof = store.manifest.profile;
    return {
      layers,
      source: `the store's activation profile${prof?.file ? ` (${prof.file}${prof.tokens ? `, ${prof.tokens} tokens` : ""})` : ""}`,
    };
  }
  if (assumed === undefined && store.has("synth.sparsity") && store.has("synth.seed")) {
    // stored as f32: back to the decimal synth was given (0.9, not 0.8999999762)
    const sparsity = Number(store.getNumber("synth.sparsity").toPrecision(6));
    const alpha = store.has("synth.alpha") ? Number(store.getNumber("synth.alpha").toPrecision(6)) : undefined;
    const seed = Number(store.metadata.get("synth.seed"));
    // a mixture: each expert's own planted rates when routed, times its routing share (the
    // generator plants firing, not routing: every expert taken as routed alike)
    const E = store.ffn.experts;
    const share = evenRoutingShare(E, cfg.nExpertUsed);
    for (let g = 0; g < L; g++) {
      const Ls = store.layer(g);
      const planted =
        E > 0
          ? plannedFiring(seed, Math.floor(g / E), Ls.neurons, sparsity, alpha, g % E)
          : plannedFiring(seed, g, Ls.neurons, sparsity, alpha);
      const p = new Float64Array(Ls.neurons);
      for (let k = 0; k < Ls.neurons; k++) p[k] = share * planted[Ls.order[k]];
      layers.push(p);
    }
    return {
      layers,
      source: `no profile in the store: the firing rates its generator planted (synthetic model, sparsity ${sparsity}${alpha !== undefined ? `, alpha ${alpha}` : ""})`,
    };
  }
  const silu =
    (cfg.activation === "silu" || cfg.activation === "gelu") && !store.has("powerinfer.activation_thresholds");
  const p0 = assumed ?? (silu ? 1 : ASSUMED_FIRING);
  if (!(p0 > 0 && p0 <= 1)) throw new RangeError(`firing rate must be in (0, 1], got ${p0}`);
  for (let l = 0; l < L; l++) layers.push(new Float64Array(store.layer(l).neurons).fill(p0));
  const why =
    assumed !== undefined
      ? "as given"
      : silu
        ? `${cfg.activation} without activation thresholds: no activation is exactly zero`
        : "assumed (no profile in the store; convert with --profile for a better plan)";
  return {
    layers,
    source: `every neuron fires with probability ${p0} (${why}); no hot-first order, so the hot set is no hotter than the rest`,
  };
}

/** The cost model's view of the probe at one thread count. */
export function hardwareFromProbe(probe: ProbeResult, shape: ModelShape, threads: number, base: number): Hardware {
  const dev = probe.fingerprint.device;
  const need = <T>(v: T | undefined, what: string): T => {
    if (v === undefined) throw new Error(`the probe has no ${what}: probe again (powerinfer plan --reprobe)`);
    return v;
  };
  const sparse = need(
    probe.sparse[sparseKey(shape.ffnType, shape.nEmbd, threads)],
    `sparse kernel speed for ${typeName(shape.ffnType)} at ${threads} thread(s)`,
  );
  const tables = new Map<number, IoTable>();
  for (const bytes of new Set([shape.bundleBytes, shape.gateReadBytes]))
    tables.set(
      bytes,
      need(
        probe.io[ioKey(dev, bytes, threads)],
        `read table for ${bytes}-byte reads on ${dev} at ${threads} thread(s)`,
      ),
    );
  const table = (bytes: number) => tables.get(bytes) ?? tables.get(shape.bundleBytes)!;
  const stream = shape.gateStream
    ? need(
        probe.io[streamKey(dev, shape.gateStream.bytes, threads)],
        `read table for gate-row chunks on ${dev} at ${threads} thread(s)`,
      )
    : null;
  const rates = new Map<GGMLType, number>();
  for (const m of [...shape.layerMatrices, shape.output, { type: shape.ffnType, rows: 0, cols: shape.nEmbd }]) {
    if (rates.has(m.type)) continue;
    // rates were measured nEmbd wide; a type without its own measurement borrows the FFN type's
    rates.set(
      m.type,
      probe.matvec[matvecKey(m.type, shape.nEmbd, threads)] ??
        need(probe.matvec[matvecKey(shape.ffnType, shape.nEmbd, threads)], `matvec speed at ${threads} thread(s)`),
    );
  }
  return {
    threads,
    dispatch: need(probe.dispatch[threads], `dispatch cost at ${threads} thread(s)`),
    memoryBandwidth: need(probe.memoryBandwidth[threads], `memory bandwidth at ${threads} thread(s)`),
    matvecRate: (type) => rates.get(type) ?? rates.get(shape.ffnType)!,
    sparse,
    scan: need(probe.scan ?? undefined, "JS scan cost"),
    streamChunkSeconds: (qd) => (stream ? batchSecondsAt(stream, qd, 1) : Infinity),
    batchSeconds: (bytes, qd, n) => batchSecondsAt(table(bytes), qd, n),
    submitSeconds: (bytes, qd) => submitAt(table(bytes), qd),
    iops: (bytes, qd) => iopsAt(table(bytes), qd),
    predictorSeconds: shape.predictor
      ? need(
          probe.predictor[predictorKey(shape.predictor, shape.nEmbd, shape.nFF, threads)],
          `predictor speed at ${threads} thread(s)`,
        )
      : 0,
    base,
    // native AIO reads on while every core computes; libuv's read threads wait for a free core
    overlap: aio().binding !== null || threads < probe.fingerprint.cores,
  };
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
  /** the sparsity mode to plan (default: the one `run` uses, predictor when the store has predictors) */
  sparsity?: "gate" | "predictor";
  /**
   * resident bytes of the runtime before any weight loads, per thread count: a number, or how to
   * measure it (default measureRuntimeBase: a fresh process made as `run` makes it)
   */
  runtimeBase?: number | ((job: BaseJob) => Promise<number>);
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
    if (["attn_q", "attn_k", "attn_v", "attn_output"].some((n) => !store.tensors.has(`blk.0.${n}.weight`))) {
      throw new Error(
        `${o.modelPath}: the planner models llama-style attention (blk.N.attn_q/k/v/output); this store lacks them`,
      );
    }
    // the mode `run` will use: predictors when the store has them
    const withPredictors = hasPredictors(store, cfg);
    const sparsity = o.sparsity ?? (withPredictors ? "predictor" : "gate");
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
    const baseOf = new Map<number, number>();
    for (const threads of threadList) {
      baseOf.set(
        threads,
        typeof o.runtimeBase === "number"
          ? o.runtimeBase
          : await (o.runtimeBase ?? measureRuntimeBase)({
              store: o.modelPath,
              threads,
              contextSize,
              batchSize,
              sparsity,
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
    if (o.calibrate) {
      const steps = Math.max(2, o.calibrationTokens ?? 8);
      const runs = new Map<number, CalibrationRun>();
      for (const threads of threadList) {
        const knobs = evaluate(hardware(threads), defaultsAt(threads)).knobs;
        if (!layoutFor(shape, hardware(threads), knobs, o.budget).fits) continue;
        o.onProgress?.(
          `calibrating: a ${steps}-token decode of the store under the budget with the default knobs (${knobsText(knobs)})`,
        );
        const run = await o.calibrate({
          store: o.modelPath,
          budget: o.budget,
          knobs,
          contextSize,
          batchSize,
          promptTokens: workload.promptTokens,
          decodeTokens: steps,
        });
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
        const per = firing.layers.reduce((a, p) => a + p.reduce((s, v) => s + v, 0), 0);
        const scale = median(picked) / per;
        rates = {
          layers: firing.layers.map((p) => p.map((v) => Math.min(1, v * scale))),
          source: `${firing.source}, scaled by ${scale.toFixed(3)} to the picks the calibration runs measured`,
        };
        hitMemo.clear();
      }
      for (const [threads, run] of runs) {
        // the model for the very steps measured: after the prompt and the first generated token
        const same = predict(
          shape,
          rates,
          hardware(threads),
          run.knobs,
          { contextSize, promptTokens: run.promptTokens + 1, decodeTokens: run.steps },
          o.budget,
          undefined,
          readAheadAt.get(threads),
        );
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
      const steps = Math.max(2, o.calibrationTokens ?? 8);
      o.onProgress?.(`checking the finalist: a ${steps}-token decode with ${knobsText(best.knobs)}`);
      const run = await o.calibrate({
        store: o.modelPath,
        budget: o.budget,
        knobs: best.knobs,
        contextSize,
        batchSize,
        promptTokens: workload.promptTokens,
        decodeTokens: steps,
      });
      const hw = hardware(best.knobs.threads);
      const same = predict(
        shape,
        rates,
        hw,
        best.knobs,
        { contextSize, promptTokens: run.promptTokens + 1, decodeTokens: run.steps },
        o.budget,
        undefined,
        run.readAhead ?? readAheadAt.get(best.knobs.threads),
      );
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
        meanFiring:
          rates.layers.reduce((a, p) => a + p.reduce((s, v) => s + v, 0), 0) /
          rates.layers.reduce((a, p) => a + p.length, 0),
      },
      readAhead: sparsity === "predictor" ? (readAheadAt.get(best.knobs.threads) ?? ASSUMED_READ_AHEAD) : undefined,
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

/**
 * Predictions closer than this to the best are taken as equal: the probe's numbers move by more
 * than that between minutes on a shared machine, and a change of knobs should be worth it.
 */
export const PLAN_TOLERANCE = 0.05;

/** Whether two resolved knob sets run the same way. */
function sameKnobs(a: PlannedKnobs, b: PlannedKnobs): boolean {
  return (
    a.sparsity === b.sparsity &&
    a.threads === b.threads &&
    a.queueDepth === b.queueDepth &&
    Math.abs(a.hotFraction - b.hotFraction) < 1e-9 &&
    a.residentGates === b.residentGates &&
    a.pipeline === b.pipeline
  );
}

/** Among candidates within PLAN_TOLERANCE of the best, the one closest to the defaults. */
function pickStable(sorted: Prediction[], defaults: Prediction): Prediction {
  const top = sorted[0].tokensPerSecond;
  const near = sorted.filter((p) => p.tokensPerSecond >= top * (1 - PLAN_TOLERANCE));
  const distance = (p: Prediction) =>
    (p.knobs.threads !== defaults.knobs.threads ? 1 : 0) +
    (p.knobs.residentGates !== defaults.knobs.residentGates ? 4 : 0) +
    (p.knobs.pipeline !== defaults.knobs.pipeline ? 2 : 0) +
    Math.abs(Math.log2(p.knobs.queueDepth / defaults.knobs.queueDepth)) * 0.25 +
    Math.abs(p.knobs.hotFraction - defaults.knobs.hotFraction);
  return near.reduce((a, b) => (distance(b) < distance(a) ? b : a));
}

function summary(p: Prediction): PlanPrediction {
  return {
    knobs: p.knobs,
    tokensPerSecond: p.tokensPerSecond,
    secondsPerToken: p.secondsPerToken,
    breakdown: p.breakdown,
    hitRate: p.hitRate,
    firingPerToken: p.firingPerToken,
    missesPerToken: p.missesPerToken,
    readBytesPerToken: p.readBytesPerToken,
    cacheBytes: p.layout.cacheBytes,
  };
}

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;

// ---------------------------------------------------------------------------------------------
// Plan files

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
    throw new PlanError(`cannot read plan ${path}: ${(e as Error).message}`);
  }
  let p: PlanFile;
  try {
    p = JSON.parse(text) as PlanFile;
  } catch (e) {
    throw new PlanError(`${path} is not a plan file: ${(e as Error).message}`);
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
    (k.sparsity === "gate" || k.sparsity === "predictor") &&
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

/** "3.75GiB" etc.: a budget as --memory-budget takes it, exact. */
export function sizeText(bytes: number): string {
  for (const [unit, f] of [
    ["GiB", 2 ** 30],
    ["MiB", 2 ** 20],
    ["KiB", 1024],
  ] as const) {
    const v = bytes / f;
    if (v >= 1 && Number.isInteger(Math.round(v * 1000)) && Math.abs(v * 1000 - Math.round(v * 1000)) < 1e-6)
      return `${+v.toFixed(3)}${unit}`;
  }
  return String(bytes);
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

const ms = (s: number) => (s * 1000).toFixed(1);
/** The knobs in a line, as `plan` prints them. */
export function knobsText(k: PlannedKnobs): string {
  const gates = k.sparsity === "gate" ? `, gate rows ${k.residentGates ? "resident" : "from flash"}` : "";
  return `${k.sparsity} sparsity, ${k.threads} thread(s), QD ${k.queueDepth}, hot share ${+k.hotFraction.toFixed(3)}${gates}${k.pipeline ? "" : ", no pipeline"}`;
}
