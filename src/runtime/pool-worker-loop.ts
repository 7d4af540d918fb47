/**
 * The body of a pool worker, shared by Node's worker_threads entry (pool-worker.ts) and the
 * browser's Web Worker entry (src/browser/pool-worker.ts): instantiate the kernel module over
 * each shared memory (one per shard), say ready, then loop: wait for a new group generation, take chunks of it
 * until none are left. See pool.ts.
 */
import { CTRL, MAX_ARGS, chunkTag, runChunks, type PoolWorkerData } from "./pool.js";
import { instantiateKernels } from "./wasm.js";

/** Runs until the pool says exit (FN < 0). */
export function runPoolWorker(data: PoolWorkerData, ready: () => void): void {
  const { module, memories, ctrl, names } = data;
  // kernel index = shard * names + name: as ThreadPool.fn counts them
  const fns = memories.flatMap((memory) => {
    const kernels = instantiateKernels(memory, module);
    return names.map((n) => kernels[n]);
  });
  const c = new Int32Array(ctrl);
  const a = new Int32Array(MAX_ARGS + 2);
  const range = new Int32Array(2);
  let seen = Atomics.load(c, CTRL.GEN);
  ready();
  for (;;) {
    let spins = 0;
    const spin = Atomics.load(c, CTRL.SPIN);
    while (Atomics.load(c, CTRL.GEN) === seen) {
      if (++spins > spin) {
        Atomics.wait(c, CTRL.GEN, seen);
        spins = 0;
      }
    }
    seen = Atomics.load(c, CTRL.GEN);
    if (c[CTRL.NJOBS] < 0) break;
    runChunks(c, chunkTag(seen), fns, a, range);
  }
}
