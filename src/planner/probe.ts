/**
 * Hardware probe for the offline planner: what this machine does with *this* model's kernels and
 * *this* store's device, measured in a few seconds and cached per machine.
 *
 * What is measured (each with the engine's own code, so the numbers are what `run` will see):
 * - dense matvec speed (multiply-adds per second) per weight type of the model's matrices, on a
 *   real matrix of the store packed for its kernel, rotated over copies larger than the last-level
 *   cache (decode streams weights from DRAM), at each candidate thread count;
 * - the sparse FFN kernels on the store's own bundles at shuffled addresses (what a warm neuron
 *   cache looks like): up/down per firing neuron, the fixed cost of a layer (prepare + reduce),
 *   gate per neuron from staged gate pages (the non-resident-gate mode's first phase);
 * - the cost of handing a job to the worker threads (one pool.run), and memory bandwidth (the
 *   add kernel over buffers far larger than the cache: attention over the KV cache is bound by it);
 * - the JS scan that files a layer's firing neurons as hits or misses (NeuronCache.lookup);
 * - random reads of the store's own bundles (and of single 4 KiB gate pages) through the
 *   runtime's FlashReader with O_DIRECT and the store's checksum verifier, in batches as the
 *   runtime issues a layer's misses, per queue depth and per compute thread count (the pool's
 *   threads take CPU from the read threads on a small machine): what the runtime gets, on the
 *   device the store lives on;
 * - the resident memory a thread pool of N threads adds (the budget counts it).
 *
 * Results are kept in ~/.cache/powerinfer-ts/probe-<machine id>.json (POWERINFER_CACHE_DIR
 * overrides the folder), keyed by a fingerprint of the machine (hostname, CPU model, cores,
 * total memory) and, for reads, of the store's device. A later plan for another model on the same
 * machine measures only what is missing (another weight type, another bundle size); `reprobe`
 * starts over. The machine is often shared: each measurement is the median of several rounds, and
 * the load average at probe time is recorded next to the numbers.
 *
 * The parts: machine.ts (the fingerprint), probe-compute.ts (dispatch and memory bandwidth,
 * matvec rates, the sparse kernels, the predictor, the JS scan: one file each), probe-reads.ts
 * (flash reads), probe-cache.ts (the cache file), probe-results.ts (what is kept), read-table.ts
 * (reading the read tables back).
 */
import { loadavg } from "node:os";
import type { NeuronStore } from "../format/store/index.js";
import { typeName } from "../format/ggml-types.js";
import { DEFAULT_MAX_READ_BYTES, readerDepthLimit } from "../io/flash-reader.js";
import { hasSparseKernel } from "../runtime/sparse-kernels.js";
import { hasWeightKernel } from "../runtime/weight-kernels.js";
import { machineFingerprint } from "./machine.js";
import { defaultCacheDir, loadProbeCache, probeCachePath, saveProbeCache } from "./probe-cache.js";
import { probeCompute } from "./probe-compute.js";
import { denseMatrixTypes } from "./probe-matvec.js";
import { probeReads, probeStream } from "./probe-reads.js";
import {
  emptyResult,
  ioKey,
  matvecKey,
  predictorKey,
  sparseKey,
  runKey,
  streamKey,
  type ProbeResult,
} from "./probe-results.js";
import { gatePageBytes, gateStreamOf, storePredictor } from "./store-shape.js";

/** Reads of the reader's largest size in the run-of-bundles probe's one batch. */
const RUN_READS = 4;

export interface ProbeOptions {
  /** thread counts to measure (default 1..cores, at most 4 of them) */
  threads?: number[];
  /** queue depths to measure (default 1, 2, 4, 8, 16 and deeper ones up to libuv's pool) */
  queueDepths?: number[];
  /** forget the cached results and measure everything again */
  reprobe?: boolean;
  /** multiplies every measurement's duration (default 1; tests use ~0.02) */
  scale?: number;
  /** folder of the cache (default $POWERINFER_CACHE_DIR or ~/.cache/powerinfer-ts); null: no cache */
  cacheDir?: string | null;
  onProgress?: (message: string) => void;
}

/** Thread counts worth measuring on a machine with `cores` cores. */
export function defaultThreadCounts(cores: number): number[] {
  if (cores <= 4) return Array.from({ length: cores }, (_, i) => i + 1);
  return [...new Set([1, 2, Math.floor(cores / 2), cores])].sort((a, b) => a - b);
}

/** Queue depths worth measuring when `pool` reads can run at once (others are interpolated). */
export function defaultQueueDepths(pool: number): number[] {
  return depthsUpTo([1, 4, 16, 64, 256], pool);
}

/** Queue depths worth trying in a plan. */
export function candidateQueueDepths(pool: number): number[] {
  return depthsUpTo([1, 2, 4, 8, 16, 32, 64, 128, 256], pool);
}

/** The depths of `list` (ascending, up to 256) that `pool` reads at once can run, and the pool's own depth. */
function depthsUpTo(list: number[], pool: number): number[] {
  const out = list.filter((q) => q <= pool);
  if (!out.includes(pool) && pool <= 256) out.push(pool);
  return out;
}

/**
 * Measure what the planner needs for `store` on this machine, reusing cached results. Returns
 * the (possibly cached) results; measures at most a few seconds at scale 1.
 */
export async function probeMachine(store: NeuronStore, opts: ProbeOptions = {}): Promise<ProbeResult> {
  const fp = machineFingerprint(store.path);
  const dir = opts.cacheDir === undefined ? defaultCacheDir() : opts.cacheDir;
  const path = dir === null ? null : probeCachePath(dir, fp);
  const r = (!opts.reprobe && path ? loadProbeCache(path, fp) : null) ?? emptyResult(fp);
  const scale = opts.scale ?? 1;
  const threads = (opts.threads ?? defaultThreadCounts(fp.cores)).filter((t) => Number.isInteger(t) && t >= 1);
  const pool = readerDepthLimit();
  const depths = (opts.queueDepths ?? defaultQueueDepths(pool)).filter((q) => Number.isInteger(q) && q >= 1);
  const say = opts.onProgress ?? (() => {});
  const t0 = performance.now();
  const note = (part: string) => (r.notes[part] = { at: new Date().toISOString(), loadAverage: loadavg()[0] });

  const ffn = store.ffn;
  const nEmbd = ffn.nEmbd;
  const nFF = store.layer(0).neurons;
  const types = denseMatrixTypes(store);
  const predictor = storePredictor(store);
  const needCompute =
    threads.some(
      (t) => r.dispatch[t] === undefined || r.memoryBandwidth[t] === undefined || r.poolBytes[t] === undefined,
    ) ||
    threads.some((t) =>
      [...types.keys(), ffn.type].some((ty) => hasWeightKernel(ty) && r.matvec[matvecKey(ty, nEmbd, t)] === undefined),
    ) ||
    threads.some((t) => hasSparseKernel(ffn.type) && r.sparse[sparseKey(ffn.type, nEmbd, t)] === undefined) ||
    threads.some((t) => predictor !== null && r.predictor[predictorKey(predictor, nEmbd, nFF, t)] === undefined) ||
    r.scan === null;
  if (needCompute) {
    say(
      `probing compute: ${[...new Set([...types.keys(), ffn.type])].map(typeName).join(", ")} kernels at ${threads.join(", ")} thread(s)`,
    );
    await probeCompute(store, r, threads, scale, types);
    note("compute");
  }
  const sizes = [...new Set([ffn.bundleBytes, gatePageBytes(store)])];
  for (const bytes of sizes) {
    for (const T of threads) {
      const key = ioKey(fp.device, bytes, T);
      const have = r.io[key];
      if (have && depths.every((q) => have.cells.some((c) => c.queueDepth === q))) continue;
      say(
        `probing reads of ${bytes >> 10} KiB from ${store.path} (${fp.device}) at queue depths ${depths.join(", ")}, ${T} compute thread(s)`,
      );
      r.io[key] = await probeReads(store, bytes, depths, scale, T);
      note(`io ${bytes} ${T}`);
    }
  }
  const stream = gateStreamOf(store);
  for (const T of stream ? threads : []) {
    const key = streamKey(fp.device, stream!.bytes, T);
    const have = r.io[key];
    if (have && depths.every((q) => have.cells.some((c) => c.queueDepth === q))) continue;
    say(
      `probing gate-row chunk reads of ${(stream!.bytes / 2 ** 20).toFixed(1)} MiB at queue depths ${depths.join(", ")}, ${T} compute thread(s)`,
    );
    r.io[key] = await probeStream(store, stream!.bytes, depths, scale, T);
    note(`stream ${stream!.bytes} ${T}`);
  }
  // runs of adjacent bundles, as the reader coalesces a layer's adjacent misses (read-runs.ts):
  // a few of its largest reads, or a layer's bundles where those are fewer
  const runBytes = Math.min(
    RUN_READS * DEFAULT_MAX_READ_BYTES,
    ...store.ffn.layers.map((_, l) => Math.floor((store.layer(l).neurons * store.layer(l).bundleBytes) / 4096) * 4096),
  );
  for (const T of runBytes >= 4096 ? threads : []) {
    const key = runKey(fp.device, runBytes, T);
    const have = r.io[key];
    if (have && depths.every((q) => have.cells.some((c) => c.queueDepth === q))) continue;
    say(
      `probing runs of adjacent bundles, ${(runBytes / 2 ** 20).toFixed(1)} MiB at queue depths ${depths.join(", ")}, ${T} compute thread(s)`,
    );
    r.io[key] = await probeStream(store, runBytes, depths, scale, T, "bundles");
    note(`run ${runBytes} ${T}`);
  }
  r.seconds += (performance.now() - t0) / 1000;
  if (path) saveProbeCache(path, r);
  return r;
}
