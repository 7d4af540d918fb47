/**
 * What the cost model knows about a model: its shapes, what loading it keeps resident, and (for a
 * mixture of experts) how its tokens are routed. shapeOfStore (store-shape.ts) reads it from a
 * store.
 */
import type { GGMLType } from "../format/ggml-types.js";
import { evenRoutingShare } from "../io/hit-model.js";
import type { FixedResident, StoreFacts } from "../model/offload/layout.js";
import type { PredictorShape } from "../model/offload/predictor.js";
import type { ShardPlan } from "../model/shards.js";
import type { StoreShardInput } from "../model/store-shards.js";

export interface MatrixShape {
  type: GGMLType;
  rows: number;
  cols: number;
}

export interface ModelShape {
  /** the store as the layout sees it */
  facts: StoreFacts;
  /** what loading the store keeps in wasm memory at the plan's context and batch (residentBytes) */
  resident: Omit<FixedResident, "base">;
  nLayer: number;
  /** a mixture of experts: experts per layer (0: a dense FFN) and how many each token runs */
  experts: number;
  expertsUsed: number;
  /** per (layer, expert) group, the share of tokens routed to it (null: dense, or every expert alike) */
  routed: Float64Array | null;
  nEmbd: number;
  /** neurons of one FFN (of one expert) */
  nFF: number;
  nHead: number;
  nHeadKV: number;
  headDim: number;
  nVocab: number;
  ffnType: GGMLType;
  bundleBytes: number;
  /** bytes of a first-phase gate read (the pages holding a gate row) */
  gateReadBytes: number;
  /** the dense matrices of one layer's attention (wq, wk, wv, wo) */
  layerMatrices: MatrixShape[];
  output: MatrixShape;
  /**
   * When every layer has a contiguous copy of its gate rows (stores converted since it exists):
   * gates not resident are streamed from it in chunks of `rows` rows (`bytes` per read, as
   * StreamedGateRows reads them), double-buffered, the first chunk read during the attention
   * block. null: each uncached bundle's gate pages are read instead.
   */
  gateStream: { rows: number; bytes: number; rowBytes: number } | null;
  /** layer 0's activation predictor as it sits in memory (null: the store has none) */
  predictor: PredictorShape | null;
  /**
   * What splitting the store among wasm32 memories takes (store-shards.ts storeLayout): the
   * model, what it keeps resident, the context and batch, a memory's capacity, and `onePlan`, the
   * split of everything but the FFN. Absent: a shape made by hand, taken to fit one memory.
   */
  memory?: Omit<StoreShardInput, "facts" | "fixed" | "budget" | "knobs"> & { onePlan: ShardPlan };
}

/** Groups of bundles: the layers, or for a mixture of experts every (layer, expert). */
export function groupsOf(shape: Pick<ModelShape, "nLayer" | "experts">): number {
  return shape.nLayer * Math.max(1, shape.experts);
}

/** The share of tokens routed to group g (1 for a dense layer; every expert alike when the store does not say). */
export function routedShare(shape: ModelShape, g: number): number {
  if (shape.experts === 0) return 1;
  return shape.routed ? shape.routed[g] : evenRoutingShare(shape.experts, shape.expertsUsed);
}
