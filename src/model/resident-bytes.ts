/**
 * What loading a model puts in wasm memory, computed from its tensor table before anything
 * loads: the packed weights kept in memory, the activation buffers for a batch and the KV cache.
 * LlamaModel.load caps the context and lays out a memory budget with it, the planner plans with
 * it, and a test checks it byte for byte against the arena after a real load.
 */
import type { ModelFile } from "../format/gguf.js";
import { NeuronStore } from "../format/store/index.js";
import { activationBytes, hasWeightKernel, weightKernel, type ActivationFormat } from "../runtime/weight-kernels.js";
import type { ModelConfig } from "./config.js";
import { predictorBytes, predictorShapes, type PredictorShape } from "./offload/predictor.js";
import { expertTensor, routerName } from "./arch/experts.js";
import { DEFAULT_KV_CACHE, kvCacheBytes, type KvCacheTypes } from "./kv-cache.js";
import { ropeLayout } from "./rope.js";

/** The activation buffers of the forward pass and the KV cache, by name: bytes each. */
export interface BufferBytes {
  x: number;
  xb: number;
  q: number;
  att: number;
  hg: number;
  hu: number;
  logits: number;
  scores: number;
  pos: number;
  rope: number;
  kCache: number;
  vCache: number;
  /** a mixture of experts: router logits, the tokens routed to one expert gathered, their output, the layer's weighted sum */
  route: number;
  moeIn: number;
  moeOut: number;
  moeAcc: number;
  /** the FFN's output before its post-norm (architectures that norm it: gemma3) */
  ffnOut: number;
}

/**
 * The forward pass's buffers for `batch` tokens and `ctx` positions, in the order they are laid
 * out, with the KV cache of layers `layers` (default all: a model in one memory; a shard holds
 * its own layers'). hg and hu (the FFN's gate and up rows) also hold a batch's new keys and
 * values in f32 while attention runs, before they are rounded into the cache, so they are at
 * least kvDim wide.
 */
export function bufferBytes(
  cfg: ModelConfig,
  ctx: number,
  batch: number,
  kv: KvCacheTypes,
  layers: LayerRange = { from: 0, to: cfg.nLayer },
): BufferBytes {
  const { nEmbd, nFF, nHead, nHeadKV, headDim, nVocab } = cfg;
  const f32 = (n: number) => n * 4;
  const ffnRow = Math.max(nFF, nHeadKV * headDim);
  return {
    x: f32(batch * nEmbd),
    xb: f32(batch * nEmbd),
    q: f32(batch * nHead * headDim),
    att: f32(batch * nHead * headDim),
    hg: f32(batch * ffnRow),
    hu: f32(batch * ffnRow),
    logits: f32(nVocab),
    scores: f32(nHead * ctx),
    pos: f32(batch),
    rope: f32(ctx * cfg.nRot * ropeLayout(cfg).tables.length),
    kCache: kvCacheBytes(cfg, kv.k, ctx, batch, layers.from, layers.to),
    vCache: kvCacheBytes(cfg, kv.v, ctx, batch, layers.from, layers.to),
    route: f32(batch * cfg.nExpert),
    moeIn: cfg.nExpert > 0 ? f32(batch * nEmbd) : 0,
    moeOut: cfg.nExpert > 0 ? f32(batch * nEmbd) : 0,
    moeAcc: cfg.nExpert > 0 ? f32(batch * nEmbd) : 0,
    ffnOut: cfg.postNorms ? f32(batch * nEmbd) : 0,
  };
}

/** Bytes of the quantized-input buffer of each activation format, for `batch` rows as wide as the widest matrix reading it. */
export function activationBufferBytes(
  widest: Map<ActivationFormat, number>,
  batch: number,
): Map<ActivationFormat, number> {
  const out = new Map<ActivationFormat, number>();
  for (const [fmt, cols] of widest) if (fmt !== "f32") out.set(fmt, batch * activationBytes(fmt, cols) + 64);
  return out;
}

/** Layers [from, to). */
export interface LayerRange {
  from: number;
  to: number;
}

export interface ResidentBytes {
  /** packed matrices and f32 vectors: attention, norms, output, predictors, and the dense FFN of a model in memory */
  weights: number;
  /** of those, each layer's (in the order they load) */
  layerWeights: number[];
  /** of those, what loads after the layers: the output norm and matrix, and predictors */
  headWeights: number;
  /** activation buffers (quantized inputs and f32 rows) */
  buffers: number;
  /** the KV cache */
  kv: number;
  /** predictor shapes in memory, per layer (when they load) */
  predictors: PredictorShape[] | null;
  /** bytes of the quantized-input buffer of each activation format the matrices read */
  quantized: Map<ActivationFormat, number>;
}

export interface ResidentOptions {
  batchSize: number;
  contextSize: number;
  /** the activation predictors load (a store run in predictor mode) */
  predictors: boolean;
  predictorType?: "q8_0" | "original";
  /** the KV cache's element types (default f16 keys and values) */
  kvCache?: KvCacheTypes;
}

const align64 = (n: number) => Math.ceil(n / 64) * 64;

/**
 * Wasm bytes the model takes once loaded (each allocation 64-byte aligned, as LlamaModel lays
 * them out), before an offloaded FFN's own memory. A store's token embeddings stay on flash (one
 * row read per token); a GGUF's stay in JS memory, outside this count, unless they double as the
 * output matrix.
 */
export function residentBytes(file: ModelFile, cfg: ModelConfig, opts: ResidentOptions): ResidentBytes {
  const store = file instanceof NeuronStore;
  const { nEmbd, nLayer, nHead, nHeadKV, headDim } = cfg;
  let weights = 0;
  const widest = new Map<ActivationFormat, number>();
  const reads = (fmt: ActivationFormat, cols: number) => widest.set(fmt, Math.max(widest.get(fmt) ?? 0, cols));
  /** the matrix `name`, or `parts` of its rows loaded as matrices of their own (a fused one's) */
  const matrix = (name: string, parts?: number[]) => {
    const t = file.tensor(name);
    const [cols, rows] = t.dims;
    if (!hasWeightKernel(t.type)) return; // the loader refuses it
    const k = weightKernel(t.type);
    for (const r of parts ?? [rows]) weights += align64(k.packedBytes(r, cols));
    reads(k.act, cols);
  };
  const qDim = nHead * headDim;
  const kvDim = nHeadKV * headDim;
  const vector = (n: number) => (weights += align64(n * 4));
  const layerWeights: number[] = [];
  for (let l = 0; l < nLayer; l++) {
    const before = weights;
    const p = `blk.${l}.`;
    vector(nEmbd);
    if (file.tensors.has(`${p}attn_qkv.weight`)) matrix(`${p}attn_qkv.weight`, [qDim, kvDim, kvDim]);
    else for (const m of ["attn_q", "attn_k", "attn_v"]) matrix(`${p}${m}.weight`);
    matrix(`${p}attn_output.weight`);
    if (cfg.attnOutputBias) vector(nEmbd);
    if (cfg.attnSinks) vector(nHead);
    if (cfg.qkvBias) {
      vector(nHead * headDim);
      vector(nHeadKV * headDim);
      vector(nHeadKV * headDim);
    }
    if (cfg.qkNorm) {
      vector(headDim);
      vector(headDim);
    }
    if (cfg.postNorms) {
      vector(nEmbd);
      vector(nEmbd);
    }
    vector(nEmbd);
    if (store && cfg.nExpert > 0) matrix(routerName(l));
    if (!store && cfg.nExpert > 0) {
      // the router and every expert's three matrices (and their biases)
      matrix(routerName(l));
      if (cfg.expertBiases) {
        vector(cfg.nExpert);
        for (let e = 0; e < cfg.nExpert; e++) {
          vector(cfg.nFF);
          vector(cfg.nFF);
          vector(nEmbd);
        }
      }
      for (const kind of ["gate", "up", "down"] as const) {
        for (let e = 0; e < cfg.nExpert; e++) {
          const t = expertTensor(file, l, kind, e);
          const info = file.tensor(t.name);
          const [cols, rows] = info.dims;
          if (!hasWeightKernel(info.type)) continue;
          const k = weightKernel(info.type);
          weights += align64(k.packedBytes(rows, cols));
          reads(k.act, cols);
        }
      }
    } else if (!store) {
      if (file.tensors.has(`${p}ffn_gate.weight`)) {
        matrix(`${p}ffn_gate.weight`);
        matrix(`${p}ffn_up.weight`);
      } else matrix(`${p}ffn_up.weight`, [cfg.nFF, cfg.nFF]); // gate and up fused
      if (file.tensors.has(`${p}ffn_down_t.weight`)) {
        weights += align64(cfg.nFF * nEmbd * 4); // turned back into a row-major F32 matrix
        reads("f32", cfg.nFF);
      } else matrix(`${p}ffn_down.weight`);
    }
    layerWeights.push(weights - before);
  }
  const layersEnd = weights;
  vector(nEmbd);
  matrix(file.tensors.has("output.weight") ? "output.weight" : "token_embd.weight");
  const predictors = opts.predictors ? predictorShapes(file, cfg, opts.predictorType) : null;
  for (const s of predictors ?? []) {
    weights += predictorBytes(s);
    reads(s.fc1Act, nEmbd);
    reads(s.fc2Act, s.hidden);
  }
  if (predictors) weights += align64(Math.max(...predictors.map((s) => s.hidden)) * 4); // their hidden activations
  // An offloaded FFN's resident gate rows read the FFN input in their kernel's format.
  if (store) reads(weightKernel(file.ffn.type).act, nEmbd);
  const quantized = activationBufferBytes(widest, opts.batchSize);
  let buffers = 0;
  for (const bytes of quantized.values()) buffers += align64(bytes);
  const sizes = bufferBytes(cfg, opts.contextSize, opts.batchSize, opts.kvCache ?? DEFAULT_KV_CACHE);
  let kv = 0;
  for (const [name, n] of Object.entries(sizes)) {
    if (name === "kCache" || name === "vCache") kv += align64(n);
    else buffers += align64(n);
  }
  return { weights, layerWeights, headWeights: weights - layersEnd, buffers, kv, predictors, quantized };
}
