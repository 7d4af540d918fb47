/**
 * The runtime's base: what a `run` process holds before any weight loads (node, the engine's
 * modules, the thread pool, the store's manifest). The layout of a budget starts from it, so the
 * planner measures it the way `run` does: in a fresh process that loads the library and makes
 * the pool (`powerinfer plan --base-child JOB`, LlamaModel.layoutOf), once per thread count.
 */
import { runPlanChild } from "./child-run.js";

export interface BaseJob {
  store: string;
  threads: number;
  contextSize: number;
  batchSize: number;
  sparsity: "gate" | "predictor";
}

/** Bytes of the runtime's base for `job`, measured in a fresh process. */
export function measureRuntimeBase(job: BaseJob): Promise<number> {
  return runPlanChild("--base-child", job, (m) => (m as { base: number }).base, "measuring the runtime's memory");
}
