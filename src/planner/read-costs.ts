/**
 * Seconds of the misses' reads: a batch alone, a batch overlapping main-thread work (the I/O and
 * compute overlap rule), and the rounds a cold region smaller than a layer's misses needs.
 */
import type { Hardware } from "./hardware.js";

/** Seconds of a batch of n reads of `bytes` at queue depth qd, with nothing else to do meanwhile (submit included). */
export function readTime(hw: Hardware, bytes: number, n: number, qd: number): number {
  if (n <= 0) return 0;
  return hw.batchSeconds(bytes, Math.max(1, Math.min(qd, Math.ceil(n))), n);
}

/**
 * A batch of n reads submitted just before `compute` seconds of main-thread work: only the first
 * QD reads proceed during the compute (new reads are issued from completion callbacks, which wait
 * for the main thread); the rest go as a batch of their own afterwards. Wall time, submit included.
 * Without overlap (Hardware.overlap) the reads and the compute add up.
 */
export function overlapped(hw: Hardware, bytes: number, n: number, qd: number, compute: number): number {
  if (n <= 0) return compute;
  if (!hw.overlap) return compute + readTime(hw, bytes, n, qd);
  const submit = n * hw.submitSeconds(bytes, qd);
  const rest = Math.max(0, n - qd);
  const after = rest > 0 ? readTime(hw, bytes, rest, qd) - rest * hw.submitSeconds(bytes, qd) : 0;
  return Math.max(submit + compute + after, readTime(hw, bytes, n, qd));
}

/** Reads of `n` bundles in rounds of at most `cold` (each round read, then computed at `up` seconds per bundle). */
export function rounds(
  hw: Hardware,
  bytes: number,
  n: number,
  cold: number,
  qd: number,
  up: number,
): { io: number; compute: number } {
  let io = 0,
    compute = 0;
  let left = n;
  while (left > 1e-9) {
    const r = Math.min(left, Math.max(1, cold));
    io += readTime(hw, bytes, r, qd);
    compute += r * up + hw.dispatch;
    left -= r;
  }
  return { io, compute };
}

/** Rounds a layer's `misses` need in a cold region of `cold` slots (expected values). */
export function roundsOf(misses: number, cold: number): number {
  return Math.ceil(misses / Math.max(1, cold) - 1e-9);
}
