/**
 * The neuron cache as a layout lays it out, with its hot region filled: each layer's first
 * stored positions (its hottest neurons in a hot-first store), read once at load and kept. Packed
 * hot slots hold a bundle's parts (and biases) without its read padding.
 */
import type { GroupStore } from "./store-groups.js";
import { NeuronCache } from "../../io/neuron-cache.js";
import type { Arena } from "../../runtime/arena.js";
import type { OffloadLayout } from "./layout.js";

/** Load-time read buffer (counted in layout.ts RUNTIME_GROWTH_BYTES). */
const CHUNK = 2 << 20;

export function makeCache(store: GroupStore, arena: Arena, layout: OffloadLayout): NeuronCache {
  const ffn = store.ffn;
  const groups = ffn.layers.length;
  const hotBytes = layout.hotSlotBytes;
  const hotSlots = layout.hotPerGroup.reduce((a, b) => a + b, 0);
  const base = arena.alloc(NeuronCache.bytesFor(hotSlots, layout.coldSlots, ffn.bundleBytes, hotBytes), 4096);
  const cache = new NeuronCache(
    base,
    ffn.bundleBytes,
    layout.slots,
    ffn.layers.map((L) => L.neurons),
    layout.hotPerGroup,
    hotBytes,
  );
  const chunk = new Uint8Array(Math.max(1, Math.floor(CHUNK / ffn.bundleBytes)) * ffn.bundleBytes);
  const perRead = chunk.length / ffn.bundleBytes;
  for (let l = 0; l < groups; l++) {
    const hot = layout.hotPerGroup[l];
    if (hot === 0) continue;
    const dst = arena.u8(cache.address(cache.hotStart[l]), hot * hotBytes);
    if (hotBytes === ffn.bundleBytes) {
      store.readBundles(l, 0, hot, dst);
      continue;
    }
    for (let k = 0; k < hot; k += perRead) {
      const n = Math.min(perRead, hot - k);
      store.readBundles(l, k, n, chunk.subarray(0, n * ffn.bundleBytes));
      for (let i = 0; i < n; i++)
        dst.set(chunk.subarray(i * ffn.bundleBytes, i * ffn.bundleBytes + hotBytes), (k + i) * hotBytes);
    }
  }
  return cache;
}
