/**
 * The runtime's base: what a `run` process holds before any weight loads (node, the engine's
 * modules, the thread pool, the store's manifest). The layout of a budget starts from it, so the
 * planner measures it the way `run` does: in a fresh process that loads the library and makes
 * the pool (`powerinfer plan --base-child JOB`, LlamaModel.layoutOf), once per thread count. It
 * does so under the plan's budget: a store split among several wasm memories makes each of them
 * (and its kernels' instances in every thread) before it measures, a few MiB each.
 */
import type { SparsityMode } from "../model/offload/layout.js";
import { runPlanChild } from "./child-run.js";

export interface BaseJob {
  store: string;
  threads: number;
  contextSize: number;
  batchSize: number;
  sparsity: SparsityMode;
  /** the plan's memory budget, bytes */
  budget: number;
}

/**
 * The runtime's base in bytes, and the wasm memories holding layers when it was measured (a memory
 * for the output alone is not counted: the split search adds it where it is needed, as load's does).
 */
export interface RuntimeBase {
  base: number;
  memories: number;
}

/** The runtime's base for `job`, measured in a fresh process. */
export function measureRuntimeBase(job: BaseJob): Promise<RuntimeBase> {
  return runPlanChild("--base-child", job, (m) => m as RuntimeBase, "measuring the runtime's memory");
}
