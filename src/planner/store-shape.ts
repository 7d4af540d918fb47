/**
 * The model as the cost model sees it (ModelShape), read from a store: its shapes, what loading
 * it keeps resident, its gate-row stream and its predictor. The runtime's own functions (layout.ts
 * storeFacts, resident-bytes.ts residentBytes), so that the layout the planner predicts is the
 * one the runtime makes.
 */
import { typeName, type GGMLType } from "../format/ggml-types.js";
import type { NeuronStore } from "../format/store/index.js";
import { readConfig, type ModelConfig } from "../model/config.js";
import { gateReadBytesOf, gateStreamGeometry, storeFacts, type SparsityMode } from "../model/offload/layout.js";
import { hasPredictors, predictorShapes, type PredictorShape } from "../model/offload/predictor.js";
import { DEFAULT_KV_CACHE } from "../model/kv-cache.js";
import { residentBytes, type ResidentBytes } from "../model/resident-bytes.js";
import { planShards, shardCapacity } from "../model/shards.js";
import { hasWeightKernel } from "../runtime/weight-kernels.js";
import type { ModelShape } from "./model-shape.js";

/** The attention matrices of a layer the planner models (llama-style), in the order of ModelShape.layerMatrices. */
export const ATTENTION_MATRICES = ["attn_q", "attn_k", "attn_v", "attn_output"];

/** Whether the store has the llama-style attention the planner models (layer 0's matrices). */
export function hasModelledAttention(store: NeuronStore): boolean {
  return ATTENTION_MATRICES.every((n) => store.tensors.has(`blk.0.${n}.weight`));
}

/**
 * The store's shapes and what loading it in `sparsity` mode keeps resident besides the offloaded
 * FFN.
 */
export function shapeOfStore(
  store: NeuronStore,
  cfg: ModelConfig,
  sparsity: SparsityMode,
  batchSize = 256,
  contextSize = 256,
): ModelShape {
  const mat = (name: string): { type: GGMLType; rows: number; cols: number } => {
    const t = store.tensor(name);
    if (!hasWeightKernel(t.type))
      throw new Error(`${store.path}: a ${typeName(t.type)} matrix has no kernel in this engine`);
    return { type: t.type, rows: t.dims[1], cols: t.dims[0] };
  };
  const r = residentBytes(store, cfg, { batchSize, contextSize, predictors: sparsity === "predictor" });
  return {
    facts: storeFacts(store, cfg),
    resident: { weights: r.weights, buffers: r.buffers, kv: r.kv },
    nLayer: cfg.nLayer,
    experts: store.ffn.experts,
    expertsUsed: store.ffn.experts > 0 ? cfg.nExpertUsed : 1,
    routed: routedShares(store),
    nEmbd: cfg.nEmbd,
    nFF: cfg.nFF,
    nHead: cfg.nHead,
    nHeadKV: cfg.nHeadKV,
    headDim: cfg.headDim,
    nVocab: cfg.nVocab,
    ffnType: store.ffn.type,
    bundleBytes: store.ffn.bundleBytes,
    gateReadBytes: gatePageBytes(store),
    layerMatrices: ATTENTION_MATRICES.map((n) => mat(`blk.0.${n}.weight`)),
    output: mat(store.tensors.has("output.weight") ? "output.weight" : "token_embd.weight"),
    gateStream: gateStreamOf(store),
    predictor: storePredictor(store),
    memory: memoryOf(cfg, r, contextSize, batchSize),
  };
}

/** What splitting the store among memories of `capacity` bytes takes (ModelShape.memory), with `run`'s KV cache types. */
export function memoryOf(
  cfg: ModelConfig,
  resident: ResidentBytes,
  contextSize: number,
  batchSize: number,
  capacity = shardCapacity(),
): NonNullable<ModelShape["memory"]> {
  const kvCache = DEFAULT_KV_CACHE;
  const onePlan = planShards(cfg, resident, contextSize, batchSize, kvCache, capacity);
  return { cfg, resident, contextSize, batchSize, kvCache, capacity, floor: 0, onePlan };
}

/**
 * A mixture's routing share per (layer, expert) group, from the profile the store was ordered by
 * (manifest `profile.routed`); null for a dense store, or when the store does not say (or says
 * something that is not one share in [0, 1] per group).
 */
function routedShares(store: NeuronStore): Float64Array | null {
  const r = store.manifest.profile?.routed;
  const groups = store.ffn.layers.length;
  if (store.ffn.experts === 0 || !Array.isArray(r) || r.length !== groups) return null;
  if (!r.every((v) => typeof v === "number" && v >= 0 && v <= 1)) return null;
  return Float64Array.from(r);
}

/** Layer 0's predictor as the runtime holds it (predictorShapes), or null when the store has none. */
export function storePredictor(store: NeuronStore): PredictorShape | null {
  const cfg = readConfig(store);
  return hasPredictors(store, cfg) ? predictorShapes(store, cfg)[0] : null;
}

/** Bytes a first-phase gate read takes (the pages holding a bundle's gate row), as OffloadedFFN reads them. */
export function gatePageBytes(store: NeuronStore): number {
  return gateReadBytesOf(store.ffn);
}

/**
 * How OffloadedFFN streams gate rows when they are not resident and the store has a contiguous
 * copy of them: rows per chunk and the bytes one chunk's page span reads; null without a copy.
 */
export function gateStreamOf(store: NeuronStore): { rows: number; bytes: number; rowBytes: number } | null {
  if (!store.ffn.layers.every((l) => l.gateRows !== null)) return null;
  const rowBytes = store.ffn.rowBytes;
  const { rows } = gateStreamGeometry(store.layer(0).neurons, gatePageBytes(store), rowBytes);
  if (rows === 0) return null;
  return { rows, bytes: (Math.ceil((rows * rowBytes) / 4096) + 1) * 4096, rowBytes };
}
