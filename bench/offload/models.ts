/** The models bench:offload runs: a synthetic GGUF for llama.cpp and its two stores for ours, made once. */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { evenRoutingShare } from "../../src/io/hit-model.js";
import { plannedFiring } from "../../src/model/firing.js";
import { FIXED_ACTIVATION, SHAPE_SPECS } from "../../src/offline/synth.js";
import { isDenseShape, type DenseShape, type Shape } from "./options.js";
import { BIN, MODELS_DIR, SEED, SPARSITY } from "./settings.js";

function sh(cmd: string[], what: string): void {
  process.stderr.write(`$ ${cmd.join(" ")}\n`);
  const r = spawnSync(cmd[0], cmd.slice(1), { stdio: "inherit" });
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status})`);
}

export interface Models {
  gguf: string;
  store: string;
  /** the store ordered hot-first by the planted firing rates (a dense shape has none) */
  hotStore?: string;
}

/** The hot-first store, which the sections that need it ask for (a dense shape's run skips them). */
export function hotStoreOf(m: Models): string {
  if (!m.hotStore) throw new Error(`${m.gguf}: a dense model has no hot-first store (no planted firing rates)`);
  return m.hotStore;
}

/** The dense model's activation: the one its architecture computes (gemma3: GELU), else SiLU. */
export function denseActivation(shape: DenseShape): string {
  return FIXED_ACTIVATION[SHAPE_SPECS[shape].arch ?? "llama"] ?? "silu";
}

/** A dense shape's GGUF and its store in index order: made once. */
function ensureDenseModels(shape: DenseShape, type: string, layers?: number): Models {
  const spec = SHAPE_SPECS[shape];
  const nLayer = layers ?? spec.layers;
  const act = denseActivation(shape);
  const base = join(MODELS_DIR, `${shape}${nLayer !== spec.layers ? `-L${nLayer}` : ""}-${act}-${type}`);
  const m: Models = { gguf: `${base}.gguf`, store: `${base}.pi` };
  if (!existsSync(m.gguf))
    sh(
      [
        ...[process.execPath, BIN, "synth", "--shape", shape, "--act", act, "--type", type, "--seed", String(SEED)],
        ...(nLayer !== spec.layers ? ["--layers", String(nLayer)] : []),
        ...["-o", m.gguf],
      ],
      "synth",
    );
  if (!existsSync(m.store)) sh([process.execPath, BIN, "convert", m.gguf, "-o", m.store], "convert");
  return m;
}

/** The GGUF, its store in index order and (ReLU shapes) its store ordered hot-first: made once. */
export function ensureModels(shape: Shape, type: string, gateRank: number | undefined, layers?: number): Models {
  mkdirSync(MODELS_DIR, { recursive: true });
  if (isDenseShape(shape)) return ensureDenseModels(shape, type, layers);
  const spec = SHAPE_SPECS[shape];
  const nLayer = layers ?? spec.layers;
  const prefix =
    (
      {
        "7b": "7b",
        "mistral-7b": "m7b",
        mixtral: "mx",
        "smallthinker-4b": "st4b",
        "smallthinker-21b": "st21b",
      } as const
    )[shape] + (nLayer !== spec.layers || shape === "mixtral" ? String(nLayer) : "");
  const base = join(MODELS_DIR, `${prefix}-relu90-${gateRank ? `r${gateRank}-` : ""}${type}`);
  const hotStore = `${base}.hot.pi`;
  const m: Models = { gguf: `${base}.gguf`, store: `${base}.pi`, hotStore };
  // a predictable model's planted predictors go into both stores (llama.cpp reads the GGUF, which has none)
  const predictors = gateRank ? ["--predictors", `${base}.predictors.gguf`] : [];
  if (!existsSync(m.gguf) || (gateRank && !existsSync(predictors[1]))) {
    sh(
      [
        process.execPath,
        BIN,
        "synth",
        "--shape",
        shape,
        "--act",
        "relu",
        "--sparsity",
        String(SPARSITY),
        ...(gateRank ? ["--gate-rank", String(gateRank)] : []),
        ...(nLayer !== spec.layers ? ["--layers", String(nLayer)] : []),
        "--type",
        type,
        "--seed",
        String(SEED),
        "-o",
        m.gguf,
      ],
      "synth",
    );
  }
  if (!existsSync(m.store)) sh([process.execPath, BIN, "convert", m.gguf, "-o", m.store, ...predictors], "convert");
  if (!existsSync(hotStore)) {
    // The planted per-neuron firing rates as an activation profile: what profiling the model on
    // varied input would find, up to sampling noise. Only the order on flash depends on it.
    const profile = join(MODELS_DIR, `${prefix}-relu90-planted-profile.json`);
    writeFileSync(profile, JSON.stringify({ layers: plantedProfile(shape, nLayer) }));
    sh(
      [process.execPath, BIN, "convert", m.gguf, "-o", hotStore, "--profile", profile, ...predictors],
      "convert (hot-first)",
    );
  }
  return m;
}

/**
 * The planted per-neuron firing rates as profile entries, one per layer (a mixture: per layer and
 * expert, each expert's rates when routed, every expert taken as routed alike: the generator plants
 * firing, not routing).
 */
function plantedProfile(shape: Shape, nLayer: number): { frequency: number[]; routed?: number }[] {
  const spec = SHAPE_SPECS[shape];
  const round = (xs: ArrayLike<number>) => Array.from(xs, (x) => Number(x.toPrecision(6)));
  const experts = spec.experts ?? 0;
  if (experts === 0)
    return Array.from({ length: nLayer }, (_, l) => ({ frequency: round(plannedFiring(SEED, l, spec.ffn, SPARSITY)) }));
  const out: { frequency: number[]; routed?: number }[] = [];
  for (let l = 0; l < nLayer; l++)
    for (let e = 0; e < experts; e++)
      out.push({
        frequency: round(plannedFiring(SEED, l, spec.ffn, SPARSITY, undefined, e)),
        routed: evenRoutingShare(experts, spec.expertsUsed!),
      });
  return out;
}
