/**
 * Gates without resident gate rows, from the store's contiguous copy of each layer's gate rows
 * (stored order): the bundles in memory give their own gates, and the rows past the hot region
 * stream in large sequential reads through a staging area in two halves, the next chunk read
 * while this one's gates compute. The first read overlaps the hits' compute; the next layer's
 * first chunk is read during its attention block. Prompt batches stream the rows once for all
 * their tokens.
 */
import type { FlashReader } from "../../io/flash-reader.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { GroupStore } from "./store-groups.js";
import type { Arena } from "../../runtime/arena.js";
import type { SparseFFN } from "../../runtime/sparse-kernels.js";
import { fileCachedGates, listCached, type BatchGateSource, type GateSource } from "./gate-source.js";
import { gateReadBytesOf, gateStreamGeometry, STAGE_NEURONS } from "./layout.js";
import type { FFNStep } from "./ffn-step.js";
import type { NeuronCompute } from "./neuron-compute.js";
import type { NeuronLists } from "./neuron-lists.js";
import { waitForReads, type Spent } from "./stats.js";

/** A prompt batch's use of the streamed rows: the gates (n x nFF f32 at `gates`) of its n input rows at x. */
interface BatchUse {
  x: number;
  n: number;
  gates: number;
}

export class StreamedGateRows implements GateSource, BatchGateSource {
  /** rows per chunk, and the bytes of a staging half */
  private readonly rows: number;
  private readonly halfBytes: number;
  private readonly stage: number;
  /** wasm list of a chunk's uncached rows' addresses, and their stored positions */
  private readonly stageList: number;
  private readonly stagePos: Int32Array;
  private readonly cachedPos: Int32Array;
  /** address of the first row of the chunk in each half */
  private readonly chunkBase = [0, 0];
  /** one read request per staging half, rewritten for each chunk (a half is reused only once its read has landed) */
  private readonly chunkRequests: { fileOffset: number; length: number; dst: number }[][] = [
    [{ fileOffset: 0, length: 0, dst: 0 }],
    [{ fileOffset: 0, length: 0, dst: 0 }],
  ];
  /** a first chunk read ahead into half 0 during the next layer's attention: its layer, or -1 */
  private prefetchLayer = -1;
  private prefetchRead: Promise<void> | null = null;

  /** Whether gates can stream from `store` with this staging area (every layer has a gate-row copy that fits a half). */
  static possible(store: GroupStore): boolean {
    const ffn = store.ffn;
    const nFF = store.layer(0).neurons;
    return (
      ffn.layers.every((L) => L.gateRows !== null) &&
      gateStreamGeometry(Math.min(nFF, STAGE_NEURONS), gateReadBytesOf(ffn), ffn.rowBytes).rows > 0
    );
  }

  constructor(
    private readonly store: GroupStore,
    private readonly cache: NeuronCache,
    private readonly reader: FlashReader,
    private readonly sparse: SparseFFN,
    arena: Arena,
    private readonly lists: NeuronLists,
  ) {
    const ffn = store.ffn;
    const nFF = lists.nFF;
    const neurons = Math.min(nFF, STAGE_NEURONS);
    const stream = gateStreamGeometry(neurons, gateReadBytesOf(ffn), ffn.rowBytes);
    this.rows = stream.rows;
    this.halfBytes = stream.halfBytes;
    // layout.ts stagingBytes
    this.stage = arena.alloc(neurons * gateReadBytesOf(ffn), 4096);
    this.stageList = arena.alloc(neurons * 4, 64);
    this.stagePos = new Int32Array(neurons);
    this.cachedPos = new Int32Array(nFF);
  }

  async pick(step: FFNStep, lists: NeuronLists, _x: number, _residual: number, compute: NeuronCompute): Promise<void> {
    fileCachedGates(step, lists, this.cache, this.sparse, this.cachedPos);
    // the hot region is all filed now; the rest as its chunks are (useChunk)
    step.filedBelow = this.cache.hotCount[step.layer];
    await this.stream(step, null, compute);
  }

  /** The next layer's first chunk does not depend on this token's values: read it while the next attention block computes. */
  afterStep(step: FFNStep): void {
    // a mixture's next group is whichever expert the next layer routes to: nothing to read yet
    if (this.store.ffn.experts > 0) return;
    const next = (step.layer + 1) % this.store.ffn.layers.length;
    if (this.cache.hotCount[next] < this.lists.nFF) {
      this.prefetchLayer = next;
      this.prefetchRead = this.readChunk(next, this.cache.hotCount[next], 0, step);
    }
  }

  async settle(): Promise<void> {
    const read = this.prefetchRead;
    this.prefetchRead = null;
    this.prefetchLayer = -1;
    if (read) await read.catch(() => undefined);
  }

  async batchGates(step: FFNStep, x: number, n: number, gates: number): Promise<void> {
    const batch: BatchUse = { x, n, gates };
    const cached = listCached(step.layer, this.lists, this.cache, this.cachedPos);
    this.gatesForBatch(step, batch, this.lists.missList, this.cachedPos, cached);
    await this.stream(step, batch, null);
  }

  /**
   * Stream the step's group's gate-row copy from the end of its hot region on, in chunks
   * alternating between the two staging halves: the next chunk is read while this one is used
   * (reads, waits and compute counted in the step). A decode step's neurons are filed, and
   * `compute` computes the filed hits while the chunks are read; else the rows give the `batch`'s
   * gates.
   */
  private async stream(step: FFNStep, batch: BatchUse | null, compute: NeuronCompute | null): Promise<void> {
    const l = step.layer;
    const nFF = this.lists.nFF;
    const from = this.cache.hotCount[l];
    if (from >= nFF) {
      await this.settle();
      compute?.hits(step, this.lists);
      return;
    }
    let cur: Promise<void>;
    if (this.prefetchRead && this.prefetchLayer === l) {
      cur = this.prefetchRead;
      this.prefetchRead = null;
      this.prefetchLayer = -1;
    } else {
      await this.settle();
      cur = this.readChunk(l, from, 0, step);
    }
    let half = 0;
    for (let r0 = from; r0 < nFF;) {
      const r1 = Math.min(nFF, r0 + this.rows);
      half ^= 1;
      const next = r1 < nFF ? this.readChunk(l, r1, half, step) : null;
      compute?.hits(step, this.lists);
      try {
        await waitForReads(step, cur);
      } catch (e) {
        // let the other half's read finish before its staging can be reused
        await next?.catch(() => undefined);
        throw e;
      }
      this.useChunk(step, batch, r0, r1, this.chunkBase[half ^ 1]);
      r0 = r1;
      if (next) cur = next;
    }
  }

  /** Read the page span holding gate rows [r0, r0 + rows) of layer l into staging half h (its bytes counted in `spent`). */
  private readChunk(l: number, r0: number, h: number, spent: Spent): Promise<void> {
    const L = this.store.layer(l);
    const rb = L.rowBytes;
    const r1 = Math.min(this.lists.nFF, r0 + this.rows);
    const from = L.gateRows! + r0 * rb;
    const a = from - (from % 4096);
    const end = Math.ceil((L.gateRows! + r1 * rb) / 4096) * 4096;
    const dst = this.stage + h * this.halfBytes;
    this.chunkBase[h] = dst + (from - a);
    const req = this.chunkRequests[h];
    req[0].fileOffset = a;
    req[0].length = end - a;
    req[0].dst = dst;
    spent.bytesRead += end - a;
    const read = this.reader.read(req);
    // Whoever awaits it still sees a failure; a read left behind by an error elsewhere must not
    // become an unhandled rejection.
    read.catch(() => undefined);
    return read;
  }

  /** The uncached rows of chunk [r0, r1) (row r0 at `base`): a decode step's gates computed and filed, or gathered for `batch`. */
  private useChunk(step: FFNStep, batch: BatchUse | null, r0: number, r1: number, base: number): void {
    const l = step.layer;
    const rb = this.store.ffn.rowBytes;
    const lists = this.lists;
    const i32 = lists.i32;
    let m = 0;
    for (let r = r0; r < r1; r++) {
      if (this.cache.peek(l, r) >= 0) continue;
      i32[(this.stageList >>> 2) + m] = base + (r - r0) * rb;
      this.stagePos[m++] = r;
    }
    if (m === 0) {
      if (!batch) step.filedBelow = r1;
      return;
    }
    if (batch) {
      this.gatesForBatch(step, batch, this.stageList, this.stagePos, m);
      return;
    }
    const t = performance.now();
    this.sparse.gate(this.stageList, m, lists.gateOut);
    step.computeMs += performance.now() - t;
    const g0 = lists.gateOut >>> 2;
    for (let i = 0; i < m; i++) lists.file(step, this.stagePos[i], lists.f32[g0 + i]);
    step.filedBelow = r1;
  }

  /** Gates of `count` rows (addresses in `list`, stored positions in pos) for each token of the batch. */
  private gatesForBatch(step: FFNStep, use: BatchUse, list: number, pos: Int32Array, count: number): void {
    if (count === 0) return;
    const { f32, nFF, gateOut } = this.lists;
    const rowBytes = this.sparse.nEmbd * 4;
    const t0 = performance.now();
    for (let t = 0; t < use.n; t++) {
      this.sparse.prepare(use.x + t * rowBytes);
      this.sparse.gate(list, count, gateOut);
      const g0 = (use.gates >>> 2) + t * nFF;
      for (let i = 0; i < count; i++) f32[g0 + pos[i]] = f32[(gateOut >>> 2) + i];
    }
    step.computeMs += performance.now() - t0;
  }
}
