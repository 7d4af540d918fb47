/**
 * Reading the probe's read tables (IoTable): per-read submit cost, batch times and IOPS at any
 * queue depth and batch size, interpolated between the measured cells. The cost model's
 * Hardware reads the device through these.
 */
import type { IoCell, IoTable } from "./probe-results.js";

/** Main-thread seconds per read to submit it, at queue depth `qd` (interpolated in log qd). */
export function submitAt(table: IoTable, qd: number): number {
  return lerpDepth(table, qd, (c) => c.submit);
}

/** Reads per second of a batch of n in a cell: interpolated in log n between its measured sizes. */
function cellRate(c: IoCell, n: number): number {
  const b = c.batches;
  if (n <= b[0].n) return b[0].perSecond;
  for (let i = 1; i < b.length; i++) {
    if (n <= b[i].n) {
      const t = Math.log(n / b[i - 1].n) / Math.log(b[i].n / b[i - 1].n);
      return b[i - 1].perSecond + t * (b[i].perSecond - b[i - 1].perSecond);
    }
  }
  return b[b.length - 1].perSecond;
}

/**
 * Seconds a batch of n reads takes at queue depth qd (submit included): n / the rate measured
 * for batches of that size, interpolated in log n between the measured sizes (below the smallest,
 * its rate; past the largest, the rate while the queue stays full) and in log qd between depths.
 * As for iopsAt, a deeper queue is taken to be at least as fast for the same batch.
 */
export function batchSecondsAt(table: IoTable, qd: number, n: number): number {
  if (n <= 0) return 0;
  const cells = [...table.cells].sort((a, b) => a.queueDepth - b.queueDepth);
  let best = 0;
  const rates = cells.map((c) => (best = Math.max(best, cellRate(c, n))));
  return n / lerpDepth({ ...table, cells }, qd, (c) => rates[cells.indexOf(c)]);
}

/** f of the cells, interpolated in log qd between measured depths (clamped at the ends and at libuv's pool size). */
function lerpDepth(table: IoTable, qd: number, f: (c: IoCell) => number): number {
  const cells = [...table.cells].sort((a, b) => a.queueDepth - b.queueDepth);
  if (cells.length === 0) throw new Error("empty read table");
  const q = Math.min(qd, table.threadPool);
  if (q <= cells[0].queueDepth) return f(cells[0]);
  for (let i = 1; i < cells.length; i++) {
    const a = cells[i - 1],
      b = cells[i];
    if (q <= b.queueDepth) {
      const t = Math.log(q / a.queueDepth) / Math.log(b.queueDepth / a.queueDepth);
      return f(a) + t * (f(b) - f(a));
    }
  }
  return f(cells[cells.length - 1]);
}

/**
 * Reads per second at queue depth `qd` from a table, interpolated in log(qd) between measured
 * depths (clamped at the ends: past the deepest measured depth nothing gets faster). A deeper
 * queue is taken to be at least as fast as a shallower one (a running maximum over depth): on a
 * shared machine a cell measured during a burst of other work reads low, and the search should
 * not prefer a shallower queue for that.
 */
export function iopsAt(table: IoTable, qd: number): number {
  const sorted = [...table.cells].sort((a, b) => a.queueDepth - b.queueDepth);
  if (sorted.length === 0) throw new Error("empty read table");
  let best = 0;
  const cells = sorted.map((c) => ({ ...c, iops: (best = Math.max(best, c.iops)) }));
  const q = Math.min(qd, table.threadPool);
  // below the shallowest depth measured, fewer reads in flight: proportionally slower
  if (q <= cells[0].queueDepth) return cells[0].iops * (q / cells[0].queueDepth);
  return lerpDepth({ ...table, cells }, qd, (c) => c.iops);
}
