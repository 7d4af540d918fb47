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

/**
 * Seconds of a batch of n reads of `bytes` from tables measured at several read sizes (each
 * table one size): the per-read time interpolated linearly in bytes between the two measured
 * sizes around it (a read costs a fixed part and a part per byte); below the smallest, the
 * smallest's; past the largest, the largest's bandwidth (no evidence that a larger read goes
 * faster per byte than the largest measured).
 */
export function sizedBatchSecondsAt(tables: readonly IoTable[], bytes: number, qd: number, n: number): number {
  if (n <= 0) return 0;
  if (tables.length === 0) throw new Error("no read tables");
  const sized = tables.map((t) => ({ bytes: t.cells[0].bytes, t })).sort((a, b) => a.bytes - b.bytes);
  const per = (i: number) => batchSecondsAt(sized[i].t, qd, n) / n;
  if (bytes <= sized[0].bytes) return n * per(0);
  for (let i = 1; i < sized.length; i++) {
    if (bytes <= sized[i].bytes) {
      const a = sized[i - 1].bytes,
        b = sized[i].bytes;
      const t = (bytes - a) / (b - a);
      return n * (per(i - 1) + t * (per(i) - per(i - 1)));
    }
  }
  const last = sized.length - 1;
  return (n * per(last) * bytes) / sized[last].bytes;
}

/**
 * A gate-row chunk table (one chunk of `bytes` per batch, which the reader splits into reads of
 * at most maxRead, up to QD at once) as a table of those reads: each cell's chunk is k reads of
 * bytes / k, so the chunk's rate times k reads per second in a batch of k.
 */
export function chunkReads(table: IoTable, maxRead: number): IoTable {
  return {
    ...table,
    cells: table.cells.map((c) => {
      const k = Math.ceil(c.bytes / maxRead);
      return {
        ...c,
        bytes: c.bytes / k,
        iops: c.iops * k,
        batches: c.batches.map((b) => ({ n: b.n * k, perSecond: b.perSecond * k })),
      };
    }),
  };
}
