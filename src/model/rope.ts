/**
 * The RoPE table: (cos, sin) for every position and rotated pair, computed once at load the way
 * ggml does (theta advanced by repeated f32 multiplication by base^(-2/nRot), divided by the
 * pair's frequency factor where the model has them), so our rotations match llama.cpp's bit for
 * bit as far as cos/sin allow.
 */
import { GGMLType, typeName } from "../format/ggml-types.js";
import { GGUFError, type ModelFile } from "../format/gguf.js";
import { dequantize } from "../format/quant.js";
import type { ModelConfig } from "./config.js";

/** Which per-pair frequency factors an architecture applies (Architecture.ropeFactors). */
export type RopeFactorsKind = "none" | "llama3" | "longrope";

/** Llama 3.1/3.2's per-pair divisors of theta (the llama3 RoPE scaling, computed by the converter). */
export const ROPE_FACTORS_TENSOR = "rope_freqs.weight";
/** Phi-3's LongRoPE divisors: long past the original context, short within it. */
export const ROPE_FACTORS_LONG = "rope_factors_long.weight";
export const ROPE_FACTORS_SHORT = "rope_factors_short.weight";

/** One RoPE table's parameters: a layer's base and position scale, and the model's rotated pairs and attention factor. */
export interface RopeSpec {
  nRot: number;
  base: number;
  scale: number;
  attnFactor: number;
  /** YaRN's blend of interpolated and original angles (rope.scaling.type "yarn"), null: plain scaling */
  yarn?: RopeYarn | null;
}

/**
 * YaRN (rope.scaling.type "yarn", gpt-oss): the pairs that turn more than betaFast times over the
 * original context keep their angle, those that turn fewer than betaSlow times take the scaled
 * one, a linear ramp between; cos and sin are scaled by 1 + 0.1 ln(1 / scale). llama.cpp's
 * extrapolation factor (1 for YaRN) weights the ramp.
 */
export interface RopeYarn {
  extFactor: number;
  betaFast: number;
  betaSlow: number;
  /** the context the model was trained at before its RoPE was scaled */
  origContext: number;
  /**
   * The ramp's ends rounded outwards to whole pairs (llama.cpp always does; transformers unless
   * the config says `truncate: false`, as gpt-oss's does: rope.scaling.yarn_truncate).
   */
  truncate: boolean;
}

/**
 * The pair range [low, high] of YaRN's ramp for a table of `base`, as ggml_rope_yarn_corr_dims
 * computes it in f32; unrounded where the model was trained so (`truncate` false).
 */
export function yarnCorrDims(nRot: number, base: number, y: RopeYarn): [number, number] {
  const f = Math.fround;
  const dim = (beta: number) =>
    f(f(nRot * f(Math.log(f(y.origContext / f(f(beta * 2) * f(Math.PI)))))) / f(2 * f(Math.log(base))));
  const low = dim(y.betaFast),
    high = dim(y.betaSlow);
  return y.truncate
    ? [Math.max(0, Math.floor(low)), Math.min(nRot - 1, Math.ceil(high))]
    : [Math.max(0, low), Math.min(nRot - 1, high)];
}

/**
 * Pair i's angle under YaRN from its unscaled angle `theta` (ggml's rope_yarn, in f32): the
 * scaled angle blended toward the unscaled one by the ramp over [low, high].
 */
export function yarnAngle(theta: number, scale: number, i: number, corr: [number, number], extFactor: number): number {
  const f = Math.fround;
  const mix = yarnRamp(i, corr, extFactor);
  return f(f(f(scale * theta) * f(1 - mix)) + f(theta * mix));
}

/** How much of pair i's unscaled angle YaRN keeps: 1 below corr[0], 0 above corr[1], linear between (f32, as ggml). */
export function yarnRamp(i: number, corr: [number, number], extFactor: number): number {
  const f = Math.fround;
  const y = f((i - corr[0]) / Math.max(f(0.001), corr[1] - corr[0]));
  return f(f(1 - Math.min(1, Math.max(0, y))) * extFactor);
}

/** YaRN's magnitude factor on cos and sin: 1 + 0.1 ln(1 / scale) (1 without YaRN). */
export function yarnMagnitude(scale: number, yarn: RopeYarn | null | undefined): number {
  const f = Math.fround;
  return yarn && yarn.extFactor !== 0 ? f(1 + f(0.1 * f(Math.log(f(1 / scale))))) : 1;
}

/**
 * The RoPE tables a model needs, one per distinct (base, scale) of its layers (gemma3's windowed
 * and global layers differ), and each layer's table (-1: a layer without RoPE).
 */
export function ropeLayout(cfg: ModelConfig): { tables: RopeSpec[]; tableOf: number[] } {
  const tables: RopeSpec[] = [];
  const tableOf: number[] = [];
  for (let l = 0; l < cfg.nLayer; l++) {
    const base = cfg.ropeBases[l];
    const scale = cfg.ropeScales[l];
    if (base === 0) {
      tableOf.push(-1);
      continue;
    }
    let i = tables.findIndex((t) => t.base === base && t.scale === scale);
    if (i < 0) i = tables.push({ nRot: cfg.nRot, base, scale, attnFactor: cfg.ropeAttnFactor, yarn: cfg.ropeYarn }) - 1;
    tableOf.push(i);
  }
  return { tables, tableOf };
}

/**
 * `factors`: one divisor of theta per rotated pair, null: none. The rotation angle of pair i at
 * position p is p * base^(-2i/nRot) / factors[i] * scale (under YaRN blended with the unscaled
 * angle: yarnAngle); cos and sin are scaled by the model's attention factor (LongRoPE's; 1
 * elsewhere) and YaRN's magnitude factor, as ggml scales them.
 */
export function ropeTable(r: RopeSpec, positions: number, factors: Float32Array | null = null): Float32Array {
  const half = r.nRot / 2;
  const table = new Float32Array(positions * half * 2);
  const thetaScale = Math.fround(Math.pow(r.base, -2 / r.nRot));
  const scale = Math.fround(r.scale);
  const mscale = Math.fround(r.attnFactor * yarnMagnitude(r.scale, r.yarn));
  const yarn = r.yarn && r.yarn.extFactor !== 0 ? r.yarn : null;
  const corr = yarn ? yarnCorrDims(r.nRot, r.base, yarn) : null;
  for (let p = 0; p < positions; p++) {
    let theta = Math.fround(p);
    for (let i = 0; i < half; i++) {
      const extrap = factors ? Math.fround(theta / factors[i]) : theta;
      const t = yarn ? yarnAngle(extrap, scale, i, corr!, yarn.extFactor) : Math.fround(extrap * scale);
      table[(p * half + i) * 2] = Math.fround(Math.cos(t)) * mscale;
      table[(p * half + i) * 2 + 1] = Math.fround(Math.sin(t)) * mscale;
      theta = Math.fround(theta * thetaScale);
    }
  }
  return table;
}

/**
 * The frequency factors an architecture of `kind` applies for a context of `contextSize`, read
 * and checked, with the tensors that hold them (the caller counts them as read); null where the
 * file has none. For "none" nothing is read: a file that has such tensors is then refused for
 * them (unused-tensors-check.ts) rather than run without.
 */
export function ropeFactors(
  file: ModelFile,
  cfg: ModelConfig,
  kind: RopeFactorsKind,
  contextSize: number,
): { factors: Float32Array; tensors: string[] } | null {
  if (kind === "llama3") {
    if (!file.tensors.has(ROPE_FACTORS_TENSOR)) return null;
    return { factors: factorTensor(file, cfg, ROPE_FACTORS_TENSOR), tensors: [ROPE_FACTORS_TENSOR] };
  }
  if (kind === "longrope") {
    const long = file.tensors.has(ROPE_FACTORS_LONG);
    if (long !== file.tensors.has(ROPE_FACTORS_SHORT))
      throw new GGUFError(
        file.path,
        `tensor "${long ? ROPE_FACTORS_SHORT : ROPE_FACTORS_LONG}" is missing (LongRoPE needs both ${ROPE_FACTORS_LONG} and ${ROPE_FACTORS_SHORT})`,
      );
    if (!long) return null;
    // llama.cpp's choice: the long factors once the context passes the original one
    const longF = factorTensor(file, cfg, ROPE_FACTORS_LONG);
    const shortF = factorTensor(file, cfg, ROPE_FACTORS_SHORT);
    return {
      factors: contextSize > cfg.ropeOrigContext ? longF : shortF,
      tensors: [ROPE_FACTORS_LONG, ROPE_FACTORS_SHORT],
    };
  }
  return null;
}

/** One factor tensor ([nRot / 2] F32 or F16, every value positive), read. */
function factorTensor(file: ModelFile, cfg: ModelConfig, name: string): Float32Array {
  const t = file.tensor(name);
  if (t.dims.length !== 1 || t.dims[0] !== cfg.nRot / 2)
    throw new GGUFError(
      file.path,
      `tensor "${name}" has shape [${t.dims.join(", ")}], expected [${cfg.nRot / 2}] (one factor per rotated pair)`,
    );
  if (t.type !== GGMLType.F32 && t.type !== GGMLType.F16)
    throw new GGUFError(file.path, `tensor "${name}" is ${typeName(t.type)}, expected F32`);
  const f = dequantize(t.type, file.tensorData(name), t.elements);
  for (let i = 0; i < f.length; i++)
    if (!(f[i] > 0) || !Number.isFinite(f[i]))
      throw new GGUFError(file.path, `tensor "${name}"[${i}] = ${f[i]}: a frequency factor must be positive`);
  return f;
}

/**
 * Llama 3.1's RoPE scaling as per-pair divisors of theta (what rope_freqs.weight holds): pairs
 * that turn faster than once per original-context / highFreqFactor positions are kept, those
 * slower than once per original-context / lowFreqFactor are slowed by `factor`, and those between
 * blend the two by where their wavelength falls. In f32, as the converters compute it.
 */
export function llama3RopeFactors(
  headDim: number,
  base: number,
  s: { factor: number; lowFreqFactor: number; highFreqFactor: number; originalContext: number },
): Float32Array {
  const f = Math.fround;
  const lowWavelen = s.originalContext / s.lowFreqFactor;
  const highWavelen = s.originalContext / s.highFreqFactor;
  const out = new Float32Array(headDim / 2);
  for (let i = 0; i < headDim / 2; i++) {
    const freq = f(1 / f(Math.pow(base, f((2 * i) / headDim))));
    const wavelen = f((2 * Math.PI) / freq);
    if (wavelen < highWavelen) out[i] = 1;
    else if (wavelen > lowWavelen) out[i] = s.factor;
    else {
      const smooth = (s.originalContext / wavelen - s.lowFreqFactor) / (s.highFreqFactor - s.lowFreqFactor);
      out[i] = 1 / ((1 - smooth) / s.factor + smooth);
    }
  }
  return out;
}
