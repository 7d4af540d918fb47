/**
 * The llama-family transformer (llama, mistral, qwen2, bamboo; PowerInfer "PWRI" files run dense),
 * one forward pass over a batch of tokens. Prompt prefill runs the whole batch through each
 * matrix as one GEMM; decode is the same code with a batch of one (matvec kernels).
 *
 * Everything lives in one wasm memory laid out at load: weights, the KV cache ([layer][position]
 * [kvDim], f16 by default, kv-cache.ts) and the activation buffers for a batch of up to
 * `batchSize` tokens. forward() allocates nothing.
 */
import { readSync, closeSync } from "node:fs";
import { openModelFile } from "../format/model-file-open.js";
import { checkFiniteOnRead } from "../format/finite-check.js";
import { checkContextSize } from "./context-size.js";
import { checkValueTensorTypes } from "./tensor-types-check.js";
import { GGUFFile, type ModelFile } from "../format/gguf.js";
import { NeuronStore, STORE_MAGIC } from "../format/store/index.js";
import { OffloadedFFN, type OffloadOptions } from "./offload/offloaded-ffn.js";
import type { Tracer } from "../runtime/tracer.js";
import { BudgetError, offloadLayout, storeFacts, type OffloadLayout } from "./offload/layout.js";
import { hasPredictors, Predictor } from "./offload/predictor.js";
import { dequantizeRow } from "../format/quant.js";
import { GGMLType, tensorBytes } from "../format/ggml-types.js";
import { Arena } from "../runtime/arena.js";
import { ThreadPool } from "../runtime/pool.js";
import type { ActivationFormat } from "../runtime/weight-kernels.js";
import { readConfig, type ModelConfig } from "./config.js";
import { MatrixRunner } from "./matrix-runner.js";
import { bufferBytes, residentBytes, type BufferBytes } from "./resident-bytes.js";
import {
  DEFAULT_KV_CACHE,
  kvBytesPerPosition,
  kvRowBytes,
  parseKvCacheType,
  type KvCacheType,
  type KvCacheTypes,
} from "./kv-cache.js";
import { loadMoeLayer, routeTokens, routerName, type MoeLayer } from "./moe.js";
import { ropeTable } from "./rope.js";
import { WeightLoader, type Matrix } from "./weight-loader.js";
import type { GGUFTensorInfo } from "../format/gguf.js";

export { PREDICTOR_TENSOR_RE } from "./offload/predictor.js";

export interface LoadOptions {
  /** threads for compute, including the caller (default: all cores) */
  threads?: number;
  /** KV cache length in tokens (default: the training context, capped to what fits) */
  contextSize?: number;
  /** most tokens per forward call (prompt chunks); default 256 */
  batchSize?: number;
  /** element types of the KV cache's keys and values (default f16 both, as llama.cpp's) */
  kvCache?: Partial<KvCacheTypes>;
  onProgress?: (loadedBytes: number, totalBytes: number) => void;
  /**
   * For a neuron store (.pi): everything resident (weights kept in memory, KV cache, buffers,
   * neuron cache, the runtime itself) must fit in this many bytes; default: room for all of it.
   */
  memoryBudget?: number;
  /**
   * What the budget counts: "process" (default) the process's resident size (measured at load,
   * plus an allowance for what it gains while running); "wasm" the wasm memory and the buffers
   * it owns, nothing else (a browser tab, where the page's own memory is not the engine's to count).
   */
  budgetCounts?: "process" | "wasm";
  /** neuron cache and reader settings for a store (cacheBytes: a fixed cache size instead of what the budget leaves) */
  offload?: Partial<OffloadOptions>;
  /**
   * Per layer, FFN activations with |act(gate)| at or below this count as zero (CATS/TEAL-style
   * sparsity for SiLU models; 0 changes nothing for ReLU). Default: the model's
   * `powerinfer.activation_thresholds` metadata (written by convert from a calibrated profile), else none.
   */
  activationThresholds?: ArrayLike<number>;
  /**
   * How activation predictors (blk.N.fc1/fc2) sit in memory. "q8_0" (default): F32/F16/BF16
   * predictors are requantized to Q8_0 at load, their hidden width padded with zeros to a
   * multiple of 32 (fc1 zero rows, fc2 zero columns: the padding contributes exactly nothing);
   * predictors already quantized stay as they are. "original": as stored in the file.
   */
  predictorType?: "q8_0" | "original";
  /** records the forward pass per layer (attention, FFN), a store's FFN steps and reads (src/runtime/tracer.ts) */
  tracer?: Tracer;
  /**
   * Test hook: leave this many bytes of wasm memory unused below every buffer (untouched, so not
   * resident), to run the engine at addresses above 2 GiB where a signed shift would go wrong.
   */
  addressFloor?: number;
}

/**
 * What the dense FFN of layer `layer` sees for `n` tokens (row-major views into wasm memory, valid
 * only during the call): the residual stream before the FFN norm (the predictor's input), and the
 * gate and up projections before the activation. For offline tools (profiling, predictor training).
 */
export interface FFNObservation {
  layer: number;
  /** rows of gate and up */
  n: number;
  /** the residual stream of every token of the forward pass (n rows, or for an expert all the pass's tokens) */
  residual: Float32Array;
  gate: Float32Array;
  up: Float32Array;
  /** a mixture of experts: the expert observed, and which of the pass's tokens each gate/up row is */
  expert?: number;
  tokens?: Int32Array;
}

/** Metadata key of per-layer activation thresholds (an array of f32, one per layer). */
export const THRESHOLDS_KEY = "powerinfer.activation_thresholds";

/** Whether `path` is a neuron store (by its magic), as opposed to a GGUF file. */
export function isNeuronStore(path: string): boolean {
  let fd: number;
  try {
    ({ fd } = openModelFile(path, (m) => new Error(m)));
  } catch {
    return false; // not a readable, non-empty regular file: the GGUF reader says why
  }
  try {
    const b = Buffer.alloc(8);
    return readSync(fd, b, 0, 8, 0) === 8 && b.toString("latin1") === STORE_MAGIC;
  } finally {
    closeSync(fd);
  }
}

interface Layer {
  attnNorm: number;
  wq: Matrix;
  wk: Matrix;
  wv: Matrix;
  wo: Matrix;
  bq: number;
  bk: number;
  bv: number;
  ffnNorm: number;
  /** the dense FFN (absent when it is offloaded to a neuron store, or a mixture of experts) */
  gate?: Matrix;
  up?: Matrix;
  down?: Matrix;
  /** a mixture of experts in memory (Mixtral layout) */
  moe?: MoeLayer;
  /** a mixture whose experts are offloaded to a store: the router alone stays in memory */
  router?: Matrix;
}

const ACT_CODE = { silu: 0, relu: 1, drelu: 2, gelu: 3 } as const;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;
const f32Bits = (v: number) => new Int32Array(new Float32Array([v]).buffer)[0];

export class LlamaModel {
  readonly config: ModelConfig;
  readonly contextSize: number;
  readonly batchSize: number;
  readonly file: ModelFile;
  /** bytes of wasm memory in use (weights, caches, buffers) */
  readonly residentBytes: number;

  private constructor(
    file: ModelFile,
    cfg: ModelConfig,
    private readonly arena: Arena,
    private readonly pool: ThreadPool,
    private readonly layers: Layer[],
    /** the token embeddings: in memory, or (data null, a neuron store) one row read per token */
    private readonly embd: { info: GGUFTensorInfo; data: Uint8Array | null },
    private readonly outputNorm: number,
    private readonly output: Matrix,
    private readonly buf: Buffers,
    /** every matrix product of the forward pass runs on it */
    private readonly mm: MatrixRunner,
    contextSize: number,
    batchSize: number,
    /** the KV cache's element types */
    readonly kvCache: KvCacheTypes,
    /** the FFN of a model run from a neuron store */
    readonly offloaded?: OffloadedFFN,
  ) {
    this.file = file;
    this.config = cfg;
    this.contextSize = contextSize;
    this.batchSize = batchSize;
    this.residentBytes = arena.used;
    this.heap = new Uint8Array(arena.memory.buffer);
    this.f32 = new Float32Array(arena.memory.buffer);
    this.i32 = new Int32Array(arena.memory.buffer);
    this.fn = {
      rmsnorm: pool.fn("rmsnorm_rows"),
      rope: pool.fn("rope"),
      attention: pool.fn("attention"),
      kvStore: pool.fn("kv_store"),
      ffnAct: pool.fn("ffn_act"),
      ffnActCut: pool.fn("ffn_act_cut"),
      add: pool.fn("add_inplace"),
      bias: pool.fn("add_bias_rows"),
    };
    this.epsBits = f32Bits(cfg.normEps);
    // q, k, v read one input and so do gate and up: each set runs as one pool group
    this.qkv = layers.map((L) => [L.wq, L.wk, L.wv]);
    this.qkvOut = [buf.q, buf.hg, buf.hu];
    this.gateUp = layers.map((L) => (L.gate && L.up ? [L.gate, L.up] : []));
    this.gateUpOut = [buf.hg, buf.hu];
    const k = cfg.nExpertUsed;
    this.routing = {
      ids: new Int32Array(batchSize * k),
      weights: new Float32Array(batchSize * k),
      probs: new Float64Array(cfg.nExpert),
      tokens: new Int32Array(batchSize),
      tokenWeights: new Float32Array(batchSize),
      ahead: new Int32Array(Math.max(1, k)),
    };
    this.logits = new Float32Array(arena.memory.buffer, buf.logits, cfg.nVocab);
  }

  private readonly heap: Uint8Array;
  private readonly f32: Float32Array;
  private readonly i32: Int32Array;
  private readonly fn: Record<
    "rmsnorm" | "rope" | "attention" | "kvStore" | "ffnAct" | "ffnActCut" | "add" | "bias",
    number
  >;
  private readonly epsBits: number;
  private readonly args = new Int32Array(16);
  private readonly qkv: Matrix[][];
  private readonly qkvOut: number[];
  private readonly gateUp: Matrix[][];
  private readonly gateUpOut: number[];
  /** a mixture of experts' routing of the current batch (laid out once) */
  private readonly routing: {
    ids: Int32Array;
    weights: Float32Array;
    probs: Float64Array;
    tokens: Int32Array;
    tokenWeights: Float32Array;
    /** the next layer's likely experts (store groups) to read ahead */
    ahead: Int32Array;
  };
  /** logits of the last token of the last forward() (a view into wasm memory) */
  readonly logits: Float32Array;
  /**
   * The tokens whose keys and values sit in the KV cache at positions 0..length-1 (forward()
   * keeps it), so that a prompt sharing a prefix with the previous one can reuse them.
   */
  readonly cachedTokens: number[] = [];
  /** per-layer activation thresholds in force (null: none) */
  thresholds: Float32Array | null = null;
  /**
   * Bytes of wasm memory the model itself took (the kernels' static region, weights, buffers, KV
   * cache), before an offloaded FFN's: what resident-bytes.ts computed before loading, plus the
   * static region (tests check the two agree).
   */
  fixedArenaBytes = 0;
  /** Bytes of the shared wasm memory as it stands (it only grows: this is also its peak). */
  get wasmMemoryBytes(): number {
    return this.arena.memory.buffer.byteLength;
  }
  /** the trace being recorded (LoadOptions.tracer), null when none */
  tracer: Tracer | null = null;
  /** one embedding row read from a store */
  private embdRow: Uint8Array | null = null;
  /** see setFFNObserver */
  private observer: ((o: FFNObservation) => void) | null = null;

  /**
   * Call `fn` in every layer of every dense forward() with the FFN's inputs and gate/up
   * projections (null: stop). Offline tools read activations this way; it slows the forward pass.
   */
  setFFNObserver(fn: ((o: FFNObservation) => void) | null): void {
    if (fn && this.offloaded)
      throw new Error("FFN observation needs the dense model (a GGUF file), not a neuron store");
    this.observer = fn;
  }

  /**
   * What a load decides before anything loads: the context, what the model will keep in wasm
   * memory, and for a store its memory layout (a budget too small is refused here: a cgroup
   * limit would kill a process that loaded first). Creates the arena and the thread pool; the
   * process's resident size after that is the layout's base.
   */
  private static async prepare(file: ModelFile, opts: LoadOptions) {
    const store = file instanceof NeuronStore ? file : undefined;
    const cfg = readConfig(file);
    checkValueTensorTypes(file);
    const threads = opts.threads ?? (await import("node:os")).availableParallelism();
    const batchSize = Math.max(1, Math.min(opts.batchSize ?? 256, 4096));
    if (opts.predictorType !== undefined && opts.predictorType !== "q8_0" && opts.predictorType !== "original") {
      throw new RangeError(`predictorType must be "q8_0" or "original", got ${JSON.stringify(opts.predictorType)}`);
    }
    const withPredictors = hasPredictors(file, cfg);
    const sparsity = opts.offload?.sparsity ?? (withPredictors ? "predictor" : "gate");
    if (store && sparsity === "predictor" && !withPredictors) {
      throw new Error(
        `${file.path}: --sparsity predictor needs activation predictors (blk.N.fc1/fc2), and this model has none: use --sparsity gate, or train them (powerinfer train-predictors)`,
      );
    }
    const kvCache: KvCacheTypes = {
      k: parseKvCacheType(opts.kvCache?.k ?? DEFAULT_KV_CACHE.k, "kvCache.k"),
      v: parseKvCacheType(opts.kvCache?.v ?? DEFAULT_KV_CACHE.v, "kvCache.v"),
    };
    const residentOpts = (contextSize: number) => ({
      batchSize,
      contextSize,
      kvCache,
      predictors: store !== undefined && sparsity === "predictor",
      predictorType: opts.predictorType,
    });
    // Under a memory budget the KV cache is part of it: a short default context. Without an
    // explicit one, the KV cache gets what wasm32 can address next to the weights (~64 MiB kept
    // for the buffers).
    const defaultContext = opts.memoryBudget !== undefined ? 256 : 4096;
    checkContextSize(opts.contextSize, Math.min(cfg.nCtxTrain, defaultContext), file);
    let contextSize = Math.max(1, Math.floor(opts.contextSize ?? Math.min(cfg.nCtxTrain, defaultContext)));
    const kvBytesPerPos = kvBytesPerPosition(cfg, kvCache);
    const room = 4 * 2 ** 30 - (1 << 20) - residentBytes(file, cfg, residentOpts(0)).weights - 64 * 2 ** 20;
    if (opts.contextSize === undefined && contextSize * kvBytesPerPos > room) {
      contextSize = Math.max(16, Math.floor(room / kvBytesPerPos));
    }
    const resident = residentBytes(file, cfg, residentOpts(contextSize));
    // Under a budget the memory starts small and grows as laid out, so that its size (what a
    // browser counts against the page) never passes the budget; otherwise 64 MiB saves grows.
    const arena = new Arena(opts.memoryBudget !== undefined ? 4 << 20 : 64 << 20);
    if (opts.addressFloor) arena.alloc(opts.addressFloor, 4096);
    const pool = await ThreadPool.create(arena.memory, threads);
    try {
      const layout = store
        ? offloadLayout(
            storeFacts(store, cfg),
            {
              // "wasm": the memory below the arena (the kernels' static region) is the base
              ...(opts.budgetCounts === "wasm" ? { base: arena.used, growth: 0 } : { base: process.memoryUsage.rss() }),
              weights: resident.weights,
              buffers: resident.buffers,
              kv: resident.kv,
            },
            opts.memoryBudget,
            {
              sparsity,
              threads,
              residentGates: opts.offload?.residentGates,
              hotFraction: opts.offload?.hotFraction,
              cacheBytes: opts.offload?.cacheBytes,
              verifyOnce: (opts.offload?.verify ?? "once") === "once",
            },
          )
        : undefined;
      if (layout && !layout.fits) throw new BudgetError(layout, file.path);
      return { store, cfg, batchSize, sparsity, contextSize, kvCache, resident, arena, pool, layout };
    } catch (e) {
      await pool.dispose();
      throw e;
    }
  }

  /**
   * The memory layout `load(path, opts)` would make for a store, computed in this process the
   * way load computes it (its base is this process's resident size with a thread pool made);
   * nothing loads. A budget too small is an error, as for load.
   */
  static async layoutOf(path: string, opts: LoadOptions = {}): Promise<OffloadLayout> {
    if (!isNeuronStore(path)) throw new Error(`${path}: a memory layout is made for a neuron store (.pi)`);
    const file = NeuronStore.open(path);
    try {
      const p = await LlamaModel.prepare(file, opts);
      await p.pool.dispose();
      return p.layout!;
    } finally {
      file.close();
    }
  }

  static async load(path: string, opts: LoadOptions = {}): Promise<LlamaModel> {
    // Every tensor read is checked for NaN/Inf as it passes (see finite-check.ts).
    const file: ModelFile = checkFiniteOnRead(isNeuronStore(path) ? NeuronStore.open(path) : GGUFFile.open(path));
    let pool: ThreadPool | undefined;
    try {
      const prepared = await LlamaModel.prepare(file, opts);
      const { store, cfg, batchSize, sparsity, contextSize, kvCache, resident, arena, layout } = prepared;
      pool = prepared.pool;
      const weightBytes = [...file.tensors.values()].reduce(
        (a, t) => (store && t.name === "token_embd.weight" ? a : a + t.bytes),
        0,
      );
      const loader = new WeightLoader(file, arena, pool, opts.onProgress && ((b) => opts.onProgress!(b, weightBytes)));
      const { nEmbd, nFF, nHead, nHeadKV, headDim, nVocab } = cfg;
      const qDim = nHead * headDim;
      const kvDim = nHeadKV * headDim;

      const thresholds = activationThresholds(file, cfg.nLayer, opts.activationThresholds);
      // From a store, embedding rows are read from the file as tokens come (one row per token):
      // the table (82 MB at 7B Q4_1) need not be resident under a budget.
      const embd = store
        ? { info: loader.check("token_embd.weight", [nEmbd, nVocab]), data: null }
        : loader.raw("token_embd.weight", [nEmbd, nVocab]);
      const layers: Layer[] = [];
      for (let l = 0; l < cfg.nLayer; l++) {
        const p = `blk.${l}.`;
        const bias = (name: string, n: number) => (cfg.qkvBias ? loader.vector(p + name, n) : 0);
        layers.push({
          attnNorm: loader.vector(p + "attn_norm.weight", nEmbd),
          wq: loader.matrix(p + "attn_q.weight", nEmbd, qDim),
          wk: loader.matrix(p + "attn_k.weight", nEmbd, kvDim),
          wv: loader.matrix(p + "attn_v.weight", nEmbd, kvDim),
          wo: loader.matrix(p + "attn_output.weight", qDim, nEmbd),
          bq: bias("attn_q.bias", qDim),
          bk: bias("attn_k.bias", kvDim),
          bv: bias("attn_v.bias", kvDim),
          ffnNorm: loader.vector(p + "ffn_norm.weight", nEmbd),
          ...(store
            ? cfg.nExpert > 0
              ? { router: loader.matrix(routerName(l), nEmbd, cfg.nExpert) }
              : {}
            : cfg.nExpert > 0
              ? { moe: loadMoeLayer(loader, file, cfg, l) }
              : {
                  gate: loader.matrix(p + "ffn_gate.weight", nEmbd, nFF),
                  up: loader.matrix(p + "ffn_up.weight", nEmbd, nFF),
                  down: file.tensors.has(p + "ffn_down_t.weight")
                    ? loader.transposedMatrix(p + "ffn_down_t.weight", nFF, nEmbd)
                    : loader.matrix(p + "ffn_down.weight", nFF, nEmbd),
                }),
        });
      }
      const outputNorm = loader.vector("output_norm.weight", nEmbd);
      const output = loader.matrix(
        file.tensors.has("output.weight") ? "output.weight" : "token_embd.weight",
        nEmbd,
        nVocab,
      );
      const predictor = resident.predictors
        ? Predictor.load(loader, arena, pool, file, cfg, resident.predictors, undefined, (g) => store!.layer(g).order)
        : null;
      const buf = allocBuffers(arena, cfg, contextSize, batchSize, resident.quantized, kvCache);
      const fixedArenaBytes = arena.used - (opts.addressFloor ?? 0);
      // Touch the activation buffers (laid out from x up to the KV cache) now: they are resident
      // from the start, as the layout counts them.
      if (store) arena.u8(buf.x, buf.kCache - buf.x).fill(0);
      arena.f32(buf.rope, contextSize * cfg.nRot).set(ropeTable(cfg, contextSize));
      const mm = new MatrixRunner(pool, buf.act);
      const offloaded =
        store && layout
          ? new OffloadedFFN(
              { store, cfg, arena, pool, layout, mm, predictor },
              { ...opts.offload, sparsity, thresholds, tracer: opts.tracer },
            )
          : undefined;
      const model = new LlamaModel(
        file,
        cfg,
        arena,
        pool,
        layers,
        embd,
        outputNorm,
        output,
        buf,
        mm,
        contextSize,
        batchSize,
        kvCache,
        offloaded,
      );
      model.thresholds = thresholds;
      model.fixedArenaBytes = fixedArenaBytes;
      model.tracer = opts.tracer ?? null;
      return model;
    } catch (e) {
      await pool?.dispose();
      file.close();
      throw e;
    }
  }

  get threads(): number {
    return this.pool.threads;
  }

  /**
   * Run `n` tokens (tokens[0..n)) at positions pos0..pos0+n-1, filling the KV cache; leaves the
   * logits of the last token in `this.logits`. n must be <= batchSize and pos0 + n <= contextSize.
   * For a model whose FFN is offloaded to a neuron store, use forwardAsync.
   */
  forward(tokens: ArrayLike<number>, n: number, pos0: number): Float32Array {
    if (this.offloaded) throw new Error("this model reads its FFN from flash: call forwardAsync()");
    const tr = this.tracer;
    this.embed(tokens, n, pos0);
    for (let l = 0; l < this.config.nLayer; l++) {
      const t = tr ? tr.now() : 0;
      this.attentionBlock(l, n, pos0);
      const tf = tr ? tr.now() : 0;
      if (tr) tr.span("attention", "attention", t, undefined, tf);
      if (this.layers[l].moe) this.moeFFN(l, n);
      else this.denseFFN(l, n);
      if (tr) {
        tr.span("ffn", "ffn", tf);
        tr.span(`layer ${l}`, "layer", t);
      }
    }
    const t = tr ? tr.now() : 0;
    const logits = this.logitsOfLast(n);
    if (tr) tr.span("output", "output", t);
    return logits;
  }

  /**
   * forward() that also writes the logits of every one of the n tokens into out (n * nVocab,
   * row-major), as perplexity needs. Dense models only.
   */
  forwardAll(tokens: ArrayLike<number>, n: number, pos0: number, out: Float32Array): void {
    const nVocab = this.config.nVocab;
    if (out.length < n * nVocab)
      throw new RangeError(`forwardAll: out holds ${out.length} floats, ${n} tokens need ${n * nVocab}`);
    this.forward(tokens, n, pos0);
    out.set(this.logits, (n - 1) * nVocab);
    for (let t = 0; t < n - 1; t++) out.set(this.logitsOfRow(t), t * nVocab);
  }

  /** forward() for any model; the FFN of an offloaded model waits for its reads from flash. */
  async forwardAsync(tokens: ArrayLike<number>, n: number, pos0: number): Promise<Float32Array> {
    const off = this.offloaded;
    if (!off) return this.forward(tokens, n, pos0);
    const b = this.buf;
    const row = this.config.nEmbd * 4;
    const tr = this.tracer;
    off.startPass();
    this.embed(tokens, n, pos0);
    for (let l = 0; l < this.config.nLayer; l++) {
      const t0 = tr ? tr.now() : 0;
      this.attentionBlock(l, n, pos0);
      const tf = tr ? tr.now() : 0;
      if (tr) tr.span("attention", "attention", t0, undefined, tf);
      if (this.config.nExpert > 0) await this.moeOffloaded(off, l, n);
      else {
        this.rmsnorm(b.xb, b.x, this.layers[l].ffnNorm, n);
        // A prompt as one batch (every needed bundle read once); otherwise one token at a time,
        // each seeing only its own firing neurons.
        if (n > 1 && off.batches) await off.prefillBatch(l, b.xb, b.x, n, b.hg);
        else for (let t = 0; t < n; t++) await off.decodeStep(l, b.xb + t * row, b.x + t * row);
      }
      if (tr) {
        tr.span("ffn", "ffn", tf);
        tr.span(`layer ${l}`, "layer", t0);
      }
    }
    const t = tr ? tr.now() : 0;
    const logits = this.logitsOfLast(n);
    if (tr) tr.span("output", "output", t);
    return logits;
  }

  /**
   * The predictor of layer `layer` on one residual row `x` (nEmbd values, before the FFN norm),
   * as decode computes it: the nFF scores (copied out) and, when `hidden` is given, the hidden
   * activations relu(fc1 . x) copied into it (the predictor's width in memory, padding
   * included: see predictorWidth). For tools and tests; uses the activation buffers, so not
   * during a forward pass.
   */
  predictorScores(layer: number, x: ArrayLike<number>, hidden?: Float32Array): Float32Array {
    const p = this.offloaded?.predictor;
    if (!p || !(layer >= 0 && layer < this.config.nLayer))
      throw new Error(
        `layer ${layer} has no predictor loaded (a store with predictors, loaded for --sparsity predictor, has one)`,
      );
    const { nEmbd, nFF } = this.config;
    if (x.length !== nEmbd)
      throw new RangeError(`predictorScores: x holds ${x.length} values, the residual has ${nEmbd}`);
    const b = this.buf;
    this.f32.set(x, b.xb >>> 2);
    p.scores(this.mm, layer, b.xb, nEmbd, b.hg);
    const width = p.width(layer).hidden;
    if (hidden) hidden.set(this.f32.subarray(p.hidden >>> 2, (p.hidden >>> 2) + Math.min(hidden.length, width)));
    const scores = this.f32.slice(b.hg >>> 2, (b.hg >>> 2) + nFF);
    if (!p.rowOrder) return scores;
    // fc2's rows are in the store's order: put each score back at its neuron
    const order = p.rowOrder(layer);
    const out = new Float32Array(nFF);
    for (let k = 0; k < nFF; k++) out[order[k]] = scores[k];
    return out;
  }

  /** The predictor of layer `layer` in memory: its GGML type and hidden width (padded when requantized), or null. */
  predictorWidth(layer: number): { type: GGMLType; hidden: number } | null {
    const p = this.offloaded?.predictor;
    return p && layer >= 0 && layer < this.config.nLayer ? p.width(layer) : null;
  }

  /** Embeddings (one dequantized row per token) and positions; checks the token ids. */
  private embed(tokens: ArrayLike<number>, n: number, pos0: number): void {
    const cfg = this.config;
    if (n < 1 || n > this.batchSize) throw new RangeError(`forward: ${n} tokens, batch holds 1..${this.batchSize}`);
    if (pos0 < 0 || pos0 + n > this.contextSize)
      throw new RangeError(
        `context full: positions ${pos0}..${pos0 + n - 1} exceed the context size ${this.contextSize}`,
      );
    const b = this.buf;
    const nEmbd = cfg.nEmbd;
    const rowBytes = tensorBytes(this.embd.info.type, nEmbd);
    for (let t = 0; t < n; t++) {
      const id = tokens[t];
      if (!(id >= 0 && id < cfg.nVocab))
        throw new RangeError(`token id ${id} is outside the vocabulary (0..${cfg.nVocab - 1})`);
      let row: Uint8Array;
      if (this.embd.data) row = this.embd.data.subarray(id * rowBytes, (id + 1) * rowBytes);
      else {
        row = this.embdRow ??= new Uint8Array(rowBytes);
        this.file.readTensor(this.embd.info, row, id * rowBytes, rowBytes);
      }
      dequantizeRow(this.embd.info.type, row, nEmbd, this.f32, (b.x >>> 2) + t * nEmbd);
      this.i32[(b.pos >>> 2) + t] = pos0 + t;
    }
    this.cachedTokens.length = pos0;
    for (let t = 0; t < n; t++) this.cachedTokens.push(tokens[t]);
  }

  /**
   * x += attention(norm(x)) for layer l: Q/K/V, RoPE, the new keys and values into the cache (in
   * its element types), attend, project. The new keys and values are computed in f32 in hg and hu,
   * which the FFN needs only after attention.
   */
  private attentionBlock(l: number, n: number, pos0: number): void {
    const cfg = this.config;
    const { nEmbd, nHead, nHeadKV, headDim } = cfg;
    const qDim = nHead * headDim;
    const kvDim = nHeadKV * headDim;
    const b = this.buf;
    const pool = this.pool;
    const a = this.args;
    const L = this.layers[l];
    const kRow = kvRowBytes(cfg, this.kvCache.k);
    const vRow = kvRowBytes(cfg, this.kvCache.v);
    const kCache = b.kCache + l * this.contextSize * kRow;
    const vCache = b.vCache + l * this.contextSize * vRow;
    const kNew = this.qkvOut[1]; // the new keys and values, in f32
    const vNew = this.qkvOut[2];

    this.rmsnorm(b.xb, b.x, L.attnNorm, n);
    this.mm.setInput(b.xb, nEmbd);
    this.mm.runAll(this.qkv[l], this.qkvOut, n);
    if (L.bq) {
      this.addBias(b.q, L.bq, qDim, n);
      this.addBias(kNew, L.bk, kvDim, n);
      this.addBias(vNew, L.bv, kvDim, n);
    }
    const neox = cfg.ropePairing === "neox" ? 1 : 0;
    a[0] = b.q;
    a[1] = b.pos;
    a[2] = b.rope;
    a[3] = nHead;
    a[4] = headDim;
    a[5] = cfg.nRot;
    a[6] = neox;
    pool.run(this.fn.rope, a, 7, n, 1, n * qDim * 4);
    a[0] = kNew;
    a[3] = nHeadKV;
    pool.run(this.fn.rope, a, 7, n, 1, n * kvDim * 4);
    this.storeKV(kNew, kCache + pos0 * kRow, this.kvCache.k, n * kvDim);
    this.storeKV(vNew, vCache + pos0 * vRow, this.kvCache.v, n * kvDim);
    a[0] = b.q;
    a[1] = kCache;
    a[2] = vCache;
    a[3] = b.att;
    a[4] = b.scores;
    a[5] = n;
    a[6] = pos0;
    a[7] = nHead;
    a[8] = nHeadKV;
    a[9] = headDim;
    a[10] = this.contextSize;
    a[11] = this.kvCache.k === "f16" ? 1 : 0;
    a[12] = this.kvCache.v === "f16" ? 1 : 0;
    pool.run(this.fn.attention, a, 13, nHead, 1, 2 * n * (pos0 + n) * qDim);
    this.mm.setInput(b.att, qDim);
    this.mm.run(L.wo, b.xb, n);
    this.add(b.x, b.xb, n * nEmbd);
  }

  /** count f32 values at src into the KV cache at dst as `type` (rounded to nearest even for f16). */
  private storeKV(src: number, dst: number, type: KvCacheType, count: number): void {
    const a = this.args;
    a[0] = src;
    a[1] = dst;
    a[2] = type === "f16" ? 1 : 0;
    this.pool.run(this.fn.kvStore, a, 3, count, 1024, count * 4);
  }

  /** x += down(act(gate . norm(x)) * up . norm(x)) for layer l, all neurons. */
  private denseFFN(l: number, n: number): void {
    const cfg = this.config;
    const b = this.buf;
    const a = this.args;
    const L = this.layers[l];
    this.rmsnorm(b.xb, b.x, L.ffnNorm, n);
    this.mm.setInput(b.xb, cfg.nEmbd);
    this.mm.runAll(this.gateUp[l], this.gateUpOut, n);
    if (this.observer) {
      const buf = this.arena.memory.buffer;
      this.observer({
        layer: l,
        n,
        residual: new Float32Array(buf, b.x, n * cfg.nEmbd),
        gate: new Float32Array(buf, b.hg, n * cfg.nFF),
        up: new Float32Array(buf, b.hu, n * cfg.nFF),
      });
    }
    this.activate(l, n);
    this.mm.setInput(b.hg, cfg.nFF);
    this.mm.run(L.down!, b.xb, n);
    this.add(b.x, b.xb, n * cfg.nEmbd);
  }

  /** hg = act(hg) * hu over n rows of nFF (with layer l's activation threshold, if any). */
  private activate(l: number, n: number): void {
    const a = this.args;
    const nFF = this.config.nFF;
    a[0] = this.buf.hg;
    a[1] = this.buf.hu;
    a[2] = ACT_CODE[this.config.activation];
    const cut = this.thresholds ? this.thresholds[l] : 0;
    if (cut > 0) {
      a[3] = f32Bits(cut);
      this.pool.run(this.fn.ffnActCut, a, 4, n * nFF, 64, n * nFF * 16);
    } else this.pool.run(this.fn.ffnAct, a, 3, n * nFF, 64, n * nFF * 16);
  }

  /**
   * x += the FFN of a mixture of experts for layer l: each token routed to its experts (moe.ts),
   * then expert by expert the tokens routed to it as one batch (gathered, their gate, up, down),
   * each token's output weighted and summed, the sum added to the residual stream last.
   */
  private moeFFN(l: number, n: number): void {
    const { nEmbd, nFF } = this.config;
    const b = this.buf;
    const moe = this.layers[l].moe!;
    const r = this.routing;
    this.routeLayer(moe.router, l, n);
    for (let e = 0; e < this.config.nExpert; e++) {
      const m = this.tokensOf(e, n);
      if (m === 0) continue;
      const E = moe.experts[e];
      this.mm.setInput(b.moeIn, nEmbd);
      this.mm.run(E.gate, b.hg, m);
      this.mm.run(E.up, b.hu, m);
      if (this.observer) {
        const buf = this.arena.memory.buffer;
        this.observer({
          layer: l,
          expert: e,
          n: m,
          tokens: r.tokens.subarray(0, m),
          residual: new Float32Array(buf, b.x, n * nEmbd),
          gate: new Float32Array(buf, b.hg, m * nFF),
          up: new Float32Array(buf, b.hu, m * nFF),
        });
      }
      this.activate(l, m);
      this.mm.setInput(b.hg, nFF);
      this.mm.run(E.down, b.moeOut, m);
      this.addWeighted(m);
    }
    this.add(b.x, b.moeAcc, n * nEmbd);
  }

  /**
   * The same for a mixture whose experts are offloaded: each expert's tokens through its group of
   * bundles in the store (a batch, or one by one). Decoding one token with read-ahead (predictor
   * mode), each routed expert's step reads ahead the next routed expert's picks (exact: the same
   * residual row), and after the layer the experts the next layer's router picks on the new
   * residual get their likely bundles read ahead while its attention computes.
   */
  private async moeOffloaded(off: OffloadedFFN, l: number, n: number): Promise<void> {
    const { nEmbd, nExpert, nExpertUsed } = this.config;
    const b = this.buf;
    const r = this.routing;
    const row = nEmbd * 4;
    this.routeLayer(this.layers[l].router!, l, n);
    const ahead = n === 1 && off.readsAheadExpert;
    for (let e = 0; e < nExpert; e++) {
      const m = this.tokensOf(e, n);
      if (m === 0) continue;
      const group = l * nExpert + e;
      this.f32.fill(0, b.moeOut >>> 2, (b.moeOut >>> 2) + m * nEmbd);
      if (m > 1 && off.batches) await off.prefillBatch(group, b.moeIn, b.moeOut, m, b.hg);
      else {
        const next = ahead ? this.nextRouted(e) : -1;
        for (let i = 0; i < m; i++)
          await off.decodeStep(
            group,
            b.moeIn + i * row,
            b.x + r.tokens[i] * row,
            b.moeOut + i * row,
            next < 0 ? -1 : l * nExpert + next,
          );
      }
      this.addWeighted(m);
    }
    this.add(b.x, b.moeAcc, n * nEmbd);
    if (n === 1 && off.readsAheadLayer && l + 1 < this.config.nLayer) {
      // the next layer's router on the residual as it is now (its attention still to come)
      this.rmsnorm(b.xb, b.x, this.layers[l + 1].ffnNorm, 1);
      this.mm.setInput(b.xb, nEmbd);
      this.mm.run(this.layers[l + 1].router!, b.route, 1);
      const logits = b.route >>> 2;
      for (let j = 0; j < nExpertUsed; j++) {
        let best = -1;
        for (let e = 0; e < nExpert; e++) {
          let taken = false;
          for (let i = 0; i < j; i++) if (r.ahead[i] === (l + 1) * nExpert + e) taken = true;
          if (!taken && (best < 0 || this.f32[logits + e] > this.f32[logits + best])) best = e;
        }
        r.ahead[j] = (l + 1) * nExpert + best;
      }
      off.readAheadGroups(r.ahead, nExpertUsed, b.x);
    }
  }

  /** Decoding one token: the expert after e (in the order moeOffloaded steps through them) it is routed to, or -1. */
  private nextRouted(e: number): number {
    const k = this.config.nExpertUsed;
    const ids = this.routing.ids;
    let next = -1;
    for (let j = 0; j < k; j++) if (ids[j] > e && (next < 0 || ids[j] < next)) next = ids[j];
    return next;
  }

  /** Route the n normed rows of xb with `router` (the routing into this.routing); clears the layer's output sum. */
  private routeLayer(router: Matrix, l: number, n: number): void {
    const { nEmbd, nExpert, nExpertUsed } = this.config;
    const b = this.buf;
    const r = this.routing;
    this.rmsnorm(b.xb, b.x, this.layers[l].ffnNorm, n);
    this.mm.setInput(b.xb, nEmbd);
    this.mm.run(router, b.route, n);
    const logits = this.f32.subarray(b.route >>> 2, (b.route >>> 2) + n * nExpert);
    routeTokens(logits, n, nExpert, nExpertUsed, r.ids, r.weights, r.probs);
    this.f32.fill(0, b.moeAcc >>> 2, (b.moeAcc >>> 2) + n * nEmbd);
  }

  /** The tokens routed to expert e (into routing.tokens, their weights into tokenWeights), their xb rows gathered into moeIn; returns how many. */
  private tokensOf(e: number, n: number): number {
    const k = this.config.nExpertUsed;
    const nEmbd = this.config.nEmbd;
    const r = this.routing;
    const f32 = this.f32;
    let m = 0;
    for (let t = 0; t < n; t++) {
      for (let j = 0; j < k; j++) {
        if (r.ids[t * k + j] !== e) continue;
        const from = (this.buf.xb >>> 2) + t * nEmbd;
        f32.copyWithin((this.buf.moeIn >>> 2) + m * nEmbd, from, from + nEmbd);
        r.tokens[m] = t;
        r.tokenWeights[m++] = r.weights[t * k + j];
      }
    }
    return m;
  }

  /** moeAcc rows of the expert's m tokens += their routing weight * its output rows (moeOut). */
  private addWeighted(m: number): void {
    const nEmbd = this.config.nEmbd;
    const r = this.routing;
    const f32 = this.f32;
    for (let i = 0; i < m; i++) {
      const w = r.tokenWeights[i];
      const acc = (this.buf.moeAcc >>> 2) + r.tokens[i] * nEmbd;
      const out = (this.buf.moeOut >>> 2) + i * nEmbd;
      for (let c = 0; c < nEmbd; c++) f32[acc + c] += w * f32[out + c];
    }
  }

  /** Final norm and the output matrix, for the last token only. */
  private logitsOfLast(n: number): Float32Array {
    return this.logitsOfRow(n - 1);
  }

  /** Final norm and the output matrix for row t of the last batch. */
  private logitsOfRow(t: number): Float32Array {
    const b = this.buf;
    const nEmbd = this.config.nEmbd;
    this.rmsnorm(b.xb, b.x + t * nEmbd * 4, this.outputNorm, 1);
    this.mm.setInput(b.xb, nEmbd);
    this.mm.run(this.output, b.logits, 1);
    return this.logits;
  }

  private rmsnorm(y: number, x: number, w: number, n: number): void {
    const a = this.args;
    a[0] = y;
    a[1] = x;
    a[2] = w;
    a[3] = this.config.nEmbd;
    a[4] = this.epsBits;
    this.pool.run(this.fn.rmsnorm, a, 5, n, 1, n * this.config.nEmbd * 4);
  }

  private add(y: number, x: number, count: number): void {
    const a = this.args;
    a[0] = y;
    a[1] = x;
    this.pool.run(this.fn.add, a, 2, count, 64, count);
  }

  private addBias(y: number, bias: number, width: number, n: number): void {
    const a = this.args;
    a[0] = y;
    a[1] = bias;
    a[2] = width;
    this.pool.run(this.fn.bias, a, 3, n, 1, n * width);
  }

  async dispose(): Promise<void> {
    await this.offloaded?.close();
    await this.pool.dispose();
    this.file.close();
  }
}

/** Addresses of the forward pass's buffers (resident-bytes.ts bufferBytes sizes them). */
type Buffers = Record<keyof BufferBytes, number> & { act: Record<ActivationFormat, number> };

function allocBuffers(
  arena: Arena,
  cfg: ModelConfig,
  ctx: number,
  batch: number,
  quantized: ReadonlyMap<ActivationFormat, number>,
  kv: KvCacheTypes,
): Buffers {
  const act = { f32: 0, q8_0: 0, q8_1: 0, q8_K: 0 } as Record<ActivationFormat, number>;
  for (const [fmt, bytes] of quantized) act[fmt] = arena.alloc(bytes, 64);
  const sizes = bufferBytes(cfg, ctx, batch, kv);
  const at = {} as Record<keyof typeof sizes, number>;
  for (const [name, n] of Object.entries(sizes) as [keyof typeof sizes, number][]) at[name] = arena.alloc(n, 64);
  return { ...at, act };
}

/** Per-layer activation thresholds from the options or the model's metadata, checked; null when none. */
function activationThresholds(
  file: ModelFile,
  nLayer: number,
  given: ArrayLike<number> | undefined,
): Float32Array | null {
  let values: ArrayLike<number>;
  let where: string;
  if (given !== undefined) {
    values = given;
    where = "activationThresholds";
  } else if (file.has(THRESHOLDS_KEY)) {
    where = `${file.path}: metadata ${THRESHOLDS_KEY}`;
    const arr = file.getArray(THRESHOLDS_KEY);
    if (!arr) throw new Error(`${where}: expected an array of numbers, one per layer`);
    values = arr as unknown as ArrayLike<number>;
  } else return null;
  if (values.length !== nLayer)
    throw new Error(`${where}: ${values.length} thresholds, the model has ${nLayer} layers`);
  const out = new Float32Array(nLayer);
  for (let l = 0; l < nLayer; l++) {
    const v = Number(values[l]);
    if (!(Number.isFinite(v) && v >= 0))
      throw new Error(`${where}: threshold of layer ${l} is ${values[l]}, expected a finite number >= 0`);
    out[l] = v;
  }
  return out.some((v) => v > 0) ? out : null;
}
