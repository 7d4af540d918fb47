/**
 * The measured machine as the cost model sees it, at one thread count: hardwareFromProbe
 * (hardware-from-probe.ts) builds it from a probe; tests build it by hand.
 */
import type { GGMLType } from "../format/ggml-types.js";
import type { ScanSpeed, SparseSpeed } from "./probe-results.js";

export interface Hardware {
  threads: number;
  /** seconds per pool.run (waking the workers) */
  dispatch: number;
  /** bytes per second streamed */
  memoryBandwidth: number;
  /** multiply-adds per second of a matvec of this weight type */
  matvecRate(type: GGMLType): number;
  sparse: SparseSpeed;
  scan: ScanSpeed;
  /** seconds of one layer's predictor scores (predictor mode) */
  predictorSeconds: number;
  /** seconds to read one chunk of a layer's gate-row copy (ModelShape.gateStream) at queue depth qd */
  streamChunkSeconds(qd: number): number;
  /** wall seconds of one batch of n random reads of `bytes` from the store at queue depth qd (submit included) */
  batchSeconds(bytes: number, qd: number, n: number): number;
  /** main-thread seconds per read to submit it */
  submitSeconds(bytes: number, qd: number): number;
  /** reads per second while the queue stays full */
  iops(bytes: number, qd: number): number;
  /**
   * whether reads progress while the compute threads run: with native AIO they do (the device
   * works while the kernels compute); through libuv's pool not when compute takes every core
   * (the read threads then wait for the CPU), so compute and reads add up
   */
  overlap: boolean;
  /** resident bytes of the runtime before any weight loads (node, the engine, the thread pool, the store's manifest), as `run` measures it */
  base: number;
  /**
   * wasm memories holding layers when `base` was measured (default 1): a store split among
   * several stays split, even where the higher base leaves a layout one memory would hold
   */
  memories?: number;
}
