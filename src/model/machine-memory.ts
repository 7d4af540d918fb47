/**
 * The memory this process can have: the machine's, or its cgroup's limit where that is lower (a
 * container, a systemd slice). A memory budget above it cannot be honoured: the process would be
 * killed, or swap, long before the cache filled, so a load refuses it before anything loads.
 */
import { readFileSync } from "node:fs";
import { totalmem } from "node:os";

export interface MachineMemory {
  bytes: number;
  /** where the number comes from, for an error message */
  source: string;
}

/** cgroup v2's memory.max, else v1's memory.limit_in_bytes; undefined where none is set (or not Linux). */
function cgroupLimit(): MachineMemory | undefined {
  for (const path of ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]) {
    let text: string;
    try {
      text = readFileSync(path, "utf8").trim();
    } catch {
      continue;
    }
    const bytes = Number(text);
    // "max", or v1's "no limit" (a page-rounded 2^63)
    if (Number.isFinite(bytes) && bytes > 0 && bytes < 2 ** 60) return { bytes, source: `the cgroup limit (${path})` };
  }
  return undefined;
}

/** The machine's memory, or the cgroup's limit where lower; undefined where unknown (a browser says 0). */
export function machineMemory(): MachineMemory | undefined {
  const total = totalmem();
  const machine = total > 0 ? { bytes: total, source: "the machine's memory" } : undefined;
  const cgroup = machine ? cgroupLimit() : undefined;
  return cgroup && machine && cgroup.bytes < machine.bytes ? cgroup : machine;
}

const gib = (n: number) => `${(n / 2 ** 30).toFixed(2)} GiB`;

/** A memory budget above what this process can have is an error stating both numbers. */
export function checkBudgetFitsMachine(budget: number | undefined): void {
  if (budget === undefined) return;
  const m = machineMemory();
  if (m && budget > m.bytes)
    throw new RangeError(
      `memory budget ${gib(budget)} (${budget} bytes) is above ${m.source}, ${gib(m.bytes)} (${m.bytes} bytes): give a budget of at most that`,
    );
}
