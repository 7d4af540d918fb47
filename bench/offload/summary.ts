/** Medians, ratios and the other cells of bench:offload's tables, from the runs' results. */
import { median } from "../../src/planner/median.js";
import type { RunResult } from "./engine-runs.js";
import { GiB } from "./settings.js";

export function commonPrefix(xs: string[]): number {
  let n = 0;
  while (xs.every((x) => n < x.length && x[n] === xs[0][n])) n++;
  return n;
}

export const gib = (b: number) => `${+(b / GiB).toFixed(2)} GiB`;

/** "1.23" from the ok runs, or the failure of the first failed run. */
export function med(rs: RunResult[], key: keyof RunResult, digits = 2): string {
  const ok = rs.filter((r) => r.ok);
  if (ok.length === 0) return rs[0]?.failure ?? "-";
  const v = median(ok.map((r) => r[key] as number)).toFixed(digits);
  return ok.length < rs.length
    ? `${v} (${rs.length - ok.length} of ${rs.length} failed: ${rs.find((r) => !r.ok)!.failure})`
    : v;
}

export function medNum(rs: RunResult[], key: keyof RunResult): number | undefined {
  const ok = rs.filter((r) => r.ok);
  return ok.length ? median(ok.map((r) => r[key] as number)) : undefined;
}

export function ratio(a?: number, b?: number): string {
  return a !== undefined && b !== undefined && b > 0 ? `${(a / b).toFixed(1)}x` : "-";
}

export function loadRange(rs: RunResult[]): string {
  const l = rs.map((r) => r.load);
  return l.length ? `${Math.min(...l).toFixed(1)}-${Math.max(...l).toFixed(1)}` : "-";
}

/**
 * Seconds of a run's generation (prefill + decode). The engine prints rates with one decimal, too
 * coarse below 1 tok/s; its I/O wait (two decimals) over its share of the run (whole percent) is
 * finer when the share is large enough.
 */
function runSeconds(r: RunResult): number {
  if (r.ioWaitPct !== undefined && r.ioWaitPct >= 10) return (100 * r.ioWaitS!) / r.ioWaitPct;
  return r.promptTokens! / r.prefill! + r.decodeTokens! / r.decode!;
}

export function oursDetail(rs: RunResult[]): { hit: string; wait: string; mbs: string; rss: string; computed: string } {
  const ok = rs.filter((r) => r.ok);
  if (!ok.length) return { hit: "-", wait: "-", mbs: "-", rss: "-", computed: "-" };
  return {
    hit: `${median(ok.map((r) => r.hitRatePct!)).toFixed(1)}%`,
    wait: `${median(ok.map((r) => r.ioWaitPct ?? (100 * r.ioWaitS!) / runSeconds(r))).toFixed(0)}%`,
    mbs: median(ok.map((r) => r.readMB! / runSeconds(r))).toFixed(0),
    rss: `${Math.max(...ok.map((r) => r.peakRssMiB!)).toFixed(0)} MiB`,
    computed: `${median(ok.map((r) => r.computedPct!)).toFixed(1)}%`,
  };
}
