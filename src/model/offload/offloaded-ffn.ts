/**
 * The FFN of a model run from a neuron store (.pi) under a memory budget. `decodeStep` is one
 * token of one layer, start to end:
 *
 * 1. Which neurons fire (a GateSource: resident gate rows, gate rows streamed from flash, gate
 *    pages, or PowerInfer's predictor), each filed as a hit (its bundle in the neuron cache) or a
 *    miss (to read from flash).
 * 2. The misses' bundles are read (direct I/O, many in flight) into cold slots, in rounds as the
 *    cold region allows; while the first round is in flight the hits are computed (and, in
 *    predictor and dense mode, a dense model's next layer's misses are read ahead; a mixture
 *    reads every routed expert's ahead once its layer has routed); then each round as it lands.
 * 3. Up, activation and down for exactly those neurons, summed into the residual stream.
 *
 * The sums go in a fixed order (fixed-order.ts): the same bits whatever was a hit or a miss,
 * whenever the reads landed, whatever the budget or thread count; a neuron is computed once the
 * neurons before it in its segment are.
 *
 * `prefillBatch` does the same for a prompt's batch: every token's gates, then each needed bundle
 * read once for the batch, segment by segment. Every buffer is laid out at load from the layout (layout.ts); a step
 * allocates nothing but the reader's promises.
 */
import { availableParallelism } from "node:os";
import type { VerifyMode } from "../../format/store/index.js";
import type { GroupStore } from "./store-groups.js";
import { FlashReader, type FlashReaderOptions } from "../../io/flash-reader.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { Arena } from "../../runtime/arena.js";
import type { ThreadPool } from "../../runtime/pool.js";
import type { Tracer } from "../../runtime/tracer.js";
import { SparseFFN, SUM_SEGMENTS, type SparseActivation } from "../../runtime/sparse-kernels.js";
import type { ModelConfig } from "../config.js";
import type { MatrixRunner } from "../matrix-runner.js";
import type { BatchGateSource, GateSource } from "./gate-source.js";
import { EveryNeuron } from "./every-neuron.js";
import { GatePageReads } from "./gate-page-reads.js";
import { makeCache } from "./hot-region.js";
import type { OffloadLayout, SparsityMode } from "./layout.js";
import { beginFFNStep, countStep, newFFNStep, type FFNStep } from "./ffn-step.js";
import { MissReader, type MissRound } from "./miss-reader.js";
import { FixedOrder } from "./fixed-order.js";
import { NeuronCompute } from "./neuron-compute.js";
import { NeuronLists } from "./neuron-lists.js";
import type { Predictor } from "./predictor.js";
import { PredictorPicks } from "./predictor-picks.js";
import { ReadAhead } from "./read-ahead.js";
import { readAheadGroup, readsAhead } from "./read-ahead-condition.js";
import { ResidentGateRows } from "./resident-gate-rows.js";
import type { OffloadCounts, Spent } from "./stats.js";
import { StreamedGateRows } from "./streamed-gate-rows.js";

export interface OffloadOptions {
  sparsity?: SparsityMode;
  /** predictor: a neuron runs when its score exceeds this (default: the model's powerinfer.sparse_threshold, else 0) */
  threshold?: number;
  /** bytes for the neuron cache (hot + cold regions) at most, instead of what the budget leaves */
  cacheBytes: number;
  /** keep every gate row in memory (default: when they fit); false reads gates from flash */
  residentGates?: boolean;
  /** share of the cache pinned to each layer's hottest neurons (default: from the store's profile, else 0.5) */
  hotFraction?: number;
  /** reads in flight (default: the reader's limit) */
  queueDepth?: number;
  /** direct I/O: "auto" (default) falls back to buffered reads with a warning */
  direct?: boolean | "auto";
  onWarning?: (message: string) => void;
  /**
   * overlap reads with compute (default true): the neurons in memory are computed while the
   * misses are read; false waits for the reads first (the ablation's "no pipeline")
   */
  pipeline?: boolean;
  /** native AIO's system calls on the reader's own thread (default: on where there are 2 or more cores) */
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
   * under the model is an error); "always" checks every read again
   */
  verify?: VerifyMode;
  /**
   * predictor and dense mode: read ahead the cold bundles the next layer will compute (default
   * true; read-ahead.ts); for a mixture of experts, every routed expert's picks once the layer
   * has routed, and the next layer's likely experts' picks
   */
  lookahead?: boolean;
  /**
   * a mixture of experts with read-ahead: what is read ahead. "expert": once the layer has
   * routed, every routed expert's picks at once, in the order they compute (exact: the input
   * their steps see, nothing read for nothing; the default); "layer": after a layer, the likely
   * picks of the experts the next layer's router
   * picks on the current residual; "both". On moe-stories from a disk that limits the token
   * (docs/benchmarks.md, "Mixture-of-experts read-ahead") "layer" read ~13% more for ~80% used
   * and was slower than none; "expert" was faster. Where the router reads the block's input
   * (smallthinker) the experts a layer's router picks before attention are the routed ones, not a
   * guess: the default there is "both", so that their reads overlap attention.
   */
  expertReadAhead?: ExpertReadAhead;
  /** records each step's phases (pick, hit and miss compute, waits) and each read (src/runtime/tracer.ts) */
  tracer?: Tracer | null;
}

export type { OffloadStats } from "./stats.js";

export type ExpertReadAhead = "both" | "expert" | "layer";
export const EXPERT_READ_AHEAD: readonly ExpertReadAhead[] = ["both", "expert", "layer"];

/** What an offloaded FFN is built from: the loaded model's parts it shares. */
export interface OffloadParts {
  /** the store, or a shard's run of its groups (store-groups.ts), numbered from 0 */
  store: GroupStore;
  cfg: ModelConfig;
  arena: Arena;
  pool: ThreadPool;
  layout: OffloadLayout;
  /** the model's dense matrix runner (resident gate rows and the predictor run on it) */
  mm: MatrixRunner;
  /** the activation predictors (predictor mode), of the same groups */
  predictor: Predictor | null;
  /** a store in several memories: the pool's memory `arena` is, and the store's number of this FFN's group 0 */
  shard?: number;
  firstGroup?: number;
}

export class OffloadedFFN {
  readonly cache: NeuronCache;
  readonly reader: FlashReader;
  readonly mode: SparsityMode;
  readonly layout: OffloadLayout;
  readonly predictor: Predictor | null;
  /** the store's number of this FFN's group 0 (its groups are numbered from 0): non-zero for a shard past the first */
  readonly firstGroup: number;
  /** experts per layer (0: a dense FFN) */
  readonly experts: number;
  /** how a decode step learns what fires, and how a prompt batch gets its gates (null: tokens one by one) */
  private readonly gates: GateSource;
  private readonly batchGates: BatchGateSource | null;
  private readonly lists: NeuronLists;
  /** the step under way: begun by decodeStep and prefillBatch, passed to each part they call */
  private readonly step: FFNStep = newFFNStep();
  private readonly compute: NeuronCompute;
  private readonly order: FixedOrder;
  private readonly misses: MissReader;
  private readonly readAhead: ReadAhead | null;
  private readonly expertReadAhead: ExpertReadAhead;
  private readonly sparse: SparseFFN;
  private readonly store: GroupStore;
  private readonly pipeline: boolean;
  private readonly verifyOnce: boolean;
  private readonly thresholds: Float32Array | null;
  private readonly nLayer: number;
  /** a prompt batch's firing neurons (any token's), by stored position */
  private readonly batchCached: Int32Array;
  private readonly tracer: Tracer | null;

  /** `opts.sparsity`: the mode the load chose (sparsityFor), not defaulted again here */
  constructor(parts: OffloadParts, opts: Omit<OffloadOptions, "cacheBytes" | "sparsity"> & { sparsity: SparsityMode }) {
    const { store, cfg, arena, pool, layout, mm } = parts;
    const act: SparseActivation = cfg.activation;
    this.store = store;
    this.layout = layout;
    this.mode = opts.sparsity;
    this.predictor = parts.predictor;
    this.thresholds = opts.thresholds ?? null;
    this.pipeline = opts.pipeline ?? true;
    this.verifyOnce = (opts.verify ?? "once") === "once";
    this.firstGroup = parts.firstGroup ?? 0;
    this.experts = store.ffn.experts;
    // the layers this FFN runs (a shard's): read-ahead stops after the last
    this.nLayer = store.ffn.layers.length / Math.max(1, store.ffn.experts);
    this.expertReadAhead = opts.expertReadAhead ?? (cfg.routerInput === "block" ? "both" : "expert");
    if (!EXPERT_READ_AHEAD.includes(this.expertReadAhead))
      throw new RangeError(
        `expertReadAhead must be ${EXPERT_READ_AHEAD.join(", ")}; got ${JSON.stringify(opts.expertReadAhead)}`,
      );
    this.batchCached = new Int32Array(cfg.nFF);
    this.tracer = opts.tracer ?? null;
    const shard = parts.shard ?? 0;
    const resident = layout.residentGates ? ResidentGateRows.load(store, arena, pool, mm, shard) : null;
    // biased bundles (gpt-oss): the kernels add each neuron's gate and up biases from its bundle
    const biased = store.ffn.parts.biases !== undefined;
    this.sparse = new SparseFFN(pool, arena, store.ffn.type, cfg.nEmbd, shard, biased);
    this.cache = makeCache(store, arena, layout);
    // only gate mode hands the kernels gate values; the other modes compute each bundle whole
    this.order = new FixedOrder(cfg.nFF, this.sparse, this.cache, act, this.mode !== "gate");
    // A gate source's gates lack the neuron's bias, so with biased bundles they cannot say which
    // neurons fire: every neuron does (swiglu_oai has no zeros to skip).
    this.lists = new NeuronLists(arena, cfg.nFF, this.cache, act, biased ? "dense" : this.mode, this.order);
    this.reader = FlashReader.open(store.path, {
      memory: arena.memory,
      queueDepth: opts.queueDepth,
      direct: opts.direct ?? "auto",
      verify: store.verifier(opts.verify ?? "once"),
      checksums: store.checksumTable(opts.verify ?? "once"),
      onWarning: opts.onWarning,
      fault: opts.fault,
      tracer: this.tracer,
      // misses a few bundles apart in the file are read at once, through the region the layout set aside
      bridge:
        layout.bridgeBytes > 0 ? { dst: arena.alloc(layout.bridgeBytes, 4096), bytes: layout.bridgeBytes } : undefined,
      // The reader's own I/O thread wherever there is a second core, even when every core
      // computes: at 2 threads on 2 cores a 7B token at 3 GiB ran about 1.09x faster than with the
      // system calls inline on the computing thread (docs/benchmarks-log.md); the reader pins it
      // to the CPU that takes the disk's interrupts. On one core it would only preempt the kernels.
      ioThread: opts.ioThread ?? availableParallelism() > 1,
    });
    pool.shareCoresWithReads();
    const everyNeuron = this.mode === "dense" ? new EveryNeuron() : null;
    const streamed =
      !resident && !everyNeuron && opts.streamGates !== false && StreamedGateRows.possible(store)
        ? new StreamedGateRows(store, this.cache, this.reader, this.sparse, arena, this.lists)
        : null;
    const threshold = opts.threshold ?? cfg.sparseThreshold;
    if (this.mode === "predictor") {
      if (!parts.predictor)
        throw new Error(`${store.path}: predictor sparsity needs the store's activation predictors`);
      // picks and read-ahead read a stored position's score at that position
      if (!parts.predictor.rowOrder)
        throw new Error(
          "the offloaded FFN's predictor must be loaded in the store's order (Predictor.load's rowOrder)",
        );
      this.gates = new PredictorPicks(parts.predictor, mm, this.cache, cfg.nEmbd, threshold);
    } else {
      this.gates =
        everyNeuron ??
        resident ??
        streamed ??
        new GatePageReads(store, this.cache, this.reader, this.sparse, arena, cfg.nFF);
    }
    // Prompts run as batches with the gates of every token: in predictor mode too (across a
    // prompt nearly every neuron fires for some token, so the batch computes its exact gates,
    // streamed once, instead of asking the predictor token by token and reading each token's
    // bundles separately).
    this.batchGates = everyNeuron ?? resident ?? streamed;
    this.compute = new NeuronCompute(this.sparse, this.order, this.reader, this.tracer);
    this.misses = new MissReader(store, this.cache, this.reader, this.order);
    const lookahead = readsAhead(this.mode, this.pipeline, opts.lookahead ?? true, layout.hotPerLayer, cfg.nFF);
    this.readAhead = lookahead
      ? new ReadAhead(store, this.cache, this.reader, parts.predictor, mm, this.lists, arena, cfg.nEmbd, threshold)
      : null;
    this.lists.takeViews(arena);
  }

  /** Whether prompts run as batches through prefillBatch (else one decodeStep per token). */
  get batches(): boolean {
    return this.batchGates !== null;
  }

  /**
   * A mixture decoding a token: whether, once the layer has routed, every routed expert's picks
   * are read ahead at once (readAheadGroups "exact"): they are known then (dense mode: its bundles
   * not in memory; predictor mode: its predictor on the FFN input its step will see), and many
   * reads in flight keep the disk busier than one expert ahead of the one computing.
   */
  get readsAheadExpert(): boolean {
    return this.readAhead !== null && this.expertReadAhead !== "layer";
  }

  /** A mixture: whether readAheadGroups reads the next layer's likely experts' picks. */
  get readsAheadLayer(): boolean {
    return this.readAhead !== null && this.expertReadAhead !== "expert";
  }

  /**
   * A mixture: start reading bundles of groups[0..count), from the residual row at `residual`,
   * counted in the pass's counts. `kind`:
   * - "likely": the experts a layer's router picks on the residual before attention (a guess),
   *   their likely picks;
   * - "routed": the experts the token is routed to (the router read the block's input: counted
   *   as readAheadRouted), their likely picks;
   * - "exact": the routed experts and exactly their picks (from the FFN input their steps see).
   * Nothing without read-ahead.
   */
  readAheadGroups(
    pass: OffloadCounts,
    groups: Int32Array,
    count: number,
    residual: number,
    kind: "likely" | "routed" | "exact",
  ): void {
    const ra = this.readAhead;
    if (!ra) return;
    const tr = this.tracer;
    const t = tr ? tr.now() : 0;
    let bundles = 0;
    // (exact picks top up what a guess already reads for a group: its bundles in flight are skipped)
    for (let i = 0; i < count; i++)
      if (kind === "exact" || !ra.has(groups[i]))
        bundles += this.readAheadFor(pass, pass, groups[i], residual, kind === "exact");
    if (kind === "routed") pass.readAheadRouted += bundles;
    if (tr)
      tr.span(kind === "likely" ? "read-ahead" : `read-ahead ${kind}`, "pick", t, {
        group: groups[0],
        experts: count,
        bundles,
      });
  }

  /** Whether the gate rows are in memory. */
  get hasResidentGates(): boolean {
    return this.layout.residentGates;
  }

  /**
   * Before a forward pass: with checksums checked on first read only, the store's size and
   * modification time are checked instead, once per pass (a file rewritten under the model is an
   * error, not other weights). Reads ahead still in flight are an earlier pass's: their failure
   * (that pass failed before using them) is not this pass's error, their slots just go back.
   */
  startPass(): void {
    this.readAhead?.newPass();
    if (this.verifyOnce) this.store.assertUnchanged();
  }

  /**
   * One token of group l (a layer, or one expert of a mixture's layer): y += FFN(x). x: the FFN
   * input after its norm (nEmbd f32); residual: the residual stream row (the predictor reads it);
   * y: where the output is added (the residual row itself for a dense FFN). What the step did is
   * added to `pass`, its forward pass's counts.
   */
  async decodeStep(pass: OffloadCounts, l: number, x: number, residual: number, y = residual): Promise<void> {
    const tr = this.tracer;
    const lists = this.lists;
    const step = this.begin(l, 1);
    this.sparse.prepare(x);
    this.cache.beginStep();

    // 1. Which neurons fire, filed as hits and misses (a source that reads from flash computes the
    //    hits meanwhile). Reads ahead for this group may still be in flight: the pick only looks
    //    their slots up, and files what they hold as landing hits, computed once they land.
    let t = tr ? tr.now() : 0;
    await this.gates.pick(step, lists, x, residual, this.compute);
    step.filedBelow = lists.nFF;
    if (tr) tr.span(this.mode, "pick", t, { hits: step.hits + step.landing, misses: step.misses });
    step.computed = step.hits + step.landing + step.misses;

    // 2. The misses, in rounds of the free cold slots: the first round's reads overlap the hits'
    //    compute and, when it takes every miss (the read-ahead takes cold slots this step's
    //    later rounds would want), a dense model's next layer's read-ahead.
    const round = this.misses.read(step, lists.missPos, 0, step.misses, false);
    if (!this.pipeline) await this.landed(step, round, lists.missPos);
    const ahead = this.readAhead ? readAheadGroup(l, this.nLayer, this.store.ffn.experts, round.to, step.misses) : -1;
    if (ahead >= 0) {
      t = tr ? tr.now() : 0;
      // dense mode's picks are certain: the next layer's bundles not in memory
      this.readAheadFor(pass, step, ahead, residual, this.mode === "dense");
      if (tr) tr.span("read-ahead", "pick", t, { group: ahead });
    }
    this.compute.hits(step, lists);
    if (this.readAhead) {
      t = tr ? tr.now() : 0;
      await this.readAhead.landed(l, step);
      if (tr) tr.span("wait read-ahead", "wait", t);
      // a landing hit whose read failed lost its slot: read in the rounds below
      this.compute.wave(step, lists, "landed compute");
    }
    await this.landed(step, round, lists.missPos);
    await this.complete(step);

    // 3. The step's sum into the residual stream; the next layer's reads that can start now.
    this.order.finish(y, lists.i32);
    this.gates.afterStep?.(step);
    countStep(pass, step, this.firstGroup + l, lists.nFF);
  }

  /** Begins the step of `tokens` tokens of group l (its threshold: its model layer's) and its fixed order. */
  private begin(l: number, tokens: number): FFNStep {
    this.order.begin();
    return beginFFNStep(this.step, l, this.thresholds ? this.thresholds[this.store.layer(l).layer] : 0, tokens);
  }

  /**
   * Start reading ahead group g's likely (or with `exact`, certain) picks: the predictor's time and
   * the bytes counted in `spent`, the bundles in the pass's counts. Returns the bundles.
   */
  private readAheadFor(pass: OffloadCounts, spent: Spent, g: number, residual: number, exact: boolean): number {
    const m = this.readAhead!.start(g, residual, exact, spent);
    pass.readAhead += m;
    pass.groups.readAhead[this.firstGroup + g] += m;
    if (exact) pass.readAheadExact += m;
    return m;
  }

  /**
   * Compute the rest of the step in its fixed order, reading what is not in memory (misses past
   * the first round, bundles evicted before their turn) in rounds of the free cold slots. Every
   * read of the step has landed.
   */
  private async complete(step: FFNStep): Promise<void> {
    const lists = this.lists;
    for (;;) {
      this.compute.wave(step, lists, "miss compute");
      if (this.order.done(step)) return;
      const m = this.order.needed(step, lists.missPos);
      if (m === 0) throw new Error(`offloaded FFN: group ${step.layer}'s neurons cannot all be computed (internal)`);
      const round = await this.nextRound(step, lists.missPos, 0, m);
      await this.landed(step, round, lists.missPos);
    }
  }

  /**
   * The next round of misses [from, count): when every cold slot not pinned by a read ahead is in
   * use, the reads ahead land first (their slots come back), so that a round always progresses.
   */
  private async nextRound(step: FFNStep, positions: Int32Array, from: number, count: number): Promise<MissRound> {
    let round = this.misses.read(step, positions, from, count, true);
    if (round.to === from && this.readAhead) {
      await this.readAhead.landed(-1, step);
      round = this.misses.read(step, positions, from, count, true);
    }
    if (round.to === from) throw new Error(`neuron cache: no cold slot free for group ${step.layer}'s misses`);
    return round;
  }

  /** Waits for a round's reads (a "wait reads" span in a trace); `positions`: the round's, to compute now. */
  private async landed(step: FFNStep, round: MissRound, positions: Int32Array | null): Promise<void> {
    const tr = this.tracer;
    if (!tr || round.reading === null) return this.misses.landed(step, round, positions);
    const t = tr.now();
    await this.misses.landed(step, round, positions);
    tr.span("wait reads", "wait", t, { bundles: round.to - round.from });
  }

  /**
   * A prompt's n tokens through layer l at once: residual rows += FFN(x rows). `gates`: an
   * n x nFF f32 buffer for the batch's gates. Every bundle any token needs is made resident once,
   * in rounds as the cold region allows (the first round's reads overlap the cached neurons'
   * compute), and each token computes just its own firing neurons among them. What the batch did
   * is added to `pass`, its forward pass's counts.
   */
  async prefillBatch(
    pass: OffloadCounts,
    l: number,
    x: number,
    residual: number,
    n: number,
    gates: number,
  ): Promise<void> {
    const step = this.begin(l, n);
    await this.readAhead?.landed(-1, step);
    const tr = this.tracer;
    const t = tr ? tr.now() : 0;
    await this.batchGates!.batchGates(step, x, n, gates);
    if (tr) tr.span("batch gates", "pick", t, { tokens: n });
    const lists = this.lists;
    this.cache.beginStep();
    // The union of the firing neurons, by stored position (the cache counts its hits in the step;
    // the step's misses are the bundles it reads, below).
    const { f32, nFF } = lists;
    const union = this.batchCached;
    let count = 0,
      fired = 0;
    for (let k = 0; k < nFF; k++) {
      let any = false;
      for (let t = 0; t < n; t++) {
        if (lists.fires(step.cut, f32[(gates >>> 2) + t * nFF + k])) {
          any = true;
          fired++;
        }
      }
      if (!any) continue;
      union[count++] = k;
      this.cache.lookup(l, k, step);
    }
    step.computed = fired;
    // Whole segments in order, as many at a time as their bundles fit in memory: read once for
    // the batch, then each token's own neurons among them, added into its row segment by segment
    // (the same sums a decode step of the token makes, fixed-order.ts).
    const order = this.order;
    const rowBytes = this.sparse.nEmbd * 4;
    for (let s = 0, i = 0; s < SUM_SEGMENTS;) {
      this.cache.beginStep();
      this.misses.beginBatch();
      let e = s,
        j = i;
      while (e < SUM_SEGMENTS) {
        const end = order.segStart(e + 1);
        let j1 = j;
        while (j1 < count && union[j1] < end) j1++;
        if (!this.misses.fit(l, union, j, j1)) break;
        j = j1;
        e++;
      }
      if (e > s) {
        const round = this.misses.readBatch(step);
        await this.landed(step, round, null);
        this.compute.tokens(step, lists, x, residual, n, gates, union, i, j);
        s = e;
        i = j;
        continue;
      }
      // one segment's bundles do not fit in the cold slots at once: each token reads its own
      const end = order.segStart(s + 1);
      while (j < count && union[j] < end) j++;
      for (let t = 0; t < n; t++) {
        this.compute.markToken(step, lists, gates, t, union, i, j);
        this.sparse.prepare(x + t * rowBytes);
        await this.complete(step);
        order.finish(residual + t * rowBytes, lists.i32);
      }
      s++;
      i = j;
    }
    countStep(pass, step, this.firstGroup + l, nFF);
  }

  /** Waits out the reads in flight (their waits no pass's) and closes the reader. */
  async close(): Promise<void> {
    await this.gates.settle?.();
    await this.readAhead?.landed(-1, null);
    await this.reader.close();
  }
}
