/**
 * Gates without resident gate rows from a store that has no contiguous gate-row copy (converted
 * before it existed): the bundles in memory give their own gates, every other bundle's gate
 * page(s) are read in rounds into the staging area; the first round overlaps the hits' compute.
 * Slow (a random read per neuron), still exact.
 */
import type { FlashReader, FlashReadRequest } from "../../io/flash-reader.js";
import type { NeuronCache } from "../../io/neuron-cache.js";
import type { GroupStore } from "./store-groups.js";
import type { Arena } from "../../runtime/arena.js";
import type { SparseFFN } from "../../runtime/sparse-kernels.js";
import { fileCachedGates, type GateSource } from "./gate-source.js";
import { gateReadBytesOf, STAGE_NEURONS } from "./layout.js";
import type { FFNStep } from "./ffn-step.js";
import type { NeuronCompute } from "./neuron-compute.js";
import type { NeuronLists } from "./neuron-lists.js";
import { waitForReads } from "./stats.js";

export class GatePageReads implements GateSource {
  private readonly pageBytes: number;
  private readonly neurons: number;
  private readonly stage: number;
  private readonly stageList: number;
  private readonly stagePos: Int32Array;
  private readonly cachedPos: Int32Array;
  private readonly requests: { fileOffset: number; length: number; dst: number }[] = [];

  constructor(
    private readonly store: GroupStore,
    private readonly cache: NeuronCache,
    private readonly reader: FlashReader,
    private readonly sparse: SparseFFN,
    arena: Arena,
    nFF: number,
  ) {
    this.pageBytes = gateReadBytesOf(store.ffn);
    this.neurons = Math.min(nFF, STAGE_NEURONS);
    // layout.ts stagingBytes
    this.stage = arena.alloc(this.neurons * this.pageBytes, 4096);
    this.stageList = arena.alloc(this.neurons * 4, 64);
    this.stagePos = new Int32Array(this.neurons);
    this.cachedPos = new Int32Array(nFF);
  }

  async pick(step: FFNStep, lists: NeuronLists, _x: number, _residual: number, compute: NeuronCompute): Promise<void> {
    const cache = this.cache;
    const l = step.layer;
    fileCachedGates(step, lists, cache, this.sparse, this.cachedPos);
    for (let k = 0; k < lists.nFF;) {
      const requests = this.requests;
      let m = 0;
      for (; k < lists.nFF && m < this.neurons; k++) {
        if (cache.peek(l, k) >= 0) continue;
        const dst = this.stage + m * this.pageBytes;
        lists.i32[(this.stageList >>> 2) + m] = dst;
        const r = (requests[m] ??= { fileOffset: 0, length: 0, dst: 0 });
        r.fileOffset = this.store.bundleOffset(l, k);
        r.length = this.pageBytes;
        r.dst = dst;
        this.stagePos[m++] = k;
      }
      if (m === 0) break;
      // every position below the chunk's first is filed (cached ones at the start)
      step.filedBelow = this.stagePos[0];
      const reading = this.reader.read(requests, undefined, m);
      compute.hits(step, lists);
      await waitForReads(step, reading);
      step.bytesRead += m * this.pageBytes;
      const t = performance.now();
      this.sparse.gate(this.stageList, m, lists.gateOut);
      step.computeMs += performance.now() - t;
      const g0 = lists.gateOut >>> 2;
      for (let i = 0; i < m; i++) lists.file(step, this.stagePos[i], lists.f32[g0 + i]);
    }
  }
}
