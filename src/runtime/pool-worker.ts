/**
 * A pool worker: instantiates the kernel module over the shared memory, then loops: wait for a
 * new job generation, take chunks of it until none are left. See pool.ts.
 */
import { parentPort, workerData } from "node:worker_threads";
import { CTRL, MAX_ARGS, chunkTag, runChunks } from "./pool.js";
import { instantiateKernels } from "./wasm.js";

const { module, memory, ctrl, names } = workerData as {
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
  ctrl: SharedArrayBuffer;
  names: string[];
};
const kernels = instantiateKernels(memory, module);
const fns = names.map((n) => kernels[n]);
const c = new Int32Array(ctrl);
const a = new Int32Array(MAX_ARGS + 2);
const range = new Int32Array(2);
/** How long to spin before sleeping: long enough to cover the gap between two kernels of a token. */
const SPIN = 200000;

let seen = Atomics.load(c, CTRL.GEN);
parentPort!.postMessage("ready");
for (;;) {
  let spins = 0;
  while (Atomics.load(c, CTRL.GEN) === seen) {
    if (++spins > SPIN) {
      Atomics.wait(c, CTRL.GEN, seen);
      spins = 0;
    }
  }
  seen = Atomics.load(c, CTRL.GEN);
  if (c[CTRL.FN] < 0) break;
  runChunks(c, chunkTag(seen), fns, a, range);
}
