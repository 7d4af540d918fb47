/**
 * A pool worker: instantiates the kernel module over the shared memory, then loops: wait for a
 * new job generation, compute its share of the range, report done. See pool.ts.
 */
import { parentPort, workerData } from "node:worker_threads";
import { CTRL, MAX_ARGS, splitRange } from "./pool.js";
import { instantiateKernels } from "./wasm.js";

const { module, memory, ctrl, names, index } = workerData as {
  module: WebAssembly.Module;
  memory: WebAssembly.Memory;
  ctrl: SharedArrayBuffer;
  names: string[];
  index: number;
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
  const fn = c[CTRL.FN];
  if (fn < 0) break;
  const nargs = c[CTRL.NARGS];
  for (let i = 0; i < nargs; i++) a[i] = c[CTRL.ARGS + i];
  splitRange(c[CTRL.TOTAL], c[CTRL.ALIGN], c[CTRL.NTHREADS], index, range);
  a[nargs] = range[0];
  a[nargs + 1] = range[1];
  try {
    if (range[0] < range[1]) {
      const f = fns[fn];
      if (nargs + 2 <= 8) f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7]);
      else f(a[0], a[1], a[2], a[3], a[4], a[5], a[6], a[7], a[8], a[9], a[10], a[11], a[12], a[13], a[14], a[15], a[16], a[17]);
    }
  } catch {
    Atomics.store(c, CTRL.ERROR, 1);
  }
  if (Atomics.sub(c, CTRL.PENDING, 1) === 1) Atomics.notify(c, CTRL.PENDING);
}
