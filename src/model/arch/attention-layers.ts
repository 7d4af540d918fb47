/**
 * How attention differs from layer to layer (Architecture.attentionLayers): the uniform case, and
 * the sliding-window patterns architectures share.
 */
import { GGUFError, type ModelFile } from "../../format/gguf.js";
import type { AttentionBase, AttentionLayers } from "./architecture.js";

/** Every layer alike: full attention, the model's RoPE, q.k scaled by 1/sqrt(head size) in f32. */
export function uniformAttention(b: AttentionBase): AttentionLayers {
  return {
    windows: new Array(b.nLayer).fill(0),
    ropeBases: new Array(b.nLayer).fill(b.ropeFreqBase),
    ropeScales: new Array(b.nLayer).fill(b.ropeFreqScale),
    kqScale: kqScaleOf(b.headDim),
  };
}

/** 1/sqrt(d) in f32, as the kernels compute it. */
export function kqScaleOf(d: number): number {
  return Math.fround(1 / Math.fround(Math.sqrt(d)));
}

/**
 * `<arch>.attention.sliding_window` (0 or absent: none), checked; `<arch>.attention.
 * sliding_window_pattern` (default `defaultPeriod`): with a window, layer l is windowed unless
 * l % period == period - 1 (every period-th layer, the last of each run, sees everything), or
 * with `denseFirst` unless l % period == 0 (the first of each run).
 */
export function slidingLayers(
  file: ModelFile,
  key: (k: string) => string,
  nLayer: number,
  defaultPeriod: number,
  denseFirst = false,
): { window: number; windowed: boolean[] } {
  const window = file.has(key("attention.sliding_window")) ? file.getNumber(key("attention.sliding_window")) : 0;
  if (!Number.isInteger(window) || window < 0)
    throw new GGUFError(file.path, `metadata "${key("attention.sliding_window")}" = ${window} is not a window size`);
  if (window === 0) return { window, windowed: new Array(nLayer).fill(false) };
  const period = file.has(key("attention.sliding_window_pattern"))
    ? file.getNumber(key("attention.sliding_window_pattern"))
    : defaultPeriod;
  if (!Number.isInteger(period) || period < 0)
    throw new GGUFError(
      file.path,
      `metadata "${key("attention.sliding_window_pattern")}" = ${period} is not a layer period (an array of flags per layer is not read yet)`,
    );
  const windowed: boolean[] = [];
  for (let l = 0; l < nLayer; l++)
    windowed.push(period === 0 || (denseFirst ? l % period !== 0 : l % period < period - 1));
  return { window, windowed };
}
