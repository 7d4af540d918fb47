/**
 * The runtime's base: what a `run` process holds before any weight loads (node, the engine's
 * modules, the thread pool, the store's manifest). The layout of a budget starts from it, so the
 * planner measures it the way `run` does: in a fresh process that loads the library and makes
 * the pool (`powerinfer plan --base-child JOB`, LlamaModel.layoutOf), once per thread count.
 */
import { fork } from "node:child_process";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export interface BaseJob {
  store: string;
  threads: number;
  contextSize: number;
  batchSize: number;
  sparsity: "gate" | "predictor";
}

/** Bytes of the runtime's base for `job`, measured in a fresh process. */
export function measureRuntimeBase(job: BaseJob): Promise<number> {
  const bin = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..", "..", "bin", "powerinfer.cjs");
  return new Promise((res, rej) => {
    let base: number | undefined;
    let stderr = "";
    const p = fork(bin, ["plan", "--base-child", JSON.stringify(job)], { stdio: ["ignore", "ignore", "pipe", "ipc"] });
    p.stderr!.on("data", (d: Buffer) => (stderr += d.toString()));
    p.on("message", (m) => (base = (m as { base: number }).base));
    p.on("error", rej);
    p.on("exit", (code, signal) => {
      if (base !== undefined && code === 0) res(base);
      else
        rej(
          new Error(
            `plan: measuring the runtime's memory failed (${signal ? `signal ${signal}` : `exit ${code}`}): ${stderr.trim().split("\n").pop() ?? ""}`,
          ),
        );
    });
  });
}
