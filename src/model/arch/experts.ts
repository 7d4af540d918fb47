/**
 * A mixture of experts' tensors in GGUF (Mixtral / TurboSparse-Mixtral layout): per layer a router
 * (`blk.N.ffn_gate_inp.weight`, [nEmbd, nExpert]) and nExpert FFNs of nFF neurons each (how
 * tokens are routed: parts/router.ts).
 *
 * The experts' tensors come in llama.cpp's two layouts: one 3-D tensor per kind
 * (`blk.N.ffn_gate_exps.weight` [nEmbd, nFF, nExpert], `ffn_up_exps`, `ffn_down_exps`
 * [nFF, nEmbd, nExpert]) or, in older files, one 2-D tensor per expert (`blk.N.ffn_gate.E.weight`).
 */
import { GGUFError, type ModelFile } from "../../format/gguf.js";
import type { ModelConfig } from "../config.js";
import type { Matrix, WeightLoader } from "../weight-loader.js";

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
