/**
 * The probe's timing helpers: a median time per call over rounds, a seeded random stream (the
 * fixtures and read offsets are the same from run to run), and the buffer size past which memory
 * is streamed from DRAM.
 */

/** Median seconds per call of fn, over `rounds` rounds of about `seconds / rounds` each. */
export function timeCalls(fn: (i: number) => void, seconds: number, rounds = 5): number {
  const per: number[] = [];
  let i = 0;
  fn(i++); // warm up (JIT, first touch)
  const slice = (seconds * 1000) / rounds;
  for (let r = 0; r < rounds; r++) {
    let n = 0;
    const start = performance.now();
    let el = 0;
    do {
      fn(i++);
      n++;
      el = performance.now() - start;
    } while (el < slice);
    per.push(el / 1000 / n);
  }
  per.sort((a, b) => a - b);
  return per[Math.floor(per.length / 2)];
}

let seed = 0x9e3779b9;
/** A seeded pseudo-random number in [0, 1) (one stream for every measurement). */
export const rnd = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32;

/** Bytes past which a buffer no longer fits in the last-level caches of common machines. */
export const STREAM_BYTES = 96 << 20;
