/**
 * bench:offload on a dense SiLU/GELU shape (qwen3, llama 3.x, gemma3, phi3 at their public widths):
 * the limit it runs under by default, and the sections it skips.
 */
import { spawnSync } from "node:child_process";
import { statSync } from "node:fs";
import { GGMLType, tensorBytes, typeFromName } from "../../src/format/ggml-types.js";
import { SHAPE_SPECS } from "../../src/offline/synth.js";
import { denseActivation, type Models } from "./models.js";
import type { DenseShape, Options } from "./options.js";
import { BIN, CONTEXT, GiB, MiB, SEED } from "./settings.js";
import { gib } from "./summary.js";

/** Share of the GGUF's FFN weights the default limit leaves for the neuron cache: the rest stays on flash. */
const CACHED_FFN_SHARE = 1 / 8;
/** The default limit is rounded up to this (0.05 GiB): a number a reader can type to rerun it. */
const LIMIT_STEP = GiB / 20;

/** The GGUF's FFN weights (gate, up and down of every layer, and of every expert of a mixture) in bytes. */
function ffnWeightBytes(shape: DenseShape, type: string, layers: number): number {
  const t = typeFromName(type);
  if (t === undefined) throw new Error(`bench:offload: unknown weight type ${type}`);
  const spec = SHAPE_SPECS[shape];
  return layers * Math.max(1, spec.experts ?? 0) * 3 * tensorBytes(t as GGMLType, spec.dim * spec.ffn);
}

/**
 * The least budget ours runs the store at (its resident part and a minimal cache), as `run`
 * reports it when asked for far less: the engine's own layout, not an estimate of it.
 */
function minimumBudget(store: string, threads: number): number {
  const r = spawnSync(
    process.execPath,
    [
      BIN,
      "run",
      "-m",
      store,
      "--memory-budget",
      "1MiB",
      "-p",
      "x",
      "-n",
      "1",
      "-t",
      String(threads),
      "-c",
      String(CONTEXT),
    ],
    { encoding: "utf8" },
  );
  const m = /at least ([\d.]+) MiB would run/.exec(r.stderr);
  if (!m) throw new Error(`bench:offload: could not learn ${store}'s least budget from:\n${r.stderr}`);
  return Number(m[1]) * MiB;
}

/**
 * The default limit of a dense shape: the least budget that runs plus an eighth of its FFN
 * weights for the cache, so that most of the FFN is read from flash; rounded up to 0.05 GiB.
 * (A fixed share of the GGUF cannot serve every shape: a 1B model with a 128k vocabulary keeps
 * two thirds of its GGUF resident, embeddings and attention, plus the runtime.)
 */
export function defaultDenseLimits(
  o: Options & { shape: DenseShape },
  models: Models,
  log: (s: string) => void,
): number[] {
  const layers = o.layers ?? SHAPE_SPECS[o.shape].layers;
  const min = Math.max(...o.threads.map((t) => minimumBudget(models.store, t)));
  const ffn = ffnWeightBytes(o.shape, o.type, layers);
  const limit = Math.ceil((min + CACHED_FFN_SHARE * ffn) / LIMIT_STEP) * LIMIT_STEP;
  log(
    `limit (default for a dense shape): ours' least budget ${gib(min)} + ${CACHED_FFN_SHARE} of the FFN weights (${gib(ffn)}) for the cache = ${gib(limit)}, ${((100 * limit) / statSync(models.gguf).size).toFixed(0)}% of the GGUF`,
  );
  if (limit >= statSync(models.gguf).size)
    log(
      "  (the GGUF is smaller than this limit: llama.cpp can keep all of it in memory; at this size ours' runtime and padded bundles cost more than the FFN they leave on flash; pass --limits to set one)",
    );
  return [+(limit / GiB).toFixed(2)];
}

/** The report's model line for a dense shape. */
export function denseModelLine(o: Options & { shape: DenseShape }, models: Models): string {
  const spec = SHAPE_SPECS[o.shape];
  const layers = o.layers !== undefined && o.layers !== spec.layers ? `, ${o.layers} of its ${spec.layers} layers` : "";
  return (
    `model: ${o.shape} shape (${spec.like}${layers}), dense ${{ gelu: "GELU", swiglu_oai: "clamped SwiGLU" }[denseActivation(o.shape)] ?? "SiLU"} (random weights, no planted sparsity), ${o.type.toUpperCase()}, seed ${SEED}: ` +
    `GGUF ${gib(statSync(models.gguf).size)}, store ${gib(statSync(models.store).size)}; ours runs dense mode, which computes every neuron, each bundle whole (no thresholds: sparsity only where --sparsity and a calibration ask for it)`
  );
}

/** The sections a dense shape skips, each with the reason the report prints. */
const DENSE_SKIPS: Record<string, string> = {
  ablation:
    "the ablation's last step orders the store hot-first by planted firing rates, and its cache steps measure sparse reuse: a dense model has neither",
  plan: "the planner check runs on the hot-first store of planted firing rates, which a dense shape does not have",
};

/** Whether a dense shape skips this section; if so the report says why. */
export function skipForDense(section: string, shape: DenseShape, log: (s: string) => void): boolean {
  const why = DENSE_SKIPS[section];
  if (why) {
    log("");
    log(`(${section} skipped for the dense shape ${shape}: ${why})`);
  }
  return why !== undefined;
}
