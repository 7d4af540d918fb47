/**
 * The native Linux AIO binding (native/flash_aio.c, compiled by scripts/build-native.mjs at
 * install), loaded once. The flash reader uses it for direct reads when it is there: one system
 * call submits a batch, another collects what finished, both on a thread of the addon's own,
 * and no thread is woken per read.
 * Where it could not be built or loaded (no compiler, not Linux, POWERINFER_AIO=0), `aio()` says
 * why and the reader goes through libuv's thread pool instead.
 */
import { createRequire } from "node:module";

/** An io_setup context with its request table (opaque to JavaScript). */
export type AioRing = { readonly __aioRing: unique symbol };

export interface AioBinding {
  /**
   * io_setup for `capacity` reads in flight on file descriptor fd (opened with O_DIRECT); threaded:
   * the system calls run on a thread of the addon, else on the caller's in submit and reap.
   */
  open(fd: number, capacity: number, threaded: boolean): AioRing;
  /**
   * Threaded rings: the I/O thread on `cpu` alone and the caller on its other CPUs until close
   * (aio-backend.ts pinIoThread); false where that is not possible. The native addon only.
   */
  pin?(ring: AioRing, cpu: number): boolean;
  /**
   * Reads reqs[0..4n) = [id, fileOffset, length, dst] * n into `view`. Threaded: queued for the
   * I/O thread, returns n (a read the kernel refuses is reported by reap with -errno). Inline:
   * io_submit, returns how many it took (the first k; 0 when the kernel is full), or -errno when
   * it refused the first.
   */
  submit(ring: AioRing, view: Uint8Array, reqs: Float64Array, n: number): number;
  /** Finished reads into out = [id, bytes read or -errno] * k, waiting up to waitMs for the first; returns k. */
  reap(ring: AioRing, out: Float64Array, max: number, waitMs: number): number;
  /**
   * Threaded rings: the I/O thread checks each read that lands whole against `crcs` (CRC-32 of
   * each chunkBytes chunk of [start, end); with `seen`, only chunks not verified before, marking
   * them) and reports a mismatch as -EBADMSG. The arrays must outlive the ring.
   */
  setChecksums(
    ring: AioRing,
    crcs: Uint32Array,
    start: number,
    end: number,
    chunkBytes: number,
    seen: Uint8Array | null,
  ): void;
  /** io_destroy: waits for the reads in flight, then frees the ring. */
  close(ring: AioRing): void;
  /**
   * madvise(MADV_HUGEPAGE) over the 2 MiB pages wholly inside `view`; returns the bytes advised
   * (0 where the kernel refused). The native addon only (src/runtime/arena.ts uses it).
   */
  hugePages?(view: Uint8Array): number;
}

let loaded: { binding: AioBinding | null; reason: string } | undefined;

/**
 * Use `binding` instead of the native addon (the browser build's reader workers over OPFS,
 * src/browser/opfs-aio.ts, have the same shape: batches in, completions out).
 */
export function provideAioBinding(binding: AioBinding): void {
  loaded = { binding, reason: "" };
}

/** The binding, or null and why not. */
export function aio(): { binding: AioBinding | null; reason: string } {
  if (loaded) return loaded;
  if (process.env.POWERINFER_AIO === "0") return (loaded = { binding: null, reason: "POWERINFER_AIO=0 turned it off" });
  if (process.platform !== "linux")
    return (loaded = { binding: null, reason: `Linux AIO does not exist on ${process.platform}` });
  const file = new URL("../../../build/flash_aio.node", import.meta.url);
  try {
    const binding = createRequire(import.meta.url)(file.pathname) as AioBinding;
    return (loaded = { binding, reason: "" });
  } catch (e) {
    const why =
      (e as NodeJS.ErrnoException).code === "MODULE_NOT_FOUND"
        ? `${file.pathname} was not built (see npm install's output)`
        : (e as Error).message.split("\n")[0];
    return (loaded = { binding: null, reason: why });
  }
}
