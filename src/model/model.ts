/**
 * A loaded model: its blocks (arch/ maps the file's tensors to them, parts/ runs them), its
 * buffers and KV cache, and the forward pass over a batch of tokens (forward.ts's one layer loop).
 * Prompt prefill runs the whole batch through each matrix as one GEMM; decode is the same code
 * with a batch of one (matvec kernels). The FFN of a neuron store is read from flash under a
 * memory budget: forwardAsync awaits its reads.
 *
 * Everything lives in wasm memory laid out at load: weights, the KV cache ([layer][position]
 * [kvDim], f16 by default, kv-cache.ts) and the activation buffers for a batch of up to
 * `batchSize` tokens; past what one wasm32 memory holds, in several (shards of whole layers,
 * shards.ts). forward() allocates nothing.
 */
import { checkFiniteOnRead } from "../format/finite-check.js";
import { checkContextSize, contextNote } from "./context-size.js";
import { checkInMemoryBudget } from "./in-memory-budget.js";
import { checkValueTensorTypes } from "./tensor-types-check.js";
import { GGUFFile, type ModelFile } from "../format/gguf.js";
import { activationThresholds } from "./activation-thresholds.js";
import { isNeuronStore, NeuronStore } from "../format/store/index.js";
import { OffloadedFFN, type OffloadOptions } from "./offload/offloaded-ffn.js";
import { OffloadedStore } from "./offload/offloaded-store.js";
import { clearStats } from "./offload/stats.js";
import { storeGroups } from "./offload/store-groups.js";
import { storeLayout } from "./store-shards.js";
import type { Tracer } from "../runtime/tracer.js";
import { BudgetError, storeFacts, type FixedResident, type LayoutKnobs, type OffloadLayout } from "./offload/layout.js";
import { Predictor, sparsityFor, type PredictorWidth } from "./offload/predictor.js";
import { checkExpertBiases } from "./offload/expert-biases.js";
import { dequantizeRow } from "../format/quant.js";
import { tensorBytes } from "../format/ggml-types.js";
import { Arena } from "../runtime/arena.js";
import { ThreadPool } from "../runtime/pool.js";
import { collectGarbage } from "../runtime/memory.js";
import { readConfig, type ModelConfig } from "./config.js";
import { MatrixRunner } from "./matrix-runner.js";
import { residentBytes } from "./resident-bytes.js";
import { DEFAULT_KV_CACHE, kvLayerRows, parseKvCacheType, type KvCacheTypes } from "./kv-cache.js";
import { ropeFactors, ropeLayout, ropeTable } from "./rope.js";
import { checkEveryTensorUsed } from "./unused-tensors-check.js";
import { WeightLoader, type Matrix } from "./weight-loader.js";
import type { GGUFTensorInfo } from "../format/gguf.js";
import { ARCHITECTURES } from "./arch/index.js";
import { allocBuffers } from "./buffers.js";
import { outputLogits, runBlocks } from "./forward.js";
import { makeBlock, type Block, type LayerWeights } from "./parts/block.js";
import { PartContext } from "./parts/context.js";
import { Router } from "./parts/router.js";
import { newStep, type FFNObservation, type ForwardStep } from "./step.js";
import { planShards, shardCapacity } from "./shards.js";
import { checkBudgetFitsMachine } from "./machine-memory.js";
import { carryResidual } from "./forward.js";

export { PREDICTOR_TENSOR_RE } from "./offload/predictor.js";

export interface LoadOptions {
  /** threads for compute, including the caller (default: all cores) */
  threads?: number;
  /** KV cache length in tokens (default: the training context, at most 4096; 256 under a memory budget) */
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
   * predictors are converted at load, fc1 to Q8_0 and fc2 to Q8_0 or F16 (whichever takes less
   * memory for its shape: F16 for a narrow hidden width), the hidden width padded with zeros to
   * what fc2's type needs (fc1 zero rows, fc2 zero columns: the padding contributes exactly
   * nothing); predictors already quantized stay as they are. "original": as stored in the file.
   */
  predictorType?: "q8_0" | "original";
  /** records the forward pass per layer (attention, FFN), a store's FFN steps and reads (src/runtime/tracer.ts) */
  tracer?: Tracer;
  /**
   * The most bytes one wasm memory (a shard of whole layers) may hold; default
   * $POWERINFER_SHARD_BYTES, else 4 GiB, all wasm32 addresses. Smaller forces several shards (tests).
   */
  shardBytes?: number;
  /**
   * Test hook: leave this many bytes of wasm memory unused below every buffer (in every shard) (untouched, so not
   * resident), to run the engine at addresses above 2 GiB where a signed shift would go wrong.
   */
  addressFloor?: number;
}

/**
 * What the dense FFN of layer `layer` sees for `n` tokens (row-major views into wasm memory, valid
 * only during the call): the residual stream before the FFN norm (the predictor's input), and the
 * gate and up projections before the activation. For offline tools (profiling, predictor training).
 */
export type { FFNObservation } from "./step.js";

export { THRESHOLDS_KEY } from "./activation-thresholds.js";

export { isNeuronStore } from "../format/store/index.js";

export class LlamaModel {
  readonly config: ModelConfig;
  readonly contextSize: number;
  readonly batchSize: number;
  readonly file: ModelFile;
  /** bytes of wasm memory in use (weights, caches, buffers) */
  readonly residentBytes: number;
  /** why the context is shorter than the model's trained one when none was asked for (null otherwise) */
  contextNote: string | null = null;

  private constructor(
    file: ModelFile,
    cfg: ModelConfig,
    /** one per shard */
    private readonly arenas: readonly Arena[],
    private readonly pool: ThreadPool,
    /** what the parts of each shard share: buffers, matrix runner, the small kernels */
    private readonly shards: readonly PartContext[],
    /** the shard of the output norm and matrix (the last): the logits are computed there */
    private readonly ctx: PartContext,
    private readonly blocks: readonly Block[],
    /** the token embeddings: in memory, or (data null, a neuron store) one row read per token */
    private readonly embd: { info: GGUFTensorInfo; data: Uint8Array | null },
    private readonly outputNorm: number,
    private readonly output: Matrix,
    contextSize: number,
    batchSize: number,
    /** the KV cache's element types */
    readonly kvCache: KvCacheTypes,
    /** the FFN of a model run from a neuron store */
    readonly offloaded?: OffloadedStore,
  ) {
    this.file = file;
    this.config = cfg;
    this.contextSize = contextSize;
    this.batchSize = batchSize;
    this.residentBytes = arenas.reduce((a, m) => a + m.used, 0);
    this.i32 = arenas.map((a) => new Int32Array(a.memory.buffer));
    this.logits = new Float32Array(ctx.arena.memory.buffer, ctx.buf.logits, cfg.nVocab);
    this.first = blocks.length > 0 ? blocks[0].ctx : ctx;
    if (offloaded) {
      // the offloaded FFN's parts count each pass in its step; its meter adds up the passes
      const meter = offloaded.meter;
      this.step.offload = meter.newPass();
      this.onPass((step) => meter.add(step.offload!));
    }
  }

  /** positions are written through these, one per shard (the f32 rows through ctx.f32) */
  private readonly i32: Int32Array[];
  /** the shard of the first block: the embeddings go into its residual rows */
  private readonly first: PartContext;
  /** the state of the pass under way, handed to every part (filled at the start of each pass) */
  private readonly step: ForwardStep = newStep();
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
  /** Bytes of the wasm memories as they stand (they only grow: this is also their peak). */
  get wasmMemoryBytes(): number {
    return this.arenas.reduce((a, m) => a + m.memory.buffer.byteLength, 0);
  }
  /** how many wasm memories the model is split into (one unless it is larger than one holds) */
  get shardCount(): number {
    return this.arenas.length;
  }
  /** the trace being recorded (LoadOptions.tracer), null when none */
  tracer: Tracer | null = null;
  /** one embedding row read from a store */
  private embdRow: Uint8Array | null = null;
  /** see setFFNObserver */
  private observer: ((o: FFNObservation) => void) | null = null;
  /** the measuring hook's subscribers, in the order they subscribed (onPass) */
  private readonly passHooks: ((step: Readonly<ForwardStep>) => void)[] = [];

  /**
   * The measuring hook: `fn` is called at the end of every forward pass that finishes, with the
   * pass's step (its batch, what it routed, and a store's what its FFN did: ForwardStep.offload),
   * valid only during the call. Every measure of a run goes through it: the offloaded FFN's meter
   * (OffloadedStore.meter) subscribes at load. Returns the call that unsubscribes `fn`.
   */
  onPass(fn: (step: Readonly<ForwardStep>) => void): () => void {
    this.passHooks.push(fn);
    return () => {
      const i = this.passHooks.indexOf(fn);
      if (i >= 0) this.passHooks.splice(i, 1);
    };
  }

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
    const thresholds = activationThresholds(file, cfg.nLayer, opts.activationThresholds);
    const { sparsity, withPredictors } = sparsityFor(file, cfg, opts.offload?.sparsity, thresholds !== null);
    if (store) checkExpertBiases(store, cfg, sparsity, thresholds);
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
    // Under a memory budget the KV cache is part of it: a short default context. Without one, the
    // KV cache takes a memory of its own where it does not fit next to the weights (shards).
    const defaultContext = opts.memoryBudget !== undefined ? 256 : 4096;
    checkContextSize(opts.contextSize, Math.min(cfg.nCtxTrain, defaultContext), file);
    const contextSize = Math.max(1, Math.floor(opts.contextSize ?? Math.min(cfg.nCtxTrain, defaultContext)));
    const note = contextNote(
      opts.contextSize,
      contextSize,
      cfg.nCtxTrain,
      opts.memoryBudget !== undefined ? "budget" : "default",
    );
    const resident = residentBytes(file, cfg, residentOpts(contextSize));
    if (opts.budgetCounts !== "wasm") checkBudgetFitsMachine(opts.memoryBudget);
    if (!store && opts.memoryBudget !== undefined) checkInMemoryBudget(file.path, cfg, resident, opts.memoryBudget);
    const capacity = shardCapacity(opts.shardBytes);
    const floor = opts.addressFloor ?? 0;
    const plan = planShards(cfg, resident, contextSize, batchSize, kvCache, capacity, floor);
    // A store whose fixed part and FFN do not fit one memory splits its layers with their FFN
    // (store-shards.ts); the memories are made before the process's base is measured, so a
    // split is planned, its memories made, and planned again on the new base (a few MiB higher):
    // until the memories made are enough.
    let memories = plan.bytes.length;
    let minShards = 2;
    for (;;) {
      // Under a budget the memory starts small and grows as laid out, so that its size (what a
      // browser counts against the page) never passes the budget; otherwise 64 MiB saves grows.
      const arenas = Array.from(
        { length: memories },
        () => new Arena(opts.memoryBudget !== undefined ? 4 << 20 : 64 << 20),
      );
      if (floor) for (const a of arenas) a.alloc(floor, 4096);
      const pool = await ThreadPool.create(
        arenas.map((a) => a.memory),
        threads,
      );
      try {
        const common = { store, cfg, batchSize, sparsity, thresholds, contextSize, note, kvCache, resident, pool };
        if (!store) return { ...common, arenas, plan, layout: undefined, split: undefined };
        const fixed: FixedResident = {
          // "wasm": the memory below the arenas (the kernels' static regions) is the base
          ...(opts.budgetCounts === "wasm"
            ? { base: arenas.reduce((n, a) => n + a.used, 0), growth: 0 }
            : { base: (collectGarbage(), process.memoryUsage.rss()) }),
          weights: resident.weights,
          buffers: resident.buffers,
          kv: resident.kv,
        };
        const knobs: LayoutKnobs = {
          sparsity,
          threads,
          residentGates: opts.offload?.residentGates,
          hotFraction: opts.offload?.hotFraction,
          cacheBytes: opts.offload?.cacheBytes,
          verifyOnce: (opts.offload?.verify ?? "once") === "once",
        };
        const made = storeLayout(
          {
            cfg,
            facts: storeFacts(store, cfg),
            resident,
            contextSize,
            batchSize,
            kvCache,
            capacity,
            floor,
            fixed,
            budget: opts.memoryBudget,
            knobs,
          },
          plan,
          memories,
          minShards,
        );
        if (!made.fits) {
          const e = new BudgetError(made.layout, file.path);
          if (made.shards > 1)
            e.message += ` (split among ${made.shards} wasm memories of at most ${capacity} bytes, each with its own buffers and staging)`;
          throw e;
        }
        const { layout, split } = made;
        if (!split) return { ...common, arenas, plan, layout, split: undefined };
        // (a split is among as many memories as were made, or more)
        if (split.plan.bytes.length === memories) return { ...common, arenas, plan: split.plan, layout, split };
        memories = split.plan.bytes.length;
        minShards = split.plan.layers.filter((r) => r.to > r.from).length;
        await pool.dispose();
      } catch (e) {
        await pool.dispose();
        throw e;
      }
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
      const {
        store,
        cfg,
        batchSize,
        sparsity,
        thresholds,
        contextSize,
        note,
        kvCache,
        resident,
        arenas,
        plan,
        layout,
        split,
      } = prepared;
      const arena = arenas[0];
      pool = prepared.pool;
      const weightBytes = [...file.tensors.values()].reduce(
        (a, t) => (store && t.name === "token_embd.weight" ? a : a + t.bytes),
        0,
      );
      const loader = new WeightLoader(file, arena, pool, opts.onProgress && ((b) => opts.onProgress!(b, weightBytes)));
      // each shard's memory gets its layers' weights, in layer order (shards.ts)
      const loaders = arenas.map((a, s) => (s === 0 ? loader : loader.onShard(a, s)));
      const head = loaders[plan.headShard];
      const { nEmbd, nVocab } = cfg;

      // From a store, embedding rows are read from the file as tokens come (one row per token):
      // the table (82 MB at 7B Q4_1) need not be resident under a budget.
      const embd = store
        ? { info: loader.check("token_embd.weight", [nEmbd, nVocab]), data: null }
        : loader.raw("token_embd.weight", [nEmbd, nVocab]);
      const arch = ARCHITECTURES.get(cfg.architecture)!;
      const layers: LayerWeights[] = [];
      for (let l = 0; l < cfg.nLayer; l++)
        layers.push(arch.layer({ loader: loaders[plan.layerShard[l]], file, cfg, store: store !== undefined }, l));
      const outputNorm = head.vector("output_norm.weight", nEmbd);
      const output = head.matrix(
        file.tensors.has("output.weight") ? "output.weight" : "token_embd.weight",
        nEmbd,
        nVocab,
      );
      // a store's groups: per memory of a split store, its layers' (store-shards.ts)
      const experts = Math.max(1, store?.ffn.experts ?? 0);
      const groupsOf = (s: number) => ({ from: plan.layers[s].from * experts, to: plan.layers[s].to * experts });
      const shapes = resident.predictors;
      // the predictors: in one memory after the output; in a split store each memory its groups'
      const predictors = !shapes
        ? arenas.map(() => null)
        : !split
          ? [Predictor.load(loader, cfg, shapes, { rowOrder: (g) => store!.layer(g).order })]
          : arenas.map((_, s) => {
              const g = groupsOf(s);
              if (g.to === g.from) return null;
              const rowOrder = (k: number) => store!.layer(g.from + k).order;
              return Predictor.load(loaders[s], cfg, shapes, { first: g.from, groups: g.to - g.from, rowOrder });
            });
      const rope = ropeFactors(file, cfg, arch.ropeFactors, contextSize);
      for (const t of rope?.tensors ?? []) loader.use(t);
      checkEveryTensorUsed(file, loader.used);
      const bufs = arenas.map((a, s) =>
        allocBuffers(a, cfg, contextSize, batchSize, resident.quantized, kvCache, plan.layers[s]),
      );
      const buf = bufs[0];
      const fixedArenaBytes = arenas.reduce((a, m) => a + m.used - (opts.addressFloor ?? 0), 0);
      // Touch the activation buffers (laid out from x up to the KV cache) now: they are resident
      // from the start, as the layout counts them.
      if (store) arenas.forEach((a, s) => a.u8(bufs[s].x, bufs[s].kCache - bufs[s].x).fill(0));
      const ropes = ropeLayout(cfg);
      const kvRows = kvLayerRows(cfg, contextSize, batchSize);
      // each layer's first row: the rows of the layers before it in its shard
      const kvFirstRows = kvRows.map((_, l) => {
        let first = 0;
        for (let k = plan.layers[plan.layerShard[l]].from; k < l; k++) first += kvRows[k];
        return first;
      });
      const tableBytes = contextSize * cfg.nRot * 4;
      const tables = ropes.tables.map((spec) => ropeTable(spec, contextSize, rope?.factors));
      arenas.forEach((a, s) =>
        tables.forEach((t, i) => a.f32(bufs[s].rope + i * tableBytes, contextSize * cfg.nRot).set(t)),
      );
      const mms = arenas.map((_, s) => new MatrixRunner(pool!, bufs[s].act, s));
      const mm = mms[0];
      const offloadOpts = { ...opts.offload, sparsity, thresholds, tracer: opts.tracer };
      // each memory's offloaded FFN (null: none there)
      const parts: (OffloadedFFN | null)[] =
        store && layout
          ? !split
            ? [new OffloadedFFN({ store, cfg, arena, pool, layout, mm, predictor: predictors[0] }, offloadOpts)]
            : arenas.map((a, s) => {
                const g = groupsOf(s);
                if (g.to === g.from) return null;
                return new OffloadedFFN(
                  {
                    store: storeGroups(store, g.from, g.to),
                    cfg,
                    arena: a,
                    pool: pool!,
                    layout: split.parts[s]!,
                    mm: mms[s],
                    predictor: predictors[s],
                    shard: s,
                    firstGroup: g.from,
                  },
                  offloadOpts,
                );
              })
          : arenas.map(() => null);
      const offloaded =
        store && layout
          ? new OffloadedStore(
              parts.filter((p): p is OffloadedFFN => p !== null),
              layout,
            )
          : undefined;
      const ctxs = arenas.map((a, s) => new PartContext(cfg, a, pool!, mms[s], bufs[s], kvCache, contextSize, s));
      const shareds = ctxs.map((ctx, s) => ({
        attention: ropes.tableOf.map((t, l) => ({
          ropePairing: cfg.ropePairing,
          rope: t < 0 ? 0 : bufs[s].rope + t * tableBytes,
          window: cfg.windows[l],
          kqScale: cfg.kqScale,
          kvFirstRow: kvFirstRows[l],
          kvRows: kvRows[l],
        })),
        router: cfg.nExpert > 0 ? new Router(ctx, batchSize) : null,
        offloaded: parts[s],
      }));
      const blocks = layers.map((w, l) => {
        const s = plan.layerShard[l];
        return makeBlock(ctxs[s], l, w, shareds[s]);
      });
      const model = new LlamaModel(
        file,
        cfg,
        arenas,
        pool,
        ctxs,
        ctxs[plan.headShard],
        blocks,
        embd,
        outputNorm,
        output,
        contextSize,
        batchSize,
        kvCache,
        offloaded,
      );
      model.thresholds = thresholds;
      model.contextNote = note;
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

  /** The step of a pass over tokens[0..n) at pos0.., with the thresholds, observer and tracer now in force. */
  private begin(tokens: ArrayLike<number>, n: number, pos0: number): ForwardStep {
    this.embed(tokens, n, pos0);
    const step = this.step;
    step.n = n;
    step.pos0 = pos0;
    step.thresholds = this.thresholds;
    step.observer = this.observer;
    step.tracer = this.tracer;
    step.routed = 0;
    step.routeMargin = Infinity;
    if (step.offload) clearStats(step.offload);
    return step;
  }

  /**
   * Of the first `shared` cached positions (the tokens a new prompt has in common with
   * cachedTokens), how many the next pass may keep: all of them, unless a sliding-window layer's
   * ring has since overwritten rows that the window of the next position needs; then none.
   */
  reusablePrefix(shared: number): number {
    const last = this.cachedTokens.length - 1;
    if (shared > last) return shared;
    for (const B of this.blocks) {
      const { ringRows, window } = B.attention;
      if (ringRows > 0 && shared > 0 && last - ringRows + window > shared) return 0;
    }
    return shared;
  }

  /** The logits of the pass's last token. */
  private end(step: ForwardStep): Float32Array {
    const tr = step.tracer;
    const t = tr ? tr.now() : 0;
    const last = this.blocks.length > 0 ? this.blocks[this.blocks.length - 1].ctx : this.first;
    if (last !== this.ctx) carryResidual(last, this.ctx, step.n);
    outputLogits(this.ctx, this.outputNorm, this.output, step.n - 1);
    if (tr) tr.span("output", "output", t);
    const hooks = this.passHooks;
    for (let i = 0; i < hooks.length; i++) hooks[i](step);
    return this.logits;
  }

  /**
   * Run `n` tokens (tokens[0..n)) at positions pos0..pos0+n-1, filling the KV cache; leaves the
   * logits of the last token in `this.logits`. n must be <= batchSize and pos0 + n <= contextSize.
   * For a model whose FFN is offloaded to a neuron store, use forwardAsync.
   */
  forward(tokens: ArrayLike<number>, n: number, pos0: number): Float32Array {
    if (this.offloaded) throw new Error("this model reads its FFN from flash: call forwardAsync()");
    const step = this.begin(tokens, n, pos0);
    // every part is in memory: the loop returns no promise
    runBlocks(this.blocks, step);
    return this.end(step);
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
    for (let t = 0; t < n - 1; t++) {
      outputLogits(this.ctx, this.outputNorm, this.output, t);
      out.set(this.logits, t * nVocab);
    }
  }

  /** forward() for any model; the FFN of an offloaded model waits for its reads from flash. */
  async forwardAsync(tokens: ArrayLike<number>, n: number, pos0: number): Promise<Float32Array> {
    this.offloaded?.startPass();
    const step = this.begin(tokens, n, pos0);
    const reading = runBlocks(this.blocks, step);
    if (reading) await reading;
    return this.end(step);
  }

  /**
   * The predictor of layer `layer` on one residual row `x` (nEmbd values, before the FFN norm),
   * as decode computes it: the nFF scores (copied out) and, when `hidden` is given, the hidden
   * activations relu(fc1 . x) copied into it (the predictor's width in memory, padding included:
   * see predictorWidth; each unit times its power of two where fc2 is Q8_0: fc2Balance). For
   * tools and tests; uses the activation buffers, so not during a forward pass.
   */
  predictorScores(layer: number, x: ArrayLike<number>, hidden?: Float32Array): Float32Array {
    const at = this.predictorAt(layer);
    if (!at)
      throw new Error(
        `layer ${layer} has no predictor loaded (a store with predictors, loaded for --sparsity predictor, has one)`,
      );
    const { nEmbd, nFF } = this.config;
    if (x.length !== nEmbd)
      throw new RangeError(`predictorScores: x holds ${x.length} values, the residual has ${nEmbd}`);
    const { p, group } = at;
    const { buf: b, f32, mm } = at.ctx;
    f32.set(x, b.xb >>> 2);
    p.scores(mm, group, b.xb, nEmbd, b.hg);
    const width = p.width(group).hidden;
    if (hidden) hidden.set(f32.subarray(p.hidden >>> 2, (p.hidden >>> 2) + Math.min(hidden.length, width)));
    const scores = f32.slice(b.hg >>> 2, (b.hg >>> 2) + nFF);
    if (!p.rowOrder) return scores;
    // fc2's rows are in the store's order: put each score back at its neuron
    const order = p.rowOrder(group);
    const out = new Float32Array(nFF);
    for (let k = 0; k < nFF; k++) out[order[k]] = scores[k];
    return out;
  }

  /** The predictor of layer `layer` in memory: fc1's and fc2's GGML types, fc2's layout and the hidden width (padded when converted), or null. */
  predictorWidth(layer: number): PredictorWidth | null {
    const at = this.predictorAt(layer);
    return at ? at.p.width(at.group) : null;
  }

  /** The predictor of store group g (layer < nLayer), in the numbering of its memory's, and that memory's context; null: none. */
  private predictorAt(g: number): { p: Predictor; group: number; ctx: PartContext } | null {
    if (!this.offloaded || !(g >= 0 && g < this.config.nLayer)) return null;
    const { part, group } = this.offloaded.partOf(g);
    if (!part.predictor) return null;
    const layer = Math.floor(g / Math.max(1, this.config.nExpert));
    return { p: part.predictor, group, ctx: this.blocks[layer].ctx };
  }

  /** Embeddings (one dequantized row per token) and positions; checks the token ids. */
  private embed(tokens: ArrayLike<number>, n: number, pos0: number): void {
    const cfg = this.config;
    if (n < 1 || n > this.batchSize) throw new RangeError(`forward: ${n} tokens, batch holds 1..${this.batchSize}`);
    if (pos0 < 0 || pos0 + n > this.contextSize)
      throw new RangeError(
        `context full: positions ${pos0}..${pos0 + n - 1} exceed the context size ${this.contextSize}`,
      );
    const x = this.first;
    const b = x.buf;
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
      const at = (b.x >>> 2) + t * nEmbd;
      dequantizeRow(this.embd.info.type, row, nEmbd, x.f32, at);
      const scale = cfg.embedScale;
      if (scale !== 1) for (let i = at; i < at + nEmbd; i++) x.f32[i] = Math.fround(x.f32[i] * scale);
      for (let s = 0; s < this.shards.length; s++) this.i32[s][(this.shards[s].buf.pos >>> 2) + t] = pos0 + t;
    }
    this.cachedTokens.length = pos0;
    for (let t = 0; t < n; t++) this.cachedTokens.push(tokens[t]);
  }

  async dispose(): Promise<void> {
    await this.offloaded?.close();
    await this.pool.dispose();
    this.file.close();
  }
}
