/**
 * Gate mode with every gate row in memory: one dense matrix per layer (a third of the FFN, no
 * I/O), the gates of all neurons by the dense kernels, then every neuron filed.
 */
import type { GroupStore } from "./store-groups.js";
import type { Arena } from "../../runtime/arena.js";
import type { ThreadPool } from "../../runtime/pool.js";
import { weightKernel } from "../../runtime/weight-kernels.js";
import type { MatrixRunner } from "../matrix-runner.js";
import type { Matrix } from "../weight-loader.js";
import type { BatchGateSource, GateSource } from "./gate-source.js";
import type { FFNStep } from "./ffn-step.js";
import type { NeuronLists } from "./neuron-lists.js";

/** Load-time read buffer: small, because under a budget a transient buffer counts too (counted in layout.ts RUNTIME_GROWTH_BYTES). */
const CHUNK = 2 << 20;

export class ResidentGateRows implements GateSource, BatchGateSource {
  private constructor(
    /** one matrix per layer, rows in stored order */
    readonly gates: Matrix[],
    private readonly mm: MatrixRunner,
    private readonly nEmbd: number,
  ) {}

  /** Read every bundle once and keep its gate part, packed for the dense kernel. */
  static load(
    store: GroupStore,
    arena: Arena,
    pool: ThreadPool,
    mm: MatrixRunner,
    /** the pool's memory `arena` is */
    shard = 0,
  ): ResidentGateRows {
    const ffn = store.ffn;
    const kernel = weightKernel(ffn.type);
    const nEmbd = ffn.nEmbd;
    const perChunk = Math.max(1, Math.floor(CHUNK / ffn.bundleBytes));
    const rows = new Uint8Array(perChunk * ffn.rowBytes);
    const bundles = new Uint8Array(perChunk * ffn.bundleBytes);
    const gates: Matrix[] = [];
    for (let l = 0; l < ffn.layers.length; l++) {
      const nFF = store.layer(l).neurons;
      const size = kernel.packedBytes(nFF, nEmbd);
      const ptr = arena.alloc(size, 64);
      const dst = arena.u8(ptr, size);
      for (let p = 0; p < nFF; p += perChunk) {
        const n = Math.min(perChunk, nFF - p);
        store.readBundles(l, p, n, bundles.subarray(0, n * ffn.bundleBytes));
        for (let i = 0; i < n; i++) {
          const at = i * ffn.bundleBytes + ffn.parts.gate;
          rows.set(bundles.subarray(at, at + ffn.rowBytes), i * ffn.rowBytes);
        }
        kernel.pack(rows.subarray(0, n * ffn.rowBytes), dst, p, n, nFF, nEmbd);
      }
      gates.push({
        name: `blk.${l}.ffn_gate (resident)`,
        ptr,
        rows: nFF,
        cols: nEmbd,
        kernel,
        matvecFn: pool.fn(kernel.matvec, shard),
        matmulFn: pool.fn(kernel.matmul, shard),
      });
    }
    return new ResidentGateRows(gates, mm, nEmbd);
  }

  pick(step: FFNStep, lists: NeuronLists, x: number): void {
    const t = performance.now();
    this.mm.setInput(x, this.nEmbd);
    this.mm.run(this.gates[step.layer], lists.gateOut, 1);
    step.computeMs += performance.now() - t;
    const g0 = lists.gateOut >>> 2;
    for (let k = 0; k < lists.nFF; k++) lists.file(step, k, lists.f32[g0 + k]);
  }

  batchGates(step: FFNStep, x: number, n: number, gates: number): void {
    const t = performance.now();
    this.mm.setInput(x, this.nEmbd);
    this.mm.run(this.gates[step.layer], gates, n);
    step.computeMs += performance.now() - t;
  }
}
