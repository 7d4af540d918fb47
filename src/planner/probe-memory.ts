/**
 * The probe's memory measurements at one thread count: the cost of handing a job to the worker
 * threads (one pool.run of a trivial job), and memory bandwidth (the add kernel over buffers far
 * larger than the caches: attention over the KV cache is bound by it).
 */
import type { Arena } from "../runtime/arena.js";
import type { ThreadPool } from "../runtime/pool.js";
import { STREAM_BYTES, timeCalls } from "./probe-timing.js";

/** Two buffers far past the caches for y += x. */
export interface BandwidthBuffers {
  x: number;
  y: number;
  /** f32 values in each */
  count: number;
}

export function bandwidthBuffers(arena: Arena): BandwidthBuffers {
  const count = STREAM_BYTES / 8;
  const x = arena.alloc(count * 4, 64);
  const y = arena.alloc(count * 4, 64);
  arena.u8(x, count * 4).fill(0);
  arena.u8(y, count * 4).fill(0);
  return { x, y, count };
}

/** Seconds per pool.run of a job too small to matter split over the pool's `threads` threads. */
export function measureDispatch(pool: ThreadPool, threads: number, buf: BandwidthBuffers, seconds: number): number {
  const args = new Int32Array(16);
  const add = pool.fn("add_inplace");
  const tiny = 64 * threads * 4;
  return timeCalls(() => {
    args[0] = buf.y;
    args[1] = buf.x;
    pool.run(add, args, 2, tiny, 64);
  }, seconds);
}

/** Bytes per second streamed by y += x (read x, read and write y). */
export function measureBandwidth(pool: ThreadPool, buf: BandwidthBuffers, seconds: number): number {
  const args = new Int32Array(16);
  const add = pool.fn("add_inplace");
  return (
    (3 * buf.count * 4) /
    timeCalls(
      () => {
        args[0] = buf.y;
        args[1] = buf.x;
        pool.run(add, args, 2, buf.count, 64);
      },
      seconds * 2,
      3,
    )
  );
}
