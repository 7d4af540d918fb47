/**
 * Peak resident memory of this process. Linux's VmHWM (/proc/self/status) is the high-water
 * mark of this program's own address space; getrusage's maxrss is not a substitute, since after
 * fork + exec it still carries the parent's peak from before the exec.
 */
import { readFileSync } from "node:fs";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";

export function peakResidentBytes(): number {
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync("/proc/self/status", "utf8"));
    if (m) return Number(m[1]) * 1024;
  } catch {
    // not Linux: fall through
  }
  return process.resourceUsage().maxRSS * 1024;
}

let collector: (() => void) | null | undefined;

/**
 * A full garbage collection, where the host lets one be asked for (Node, through a context made
 * with V8's gc exposed); elsewhere nothing. For a measurement that must not count what is
 * already garbage: a store's manifest parse leaves 30-40 MiB of it, which V8 may keep until long
 * after the process's base has been measured.
 *
 * Two collections: V8 frees the backing stores of dead ArrayBuffers on a background thread after
 * a collection, and the next one waits for that to finish. After one, the 4B store's base read
 * 155-181 MiB (the manifest's buffers freed or not yet), after two 129-131.
 */
export function collectGarbage(): void {
  if (collector === undefined) {
    setFlagsFromString("--expose-gc");
    const gc: unknown = runInNewContext("typeof gc === 'function' ? gc : null");
    collector = typeof gc === "function" ? (gc as () => void) : null;
  }
  collector?.();
  collector?.();
}
