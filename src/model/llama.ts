/**
 * The llama-family transformer (llama, mistral, qwen2, bamboo; PowerInfer "PWRI" files run dense),
 * one forward pass over a batch of tokens. Prompt prefill runs the whole batch through each
 * matrix as one GEMM; decode is the same code with a batch of one (matvec kernels).
 *
 * Everything lives in one wasm memory laid out at load: weights, the KV cache ([layer][position]
 * [kvDim] f32) and the activation buffers for a batch of up to `batchSize` tokens. forward()
 * allocates nothing.
 */
import { readSync, closeSync } from "node:fs";
import { openModelFile } from "../format/model-file-open.js";
import { checkFiniteOnRead } from "../format/finite-check.js";
import { checkContextSize } from "./context-size.js";
import { checkValueTensorTypes } from "./tensor-types-check.js";
import { GGUFFile, type ModelFile } from "../format/gguf.js";
import { NeuronStore, STORE_MAGIC } from "../format/store.js";
import { OffloadedFFN, gateReadBytesOf, gateStagingBytes, type OffloadOptions } from "./offloaded-ffn.js";
import { dequantizeRow } from "../format/quant.js";
import { GGMLType, tensorBytes } from "../format/ggml-types.js";
import { Arena } from "../runtime/arena.js";
import { ThreadPool } from "../runtime/pool.js";
import {
  activationBytes,
  hasWeightKernel,
  prepareKernel,
  weightKernel,
  type ActivationFormat,
} from "../runtime/weights.js";
import { readConfig, type ModelConfig } from "./config.js";
import { ropeTable } from "./rope.js";
import { WeightLoader, type Matrix } from "./weights.js";
import type { GGUFTensorInfo } from "../format/gguf.js";

export interface LoadOptions {
  /** threads for compute, including the caller (default: all cores) */
  threads?: number;
  /** KV cache length in tokens (default: the training context, capped to what fits) */
  contextSize?: number;
  /** most tokens per forward call (prompt chunks); default 256 */
  batchSize?: number;
  onProgress?: (loadedBytes: number, totalBytes: number) => void;
  /**
   * For a neuron store (.pi): everything resident (weights kept in memory, KV cache, buffers,
   * neuron cache, the runtime itself) must fit in this many bytes; default: room for all of it.
   */
  memoryBudget?: number;
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
  n: number;
  residual: Float32Array;
  gate: Float32Array;
  up: Float32Array;
}

/** PowerInfer's activation predictor tensors (blk.N.fc1.weight, blk.N.fc2.weight). */
export const PREDICTOR_TENSOR_RE = /^blk\.\d+\.fc[12]\.weight$/;

/** GGUF types of predictor matrices that load requantizes to Q8_0 (LoadOptions.predictorType "q8_0"). */
const PREDICTOR_REQUANT_TYPES: ReadonlySet<GGMLType> = new Set([GGMLType.F32, GGMLType.F16, GGMLType.BF16]);

/**
 * The hidden width layer l's predictor takes in memory when it is requantized to Q8_0 (its
 * hidden width rounded up to a multiple of 32), or 0 when it stays as stored: by choice, because
 * fc1 or fc2 is already of another type, or because the padded shape would not fit the kernels
 * or the FFN's buffers.
 */
function predictorQ8Hidden(file: ModelFile, cfg: ModelConfig, l: number, opt: LoadOptions["predictorType"]): number {
  if ((opt ?? "q8_0") === "original") return 0;
  const fc1 = file.tensor(`blk.${l}.fc1.weight`),
    fc2 = file.tensor(`blk.${l}.fc2.weight`);
  if (!PREDICTOR_REQUANT_TYPES.has(fc1.type) || !PREDICTOR_REQUANT_TYPES.has(fc2.type)) return 0;
  const hidden = fc1.dims[1];
  const padded = Math.ceil(hidden / 32) * 32;
  return cfg.nEmbd % 32 === 0 && padded <= cfg.nFF ? padded : 0;
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
  /** PowerInfer's activation predictor (present for predictor sparsity) */
  fc1?: Matrix;
  fc2?: Matrix;
  /** the dense FFN (absent when it is offloaded to a neuron store) */
  gate?: Matrix;
  up?: Matrix;
  down?: Matrix;
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
    contextSize: number,
    batchSize: number,
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
      ffnAct: pool.fn("ffn_act"),
      ffnActCut: pool.fn("ffn_act_cut"),
      add: pool.fn("add_inplace"),
      bias: pool.fn("add_bias_rows"),
      relu: pool.fn("relu_inplace"),
    };
    this.epsBits = f32Bits(cfg.normEps);
    this.logits = new Float32Array(arena.memory.buffer, buf.logits, cfg.nVocab);
  }

  private readonly heap: Uint8Array;
  private readonly f32: Float32Array;
  private readonly i32: Int32Array;
  private readonly fn: Record<
    "rmsnorm" | "rope" | "attention" | "ffnAct" | "ffnActCut" | "add" | "bias" | "relu",
    number
  >;
  private readonly epsBits: number;
  private readonly args = new Int32Array(16);
  /** which prepared-activation buffers hold the current matmul input */
  private readonly prepared = new Set<ActivationFormat>();
  /** logits of the last token of the last forward() (a view into wasm memory) */
  readonly logits: Float32Array;
  /**
   * The tokens whose keys and values sit in the KV cache at positions 0..length-1 (forward()
   * keeps it), so that a prompt sharing a prefix with the previous one can reuse them.
   */
  readonly cachedTokens: number[] = [];
  /** per-layer activation thresholds in force (null: none) */
  thresholds: Float32Array | null = null;
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

  static async load(path: string, opts: LoadOptions = {}): Promise<LlamaModel> {
    // Every tensor read is checked for NaN/Inf as it passes (see finite-check.ts).
    const file: ModelFile = checkFiniteOnRead(isNeuronStore(path) ? NeuronStore.open(path) : GGUFFile.open(path));
    const store = file instanceof NeuronStore ? file : undefined;
    let pool: ThreadPool | undefined;
    try {
      const cfg = readConfig(file);
      checkValueTensorTypes(file);
      const threads = opts.threads ?? (await import("node:os")).availableParallelism();
      const batchSize = Math.max(1, Math.min(opts.batchSize ?? 256, 4096));
      // Under a memory budget the KV cache is part of it: a short default context.
      const defaultContext = opts.memoryBudget !== undefined ? 256 : 4096;
      checkContextSize(opts.contextSize, Math.min(cfg.nCtxTrain, defaultContext), file);
      let contextSize = Math.max(1, Math.floor(opts.contextSize ?? Math.min(cfg.nCtxTrain, defaultContext)));
      // Keep the KV cache inside what wasm32 can address next to the weights.
      const kvBytesPerPos = 2 * cfg.nLayer * cfg.nHeadKV * cfg.headDim * 4;
      const weightBytes = [...file.tensors.values()].reduce(
        (a, t) => (store && t.name === "token_embd.weight" ? a : a + t.bytes),
        0,
      );
      // What the weights will take in wasm memory once packed (the embedding table stays in JS
      // unless it doubles as the output matrix), plus ~64 MiB of buffers: the KV cache gets the rest.
      const hasPredictors = [...Array(cfg.nLayer).keys()].every(
        (l) => file.tensors.has(`blk.${l}.fc1.weight`) && file.tensors.has(`blk.${l}.fc2.weight`),
      );
      const sparsity = opts.offload?.sparsity ?? (hasPredictors ? "predictor" : "gate");
      const usePredictors = store !== undefined && sparsity === "predictor";
      if (opts.predictorType !== undefined && opts.predictorType !== "q8_0" && opts.predictorType !== "original") {
        throw new RangeError(`predictorType must be "q8_0" or "original", got ${JSON.stringify(opts.predictorType)}`);
      }
      // Predictors requantized to Q8_0 count as packed, padded: hidden width per layer (0: as stored).
      const predQ8 =
        usePredictors && hasPredictors
          ? [...Array(cfg.nLayer).keys()].map((l) => predictorQ8Hidden(file, cfg, l, opts.predictorType))
          : [];
      const packedBytes = [...file.tensors.values()].reduce((a, t) => {
        if (t.name === "token_embd.weight" && file.tensors.has("output.weight")) return a;
        if (PREDICTOR_TENSOR_RE.test(t.name)) {
          if (!usePredictors) return a; // loaded only for predictor sparsity
          const padded = predQ8[Number(t.name.split(".")[1])];
          if (padded)
            return (
              a +
              (t.name.endsWith("fc1.weight")
                ? weightKernel(GGMLType.Q8_0).packedBytes(padded, t.dims[0])
                : weightKernel(GGMLType.Q8_0).packedBytes(t.dims[1], padded))
            );
        }
        return (
          a +
          (t.dims.length === 2 && hasWeightKernel(t.type)
            ? weightKernel(t.type).packedBytes(t.dims[1], t.dims[0])
            : t.elements * 4)
        );
      }, 0);
      const room = 4 * 2 ** 30 - (1 << 20) - packedBytes - 64 * 2 ** 20;
      if (opts.contextSize === undefined && contextSize * kvBytesPerPos > room) {
        contextSize = Math.max(16, Math.floor(room / kvBytesPerPos));
      }
      const arena = new Arena(64 << 20);
      if (opts.addressFloor) arena.alloc(opts.addressFloor, 4096);
      pool = await ThreadPool.create(arena.memory, threads);
      // Under a budget, refuse before loading what would not fit (a cgroup limit would kill the
      // process mid-load otherwise): the weights and buffers are not resident yet, so count them.
      if (store && opts.memoryBudget !== undefined) {
        const kv = 2 * cfg.nLayer * contextSize * cfg.nHeadKV * cfg.headDim * 4;
        const bufferBytes =
          4 *
          (batchSize * (4 * cfg.nEmbd + 2 * cfg.nHead * cfg.headDim + 3 * cfg.nFF) +
            cfg.nVocab +
            contextSize * (cfg.nHead + cfg.nRot));
        LlamaModel.budgetSplit(
          store,
          cfg,
          kv,
          { ...opts, offload: { ...opts.offload, sparsity } },
          process.memoryUsage.rss() + packedBytes + bufferBytes,
          "would",
        );
      }
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
      if (store && sparsity === "predictor" && !hasPredictors) {
        throw new Error(
          `${path}: --sparsity predictor needs activation predictors (blk.N.fc1/fc2), and this model has none: use --sparsity gate, or train them (powerinfer train-predictors)`,
        );
      }
      for (let l = 0; usePredictors && l < cfg.nLayer; l++) {
        const hidden = file.tensor(`blk.${l}.fc1.weight`).dims[1];
        if (hidden > nFF)
          throw new Error(`${path}: predictor of layer ${l} has ${hidden} hidden units, more than the FFN's ${nFF}`);
      }
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
          ...(usePredictors ? loadPredictor(loader, file, l, nEmbd, nFF, predQ8[l]) : {}),
          ...(store
            ? {}
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
      const matrices = [
        output,
        ...layers.flatMap((L) => [L.wq, L.wk, L.wv, L.wo, L.gate, L.up, L.down, L.fc1, L.fc2]),
      ].filter((m): m is Matrix => m !== undefined);
      // The resident gate rows of an offloaded FFN read the FFN input in their kernel's format.
      if (store) matrices.push({ ...output, kernel: weightKernel(store.ffn.type), cols: nEmbd });
      const buf = allocBuffers(arena, cfg, contextSize, batchSize, matrices);
      // Touch the activation buffers (laid out from x up to the KV cache) now, so that the
      // resident size a budget is checked against already includes them.
      if (store) arena.u8(buf.x, buf.kCache - buf.x).fill(0);
      arena.f32(buf.rope, contextSize * cfg.nRot).set(ropeTable(cfg, contextSize));
      let offloaded: OffloadedFFN | undefined;
      const kvBytes = 2 * cfg.nLayer * contextSize * kvDim * 4;

      if (store)
        offloaded = LlamaModel.offload(store, cfg, arena, pool, kvBytes, {
          ...opts,
          offload: { ...opts.offload, sparsity, thresholds },
        });
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
        contextSize,
        batchSize,
        offloaded,
      );
      model.thresholds = thresholds;
      return model;
    } catch (e) {
      await pool?.dispose();
      file.close();
      throw e;
    }
  }

  /**
   * Size the neuron cache from the budget: what is left after the process as it stands now
   * (runtime, threads, weights in memory), the KV cache (allocated but not yet touched, so not
   * yet resident), the resident gate rows, the sparse kernels' scratch and the load-time read
   * buffers. Too small a budget is an error that says how much would fit.
   */
  private static offload(
    store: NeuronStore,
    cfg: ModelConfig,
    arena: Arena,
    pool: ThreadPool,
    kvBytes: number,
    opts: LoadOptions,
  ): OffloadedFFN {
    const { cacheBytes, residentGates } = LlamaModel.budgetSplit(
      store,
      cfg,
      kvBytes,
      opts,
      process.memoryUsage.rss(),
      "",
    );
    return new OffloadedFFN(store, cfg, arena, pool, { ...opts.offload, cacheBytes, residentGates });
  }

  /**
   * The neuron cache size and whether the gate rows stay resident, given `rss` (what is or, before
   * loading, "would" be resident besides the KV cache and the FFN's own memory); throws when the
   * budget cannot hold the fixed part with a minimal cache.
   */
  private static budgetSplit(
    store: NeuronStore,
    cfg: ModelConfig,
    kvBytes: number,
    opts: LoadOptions,
    rss: number,
    would: string,
  ): { cacheBytes: number; residentGates: boolean } {
    const ffn = store.ffn;
    const gateBytes = cfg.nLayer * weightKernel(ffn.type).packedBytes(cfg.nFF, cfg.nEmbd);
    const stagingBytes = gateStagingBytes(gateReadBytesOf(ffn), cfg.nFF);
    const sparseScratch = 8 * cfg.nFF * 4 + 64 * cfg.nEmbd * 4 + (4 << 20);
    const allFFN = cfg.nLayer * cfg.nFF * ffn.bundleBytes;
    const minCache = Math.min(allFFN, 4 * ffn.bundleBytes);
    const base = rss + kvBytes + sparseScratch;
    let cacheBytes = Math.min(allFFN, opts.offload?.cacheBytes ?? allFFN);
    // Predictor mode computes a token's gates from the bundles it runs: no resident gate rows;
    // the staging area stays (prompt batches stream the gate rows through it).
    const predictor = opts.offload?.sparsity === "predictor";
    let residentGates = !predictor && (opts.offload?.residentGates ?? true);
    if (opts.memoryBudget !== undefined) {
      // 3% of the budget stays free for what is hard to count (JS heap growth, stacks).
      const room = opts.memoryBudget * 0.97;
      // Gate rows stay resident when they fit with at least a small cache; else they are read
      // from flash in a first phase (slower, still exact).
      if (!predictor && opts.offload?.residentGates === undefined) residentGates = base + gateBytes + minCache <= room;
      const fixed = base + (residentGates ? gateBytes : stagingBytes);
      cacheBytes = Math.min(cacheBytes, room - fixed);
      if (cacheBytes < minCache) {
        throw new Error(
          `memory budget ${mib(opts.memoryBudget)} is too small for ${store.path}: the part that stays in memory ` +
            `(runtime and weights ${would ? `${would} be ` : ""}${mib(rss)}, KV cache ${mib(kvBytes)}${residentGates ? `, gate rows ${mib(gateBytes)}` : `, gate staging ${mib(stagingBytes)}`}) needs ` +
            `${mib(fixed)}; at least ${mib((fixed + minCache) / 0.97)} would run (with a minimal neuron cache)`,
        );
      }
    }
    return { cacheBytes, residentGates };
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
    this.embed(tokens, n, pos0);
    for (let l = 0; l < this.config.nLayer; l++) {
      this.attentionBlock(l, n, pos0);
      this.denseFFN(l, n);
    }
    return this.logitsOfLast(n);
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
    this.embed(tokens, n, pos0);
    for (let l = 0; l < this.config.nLayer; l++) {
      this.attentionBlock(l, n, pos0);
      this.rmsnorm(b.xb, b.x, this.layers[l].ffnNorm, n);
      if (n > 1 && off.batches) {
        // Prompt: gates for the whole batch (dense kernels over the resident gate rows, or the
        // gate rows streamed once for the batch), then every needed bundle once.
        if (off.hasResidentGates) {
          this.setInput(b.xb, this.config.nEmbd);
          this.matmul(off.gates[l], b.hg, n);
        } else await off.streamBatchGates(l, b.xb, n, b.hg);
        await off.runBatch(l, b.xb, b.x, n, b.hg);
        continue;
      }
      // One token at a time: each sees only its own firing neurons.
      for (let t = 0; t < n; t++) {
        this.ffnRow = b.xb + t * row;
        this.residualRow = b.x + t * row;
        await off.run(l, this.ffnRow, this.residualRow, this.gateMatvec, this.predict);
      }
    }
    return this.logitsOfLast(n);
  }

  /** FFN input row the resident gate matrix of an offloaded model reads, and the residual row the predictor reads. */
  private ffnRow = 0;
  private residualRow = 0;
  /** Predictor scores of layer l for the current row: fc2 . relu(fc1 . x), x before the FFN norm (as PowerInfer). */
  private readonly predict = (l: number, out: number): void => {
    const L = this.layers[l];
    const b = this.buf;
    this.setInput(this.residualRow, this.config.nEmbd);
    this.matmul(L.fc1!, b.hu, 1);
    this.args[0] = b.hu;
    this.pool.run(this.fn.relu, this.args, 1, L.fc1!.rows, 64, L.fc1!.rows);
    this.setInput(b.hu, L.fc1!.rows);
    this.matmul(L.fc2!, out, 1);
  };

  /**
   * The predictor of layer `layer` on one residual row `x` (nEmbd values, before the FFN norm),
   * as decode computes it: the nFF scores (copied out) and, when `hidden` is given, the hidden
   * activations relu(fc1 . x) copied into it (the predictor's width in memory, padding
   * included: see predictorWidth). For tools and tests; uses the activation buffers, so not
   * during a forward pass.
   */
  predictorScores(layer: number, x: ArrayLike<number>, hidden?: Float32Array): Float32Array {
    const L = this.layers[layer];
    if (!L?.fc1 || !L.fc2)
      throw new Error(
        `layer ${layer} has no predictor loaded (a store with predictors, loaded for --sparsity predictor, has one)`,
      );
    const { nEmbd, nFF } = this.config;
    if (x.length !== nEmbd)
      throw new RangeError(`predictorScores: x holds ${x.length} values, the residual has ${nEmbd}`);
    const b = this.buf;
    const saved = this.residualRow;
    this.f32.set(x, b.xb >>> 2);
    this.residualRow = b.xb;
    try {
      this.predict(layer, b.hg);
    } finally {
      this.residualRow = saved;
    }
    if (hidden) hidden.set(this.f32.subarray(b.hu >>> 2, (b.hu >>> 2) + Math.min(hidden.length, L.fc1.rows)));
    return this.f32.slice(b.hg >>> 2, (b.hg >>> 2) + nFF);
  }

  /** The predictor of layer `layer` in memory: its GGML type and hidden width (padded when requantized), or null. */
  predictorWidth(layer: number): { type: GGMLType; hidden: number } | null {
    const L = this.layers[layer];
    return L?.fc1 ? { type: L.fc1.kernel.type, hidden: L.fc1.rows } : null;
  }

  private readonly gateMatvec = (m: Matrix, out: number): void => {
    this.setInput(this.ffnRow, this.config.nEmbd);
    this.matmul(m, out, 1);
  };

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

  /** x += attention(norm(x)) for layer l: Q/K/V (K and V straight into the cache), RoPE, attend, project. */
  private attentionBlock(l: number, n: number, pos0: number): void {
    const cfg = this.config;
    const { nEmbd, nHead, nHeadKV, headDim } = cfg;
    const qDim = nHead * headDim;
    const kvDim = nHeadKV * headDim;
    const b = this.buf;
    const pool = this.pool;
    const a = this.args;
    const L = this.layers[l];
    const kCache = b.kCache + l * this.contextSize * kvDim * 4;
    const vCache = b.vCache + l * this.contextSize * kvDim * 4;
    const kOut = kCache + pos0 * kvDim * 4;
    const vOut = vCache + pos0 * kvDim * 4;

    this.rmsnorm(b.xb, b.x, L.attnNorm, n);
    this.setInput(b.xb, nEmbd);
    this.matmul(L.wq, b.q, n);
    this.matmul(L.wk, kOut, n);
    this.matmul(L.wv, vOut, n);
    if (L.bq) {
      this.addBias(b.q, L.bq, qDim, n);
      this.addBias(kOut, L.bk, kvDim, n);
      this.addBias(vOut, L.bv, kvDim, n);
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
    a[0] = kOut;
    a[3] = nHeadKV;
    pool.run(this.fn.rope, a, 7, n, 1, n * kvDim * 4);
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
    pool.run(this.fn.attention, a, 11, nHead, 1, 2 * n * (pos0 + n) * qDim);
    this.setInput(b.att, qDim);
    this.matmul(L.wo, b.xb, n);
    this.add(b.x, b.xb, n * nEmbd);
  }

  /** x += down(act(gate . norm(x)) * up . norm(x)) for layer l, all neurons. */
  private denseFFN(l: number, n: number): void {
    const cfg = this.config;
    const b = this.buf;
    const a = this.args;
    const L = this.layers[l];
    this.rmsnorm(b.xb, b.x, L.ffnNorm, n);
    this.setInput(b.xb, cfg.nEmbd);
    this.matmul(L.gate!, b.hg, n);
    this.matmul(L.up!, b.hu, n);
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
    a[0] = b.hg;
    a[1] = b.hu;
    a[2] = ACT_CODE[cfg.activation];
    const cut = this.thresholds ? this.thresholds[l] : 0;
    if (cut > 0) {
      a[3] = f32Bits(cut);
      this.pool.run(this.fn.ffnActCut, a, 4, n * cfg.nFF, 64, n * cfg.nFF * 16);
    } else this.pool.run(this.fn.ffnAct, a, 3, n * cfg.nFF, 64, n * cfg.nFF * 16);
    this.setInput(b.hg, cfg.nFF);
    this.matmul(L.down!, b.xb, n);
    this.add(b.x, b.xb, n * cfg.nEmbd);
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
    this.setInput(b.xb, nEmbd);
    this.matmul(this.output, b.logits, 1);
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

  private input = 0;
  private inputCols = 0;

  /** The f32 rows that the next matmuls read; prepared (quantized) lazily per format. */
  private setInput(ptr: number, cols: number): void {
    this.input = ptr;
    this.inputCols = cols;
    this.prepared.clear();
  }

  private matmul(m: Matrix, out: number, n: number): void {
    const fmt = m.kernel.act;
    let x = this.input;
    if (fmt !== "f32") {
      x = this.buf.act[fmt];
      if (!this.prepared.has(fmt)) {
        // Quantize the input rows once; every matrix of this format reads them.
        this.pool.kernels[prepareKernel(fmt)!](this.input, x, this.inputCols, n);
        this.prepared.add(fmt);
      }
    }
    const a = this.args;
    a[0] = m.ptr;
    a[1] = x;
    a[2] = out;
    a[3] = m.rows;
    a[4] = m.cols;
    const work = m.rows * m.cols * n;
    if (n === 1) this.pool.run(m.matvecFn, a, 5, m.rows, 16, work);
    else {
      a[5] = n;
      this.pool.run(m.matmulFn, a, 6, m.rows, 16, work);
    }
  }

  async dispose(): Promise<void> {
    await this.offloaded?.close();
    await this.pool.dispose();
    this.file.close();
  }
}

interface Buffers {
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
  act: Record<ActivationFormat, number>;
}

function allocBuffers(arena: Arena, cfg: ModelConfig, ctx: number, batch: number, matrices: Matrix[]): Buffers {
  const { nEmbd, nFF, nHead, nHeadKV, headDim, nLayer, nVocab } = cfg;
  const f = (count: number) => arena.alloc(count * 4, 64);
  const act = { f32: 0, q8_0: 0, q8_1: 0, q8_K: 0 } as Record<ActivationFormat, number>;
  for (const fmt of new Set(matrices.map((m) => m.kernel.act))) {
    if (fmt !== "f32")
      act[fmt] = arena.alloc(
        batch * Math.max(...matrices.filter((m) => m.kernel.act === fmt).map((m) => activationBytes(fmt, m.cols))) + 64,
        64,
      );
  }
  return {
    x: f(batch * nEmbd),
    xb: f(batch * nEmbd),
    q: f(batch * nHead * headDim),
    att: f(batch * nHead * headDim),
    hg: f(batch * nFF),
    hu: f(batch * nFF),
    logits: f(nVocab),
    scores: f(nHead * ctx),
    pos: f(batch),
    rope: f(ctx * cfg.nRot),
    kCache: f(nLayer * ctx * nHeadKV * headDim),
    vCache: f(nLayer * ctx * nHeadKV * headDim),
    act,
  };
}

/** Layer l's predictor: requantized to Q8_0 with its hidden width padded to `padded` (0: as stored). */
function loadPredictor(
  loader: WeightLoader,
  file: ModelFile,
  l: number,
  nEmbd: number,
  nFF: number,
  padded: number,
): { fc1: Matrix; fc2: Matrix } {
  const p = `blk.${l}.`;
  const hidden = file.tensor(p + "fc1.weight").dims[1];
  const fc1 = padded
    ? loader.q8Matrix(p + "fc1.weight", nEmbd, hidden, nEmbd, padded)
    : loader.matrix(p + "fc1.weight", nEmbd, hidden);
  const fc2 = padded
    ? loader.q8Matrix(p + "fc2.weight", hidden, nFF, padded, nFF)
    : loader.matrix(p + "fc2.weight", hidden, nFF);
  // predict() feeds fc1's outputs (all of its rows, padding included) to fc2
  if (fc1.rows !== fc2.cols)
    throw new Error(`${file.path}: predictor of layer ${l}: fc1 has ${fc1.rows} outputs, fc2 reads ${fc2.cols}`);
  return { fc1, fc2 };
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
