/**
 * Peak resident memory of this process. Linux's VmHWM (/proc/self/status) is the high-water
 * mark of this program's own address space; getrusage's maxrss is not a substitute, since after
 * fork + exec it still carries the parent's peak from before the exec.
 */
import { readFileSync } from "node:fs";

export function peakResidentBytes(): number {
  try {
    const m = /^VmHWM:\s+(\d+) kB/m.exec(readFileSync("/proc/self/status", "utf8"));
    if (m) return Number(m[1]) * 1024;
  } catch {
    // not Linux: fall through
  }
  return process.resourceUsage().maxRSS * 1024;
}
