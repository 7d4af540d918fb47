/**
 * A mixture of experts' tensors in GGUF (Mixtral / TurboSparse-Mixtral layout): per layer a router
 * (`blk.N.ffn_gate_inp.weight`, [nEmbd, nExpert]) and nExpert FFNs of nFF neurons each (how
 * tokens are routed: parts/router.ts).
 *
 * The experts' tensors come in llama.cpp's two layouts: one 3-D tensor per kind
 * (`blk.N.ffn_gate_exps.weight` [nEmbd, nFF, nExpert], `ffn_up_exps`, `ffn_down_exps`
 * [nFF, nEmbd, nExpert]) or, in older files, one 2-D tensor per expert (`blk.N.ffn_gate.E.weight`).
 */
import { GGMLType, typeName } from "../../format/ggml-types.js";
import { GGUFError, type ModelFile } from "../../format/gguf.js";
import { hasWeightKernel, SUPPORTED_WEIGHT_TYPES } from "../../runtime/weight-kernels.js";
import type { ModelConfig } from "../config.js";
import type { Matrix, WeightLoader } from "../weight-loader.js";

export interface ExpertWeights {
  gate: Matrix;
  up: Matrix;
  down: Matrix;
  /** the expert's biases (addresses of f32 vectors: nFF, nFF, nEmbd), 0 where the architecture has none */
  gateBias: number;
  upBias: number;
  downBias: number;
}

export interface MoeLayer {
  /** nExpert logits from the FFN input */
  router: Matrix;
  /** a bias on those logits (nExpert f32), 0 when none */
  routerBias: number;
  experts: ExpertWeights[];
}

/** The name of layer l's bias on the router's logits, or on the experts' `kind` (one row per expert). */
export const routerBiasName = (l: number) => `blk.${l}.ffn_gate_inp.bias`;
export const expertBiasName = (l: number, kind: "gate" | "up" | "down") => `blk.${l}.ffn_${kind}_exps.bias`;

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
  if (cfg.expertBiases) checkVector(file, routerBiasName(l), [nExpert], "(expert_count)");
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
    if (!hasWeightKernel(file.tensor(t.name).type))
      throw new GGUFError(
        file.path,
        `tensor "${t.name}" has type ${typeName(file.tensor(t.name).type)}, which no matrix kernel computes (expected one of ${SUPPORTED_WEIGHT_TYPES})`,
      );
    if (cfg.expertBiases) {
      if (!t.merged)
        throw new GGUFError(
          file.path,
          `layer ${l}: ${cfg.architecture}'s experts come as 3-D "ffn_${kind}_exps" tensors`,
        );
      checkVector(file, expertBiasName(l, kind), [kind === "down" ? nEmbd : nFF, nExpert], "(one row per expert)");
    }
    if (!t.merged) {
      for (let e = 1; e < nExpert; e++) expertTensor(file, l, kind, e);
      const extra = `blk.${l}.ffn_${kind}.${nExpert}.weight`;
      if (file.tensors.has(extra))
        throw new GGUFError(file.path, `tensor "${extra}" is an expert beyond expert_count = ${nExpert}`);
    }
  }
}

/** A bias tensor's shape (and that its values can be read), or an error naming it and what was expected. */
export function checkVector(file: ModelFile, name: string, want: number[], what: string): void {
  const t = file.tensors.get(name);
  if (!t)
    throw new GGUFError(
      file.path,
      `tensor "${name}" is missing: ${file.architecture} needs it, [${want.join(", ")}] ${what}`,
    );
  if (t.dims.length !== want.length || t.dims.some((d, i) => d !== want[i]))
    throw new GGUFError(
      file.path,
      `tensor "${name}" has shape [${t.dims.join(", ")}], expected [${want.join(", ")}] ${what}`,
    );
  if (t.type !== GGMLType.F32 && t.type !== GGMLType.F16 && t.type !== GGMLType.BF16)
    throw new GGUFError(file.path, `tensor "${name}" has type ${typeName(t.type)}, expected F32 (or F16, BF16)`);
}

/** Load layer l's router and experts (in the order they compute: router, then each expert's gate, up, down). */
export function loadMoeLayer(loader: WeightLoader, file: ModelFile, cfg: ModelConfig, l: number): MoeLayer {
  checkMoeLayer(file, cfg, l);
  const { nEmbd, nFF, nExpert } = cfg;
  const part = (kind: "gate" | "up" | "down", e: number): Matrix => {
    const [cols, rows] = kind === "down" ? [nFF, nEmbd] : [nEmbd, nFF];
    const t = expertTensor(file, l, kind, e);
    return t.merged ? loader.expertMatrix(t.name, e, cols, rows, nExpert) : loader.matrix(t.name, cols, rows);
  };
  const bias = (kind: "gate" | "up" | "down", e: number): number => {
    if (!cfg.expertBiases) return 0;
    const n = kind === "down" ? nEmbd : nFF;
    return loader.expertVector(expertBiasName(l, kind), e, n, nExpert);
  };
  const router = loader.matrix(routerName(l), nEmbd, nExpert);
  const routerBias = cfg.expertBiases ? loader.vector(routerBiasName(l), nExpert) : 0;
  const experts: ExpertWeights[] = [];
  for (let e = 0; e < nExpert; e++) {
    const gate = part("gate", e),
      gateBias = bias("gate", e),
      up = part("up", e),
      upBias = bias("up", e),
      down = part("down", e),
      downBias = bias("down", e);
    experts.push({ gate, up, down, gateBias, upBias, downBias });
  }
  return { router, routerBias, experts };
}
