/**
 * The probe's compute measurements, at each candidate thread count: the pool's dispatch and
 * memory bandwidth (probe-memory.ts), the dense matvec rates (probe-matvec.ts), the sparse FFN
 * kernels (probe-sparse.ts), the predictor (probe-predictor.ts), the resident memory a pool adds;
 * and once, the JS scan (probe-scan.ts). Each with the engine's own code, so that the numbers
 * are what `run` will see.
 */
import type { GGMLType } from "../format/ggml-types.js";
import type { NeuronStore } from "../format/store/index.js";
import { Arena } from "../runtime/arena.js";
import { ThreadPool } from "../runtime/pool.js";
import { hasSparseKernel } from "../runtime/sparse-kernels.js";
import { loadDenseMatrices, measureMatvec } from "./probe-matvec.js";
import { bandwidthBuffers, measureBandwidth, measureDispatch } from "./probe-memory.js";
import { measurePredictor } from "./probe-predictor.js";
import { matvecKey, predictorKey, sparseKey, type ProbeResult } from "./probe-results.js";
import { probeScan } from "./probe-scan.js";
import { measureSparse, sparseFixture } from "./probe-sparse.js";
import { storePredictor } from "./store-shape.js";

/** Measures every compute part into `r`; `types`: the dense matrix types to measure (denseMatrixTypes). */
export async function probeCompute(
  store: NeuronStore,
  r: ProbeResult,
  threads: number[],
  scale: number,
  types: Map<GGMLType, string>,
): Promise<void> {
  const ffn = store.ffn;
  const nEmbd = ffn.nEmbd;
  const nFF = store.layer(0).neurons;
  const arena = new Arena(64 << 20);
  const dense = loadDenseMatrices(store, arena, types);
  const fx = sparseFixture(store, arena);
  const bw = bandwidthBuffers(arena);
  const pred = storePredictor(store);

  const d = scale * 0.12; // seconds per measurement
  for (const T of threads) {
    const rss0 = process.memoryUsage.rss();
    const pool = await ThreadPool.create(arena.memory, T);
    try {
      // The added workers' memory: each instantiates the kernel module over the shared memory.
      r.poolBytes[T] = Math.max(0, process.memoryUsage.rss() - rss0);
      r.dispatch[T] = measureDispatch(pool, T, bw, d);
      r.memoryBandwidth[T] = measureBandwidth(pool, bw, d);
      for (const m of dense)
        r.matvec[matvecKey(m.type, m.cols, T)] = measureMatvec(pool, m, fx.x, fx.gateOut, r.dispatch[T], d);
      if (hasSparseKernel(ffn.type)) r.sparse[sparseKey(ffn.type, nEmbd, T)] = measureSparse(pool, arena, store, fx, d);
      if (pred) r.predictor[predictorKey(pred, nEmbd, nFF, T)] = measurePredictor(store, pred, arena, pool, fx.x, d);
    } finally {
      await pool.dispose();
    }
  }
  r.scan = probeScan(nFF, store.ffn.layers.length, d);
}
