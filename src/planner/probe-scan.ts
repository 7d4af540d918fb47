/**
 * The probe of the JS work OffloadedFFN does per layer besides the kernels (the cost model's
 * ScanSpeed).
 */
import { NeuronCache } from "../io/neuron-cache.js";
import { newFFNStep } from "../model/offload/ffn-step.js";
import type { ScanSpeed } from "./probe-results.js";
import { rnd, timeCalls } from "./probe-timing.js";

/**
 * The JS work OffloadedFFN does per layer besides the kernels: scan every gate value, file each
 * firing neuron in the neuron cache (hot range check, cold map, LRU touch), and for each miss take
 * a cold slot, make its read request and list its address for the kernel.
 */
export function probeScan(nFF: number, layers: number, seconds: number): ScanSpeed {
  // the whole model's cache bookkeeping (per-layer maps, LRU lists): its size is part of the cost
  const slots = Math.max(4, Math.floor((layers * nFF) / 4));
  const hot = Math.floor(slots / 2 / layers);
  const cache = new NeuronCache(0, 4096, slots, Array(layers).fill(nFF), Array(layers).fill(hot));
  for (let l = 0; l < layers; l++) for (let k = hot; k < nFF; k += 5) if (cache.acquire(l, k) < 0) break;
  let layer = 0;
  // counted as a step counts its lookups
  const step = newFFNStep();
  const g = new Float32Array(nFF);
  const none = new Float32Array(nFF).fill(-1);
  for (let i = 0; i < nFF; i++) g[i] = rnd() < 0.1 ? 1 : -1;
  const listA = new Int32Array(nFF);
  const listG = new Float32Array(nFF);
  const missPos = new Int32Array(nFF);
  let sink = 0;
  let misses = 0;
  const scan = (v: Float32Array) => () => {
    cache.beginStep();
    layer = (layer + 1) % layers;
    let hits = 0;
    misses = 0;
    for (let k = 0; k < nFF; k++) {
      const x = v[k];
      if (!(x > 0)) continue;
      const slot = cache.lookup(layer, k, step);
      if (slot >= 0) {
        listA[hits] = cache.address(slot);
        listG[hits++] = x;
      } else missPos[misses++] = k;
    }
    sink += hits + misses;
  };
  const tNone = timeCalls(scan(none), seconds * 0.4);
  const tSome = timeCalls(scan(g), seconds * 0.4);
  const fired = g.reduce((a, v) => a + (v > 0 ? 1 : 0), 0);
  // per miss: a cold slot, a request object, then (once read) its address in the kernel's list
  const requests: { fileOffset: number; length: number; dst: number; tag: number }[] = [];
  const perMiss =
    timeCalls(() => {
      cache.beginStep();
      requests.length = 0;
      const n = Math.min(misses, 256);
      for (let i = 0; i < n; i++) {
        const k = missPos[i];
        const slot = cache.acquire(layer, k);
        if (slot < 0) break;
        requests.push({ fileOffset: k * 4096, length: 4096, dst: cache.address(slot), tag: slot });
      }
      for (let i = 0; i < requests.length; i++) listA[i] = cache.address(cache.peek(layer, missPos[i]));
      sink += requests.length;
      // the next round finds them cached: forget them so that they miss again
      for (const r of requests) cache.release(r.tag);
    }, seconds * 0.2) / Math.max(1, Math.min(misses, 256));
  void sink;
  return { perNeuron: tNone / nFF, perLookup: Math.max(0, (tSome - tNone) / Math.max(1, fired)), perMiss };
}
