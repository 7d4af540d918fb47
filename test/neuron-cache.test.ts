/**
 * The default hot share of the neuron cache (defaultHotFraction): from the profile's firing rates,
 * the share with the most expected hits that still leaves the cold region room for two layers'
 * misses; half without rates, and never less.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_HOT_FRACTION, defaultHotFraction } from "../src/io/neuron-cache.js";

/** `layers` layers of `n` neurons: the first `top` fire with probability a, the rest with b. */
function rates(layers: number, n: number, top: number, a: number, b: number): Float32Array[] {
  return Array.from({ length: layers }, () => Float32Array.from({ length: n }, (_, k) => (k < top ? a : b)));
}

test("defaultHotFraction: half without rates; otherwise the most pinning that leaves room for two layers' misses", () => {
  assert.equal(defaultHotFraction(null, 2000, 1000), DEFAULT_HOT_FRACTION);
  // 10 layers x 1000 neurons, 2000 slots, rates falling as a power law (as planted, and as
  // measured on ReLU models): pinning the next-hottest neurons beats an LRU over them, so the
  // share grows until the cold region is about two layers' misses.
  const law = Array.from({ length: 10 }, () => Float32Array.from({ length: 1000 }, (_, k) => Math.min(0.9, 5 / (k + 1))));
  const share = defaultHotFraction(law, 2000, 1000);
  const missesBeyond = (hot: number) => law[0].slice(hot).reduce((a, b) => a + b, 0);
  assert.ok(share > 0.8, `share ${share}`);
  assert.ok(2000 - Math.floor((2000 * share) / 10) * 10 >= 2 * missesBeyond(Math.floor((2000 * share) / 10)), "room for two layers' misses");
  // half already pins every neuron that ever fires: nothing to gain, half stays
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0), 2000, 1000), DEFAULT_HOT_FRACTION);
  // 0.2 beyond the top: 180 per layer at half, 1800 per token > 1000 cold slots (the LRU would keep
  // nothing); the reserve is 360 slots: floor((2000 - 360) / 10) = 164 per layer.
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0.2), 2000, 1000), 1640 / 2000);
  // every neuron busy: no share above half leaves room for two layers' misses, and half stays
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0.9), 2000, 1000), DEFAULT_HOT_FRACTION);
  // a cache that holds everything: half of it pinned is the whole FFN already
  assert.equal(defaultHotFraction(rates(2, 10, 5, 0.9, 0.2), 1000, 10), DEFAULT_HOT_FRACTION);
});
