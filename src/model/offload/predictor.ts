/**
 * PowerInfer's activation predictor: per layer, scores = fc2 . relu(fc1 . x) over the residual
 * stream x before the FFN norm; a neuron whose score exceeds the threshold is predicted to fire.
 * Two small matrices per layer (blk.N.fc1.weight [nEmbd -> hidden], blk.N.fc2.weight [hidden ->
 * nFF]), kept in memory. A mixture of experts has one per expert (blk.N.fc1.E.weight,
 * blk.N.fc2.E.weight: TurboSparse-Mixtral's model.layers.N.block_sparse_moe.experts.E.predictor
 * fc1 / fc2), indexed like the store's groups: layer * experts + expert. F32/F16/BF16 predictors
 * are converted at load by default (predictorShapes): fc1 to Q8_0, fc2 to Q8_0 or F16, whichever
 * pair takes less memory, their hidden width padded with zeros to what fc2's type needs (fc1 zero
 * rows, fc2 zero columns: the padding contributes exactly nothing).
 */
import { ACTIVATIONS } from "../../format/activations.js";
import { GGMLType } from "../../format/ggml-types.js";
import type { ModelFile } from "../../format/gguf.js";
import type { Arena } from "../../runtime/arena.js";
import type { ThreadPool } from "../../runtime/pool.js";
import { hasWeightKernel, weightKernel, type ActivationFormat } from "../../runtime/weight-kernels.js";
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
 * The types fc2 may be converted to, each with the multiple its hidden width (fc2's columns, fc1's
 * rows) pads to and the widest padded width it is taken at. Q8_0 pads to its 32-value blocks, but
 * its packed layout pads each row further to 128 columns (tiled.ts): a narrow predictor
 * (SmallThinker-4B's hidden 31 -> 32) takes 4.2x its data's Q8_0 bytes. F16 pads to its kernel's
 * 8-value steps (matvec_half.ts: a narrower tail runs scalar) and is taken only within one
 * 128-column group: wider, its kernel computes a weight about 1.5x slower than Q8_0's (bench/kernels,
 * cold: 768 x 32 F16 5.8-6.2 GMAC/s against Q8_0's 3.4-3.5 counting the 32 real columns, 14336 x 160
 * F16 7.3-9.0 against 11.7-12.7), so the few bytes it saves past one group would cost time.
 */
const FC2_TYPES = [
  { type: GGMLType.Q8_0, pad: 32, widest: Infinity },
  { type: GGMLType.F16, pad: 8, widest: 128 },
] as const;

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
  /** fc2's type in memory, and the activation format its kernels read (the hidden row, f32 in memory) */
  fc2Type: GGMLType;
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
    for (const { type: t, pad, widest } of convert ? FC2_TYPES : []) {
      const padded = Math.ceil(hidden / pad) * pad;
      if (padded > cfg.nFF || padded > widest) continue;
      const k = weightKernel(t);
      const s: PredictorShape = {
        fc1Type: GGMLType.Q8_0,
        fc1Act: q8.act,
        fc2Type: t,
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
    /** relu(fc1 . x) of the current row (the widest layer's hidden width, f32) */
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
   * (predictorShapes) says, into the loader's memory. With `part.rowOrder`, group g's fc2 rows
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
      const a = conv
        ? loader.requantMatrix(n.fc1, cfg.nEmbd, s.fileHidden, cfg.nEmbd, s.hidden, s.fc1Type)
        : loader.matrix(n.fc1, cfg.nEmbd, s.fileHidden);
      const order = rowOrder?.(g);
      const b = conv
        ? loader.requantMatrix(n.fc2, s.fileHidden, cfg.nFF, s.hidden, cfg.nFF, s.fc2Type, order)
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

  /** Layer l's predictor in memory: fc1's and fc2's GGML types and the hidden width (padded when converted). */
  width(l: number): { fc1Type: GGMLType; fc2Type: GGMLType; hidden: number } {
    return { fc1Type: this.fc1[l].kernel.type, fc2Type: this.fc2[l].kernel.type, hidden: this.fc1[l].rows };
  }
}
