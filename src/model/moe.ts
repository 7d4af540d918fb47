/**
 * Mixture of experts (Mixtral / TurboSparse-Mixtral layout): per layer a router
 * (`blk.N.ffn_gate_inp.weight`, [nEmbd, nExpert]) and nExpert FFNs of nFF neurons each. Each
 * token is routed as llama.cpp routes it: softmax over the router's logits, the nExpertUsed most
 * probable experts, their probabilities renormalized to sum to 1; the FFN's output is the
 * weighted sum of those experts' outputs.
 *
 * The experts' tensors come in llama.cpp's two layouts: one 3-D tensor per kind
 * (`blk.N.ffn_gate_exps.weight` [nEmbd, nFF, nExpert], `ffn_up_exps`, `ffn_down_exps`
 * [nFF, nEmbd, nExpert]) or, in older files, one 2-D tensor per expert (`blk.N.ffn_gate.E.weight`).
 */
import { GGUFError, type ModelFile } from "../format/gguf.js";
import type { ModelConfig } from "./config.js";
import type { Matrix, WeightLoader } from "./weight-loader.js";

export interface ExpertWeights {
  gate: Matrix;
  up: Matrix;
  down: Matrix;
}

export interface MoeLayer {
  /** nExpert logits from the FFN input */
  router: Matrix;
  experts: ExpertWeights[];
}

/** The router's tensor name of layer l. */
export const routerName = (l: number) => `blk.${l}.ffn_gate_inp.weight`;

/** Where expert e's part of kind `kind` lives: a 3-D tensor and the expert's slice, or its own 2-D tensor. */
export function expertTensor(
  file: ModelFile,
  l: number,
  kind: "gate" | "up" | "down",
  e: number,
): { name: string; merged: boolean } {
  const merged = `blk.${l}.ffn_${kind}_exps.weight`;
  if (file.tensors.has(merged)) return { name: merged, merged: true };
  const single = `blk.${l}.ffn_${kind}.${e}.weight`;
  if (file.tensors.has(single)) return { name: single, merged: false };
  throw new GGUFError(
    file.path,
    `layer ${l} is a mixture of experts (expert_count set) but has neither "${merged}" nor "${single}"`,
  );
}

/**
 * Check a layer's expert tensors against the config (shapes, expert count), naming the tensor and
 * the field that disagree: a file whose metadata and tensors disagree is refused before loading.
 */
export function checkMoeLayer(file: ModelFile, cfg: ModelConfig, l: number): void {
  const { nEmbd, nFF, nExpert } = cfg;
  const router = file.tensors.get(routerName(l));
  if (!router) throw new GGUFError(file.path, `layer ${l} is a mixture of experts but has no "${routerName(l)}"`);
  if (router.dims.length !== 2 || router.dims[0] !== nEmbd || router.dims[1] !== nExpert) {
    throw new GGUFError(
      file.path,
      `tensor "${routerName(l)}" has shape [${router.dims.join(", ")}], expected [${nEmbd}, ${nExpert}] (embedding_length, expert_count)`,
    );
  }
  for (const kind of ["gate", "up", "down"] as const) {
    const [cols, rows] = kind === "down" ? [nFF, nEmbd] : [nEmbd, nFF];
    const t = expertTensor(file, l, kind, 0);
    const dims = file.tensor(t.name).dims;
    const want = t.merged ? [cols, rows, nExpert] : [cols, rows];
    if (dims.length !== want.length || dims.some((d, i) => d !== want[i])) {
      throw new GGUFError(
        file.path,
        `tensor "${t.name}" has shape [${dims.join(", ")}], expected [${want.join(", ")}]` +
          (t.merged && dims.length === 3 && dims[2] !== nExpert
            ? ` (it holds ${dims[2]} experts, metadata expert_count says ${nExpert})`
            : ""),
      );
    }
    if (!t.merged) {
      for (let e = 1; e < nExpert; e++) expertTensor(file, l, kind, e);
      const extra = `blk.${l}.ffn_${kind}.${nExpert}.weight`;
      if (file.tensors.has(extra))
        throw new GGUFError(file.path, `tensor "${extra}" is an expert beyond expert_count = ${nExpert}`);
    }
  }
}

/** Load layer l's router and experts. */
export function loadMoeLayer(loader: WeightLoader, file: ModelFile, cfg: ModelConfig, l: number): MoeLayer {
  checkMoeLayer(file, cfg, l);
  const { nEmbd, nFF, nExpert } = cfg;
  const part = (kind: "gate" | "up" | "down", e: number): Matrix => {
    const [cols, rows] = kind === "down" ? [nFF, nEmbd] : [nEmbd, nFF];
    const t = expertTensor(file, l, kind, e);
    return t.merged ? loader.expertMatrix(t.name, e, cols, rows, nExpert) : loader.matrix(t.name, cols, rows);
  };
  const experts: ExpertWeights[] = [];
  for (let e = 0; e < nExpert; e++) experts.push({ gate: part("gate", e), up: part("up", e), down: part("down", e) });
  return { router: loader.matrix(routerName(l), nEmbd, nExpert), experts };
}

/**
 * Route n tokens: logits (n x nExpert, f32) -> for each token the k most probable experts
 * (highest first; the lower index on a tie) into ids (n x k) and their renormalized weights into
 * weights (n x k). Softmax in double precision, probabilities rounded to f32 as ggml keeps them.
 */
export function routeTokens(
  logits: Float32Array,
  n: number,
  nExpert: number,
  k: number,
  ids: Int32Array,
  weights: Float32Array,
  probs: Float64Array,
): void {
  for (let t = 0; t < n; t++) {
    const row = t * nExpert;
    let max = -Infinity;
    for (let e = 0; e < nExpert; e++) max = Math.max(max, logits[row + e]);
    let sum = 0;
    for (let e = 0; e < nExpert; e++) sum += probs[e] = Math.exp(logits[row + e] - max);
    for (let e = 0; e < nExpert; e++) probs[e] = Math.fround(probs[e] / sum);
    let chosen = 0;
    for (let j = 0; j < k; j++) {
      let best = -1;
      for (let e = 0; e < nExpert; e++) if (probs[e] >= 0 && (best < 0 || probs[e] > probs[best])) best = e;
      ids[t * k + j] = best;
      weights[t * k + j] = probs[best];
      chosen += probs[best];
      probs[best] = -1; // taken
    }
    for (let j = 0; j < k; j++) weights[t * k + j] = Math.fround(weights[t * k + j] / chosen);
  }
}
