/**
 * The RoPE table: (cos, sin) for every position and rotated pair, computed once at load the way
 * ggml does (theta advanced by repeated f32 multiplication by base^(-2/nRot)), so our rotations
 * match llama.cpp's bit for bit as far as cos/sin allow.
 */
import type { ModelConfig } from "./config.js";

export function ropeTable(cfg: ModelConfig, positions: number): Float32Array {
  const half = cfg.nRot / 2;
  const table = new Float32Array(positions * half * 2);
  const thetaScale = Math.fround(Math.pow(cfg.ropeFreqBase, -2 / cfg.nRot));
  const scale = Math.fround(cfg.ropeFreqScale);
  for (let p = 0; p < positions; p++) {
    let theta = Math.fround(p);
    for (let i = 0; i < half; i++) {
      const t = Math.fround(theta * scale);
      table[(p * half + i) * 2] = Math.cos(t);
      table[(p * half + i) * 2 + 1] = Math.sin(t);
      theta = Math.fround(theta * thetaScale);
    }
  }
  return table;
}
