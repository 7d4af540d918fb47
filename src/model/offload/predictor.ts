/**
 * PowerInfer's activation predictor: per layer, scores = fc2 . relu(fc1 . x) over the residual
 * stream x before the FFN norm; a neuron whose score exceeds the threshold is predicted to fire.
 * Two small matrices per layer (blk.N.fc1.weight [nEmbd -> hidden], blk.N.fc2.weight [hidden ->
 * nFF]), kept in memory. A mixture of experts has one per expert (blk.N.fc1.E.weight,
 * blk.N.fc2.E.weight: TurboSparse-Mixtral's model.layers.N.block_sparse_moe.experts.E.predictor
 * fc1 / fc2), indexed like the store's groups: layer * experts + expert. F32/F16/BF16 predictors
 * are converted at load by default (predictorShapes): fc1 to Q8_0, fc2 to Q8_0 (packed, or in
 * GGUF's rows where narrow) or F16, whichever pair takes less memory, their hidden width padded
 * with zeros to what fc2's type needs (fc1 zero rows, fc2 zero columns: the padding contributes
 * exactly nothing).
 */
import { ACTIVATIONS } from "../../format/activations.js";
import { GGMLType } from "../../format/ggml-types.js";
import type { ModelFile } from "../../format/gguf.js";
import type { Arena } from "../../runtime/arena.js";
import type { ThreadPool } from "../../runtime/pool.js";
import {
  hasWeightKernel,
  layoutKernel,
  weightKernel,
  type ActivationFormat,
  type WeightLayout,
} from "../../runtime/weight-kernels.js";
import type { ModelConfig } from "../config.js";
import type { MatrixRunner } from "../matrix-runner.js";
import type { SparsityMode } from "./layout.js";
import { rowTail, type Matrix, type WeightLoader } from "../weight-loader.js";

/** PowerInfer's activation predictor tensors (blk.N.fc1.weight, blk.N.fc2.weight; per expert blk.N.fc1.E.weight). */
export const PREDICTOR_TENSOR_RE = /^blk\.\d+\.fc[12](\.\d+)?\.weight$/;

/** The predictor tensors of group g (a layer, or expert g % experts of layer g / experts). */
export function predictorNames(g: number, experts: number): { fc1: string; fc2: string } {
  if (experts <= 0) return { fc1: `blk.${g}.fc1.weight`, fc2: `blk.${g}.fc2.weight` };
  const l = Math.floor(g / experts),
    e = g % experts;
  return { fc1: `blk.${l}.fc1.${e}.weight`, fc2: `blk.${l}.fc2.${e}.weight` };
}

/** Groups with a predictor each: the layers, or layers x experts. */
export const predictorGroups = (cfg: Pick<ModelConfig, "nLayer" | "nExpert">) => cfg.nLayer * Math.max(1, cfg.nExpert);

/** GGUF types of predictor matrices that load converts (predictorType "q8_0"). */
const REQUANT_TYPES: ReadonlySet<GGMLType> = new Set([GGMLType.F32, GGMLType.F16, GGMLType.BF16]);

/**
 * What fc2 may be converted to: a type, in its own layout (null) or another (layoutKernel), with
 * the multiple its hidden width (fc2's columns, fc1's rows) pads to and the widest padded width it
 * is taken at. Q8_0 in its own layout pads to its 32-value blocks, but its packed layout pads each
 * row further to 128 columns (tiled.ts): a narrow predictor (SmallThinker-4B's hidden 31 -> 32)
 * would take 4.2x its data's Q8_0 bytes. Q8_0 "rows" keeps GGUF's rows (q8-rows.ts: 34 bytes per
 * 32 values, nothing more), so within one 128-column group it is the smallest of the three for
 * fc2 alone, and its kernel there the fastest (bench/kernels, one thread, cold: 768 x 32 7.7-8.6
 * GMAC/s against F16's 5.8-6.3, 768 x 128 11.7-11.8 against 8.1-10.4). F16 pads to its kernel's
 * 8-value steps (matvec_half.ts: a narrower tail runs scalar), so with fc1's rows it can still
 * make the smaller pair just past a block where nFF is small against nEmbd (hidden 33 at 1536 x
 * 768: F16 pads fc1 to 40 rows, Q8_0 to 64). Past one group both stay out: F16's kernel computes a
 * weight about 1.5x slower than Q8_0's packed one (cold: 14336 x 160 F16 7.3-9.0 GMAC/s against
 * 11.7-12.7), and the rows kernel is made for rows of a few blocks, the packed one for wide rows
 * streamed from DRAM. Converted to Q8_0 either way, fc2's columns are evened out first (fc2Balance).
 */
const FC2_TYPES: readonly { type: GGMLType; layout: WeightLayout | null; pad: number; widest: number }[] = [
  { type: GGMLType.Q8_0, layout: null, pad: 32, widest: Infinity },
  { type: GGMLType.F16, layout: null, pad: 8, widest: 128 },
  { type: GGMLType.Q8_0, layout: "rows", pad: 32, widest: 128 },
];

export type PredictorType = "q8_0" | "original";

/** Metadata of a mixture's predictors: how many experts per layer they were made for. */
export const PREDICTOR_EXPERTS_KEY = "powerinfer.predictors.experts";

/**
 * Throws when the predictor tensors of `file` are not made for the model's experts: per-layer
 * predictors for a mixture (or per-expert ones for a dense model), an expert index past the
 * model's expert_count, or `powerinfer.predictors.experts` saying another count. A mixture's
 * predictors cannot be paired with another split of the FFN: each scores one expert's neurons.
 */
export function checkPredictorExperts(
  file: ModelFile,
  cfg: Pick<ModelConfig, "nLayer" | "nExpert">,
  /** the model's architecture, for naming its expert_count key (a predictors-only file has none) */
  arch = file.architecture,
): void {
  const where = file.path;
  const countKey = `${arch}.expert_count`;
  if (file.has(PREDICTOR_EXPERTS_KEY)) {
    const n = file.getNumber(PREDICTOR_EXPERTS_KEY);
    if (n !== cfg.nExpert)
      throw new Error(
        `${where}: metadata ${PREDICTOR_EXPERTS_KEY} = ${n}: predictors for ${n} experts per layer, but the model has ${cfg.nExpert} (${countKey})`,
      );
  }
  for (const name of file.tensors.keys()) {
    const m = /^blk\.(\d+)\.fc[12](?:\.(\d+))?\.weight$/.exec(name);
    if (!m) continue;
    if (cfg.nExpert > 0 && m[2] === undefined)
      throw new Error(
        `${where}: tensor ${name} is a whole layer's predictor, but the model is a mixture of ${cfg.nExpert} experts (${countKey}): it needs one per expert (blk.N.fc1.E.weight)`,
      );
    if (cfg.nExpert === 0 && m[2] !== undefined)
      throw new Error(
        `${where}: tensor ${name} is an expert's predictor, but the model has no experts (no ${countKey})`,
      );
    if (m[2] !== undefined && Number(m[2]) >= cfg.nExpert)
      throw new Error(
        `${where}: tensor ${name} is the predictor of expert ${m[2]}, but the model has ${cfg.nExpert} experts per layer (${countKey})`,
      );
    if (Number(m[1]) >= cfg.nLayer)
      throw new Error(
        `${where}: tensor ${name} is a predictor of layer ${m[1]}, but the model has ${cfg.nLayer} layers`,
      );
  }
}

/**
 * Whether every layer (every expert of a mixture) of `file` has an activation predictor; throws
 * (checkPredictorExperts) when its predictors are made for another number of experts.
 */
export function hasPredictors(file: ModelFile, cfg: Pick<ModelConfig, "nLayer" | "nExpert">): boolean {
  checkPredictorExperts(file, cfg);
  const groups = predictorGroups(cfg);
  for (let g = 0; g < groups; g++) {
    const n = predictorNames(g, cfg.nExpert);
    if (!file.tensors.has(n.fc1) || !file.tensors.has(n.fc2)) return false;
  }
  return groups > 0;
}

/**
 * The sparsity a store runs with: the one asked for, else PowerInfer's predictors where the file
 * has them, else the exact gates where they can skip anything (an activation with exact zeros, or
 * activation thresholds in force), else dense: every neuron fires, so each bundle is computed
 * whole with no gate read or kept before it. Loading and the planner both ask here, so the plan
 * is made for the mode `run` then uses.
 */
export function sparsityFor<M extends SparsityMode>(
  file: ModelFile,
  cfg: Pick<ModelConfig, "nLayer" | "nExpert" | "activation">,
  asked: M | undefined,
  thresholds: boolean,
): { sparsity: M | SparsityMode; withPredictors: boolean } {
  const withPredictors = hasPredictors(file, cfg);
  const gatesSkip = ACTIVATIONS[cfg.activation].exactZeros || thresholds;
  return { sparsity: asked ?? (withPredictors ? "predictor" : gatesSkip ? "gate" : "dense"), withPredictors };
}

/** How layer l's predictor sits in memory. */
export interface PredictorShape {
  /** fc1's type in memory, and the activation format its kernels read (the residual row) */
  fc1Type: GGMLType;
  fc1Act: ActivationFormat;
  /**
   * fc2's type in memory, its layout (layoutKernel: null, the type's own), and the activation
   * format its kernels read (the hidden row, f32 in memory)
   */
  fc2Type: GGMLType;
  fc2Layout: WeightLayout | null;
  fc2Act: ActivationFormat;
  /** hidden width in memory (fc1's rows, fc2's columns), padding included */
  hidden: number;
  /** hidden width in the file */
  fileHidden: number;
  /** converted (and padded) at load, rather than kept as stored */
  requantized: boolean;
  /** packed bytes of fc1 and fc2 */
  fc1Bytes: number;
  fc2Bytes: number;
}

/** Bytes a predictor takes in memory: fc1 and fc2, each allocated at a 64-byte boundary. */
export const predictorBytes = (p: Pick<PredictorShape, "fc1Bytes" | "fc2Bytes">) =>
  Math.ceil(p.fc1Bytes / 64) * 64 + Math.ceil(p.fc2Bytes / 64) * 64;

/**
 * Each layer's predictor as it will sit in memory: converted at load, fc1 to Q8_0 and fc2 to the
 * one of FC2_TYPES that, with the hidden width padded as it needs, takes the fewest bytes for
 * both matrices (Q8_0 on a tie); or as stored (by choice, because fc1 or fc2 is already of
 * another type, or because no padded shape fits the kernels or the FFN's buffers).
 */
export function predictorShapes(file: ModelFile, cfg: ModelConfig, type: PredictorType = "q8_0"): PredictorShape[] {
  if (type !== "q8_0" && type !== "original") {
    throw new RangeError(`predictorType must be "q8_0" or "original", got ${JSON.stringify(type)}`);
  }
  const q8 = weightKernel(GGMLType.Q8_0);
  const out: PredictorShape[] = [];
  for (let g = 0; g < predictorGroups(cfg); g++) {
    const names = predictorNames(g, cfg.nExpert);
    const fc1 = file.tensor(names.fc1);
    const fc2 = file.tensor(names.fc2);
    const hidden = fc1.dims[1];
    if (hidden > cfg.nFF) {
      throw new Error(
        `${file.path}: predictor ${names.fc1} has ${hidden} hidden units, more than the FFN's ${cfg.nFF}`,
      );
    }
    let best: PredictorShape | null = null;
    const convert =
      type === "q8_0" && REQUANT_TYPES.has(fc1.type) && REQUANT_TYPES.has(fc2.type) && cfg.nEmbd % 32 === 0;
    for (const { type: t, layout, pad, widest } of convert ? FC2_TYPES : []) {
      const padded = Math.ceil(hidden / pad) * pad;
      if (padded > cfg.nFF || padded > widest) continue;
      const k = layoutKernel(t, layout);
      const s: PredictorShape = {
        fc1Type: GGMLType.Q8_0,
        fc1Act: q8.act,
        fc2Type: t,
        fc2Layout: layout,
        fc2Act: k.act,
        hidden: padded,
        fileHidden: hidden,
        requantized: true,
        fc1Bytes: q8.packedBytes(padded, cfg.nEmbd),
        fc2Bytes: k.packedBytes(cfg.nFF, padded),
      };
      if (!best || predictorBytes(s) < predictorBytes(best)) best = s;
    }
    if (!best) {
      if (!hasWeightKernel(fc1.type) || !hasWeightKernel(fc2.type)) {
        throw new Error(`${file.path}: predictor ${names.fc1} has a weight type this engine cannot compute with`);
      }
      const k1 = weightKernel(fc1.type),
        k2 = weightKernel(fc2.type);
      best = {
        fc1Type: fc1.type,
        fc1Act: k1.act,
        fc2Type: fc2.type,
        fc2Layout: null,
        fc2Act: k2.act,
        hidden,
        fileHidden: hidden,
        requantized: false,
        fc1Bytes: k1.packedBytes(hidden, cfg.nEmbd),
        fc2Bytes: k2.packedBytes(cfg.nFF, hidden),
      };
    }
    out.push(best);
  }
  return out;
}

/** A loaded predictor's types and width (Predictor.width). */
export type PredictorWidth = Pick<PredictorShape, "fc1Type" | "fc2Type" | "fc2Layout" | "hidden">;

/**
 * Powers of two that even out fc2's columns before it is converted to Q8_0: fc1's row j (so the
 * hidden unit j) is multiplied by s[j] and fc2's column j by 1 / s[j]. That changes nothing the
 * predictor computes (relu(s z) = s relu(z) for s > 0; a power of two rounds nothing, and fc1's
 * Q8_0 quants come out as they were) but where fc2's rounding falls: Q8_0 rounds each weight to a
 * step of its 32-value block's largest, so a column far smaller than the rest, as a unit that
 * carries a bias has (large hidden values, small weights: synth's planted predictors' constant
 * unit), would keep few of its bits, and its large hidden value multiplies the error (recall of
 * the firing neurons 0.971 without this on test/predictor-q8.test.ts's hidden-31 model, 0.9985
 * with it, 0.9998 with the file's F16 fc1 and fc2). Each column's largest magnitude comes within a
 * factor √2 of their geometric mean; a column of zeros keeps 1. `colMax`: each column's largest
 * magnitude (WeightLoader.columnMaxima).
 */
export function fc2Balance(colMax: Float64Array): Float32Array {
  let logSum = 0,
    n = 0;
  for (const m of colMax)
    if (m > 0) {
      logSum += Math.log2(m);
      n++;
    }
  const mean = n > 0 ? logSum / n : 0;
  return Float32Array.from(colMax, (m) => (m > 0 ? 2 ** Math.round(Math.log2(m) - mean) : 1));
}

/** Which groups Predictor.load loads, and fc2's row order per group. */
export interface PredictorPart {
  first?: number;
  groups?: number;
  rowOrder?: ((g: number) => Int32Array) | null;
}

export class Predictor {
  private readonly args = new Int32Array(2);
  private readonly relu: number;
  /** per group, fc2's rows from some row on (rowTail), made on first use by scores() */
  private readonly tails: ({ matrix: Matrix; from: number } | null)[];

  private constructor(
    readonly fc1: Matrix[],
    readonly fc2: Matrix[],
    /** relu(fc1 . x) of the current row (the widest layer's hidden width, f32; unit j times fc2Balance's s[j]) */
    readonly hidden: number,
    private readonly pool: ThreadPool,
    /** per group, the model's neuron of each score (fc2's rows were loaded in this order), or null: the model's order */
    readonly rowOrder: ((g: number) => Int32Array) | null,
    shard: number,
  ) {
    this.relu = pool.fn("relu_inplace", shard);
    this.tails = fc2.map(() => null);
  }

  /**
   * Load the predictors of `part.groups` groups from `part.first` on (default: all) as `shapes`
   * (predictorShapes) says, into the loader's memory; fc2 converted to Q8_0 with its columns
   * evened out (fc2Balance). With `part.rowOrder`, group g's fc2 rows
   * are loaded in the order rowOrder(g) (a store's stored order), so its scores come out in that
   * order: the offloaded FFN then reads a stored position's score at that position, with no
   * gather per neuron per step. The groups are numbered from `first` as 0 (rowOrder and scores
   * take those numbers): a shard's predictors, in a store split among several memories.
   */
  static load(loader: WeightLoader, cfg: ModelConfig, shapes: PredictorShape[], part: PredictorPart = {}): Predictor {
    const { first = 0, groups = shapes.length - first, rowOrder = null } = part;
    const { arena, pool, file } = loader;
    const fc1: Matrix[] = [];
    const fc2: Matrix[] = [];
    for (let g = 0; g < groups; g++) {
      const n = predictorNames(first + g, cfg.nExpert);
      const s = shapes[first + g];
      const conv = s.requantized;
      const balance =
        conv && s.fc2Type === GGMLType.Q8_0 ? fc2Balance(loader.columnMaxima(n.fc2, s.fileHidden, cfg.nFF)) : null;
      const a = conv
        ? loader.requantMatrix(n.fc1, cfg.nEmbd, s.fileHidden, cfg.nEmbd, s.hidden, s.fc1Type, undefined, {
            rows: balance ?? undefined,
          })
        : loader.matrix(n.fc1, cfg.nEmbd, s.fileHidden);
      const order = rowOrder?.(g);
      const fc2Kernel = layoutKernel(s.fc2Type, s.fc2Layout);
      const b = conv
        ? loader.requantMatrix(n.fc2, s.fileHidden, cfg.nFF, s.hidden, cfg.nFF, fc2Kernel, order, {
            cols: balance?.map((v) => 1 / v),
          })
        : loader.matrix(n.fc2, s.fileHidden, cfg.nFF, order);
      // scores() feeds fc1's outputs (all of its rows, padding included) to fc2
      if (a.rows !== b.cols) {
        throw new Error(`${file.path}: predictor ${n.fc1}: fc1 has ${a.rows} outputs, fc2 reads ${b.cols}`);
      }
      fc1.push(a);
      fc2.push(b);
    }
    const hidden = arena.alloc(Math.max(...shapes.slice(first, first + groups).map((s) => s.hidden)) * 4, 64);
    return new Predictor(fc1, fc2, hidden, pool, rowOrder, loader.shard);
  }

  /**
   * The nFF scores of group l for the residual row at `residual` into `out` (f32, in the order
   * fc2 was loaded in: rowOrder's, or the model's). With `from`, only the scores from about
   * there on are wanted: those from a row at or before `from` on are computed (the rest of
   * `out` is left as it was) where fc2's layout can start there.
   */
  scores(mm: MatrixRunner, l: number, residual: number, nEmbd: number, out: number, from = 0): void {
    const fc1 = this.fc1[l];
    mm.setInput(residual, nEmbd);
    mm.run(fc1, this.hidden, 1);
    this.args[0] = this.hidden;
    this.pool.run(this.relu, this.args, 1, fc1.rows, 64, fc1.rows);
    mm.setInput(this.hidden, fc1.rows);
    let tail = from > 0 ? this.tails[l] : null;
    if (from > 0 && tail?.from !== from - (from % this.fc2[l].kernel.rowAlign))
      tail = this.tails[l] = rowTail(this.fc2[l], from);
    if (tail) mm.run(tail.matrix, out + 4 * tail.from, 1);
    else mm.run(this.fc2[l], out, 1);
  }

  /** Layer l's predictor in memory: fc1's and fc2's GGML types, fc2's layout (null: its type's own) and the hidden width (padded when converted). */
  width(l: number): PredictorWidth {
    const fc2 = this.fc2[l].kernel;
    return {
      fc1Type: this.fc1[l].kernel.type,
      fc2Type: fc2.type,
      fc2Layout: fc2.layout ?? null,
      hidden: this.fc1[l].rows,
    };
  }
}
