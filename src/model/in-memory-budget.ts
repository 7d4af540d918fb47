/**
 * A memory budget given for a plain GGUF. Such a file runs all in memory: the budget is kept if
 * everything fits in it, and otherwise refused with the command that makes a neuron store, whose
 * FFN stays on flash. Running it anyway would break the promise quietly (the budget used to be
 * ignored for a GGUF).
 */
import type { ModelConfig } from "./config.js";
import { BUDGET_ROOM, runtimeGrowthBytes } from "./offload/layout.js";

const mib = (b: number) => `${(b / 2 ** 20).toFixed(1)} MiB`;

export function checkInMemoryBudget(
  path: string,
  cfg: ModelConfig,
  resident: { weights: number; buffers: number; kv: number },
  budget: number,
): void {
  const runtime = process.memoryUsage.rss() + runtimeGrowthBytes(cfg);
  const need = runtime + resident.weights + resident.buffers + resident.kv;
  if (need <= budget * BUDGET_ROOM) return;
  const store = path.replace(/\.gguf$/i, "") + ".pi";
  throw new Error(
    `${path}: a GGUF runs all in memory and needs about ${mib(need / BUDGET_ROOM)} (weights ${mib(resident.weights)}, ` +
      `KV cache ${mib(resident.kv)}, buffers ${mib(resident.buffers)}, runtime ${mib(runtime)}), more than the memory ` +
      `budget of ${mib(budget)}. To run it under that budget, convert it once into a neuron store, whose FFN stays on ` +
      `flash: powerinfer convert ${path} -o ${store}, then run -m ${store} --memory-budget ${mib(budget).replace(" ", "")}`,
  );
}
