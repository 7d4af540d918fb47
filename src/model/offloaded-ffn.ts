/**
 * The FFN of a model run from a neuron store (.pi) under a memory budget, `gate` sparsity:
 *
 * 1. Gate for every neuron: from the gate rows kept resident as one dense matrix per layer (a
 *    third of the FFN; no I/O), or, when the budget cannot hold them, from the bundles in the
 *    cache plus a first-phase read of just the gate page(s) of every other bundle.
 * 2. The neurons whose activation is not zero (ReLU family: gate > 0) are looked up in the
 *    neuron cache; the misses' bundles are read from flash (direct I/O, many in flight) into
 *    cold slots.
 * 3. While those reads are in flight, the neurons already in memory are computed; then the ones
 *    just read. Up, activation and Down for exactly the firing neurons: exact for ReLU models.
 *
 * Every buffer is laid out at load; a step allocates nothing but the read requests' objects.
 */
import { availableParallelism } from "node:os";
import type { NeuronStore, VerifyMode } from "../format/store.js";
import type { Arena } from "../runtime/arena.js";
import type { ThreadPool } from "../runtime/pool.js";
import { weightKernel } from "../runtime/weight-kernels.js";
import { SparseFFN, type SparseActivation } from "../runtime/sparse-kernels.js";
import { FlashReader, type FlashReadRequest, type FlashReaderOptions } from "../io/flash-reader.js";
import { defaultHotFraction, NeuronCache } from "../io/neuron-cache.js";
import type { ModelConfig } from "./config.js";
import type { Matrix } from "./weight-loader.js";

/**
 * Which neurons run: "gate" computes every gate and then up/down where the activation is not
 * zero (exact for ReLU-family models); "predictor" computes the hot region densely and the cold
 * neurons the predictor selects (PowerInfer's fc1/fc2); "dense" computes every neuron (for
 * comparison and the ablation's naive baseline).
 */
export type SparsityMode = "dense" | "gate" | "predictor";

export interface OffloadOptions {
  sparsity?: SparsityMode;
  /** predictor: a neuron runs when its score exceeds this (default: the model's powerinfer.sparse_threshold, else 0) */
  threshold?: number;
  /** bytes for the neuron cache (hot + cold regions) */
  cacheBytes: number;
  /** keep every gate row in memory (default true); false reads gates from flash in a first phase */
  residentGates?: boolean;
  /** share of the cache pinned to each layer's hottest neurons (default 0.5) */
  hotFraction?: number;
  /** reads in flight (default: libuv's thread pool size, 64 under bin/powerinfer.cjs) */
  queueDepth?: number;
  /** direct I/O: "auto" (default) falls back to buffered reads with a warning */
  direct?: boolean | "auto";
  onWarning?: (message: string) => void;
  /**
   * overlap reads with compute (default true): the neurons in memory are computed while the
   * misses are read; false waits for the reads first (the ablation's "no pipeline")
   */
  pipeline?: boolean;
  /** native AIO's system calls on the reader's own thread (default: when compute leaves a core free) */
  ioThread?: boolean;
  /** test hook passed to the flash reader: return an Error to make a read fail with it */
  fault?: FlashReaderOptions["fault"];
  /**
   * gates not resident: stream them from the store's contiguous gate-row copy (default true)
   * rather than reading each bundle's gate pages (what stores without a copy always do)
   */
  streamGates?: boolean;
  /** per layer: in gate mode a neuron fires only when |act(gate)| exceeds this (SiLU models) */
  thresholds?: Float32Array | null;
  /**
   * checksums of bundles read from flash: "once" (default) checks each 4 KiB chunk the first time
   * it is read, and the store's size and modification time once per token (a file rewritten
   * under the model is an error); "always" checks every read again (CRC-32 of everything read,
   * ~30 ms per token at 7B shape, where ~100 MB are read per token)
   */
  verify?: VerifyMode;
  /**
   * predictor mode: while layer l computes, read ahead the cold bundles that layer l+1's
   * predictor picks from layer l's input (default true; see OffloadedFFN.lookahead)
   */
  lookahead?: boolean;
}

export interface OffloadStats {
  /** (token, layer) FFN evaluations */
  steps: number;
  neuronsTotal: number;
  neuronsComputed: number;
  hotHits: number;
  coldHits: number;
  misses: number;
  bytesRead: number;
  ioWaitMs: number;
  computeMs: number;
  /** predictor mode: bundles read ahead for the next layer, and how many of those its own predictor then picked (counted among the misses: they were read for this token) */
  readAhead: number;
  readAheadUsed: number;
}

/** load-time read buffer: small, because under a budget a transient buffer counts too */
const CHUNK = 2 << 20;
/** gate pages read per round when the gate rows are not resident */
const STAGE_NEURONS = 2048;
/**
 * Predictor mode, hot region: clusters of this many neurons (adjacent in the hot-first order, so
 * of similar firing rates). A cluster of which the predictor picks at least HOT_DENSE_SHARE is
 * computed whole in one dense run over its contiguous slots; of the others, just the picked
 * neurons. With a power-law of firing rates the top clusters fire nearly whole and the tail of a
 * large hot region fires a few percent: computing it all would multiply the FFN's work.
 */
const HOT_CLUSTER = 32;
const HOT_DENSE_SHARE = 0.75;
/**
 * Read-ahead takes the next layer's picks whose score (from this layer's input) clears the
 * threshold by this many standard deviations of the layer's cold scores. Measured on the 7B shape
 * at 3 GiB, 1 thread, interleaved: margin 0 read 10.5K bundles ahead per token of which 13% went
 * unused, 225-243 ms per token; 0.2 (an absolute 0.25 there) 7.1K with 3% unused, 211-217 ms;
 * more lost coverage (0.375 absolute: 231-234 ms). The disk's IOPS are the limit, so a read
 * for nothing costs as much as a useful one.
 */
const READ_AHEAD_MARGIN = 0.2;
/** cached neurons computed per kernel call between services of the reader (a few hundred microseconds) */
const HIT_PIECE = 128;

/** Bytes the first-phase gate reads need (staging for one round), for budgeting. */
export function gateStagingBytes(gateReadBytes: number, nFF: number): number {
  return Math.min(nFF, STAGE_NEURONS) * gateReadBytes;
}

/** Bytes of the pages holding one bundle's gate row: what a first-phase gate read reads. */
export function gateReadBytesOf(ffn: { parts: { gate: number }; rowBytes: number }): number {
  return Math.ceil((ffn.parts.gate + ffn.rowBytes) / 4096) * 4096;
}

/**
 * How gate rows stream from a store's contiguous gate-row copy through the staging area, split in
 * two halves (one is read while the other's gates compute): rows per chunk (0: a chunk's page span
 * would not fit a half) and the bytes of a half. The planner models the same reads.
 */
export function gateStreamGeometry(
  nFF: number,
  gateReadBytes: number,
  rowBytes: number,
): { rows: number; halfBytes: number } {
  const stage = Math.min(nFF, STAGE_NEURONS);
  const halfBytes = Math.floor((stage * gateReadBytes) / 2 / 4096) * 4096;
  return { rows: Math.max(0, Math.min(stage, Math.floor((halfBytes - 2 * 4096) / rowBytes))), halfBytes };
}

/** Each layer's firing rates in stored order, from the profile the store was ordered by (null without one). */
export function storedFiring(store: NeuronStore): Float32Array[] | null {
  const out: Float32Array[] = [];
  for (let l = 0; l < store.ffn.layers.length; l++) {
    const L = store.layer(l);
    if (!L.frequency) return null;
    const f = new Float32Array(L.neurons);
    for (let k = 0; k < L.neurons; k++) f[k] = L.frequency[L.order[k]];
    out.push(f);
  }
  return out;
}

export class OffloadedFFN {
  readonly cache: NeuronCache;
  readonly reader: FlashReader;
  readonly stats: OffloadStats = {
    steps: 0,
    neuronsTotal: 0,
    neuronsComputed: 0,
    hotHits: 0,
    coldHits: 0,
    misses: 0,
    bytesRead: 0,
    ioWaitMs: 0,
    computeMs: 0,
    readAhead: 0,
    readAheadUsed: 0,
  };
  /** resident gate matrices, one per layer, rows in stored order */
  readonly gates: Matrix[] = [];
  private readonly sparse: SparseFFN;
  private readonly act: SparseActivation;
  private readonly nFF: number;
  private readonly gateOut: number;
  private readonly hitList: number;
  private readonly hitGates: number;
  private readonly missList: number;
  private readonly missGates: number;
  private readonly missPos: Int32Array;
  private readonly missGateValues: Float32Array;
  private readonly f32: Float32Array;
  private readonly i32: Int32Array;
  private readonly requests: FlashReadRequest[] = [];
  private readonly pipeline: boolean;
  private readonly residentGates: boolean;
  /** first-phase gate reads: bytes per neuron (the pages holding its gate row), staging */
  private readonly gateReadBytes: number;
  private readonly stageNeurons: number;
  private readonly stage: number;
  private readonly stageList: number;
  private readonly stagePos: Int32Array;
  /** streaming the gate-row copy: rows per chunk (0: not possible), bytes per staging half */
  private readonly streamRows: number;
  private readonly halfBytes: number;
  private readonly chunkBase = [0, 0];
  /** one read request per staging half, rewritten for each chunk (a half is reused only once its read has landed) */
  private readonly chunkRequests: { fileOffset: number; length: number; dst: number }[][] = [
    [{ fileOffset: 0, length: 0, dst: 0 }],
    [{ fileOffset: 0, length: 0, dst: 0 }],
  ];
  /** gates streamed (not resident) for every layer: then prompt batches stream them too */
  private readonly streamsAll: boolean;
  private readonly cachedPos: Int32Array;
  readonly mode: SparsityMode;
  /** the share of the cache pinned to hot neurons */
  readonly hotFraction: number;
  private readonly threshold: number;
  private readonly thresholds: Float32Array | null;
  /** the current layer's activation threshold (0: any non-zero activation fires) */
  private cut = 0;
  private hits = 0;
  private misses = 0;
  private hitsComputed = false;
  private computeMs = 0;
  /** predictor mode, read-ahead: on, its scores, the read in flight and its requests, which slots hold a bundle read ahead and not yet used */
  private readonly lookahead: boolean;
  private readonly lookScores: number;
  private lookRead: Promise<void> | null = null;
  private lookRequests: FlashReadRequest[] = [];
  private lookLayer = -1;
  private readonly readAheadSlot: Uint8Array;
  /** checksums checked on first read only: then the file is checked for changes every token */
  private readonly verifyOnce: boolean;
  private predictFn: ((l: number, out: number) => void) | null = null;

  constructor(
    private readonly store: NeuronStore,
    private readonly cfg: ModelConfig,
    arena: Arena,
    pool: ThreadPool,
    opts: OffloadOptions,
  ) {
    const ffn = store.ffn;
    const nFF = (this.nFF = cfg.nFF);
    if (ffn.nEmbd !== cfg.nEmbd)
      throw new Error(`${store.path}: FFN rows are ${ffn.nEmbd} wide, the model is ${cfg.nEmbd}`);
    this.act = cfg.activation === "gelu" ? "gelu" : cfg.activation;

    this.mode = opts.sparsity ?? "gate";
    this.threshold = opts.threshold ?? cfg.sparseThreshold;
    this.thresholds = opts.thresholds ?? null;
    // Predictor mode reads gates from the bundles it computes: no resident gate rows.
    this.residentGates = this.mode !== "predictor" && (opts.residentGates ?? true);
    // Resident gate rows: read every bundle once, keep its gate part as a dense matrix.
    const kernel = weightKernel(ffn.type);
    const gateRows = new Uint8Array(Math.max(1, Math.floor(CHUNK / ffn.bundleBytes)) * ffn.rowBytes);
    const perChunk = gateRows.length / ffn.rowBytes;
    const bundles = new Uint8Array(perChunk * ffn.bundleBytes);
    for (let l = 0; l < cfg.nLayer && this.residentGates; l++) {
      const L = store.layer(l);
      const size = kernel.packedBytes(nFF, cfg.nEmbd);
      const ptr = arena.alloc(size, 64);
      const dst = arena.u8(ptr, size);
      for (let p = 0; p < L.neurons; p += perChunk) {
        const n = Math.min(perChunk, L.neurons - p);
        store.readBundles(l, p, n, bundles.subarray(0, n * ffn.bundleBytes));
        for (let i = 0; i < n; i++)
          gateRows.set(
            bundles.subarray(i * ffn.bundleBytes + ffn.parts.gate, i * ffn.bundleBytes + ffn.parts.gate + ffn.rowBytes),
            i * ffn.rowBytes,
          );
        kernel.pack(gateRows.subarray(0, n * ffn.rowBytes), dst, p, n, nFF, cfg.nEmbd);
      }
      this.gates.push({
        name: `blk.${l}.ffn_gate (resident)`,
        ptr,
        rows: nFF,
        cols: cfg.nEmbd,
        kernel,
        matvecFn: pool.fn(kernel.matvec),
        matmulFn: pool.fn(kernel.matmul),
      });
    }

    this.sparse = new SparseFFN(pool, arena, ffn.type, cfg.nEmbd);
    this.gateOut = arena.alloc(nFF * 4, 64);
    this.hitList = arena.alloc(nFF * 4, 64);
    this.hitGates = arena.alloc(nFF * 4, 64);
    this.missList = arena.alloc(nFF * 4, 64);
    this.missGates = arena.alloc(nFF * 4, 64);
    this.missPos = new Int32Array(nFF);
    this.missGateValues = new Float32Array(nFF);
    this.gateReadBytes = gateReadBytesOf(ffn);
    this.stageNeurons = this.residentGates ? 0 : Math.min(nFF, STAGE_NEURONS);
    this.stage = this.residentGates ? 0 : arena.alloc(this.stageNeurons * this.gateReadBytes, 4096);
    this.stageList = this.residentGates ? 0 : arena.alloc(this.stageNeurons * 4, 64);
    this.stagePos = new Int32Array(Math.max(this.stageNeurons, 1));
    // The staging area in two halves for streaming: a chunk's page span must fit in one half.
    const stream = gateStreamGeometry(this.stageNeurons, this.gateReadBytes, ffn.rowBytes);
    this.halfBytes = stream.halfBytes;
    this.streamRows = opts.streamGates === false ? 0 : stream.rows;
    this.streamsAll = store.ffn.layers.every((_, l) => this.streams(l));
    this.cachedPos = new Int32Array(nFF);
    this.denseRunStart = new Int32Array(Math.ceil(nFF / HOT_CLUSTER));
    this.denseRunCount = new Int32Array(Math.ceil(nFF / HOT_CLUSTER));

    // The cache: what the budget leaves, in whole bundles; a share pinned to hot neurons (with a
    // profile, the share with the most expected hits, at least half: see defaultHotFraction).
    const slots = Math.floor(opts.cacheBytes / ffn.bundleBytes);
    if (slots < 1)
      throw new Error(`the memory budget leaves no room for even one neuron bundle (${ffn.bundleBytes} bytes)`);
    this.hotFraction = opts.hotFraction ?? defaultHotFraction(storedFiring(store), slots, nFF);
    // A cache that holds the whole FFN pins all of it; otherwise keep at least one cold slot so
    // that misses can always be served.
    let hot =
      slots >= cfg.nLayer * nFF
        ? nFF
        : Math.min(nFF, Math.floor((slots * this.hotFraction) / cfg.nLayer), Math.floor((slots - 1) / cfg.nLayer));
    // Pinned bundles are read once at load, never by a direct read: packed without the padding
    // that 4 KiB-aligns flash reads (7680 of 8192 bytes for a 4096-wide Q4_1 bundle), the bytes
    // that padding took pin more neurons; the cold region keeps its slots.
    const cold = slots - hot * cfg.nLayer;
    const packed = 3 * ffn.rowBytes;
    let hotSlotBytes = ffn.bundleBytes;
    if (packed < ffn.bundleBytes && hot > 0 && hot < nFF) {
      const room = opts.cacheBytes - cold * ffn.bundleBytes - 4096;
      const more = Math.min(nFF, Math.floor(room / (cfg.nLayer * packed)));
      if (more >= hot) {
        hot = more;
        hotSlotBytes = packed;
      }
    }
    const cacheSlots = hot * cfg.nLayer + cold;
    const base = arena.alloc(NeuronCache.bytesFor(hot * cfg.nLayer, cold, ffn.bundleBytes, hotSlotBytes), 4096);
    this.cache = new NeuronCache(
      base,
      ffn.bundleBytes,
      cacheSlots,
      Array(cfg.nLayer).fill(nFF),
      Array(cfg.nLayer).fill(hot),
      hotSlotBytes,
    );
    const chunk = new Uint8Array(Math.max(1, Math.floor(CHUNK / ffn.bundleBytes)) * ffn.bundleBytes);
    const perRead = chunk.length / ffn.bundleBytes;
    for (let l = 0; l < cfg.nLayer && hot > 0; l++) {
      if (hotSlotBytes === ffn.bundleBytes) {
        store.readBundles(l, 0, hot, arena.u8(this.cache.address(this.cache.hotStart[l]), hot * ffn.bundleBytes));
        continue;
      }
      const dst = arena.u8(this.cache.address(this.cache.hotStart[l]), hot * hotSlotBytes);
      for (let k = 0; k < hot; k += perRead) {
        const n = Math.min(perRead, hot - k);
        store.readBundles(l, k, n, chunk.subarray(0, n * ffn.bundleBytes));
        for (let i = 0; i < n; i++)
          dst.set(chunk.subarray(i * ffn.bundleBytes, i * ffn.bundleBytes + hotSlotBytes), (k + i) * hotSlotBytes);
      }
    }
    this.reader = FlashReader.open(store.path, {
      memory: arena.memory,
      queueDepth: opts.queueDepth,
      direct: opts.direct ?? "auto",
      verify: store.verifier(opts.verify ?? "once"),
      checksums: store.checksumTable(opts.verify ?? "once"),
      onWarning: opts.onWarning,
      fault: opts.fault,
      // The reader's own I/O thread where a core is left over from compute; when every core
      // computes, it would only preempt the kernels' threads (docs/store-format.md, "Native AIO").
      ioThread: opts.ioThread ?? pool.threads < availableParallelism(),
    });
    this.pipeline = opts.pipeline ?? true;
    this.verifyOnce = (opts.verify ?? "once") === "once";
    this.lookahead = this.mode === "predictor" && this.pipeline && (opts.lookahead ?? true) && hot < nFF;
    this.lookScores = this.lookahead ? arena.alloc(nFF * 4, 64) : 0;
    this.readAheadSlot = new Uint8Array(this.lookahead ? this.cache.slots : 0);
    // views over the whole memory: taken after the last allocation (an allocation may grow it)
    this.f32 = new Float32Array(arena.memory.buffer);
    this.i32 = new Int32Array(arena.memory.buffer);
  }

  /**
   * y (nEmbd f32) += FFN(x) for one token of layer `l`; x is the normed FFN input (f32), gate()
   * computes resident gate rows into gateOut with the dense kernels (the model's matvec).
   */
  async run(
    l: number,
    x: number,
    y: number,
    gate: (m: Matrix, out: number) => void,
    predict?: (l: number, out: number) => void,
  ): Promise<void> {
    // what was read ahead for this layer must have landed before its slots are computed (one
    // left over from a pass that failed only has to settle)
    if (this.lookRead) await this.awaitLookahead(this.lookLayer === l);
    if (l === 0 && this.verifyOnce) this.store.assertUnchanged();
    this.sparse.prepare(x);
    this.cache.beginStep();
    this.cut = this.thresholds ? this.thresholds[l] : 0;
    this.hits = 0;
    this.misses = 0;
    this.hitsComputed = false;
    this.computeMs = 0;
    let dense = 0;
    if (this.mode === "predictor") {
      dense = this.predicted(l, predict!);
      this.predictFn = predict!;
    } else if (this.residentGates) {
      gate(this.gates[l], this.gateOut);
      for (let k = 0; k < this.nFF; k++) this.classify(l, k, this.f32[(this.gateOut >>> 2) + k]);
    } else {
      await this.gatesFromBundles(l);
    }
    this.stats.steps++;
    this.stats.neuronsTotal += this.nFF;
    this.stats.neuronsComputed += dense + this.hits + this.misses;
    this.stats.misses += this.misses;
    await this.serveMisses(l);
    this.sparse.finish(y);
    this.stats.computeMs += this.computeMs;
    // The next layer's first gate chunk does not depend on this token's values: read it while
    // the next attention block computes.
    const next = (l + 1) % this.cfg.nLayer;
    if (
      this.mode !== "predictor" &&
      !this.residentGates &&
      this.streams(next) &&
      this.cache.hotCount[next] < this.nFF
    ) {
      this.prefetchLayer = next;
      this.prefetchRead = this.readChunk(next, this.cache.hotCount[next], 0);
    }
  }

  /** A first gate chunk read ahead into staging half 0 (see run): its layer and read, or -1 / null. */
  private prefetchLayer = -1;
  private prefetchRead: Promise<void> | null = null;

  /** Wait out a read ahead that will not be used (it lands in staging half 0). */
  private async dropPrefetch(): Promise<void> {
    const read = this.prefetchRead;
    this.prefetchRead = null;
    this.prefetchLayer = -1;
    if (read) await read.catch(() => undefined);
  }

  /**
   * Whether prompts run as batches through runBatch: with resident gate rows, or with gate rows
   * to stream. In predictor mode too: across a prompt nearly every neuron fires for some token,
   * so the batch computes its exact gates (streamed once for the batch) instead of asking the
   * predictor token by token and reading each token's bundles separately.
   */
  get batches(): boolean {
    return this.residentGates || this.streamsAll;
  }

  /** Whether the gate rows are in memory (else streamBatchGates computes a batch's gates). */
  get hasResidentGates(): boolean {
    return this.residentGates;
  }

  /**
   * The FFN of n tokens of layer l at once (prompt prefill): `gates` holds the n x nFF gate
   * values (the caller ran the resident gate matrix over the batch, or streamBatchGates). Every
   * bundle that any token needs is made resident once per batch, in rounds as the cold region
   * allows (the first round's reads overlap the cached neurons' compute), and each token computes
   * just its own firing neurons among them. y rows (residual) += FFN(x rows).
   */
  async runBatch(l: number, x: number, y: number, n: number, gates: number): Promise<void> {
    if (this.lookRead) await this.awaitLookahead(false);
    if (l === 0 && this.verifyOnce) this.store.assertUnchanged();
    const { cache, f32, nFF } = this;
    cache.beginStep();
    this.cut = this.thresholds ? this.thresholds[l] : 0;
    this.computeMs = 0;
    // The union of the firing neurons, filed as hits (resident) or misses.
    let hits = 0;
    let misses = 0;
    let fired = 0;
    for (let k = 0; k < nFF; k++) {
      let any = false;
      for (let t = 0; t < n; t++) {
        if (this.fires(f32[(gates >>> 2) + t * nFF + k])) {
          any = true;
          fired++;
        }
      }
      if (!any) continue;
      const slot = cache.lookup(l, k);
      if (slot >= 0) this.cachedPos[hits++] = k;
      else this.missPos[misses++] = k;
    }
    this.stats.steps += n;
    this.stats.neuronsTotal += n * nFF;
    this.stats.neuronsComputed += fired;
    this.stats.misses += misses;
    // The hits while the first misses are read; then the misses, round by round.
    this.batchArgs.l = l;
    this.batchArgs.x = x;
    this.batchArgs.y = y;
    this.batchArgs.n = n;
    this.batchArgs.gates = gates;
    this.batchArgs.hits = hits;
    await this.readRounds(l, misses, this.batchHits, this.batchMisses);
    this.stats.computeMs += this.computeMs;
  }

  /** runBatch's state for its round callbacks (kept in a field: the callbacks are bound once). */
  private readonly batchArgs = { l: 0, x: 0, y: 0, n: 0, gates: 0, hits: 0 };
  private readonly batchHits = (): void => {
    const b = this.batchArgs;
    this.computeTokens(b.l, b.x, b.y, b.n, b.gates, this.cachedPos, 0, b.hits);
  };
  private readonly batchMisses = (from: number, to: number): void => {
    const b = this.batchArgs;
    this.computeTokens(b.l, b.x, b.y, b.n, b.gates, this.missPos, from, to);
  };

  /** For each token: up/down of its firing neurons among positions[from..to) (all resident). */
  private computeTokens(
    l: number,
    x: number,
    y: number,
    n: number,
    gates: number,
    positions: Int32Array,
    from: number,
    to: number,
  ): void {
    const { cache, f32, i32, nFF } = this;
    const rowBytes = this.cfg.nEmbd * 4;
    const t0 = performance.now();
    for (let t = 0; t < n; t++) {
      const g0 = (gates >>> 2) + t * nFF;
      let count = 0;
      for (let i = from; i < to; i++) {
        const k = positions[i];
        const g = f32[g0 + k];
        if (!this.fires(g)) continue;
        i32[(this.hitList >>> 2) + count] = cache.address(cache.peek(l, k));
        f32[(this.hitGates >>> 2) + count] = g;
        count++;
      }
      if (count === 0) continue;
      this.sparse.prepare(x + t * rowBytes);
      this.sparse.upDown(this.hitList, count, this.hitGates, this.act);
      this.sparse.finish(y + t * rowBytes);
    }
    this.computeMs += performance.now() - t0;
  }

  /**
   * Whether a gate value makes its neuron fire: ReLU family g > 0, otherwise any non-zero
   * activation; with a threshold, |act(g)| above it (as the dense path's ffn_act_cut).
   */
  private fires(g: number): boolean {
    if (this.mode === "dense") return true;
    const cut = this.cut;
    if (this.act === "silu" || this.act === "gelu") {
      if (cut === 0) return g !== 0;
      const a =
        this.act === "silu"
          ? g / (1 + Math.exp(-g))
          : 0.5 * g * (1 + Math.tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
      return Math.abs(a) > cut;
    }
    return g > cut;
  }

  /**
   * Predictor mode: the scores of layer l, and the neurons they pick filed for computing: hot
   * clusters picked (nearly) whole as dense runs (HOT_CLUSTER), the other picked neurons as hits
   * (resident) or misses (to read). Nothing is computed yet: that overlaps the first reads.
   * Returns the neurons of the dense runs.
   */
  private predicted(l: number, predict: (l: number, out: number) => void): number {
    const { cache, f32 } = this;
    predict(l, this.gateOut);
    const hot = cache.hotCount[l];
    const order = this.store.layer(l).order;
    const s0 = this.gateOut >>> 2;
    const thr = this.threshold;
    let dense = 0;
    this.denseRuns = 0;
    for (let c0 = 0; c0 < hot; c0 += HOT_CLUSTER) {
      const c1 = Math.min(hot, c0 + HOT_CLUSTER);
      let picked = 0;
      // scores come in the model's neuron order; bundles are stored hot-first
      for (let k = c0; k < c1; k++) if (f32[s0 + order[k]] > thr) picked++;
      if (picked === 0) continue;
      if (picked >= HOT_DENSE_SHARE * (c1 - c0)) {
        this.denseRunStart[this.denseRuns] = c0;
        this.denseRunCount[this.denseRuns++] = c1 - c0;
        cache.hot.hits += picked;
        dense += c1 - c0;
      } else {
        for (let k = c0; k < c1; k++) if (f32[s0 + order[k]] > thr) this.classify(l, k, 1);
      }
    }
    for (let k = hot; k < this.nFF; k++) {
      if (f32[s0 + order[k]] > thr) this.classify(l, k, 1);
    }
    this.denseLayer = l;
    return dense;
  }

  /** predictor mode: the hot clusters to compute whole this step (stored start, count) */
  private denseRuns = 0;
  private denseLayer = 0;
  private readonly denseRunStart: Int32Array;
  private readonly denseRunCount: Int32Array;

  /** File a firing neuron of layer l (stored position k, gate g) as a hit or a miss. */
  private classify(l: number, k: number, g: number): void {
    if (!this.fires(g)) return;
    const slot = this.cache.lookup(l, k);
    if (slot >= 0 && this.lookahead && this.readAheadSlot[slot]) {
      // read for this token, only earlier: a miss served ahead of time, not a cache hit
      this.readAheadSlot[slot] = 0;
      this.cache.cold.hits--;
      this.stats.misses++;
      this.stats.readAheadUsed++;
    }
    if (slot >= 0) {
      this.i32[(this.hitList >>> 2) + this.hits] = this.cache.address(slot);
      this.f32[(this.hitGates >>> 2) + this.hits] = g;
      this.hits++;
    } else {
      this.missPos[this.misses] = k;
      this.missGateValues[this.misses] = g;
      this.misses++;
    }
  }

  /**
   * Gates without resident gate rows: the cached bundles' own gate rows, then the others'. Those
   * stream from the store's contiguous gate-row copy in large sequential reads where the store has
   * one, else come from each bundle's gate pages, read in rounds into the staging area. Either
   * way the first read overlaps the up/down of the cached neurons that fired.
   */
  private async gatesFromBundles(l: number): Promise<void> {
    const { cache, f32, i32, nFF } = this;
    const cached = this.listCached(l);
    let t = performance.now();
    if (cached > 0) this.sparse.gate(this.missList, cached, this.gateOut);
    this.computeMs += performance.now() - t;
    for (let i = 0; i < cached; i++) this.classify(l, this.cachedPos[i], f32[(this.gateOut >>> 2) + i]);
    if (this.streams(l)) {
      this.streamLayer = l;
      await this.streamGateRows(l, cache.hotCount[l], true, this.classifyChunk);
      return;
    }
    let k = 0;
    while (k < nFF) {
      const requests = this.requests;
      requests.length = 0;
      let m = 0;
      for (; k < nFF && m < this.stageNeurons; k++) {
        if (cache.peek(l, k) >= 0) continue;
        const dst = this.stage + m * this.gateReadBytes;
        i32[(this.stageList >>> 2) + m] = dst;
        this.stagePos[m++] = k;
        requests.push({ fileOffset: this.store.bundleOffset(l, k), length: this.gateReadBytes, dst });
      }
      if (m === 0) break;
      const reading = this.reader.read(requests);
      if (!this.hitsComputed) this.computeHits();
      const tw = performance.now();
      await reading;
      this.stats.ioWaitMs += performance.now() - tw;
      this.stats.bytesRead += m * this.gateReadBytes;
      t = performance.now();
      this.sparse.gate(this.stageList, m, this.gateOut);
      this.computeMs += performance.now() - t;
      for (let i = 0; i < m; i++) this.classify(l, this.stagePos[i], f32[(this.gateOut >>> 2) + i]);
    }
  }

  /** The cached bundles of layer l: their addresses into missList, stored positions into cachedPos. Returns the count. */
  private listCached(l: number): number {
    const { cache, i32 } = this;
    let cached = 0;
    for (let k = 0; k < this.nFF; k++) {
      const slot = cache.peek(l, k);
      if (slot < 0) continue;
      i32[(this.missList >>> 2) + cached] = cache.address(slot);
      this.cachedPos[cached++] = k;
    }
    return cached;
  }

  /** Whether layer l's gates can stream from a contiguous gate-row copy. */
  private streams(l: number): boolean {
    return this.streamRows > 0 && this.store.layer(l).gateRows !== null;
  }

  /**
   * List the rows of a streamed chunk [r0, r1) (row r0 at address base) that the cache does not
   * hold: their addresses into stageList, their stored positions into stagePos. Returns the count.
   */
  private uncachedRows(l: number, r0: number, r1: number, base: number): number {
    const rb = this.store.ffn.rowBytes;
    let m = 0;
    for (let r = r0; r < r1; r++) {
      if (this.cache.peek(l, r) >= 0) continue;
      this.i32[(this.stageList >>> 2) + m] = base + (r - r0) * rb;
      this.stagePos[m++] = r;
    }
    return m;
  }

  private streamLayer = 0;
  /** Decode: the gates of a streamed chunk's uncached rows, each neuron filed as it fires. */
  private readonly classifyChunk = (r0: number, r1: number, base: number): void => {
    const l = this.streamLayer;
    const m = this.uncachedRows(l, r0, r1, base);
    if (m === 0) return;
    const t = performance.now();
    this.sparse.gate(this.stageList, m, this.gateOut);
    this.computeMs += performance.now() - t;
    for (let i = 0; i < m; i++) this.classify(l, this.stagePos[i], this.f32[(this.gateOut >>> 2) + i]);
  };

  /**
   * Stream layer l's gate-row copy from stored position `from` to the end, in chunks alternating
   * between the two halves of the staging area: the next chunk is read while `visit(r0, r1, base)`
   * computes this one (base: address of row r0). With overlapHits, the cached neurons' up/down
   * runs while the first chunk is read.
   */
  private async streamGateRows(
    l: number,
    from: number,
    overlapHits: boolean,
    visit: (r0: number, r1: number, base: number) => void,
  ): Promise<void> {
    const nFF = this.nFF;
    if (from >= nFF) {
      await this.dropPrefetch();
      if (overlapHits && !this.hitsComputed) this.computeHits();
      return;
    }
    let cur: Promise<void>;
    if (this.prefetchRead && this.prefetchLayer === l) {
      cur = this.prefetchRead;
      this.prefetchRead = null;
      this.prefetchLayer = -1;
    } else {
      await this.dropPrefetch();
      cur = this.readChunk(l, from, 0);
    }
    let half = 0;
    for (let r0 = from; r0 < nFF;) {
      const r1 = Math.min(nFF, r0 + this.streamRows);
      half ^= 1;
      const next = r1 < nFF ? this.readChunk(l, r1, half) : null;
      if (overlapHits && !this.hitsComputed) this.computeHits();
      const tw = performance.now();
      try {
        await cur;
      } catch (e) {
        // let the other half's read finish before its staging can be reused
        await next?.catch(() => undefined);
        throw e;
      }
      this.stats.ioWaitMs += performance.now() - tw;
      visit(r0, r1, this.chunkBase[half ^ 1]);
      r0 = r1;
      if (next) cur = next;
    }
  }

  /** Read the page span holding gate rows [r0, r0 + streamRows) of layer l into staging half h. */
  private readChunk(l: number, r0: number, h: number): Promise<void> {
    const L = this.store.layer(l);
    const rb = L.rowBytes;
    const r1 = Math.min(this.nFF, r0 + this.streamRows);
    const from = L.gateRows! + r0 * rb;
    const a = from - (from % 4096);
    const end = Math.ceil((L.gateRows! + r1 * rb) / 4096) * 4096;
    const dst = this.stage + h * this.halfBytes;
    this.chunkBase[h] = dst + (from - a);
    const req = this.chunkRequests[h];
    req[0].fileOffset = a;
    req[0].length = end - a;
    req[0].dst = dst;
    this.stats.bytesRead += end - a;
    const read = this.reader.read(req);
    // Whoever awaits it still sees a failure; a read left behind by an error elsewhere must not
    // become an unhandled rejection.
    read.catch(() => undefined);
    return read;
  }

  /**
   * Prompt prefill without resident gate rows: the gates of all n tokens (rows x of nEmbd f32)
   * into gates (n x nFF f32, stored order), the layer's gate rows streamed once for the batch.
   */
  async streamBatchGates(l: number, x: number, n: number, gates: number): Promise<void> {
    if (this.lookRead) await this.awaitLookahead(false);
    const cache = this.cache;
    const cached = this.listCached(l);
    this.batchArgs.l = l;
    this.batchArgs.x = x;
    this.batchArgs.n = n;
    this.batchArgs.gates = gates;
    this.computeMs = 0;
    this.gatesForBatch(this.missList, this.cachedPos, cached);
    await this.streamGateRows(l, cache.hotCount[l], false, this.batchChunk);
    this.stats.computeMs += this.computeMs;
  }

  private readonly batchChunk = (r0: number, r1: number, base: number): void => {
    const m = this.uncachedRows(this.batchArgs.l, r0, r1, base);
    this.gatesForBatch(this.stageList, this.stagePos, m);
  };

  /** Gates of `count` rows (addresses in list, stored positions in pos) for each token of the batch. */
  private gatesForBatch(list: number, pos: Int32Array, count: number): void {
    if (count === 0) return;
    const { f32, nFF } = this;
    const { x, n, gates } = this.batchArgs;
    const rowBytes = this.cfg.nEmbd * 4;
    const t0 = performance.now();
    const out = this.gateOut >>> 2;
    for (let t = 0; t < n; t++) {
      this.sparse.prepare(x + t * rowBytes);
      this.sparse.gate(list, count, this.gateOut);
      const g0 = (gates >>> 2) + t * nFF;
      for (let i = 0; i < count; i++) f32[g0 + pos[i]] = f32[out + i];
    }
    this.computeMs += performance.now() - t0;
  }

  private computeHits(): void {
    this.hitsComputed = true;
    const t = performance.now();
    const cache = this.cache;
    // In pieces, with the reader serviced in between: reads that finish meanwhile make room for
    // queued ones (native AIO reports completions only when asked), so the disk stays busy.
    for (let i = 0; i < this.denseRuns; i++) {
      this.sparse.ffnRun(
        cache.address(cache.hotStart[this.denseLayer] + this.denseRunStart[i]),
        cache.hotSlotBytes,
        this.denseRunCount[i],
        this.act,
      );
      if ((i & 3) === 3) this.reader.service();
    }
    this.denseRuns = 0;
    for (let i = 0; i < this.hits; i += HIT_PIECE) {
      const n = Math.min(HIT_PIECE, this.hits - i);
      if (this.mode === "predictor") this.sparse.ffn(this.hitList + 4 * i, n, this.act);
      else this.sparse.upDown(this.hitList + 4 * i, n, this.hitGates + 4 * i, this.act);
      this.reader.service();
    }
    this.computeMs += performance.now() - t;
  }

  /** Read the misses' bundles and compute them; the first round's reads overlap the hits' computation. */
  private async serveMisses(l: number): Promise<void> {
    this.missLayer = l;
    await this.readRounds(l, this.misses, this.hitsOnce, this.missRound);
  }

  private missLayer = 0;
  private readonly hitsOnce = (): void => {
    if (this.lookahead && this.missLayer + 1 < this.cfg.nLayer && this.missRoundsFit)
      this.readAhead(this.missLayer + 1);
    if (!this.hitsComputed) this.computeHits();
  };

  /** whether this layer's misses all fit the cold region in one round (then nothing of this step is evicted later in it) */
  private missRoundsFit = false;

  /**
   * Read-ahead (predictor mode): layer l's predictor run on the current layer's input (the
   * residual stream changes little from one layer to the next, so it picks most of what it will
   * pick from its own input: on the 7B-shape synthetic 87% of what is read ahead is then picked,
   * covering 78% of the layer's misses, docs/benchmarks.md),
   * and the cold bundles it picks that are not in memory read into cold slots now, while this
   * layer computes and the next one's attention runs. Its own predictor decides later what is
   * computed; a bundle read ahead for nothing is just a cold slot's content. Only when this
   * layer's misses took one round: slots read ahead are taken in this step and must not be
   * evicted before they land.
   */
  private readAhead(l: number): void {
    const { cache, f32 } = this;
    const t = performance.now();
    this.predictFn!(l, this.lookScores);
    this.computeMs += performance.now() - t;
    const order = this.store.layer(l).order;
    const s0 = this.lookScores >>> 2;
    // Only picks clearly above the threshold: the disk is what limits a token here, and picks
    // near it from the previous layer's input are mostly wrong (see READ_AHEAD_MARGIN).
    let sum = 0,
      sq = 0;
    const hot = cache.hotCount[l];
    for (let k = hot; k < this.nFF; k++) {
      const v = f32[s0 + order[k]];
      sum += v;
      sq += v * v;
    }
    const n = this.nFF - hot;
    const mean = sum / n;
    const thr = this.threshold + READ_AHEAD_MARGIN * Math.sqrt(Math.max(0, sq / n - mean * mean));
    const requests: FlashReadRequest[] = [];
    this.lookRequests = requests;
    for (let k = cache.hotCount[l]; k < this.nFF; k++) {
      if (!(f32[s0 + order[k]] > thr) || cache.peek(l, k) >= 0) continue;
      const slot = cache.acquire(l, k);
      if (slot < 0) break;
      this.readAheadSlot[slot] = 1;
      requests.push({
        fileOffset: this.store.bundleOffset(l, k),
        length: cache.slotBytes,
        dst: cache.address(slot),
        tag: slot,
      });
    }
    if (requests.length === 0) return;
    this.stats.readAhead += requests.length;
    this.stats.bytesRead += requests.length * cache.slotBytes;
    const read = this.reader.read(requests);
    read.catch(() => undefined);
    this.lookRead = read;
    this.lookLayer = l;
  }

  /**
   * Wait for the bundles read ahead (counted as I/O wait); on failure their slots are released
   * and, when they are for the layer about to run (`needed`), the error thrown: a read-ahead left
   * over from a pass that failed elsewhere is not this pass's error.
   */
  private async awaitLookahead(needed: boolean): Promise<void> {
    const read = this.lookRead!;
    const requests = this.lookRequests;
    this.lookRead = null;
    try {
      await this.wait(read, requests);
    } catch (e) {
      for (const r of requests) this.readAheadSlot[r.tag as number] = 0;
      if (needed) throw e;
    }
  }
  /** Up/down (or the whole bundle, predictor mode) of misses [from, to), now resident. */
  private readonly missRound = (from: number, to: number): void => {
    const { cache, f32, i32 } = this;
    for (let i = from; i < to; i++) {
      i32[(this.missList >>> 2) + i - from] = cache.address(cache.peek(this.missLayer, this.missPos[i]));
      f32[(this.missGates >>> 2) + i - from] = this.missGateValues[i];
    }
    const t = performance.now();
    if (this.mode === "predictor") this.sparse.ffn(this.missList, to - from, this.act);
    else this.sparse.upDown(this.missList, to - from, this.missGates, this.act);
    this.computeMs += performance.now() - t;
  };

  /**
   * Read the bundles of layer l at stored positions missPos[0..count) into cold slots, in rounds
   * of at most the cold slots not in use this step. `overlap` runs once, while the first round is
   * read (unless the pipeline is off: then after it); `compute(from, to)` runs on each round once
   * its bytes have landed.
   */
  private async readRounds(
    l: number,
    count: number,
    overlap: () => void,
    compute: (from: number, to: number) => void,
  ): Promise<void> {
    const cache = this.cache;
    let done = 0;
    let first = true;
    while (first || done < count) {
      const requests = this.requests;
      requests.length = 0;
      let m = 0;
      while (done + m < count) {
        const slot = cache.acquire(l, this.missPos[done + m]);
        if (slot < 0) break;
        if (this.lookahead) this.readAheadSlot[slot] = 0;
        requests.push({
          fileOffset: this.store.bundleOffset(l, this.missPos[done + m]),
          length: cache.slotBytes,
          dst: cache.address(slot),
          tag: slot,
        });
        m++;
      }
      const reading = m > 0 ? this.reader.read(requests) : undefined;
      if (reading && !this.pipeline) await this.wait(reading, requests);
      if (first) this.missRoundsFit = done + m === count;
      if (first) {
        overlap();
        first = false;
      }
      if (done < count && m === 0) {
        // Every cold slot holds a bundle this step has already computed: they may go now.
        cache.beginStep();
        continue;
      }
      if (reading) {
        if (this.pipeline) await this.wait(reading, requests);
        this.stats.bytesRead += m * cache.slotBytes;
        compute(done, done + m);
      }
      done += m;
    }
  }

  /** settle() with the wait counted as I/O wait. */
  private async wait(reading: Promise<void>, requests: FlashReadRequest[]): Promise<void> {
    const tw = performance.now();
    await this.settle(reading, requests);
    this.stats.ioWaitMs += performance.now() - tw;
  }

  /** Wait for a batch of reads; on failure their slots hold nothing valid and are released. */
  private async settle(reading: Promise<void>, requests: FlashReadRequest[]): Promise<void> {
    try {
      await reading;
    } catch (e) {
      for (const r of requests) this.cache.release(r.tag as number);
      throw e;
    }
  }

  /** Copies of the running counters, with the cache's hit counts. */
  snapshot(): OffloadStats {
    return { ...this.stats, hotHits: this.cache.hot.hits, coldHits: this.cache.cold.hits };
  }

  async close(): Promise<void> {
    await this.dropPrefetch();
    if (this.lookRead) await this.awaitLookahead(false);
    await this.reader.close();
  }
}
