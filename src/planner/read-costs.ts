/**
 * Seconds of the misses' reads: a batch alone, a batch overlapping main-thread work (the I/O and
 * compute overlap rule), and the rounds a cold region smaller than a layer's misses needs. A
 * batch of missed bundles is costed as the reads the flash reader coalesces it into
 * (read-runs.ts): `runShare` runs per bundle, each split into reads of at most the reader's
 * largest read, at the probed rate for reads of that size.
 */
import type { Hardware } from "./hardware.js";
import { coalescedReads } from "./read-runs.js";

/** Seconds of a batch of n reads of `bytes` at queue depth qd, with nothing else to do meanwhile (submit included). */
export function readTime(hw: Hardware, bytes: number, n: number, qd: number): number {
  if (n <= 0) return 0;
  return hw.batchSeconds(bytes, Math.max(1, Math.min(qd, Math.ceil(n))), n);
}

/**
 * Seconds of a batch of n missed bundles of `bytes` forming `runShare` runs per bundle, submit
 * included: the main thread submits every bundle's request (the probe's per-read submit at the
 * bundle's size), the disk reads the coalesced reads. runShare 1 is n reads of `bytes`.
 */
export function missTime(hw: Hardware, bytes: number, n: number, qd: number, runShare: number): number {
  if (n <= 0) return 0;
  const reads = coalescedReads(n, runShare, bytes);
  if (reads >= n) return readTime(hw, bytes, n, qd);
  const size = (n * bytes) / reads;
  const disk = readTime(hw, size, reads, qd) - reads * hw.submitSeconds(size, qd);
  return Math.max(0, disk) + n * hw.submitSeconds(bytes, qd);
}

/**
 * A batch of n reads submitted just before `compute` seconds of main-thread work: only the first
 * QD reads proceed during the compute (new reads are issued from completion callbacks, which wait
 * for the main thread); the rest go as a batch of their own afterwards. Wall time, submit included.
 * Without overlap (Hardware.overlap) the reads and the compute add up. Bundles coalesced
 * (runShare < 1) count by their reads: the first QD reads, not bundles, go during the compute.
 */
export function overlapped(hw: Hardware, bytes: number, n: number, qd: number, compute: number, runShare = 1): number {
  if (n <= 0) return compute;
  if (!hw.overlap) return compute + missTime(hw, bytes, n, qd, runShare);
  const submit = n * hw.submitSeconds(bytes, qd);
  const reads = coalescedReads(n, runShare, bytes);
  // the bundles of the reads past the first QD
  const rest = (n * Math.max(0, reads - qd)) / reads;
  const after = rest > 0 ? missTime(hw, bytes, rest, qd, runShare) - rest * hw.submitSeconds(bytes, qd) : 0;
  return Math.max(submit + compute + after, missTime(hw, bytes, n, qd, runShare));
}

/**
 * Reads of `n` bundles in rounds of at most `cold` (each round read, then computed at `up`
 * seconds per bundle), each round's bundles forming `runShare` runs per bundle.
 */
export function rounds(
  hw: Hardware,
  bytes: number,
  n: number,
  cold: number,
  qd: number,
  up: number,
  runShare = 1,
): { io: number; compute: number } {
  let io = 0,
    compute = 0;
  let left = n;
  while (left > 1e-9) {
    const r = Math.min(left, Math.max(1, cold));
    io += missTime(hw, bytes, r, qd, runShare);
    compute += r * up + hw.dispatch;
    left -= r;
  }
  return { io, compute };
}

/** Rounds a layer's `misses` need in a cold region of `cold` slots (expected values). */
export function roundsOf(misses: number, cold: number): number {
  return Math.ceil(misses / Math.max(1, cold) - 1e-9);
}
