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

/** Llama 3.1/3.2's per-pair divisors of theta (the llama3 RoPE scaling, computed by the converter). */
export const ROPE_FACTORS_TENSOR = "rope_freqs.weight";

/**
 * `factors`: one divisor of theta per rotated pair (rope_freqs.weight), null: none. The rotation
 * angle of pair i at position p is p * base^(-2i/nRot) / factors[i] * ropeFreqScale.
 */
export function ropeTable(cfg: ModelConfig, positions: number, factors: Float32Array | null = null): Float32Array {
  const half = cfg.nRot / 2;
  const table = new Float32Array(positions * half * 2);
  const thetaScale = Math.fround(Math.pow(cfg.ropeFreqBase, -2 / cfg.nRot));
  const scale = Math.fround(cfg.ropeFreqScale);
  for (let p = 0; p < positions; p++) {
    let theta = Math.fround(p);
    for (let i = 0; i < half; i++) {
      const t = Math.fround((factors ? Math.fround(theta / factors[i]) : theta) * scale);
      table[(p * half + i) * 2] = Math.cos(t);
      table[(p * half + i) * 2 + 1] = Math.sin(t);
      theta = Math.fround(theta * thetaScale);
    }
  }
  return table;
}

/**
 * The file's RoPE frequency factors (rope_freqs.weight, [nRot / 2] F32), checked; null when it has
 * none. Only an architecture that applies them may read them: elsewhere the tensor is left unread
 * and the model refused for it (model-tensors-check.ts).
 */
export function ropeFactors(file: ModelFile, cfg: ModelConfig): Float32Array | null {
  if (!file.tensors.has(ROPE_FACTORS_TENSOR)) return null;
  const t = file.tensor(ROPE_FACTORS_TENSOR);
  if (t.dims.length !== 1 || t.dims[0] !== cfg.nRot / 2)
    throw new GGUFError(
      file.path,
      `tensor "${ROPE_FACTORS_TENSOR}" has shape [${t.dims.join(", ")}], expected [${cfg.nRot / 2}] (one factor per rotated pair)`,
    );
  if (t.type !== GGMLType.F32 && t.type !== GGMLType.F16)
    throw new GGUFError(file.path, `tensor "${ROPE_FACTORS_TENSOR}" is ${typeName(t.type)}, expected F32`);
  const f = dequantize(t.type, file.tensorData(ROPE_FACTORS_TENSOR), t.elements);
  for (let i = 0; i < f.length; i++)
    if (!(f[i] > 0) || !Number.isFinite(f[i]))
      throw new GGUFError(
        file.path,
        `tensor "${ROPE_FACTORS_TENSOR}"[${i}] = ${f[i]}: a frequency factor must be positive`,
      );
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
