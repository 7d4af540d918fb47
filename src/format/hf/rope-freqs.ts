/**
 * Llama 3's RoPE frequency factors (`rope_freqs.weight`), computed from config.json's
 * rope_scaling as llama.cpp's converter computes them: in f32, step by step, with torch's
 * order of operations (`a / t` is `a * (1 / t)` for a scalar a), so the tensor is the same to
 * the bit.
 */
import type { HFConfig } from "./hf-config.js";
import type { RopeParams } from "./hparams.js";

const f = Math.fround;

export function llama3RopeFactors(cfg: HFConfig, rope: RopeParams, headDim: number): Float32Array {
  const num = (k: string, fallback: number): number => {
    const v = rope.get(k) ?? fallback;
    if (typeof v !== "number" || !Number.isFinite(v))
      cfg.fail(`${rope.key}.${k}`, `= ${JSON.stringify(v)} is not a number`);
    return v;
  };
  const base = f(num("rope_theta", 10000));
  const factor = num("factor", 8);
  const low = num("low_freq_factor", 1);
  const high = num("high_freq_factor", 4);
  const oldCtx = num("original_max_position_embeddings", 8192);
  if (!(factor > 0)) cfg.fail(`${rope.key}.factor`, `= ${factor} is not positive`);
  if (high === low) cfg.fail(`${rope.key}.high_freq_factor`, `= ${high} equals low_freq_factor`);
  const lowWavelen = oldCtx / low;
  const highWavelen = oldCtx / high;
  const out = new Float32Array(headDim / 2);
  const twoPi = f(2 * Math.PI);
  for (let i = 0; i < out.length; i++) {
    const freq = f(1 / f(Math.pow(base, f((2 * i) / headDim))));
    const wavelen = f(f(1 / freq) * twoPi);
    if (wavelen < f(highWavelen)) out[i] = 1;
    else if (wavelen > f(lowWavelen)) out[i] = factor;
    else {
      const smooth = f(f(f(f(1 / wavelen) * f(oldCtx)) - f(low)) / f(high - low));
      out[i] = f(1 / f(f(f(1 - smooth) / f(factor)) + smooth));
    }
  }
  return out;
}
