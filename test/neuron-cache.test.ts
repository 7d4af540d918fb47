/**
 * The default hot share of the neuron cache (defaultHotFraction): half, unless the profile's
 * firing rates say a cold region of half could not keep what one token misses.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_HOT_FRACTION, defaultHotFraction } from "../src/io/neuron-cache.js";

/** `layers` layers of `n` neurons: the first `top` fire with probability a, the rest with b. */
function rates(layers: number, n: number, top: number, a: number, b: number): Float32Array[] {
  return Array.from({ length: layers }, () => Float32Array.from({ length: n }, (_, k) => (k < top ? a : b)));
}

test("defaultHotFraction: half without rates or when the cold region can keep a token's misses; more when it cannot", () => {
  assert.equal(defaultHotFraction(null, 2000, 1000), DEFAULT_HOT_FRACTION);
  // 10 layers x 1000 neurons, 2000 slots: half pins 100 per layer and leaves 1000 cold slots.
  // Rare firing beyond the top 100: 45 misses per layer, 450 per token, which 1000 slots keep.
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0.05), 2000, 1000), DEFAULT_HOT_FRACTION);
  // 0.2 beyond the top: 180 per layer, 1800 per token > 1000 cold slots: the LRU would keep
  // nothing. The cold region keeps two layers' misses (360 slots), the rest is pinned:
  // floor((2000 - 360) / 10) = 164 per layer.
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0.2), 2000, 1000), 1640 / 2000);
  // never below half, even when two layers' misses exceed the cold region
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0.9), 2000, 1000), DEFAULT_HOT_FRACTION);
  // a cache that holds everything: half of it pinned is the whole FFN anyway
  assert.equal(defaultHotFraction(rates(2, 10, 5, 0.9, 0.2), 1000, 10), DEFAULT_HOT_FRACTION);
});
