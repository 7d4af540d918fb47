/**
 * The default hot share of the neuron cache (defaultHotFraction): from the profile's firing rates,
 * the share with the most expected hits that still leaves the cold region room for two layers'
 * misses; half without rates, and never less.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { DEFAULT_HOT_FRACTION, defaultHotFraction, NeuronCache } from "../src/io/neuron-cache.js";

/** `layers` layers of `n` neurons: the first `top` fire with probability a, the rest with b. */
function rates(layers: number, n: number, top: number, a: number, b: number): Float32Array[] {
  return Array.from({ length: layers }, () => Float32Array.from({ length: n }, (_, k) => (k < top ? a : b)));
}

test("defaultHotFraction: half without rates; otherwise the most pinning that leaves room for two layers' misses", () => {
  assert.equal(defaultHotFraction(null, 2000, 1000), DEFAULT_HOT_FRACTION);
  // 10 layers x 1000 neurons, 2000 slots, rates falling as a power law (as planted, and as
  // measured on ReLU models): pinning the next-hottest neurons beats an LRU over them, so the
  // share grows until the cold region is about two layers' misses.
  const law = Array.from({ length: 10 }, () =>
    Float32Array.from({ length: 1000 }, (_, k) => Math.min(0.9, 5 / (k + 1))),
  );
  const share = defaultHotFraction(law, 2000, 1000);
  const missesBeyond = (hot: number) => law[0].slice(hot).reduce((a, b) => a + b, 0);
  assert.ok(share > 0.8, `share ${share}`);
  assert.ok(
    2000 - Math.floor((2000 * share) / 10) * 10 >= 2 * missesBeyond(Math.floor((2000 * share) / 10)),
    "room for two layers' misses",
  );
  // half already pins every neuron that ever fires: nothing to gain, half stays
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0), 2000, 1000), DEFAULT_HOT_FRACTION);
  // 0.2 beyond the top: 180 per layer at half, 1800 per token > 1000 cold slots (the LRU would keep
  // nothing); the reserve is 360 slots: floor((2000 - 360) / 10) = 164 per layer.
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0.2), 2000, 1000), 1640 / 2000);
  // every neuron busy: no share above half leaves room for two layers' misses, and half stays
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0.9), 2000, 1000), DEFAULT_HOT_FRACTION);
  // a cache that holds everything: half of it pinned is the whole FFN already
  assert.equal(defaultHotFraction(rates(2, 10, 5, 0.9, 0.2), 1000, 10), DEFAULT_HOT_FRACTION);
  // The same rates as 5 layers x 2 experts, 1 routed per token (rates per token: half of a routed
  // expert's): a routed expert misses 360 at half, not 180, so the reserve is 720 slots and the
  // share stops at 0.65 (hot 130: 2 x 348 misses fit 700 cold slots; at 0.7 they do not).
  assert.equal(defaultHotFraction(rates(10, 1000, 100, 0.9, 0.2), 2000, 1000, { experts: 2, used: 1 }), 0.65);
});

test("packed hot slots: hot at their own stride, cold from the next 4 KiB boundary, nothing overlaps, LRU unchanged", () => {
  // 3 layers x 10 neurons, 4 hot per layer packed at 7680 bytes, 5 cold slots of 8192
  const base = 1 << 20;
  const c = new NeuronCache(base, 8192, 17, [10, 10, 10], [4, 4, 4], 7680);
  assert.equal(c.hotSlots, 12);
  assert.equal(c.address(0), base);
  assert.equal(c.address(5), base + 5 * 7680);
  assert.equal(c.coldBase % 4096, 0);
  assert.equal(c.coldBase, base + Math.ceil((12 * 7680) / 4096) * 4096);
  assert.equal(c.address(12), c.coldBase);
  assert.equal(c.address(16), c.coldBase + 4 * 8192);
  assert.equal(c.bytes, c.coldBase - base + 5 * 8192);
  assert.equal(NeuronCache.bytesFor(12, 5, 8192, 7680), c.bytes);
  // ranges [address, address + size) are disjoint and inside [base, base + bytes)
  const ranges = Array.from({ length: 17 }, (_, s) => [c.address(s), c.address(s) + (s < 12 ? 7680 : 8192)]).sort(
    (a, b) => a[0] - b[0],
  );
  for (let i = 1; i < ranges.length; i++)
    assert.ok(ranges[i][0] >= ranges[i - 1][1], `slots overlap at ${ranges[i][0]}`);
  assert.ok(ranges[ranges.length - 1][1] <= base + c.bytes);
  // hot positions map to the packed region; a miss takes a cold slot (4 KiB aligned for a direct read)
  assert.equal(c.lookup(1, 3, { hotHits: 0, coldHits: 0, aheadUsed: 0, aheadExact: 0 }), c.hotStart[1] + 3);
  const slot = c.acquire(2, 7);
  assert.ok(slot >= 12 && c.address(slot) % 4096 === 0);
  // unpacked, the old layout
  const u = new NeuronCache(0, 8192, 17, [10, 10, 10], [4, 4, 4]);
  assert.equal(u.address(12), 12 * 8192);
  assert.equal(u.bytes, 17 * 8192);
});

test("a slot read ahead is pinned while its read is in flight: no acquire takes it, whatever the step; per-layer counts add up", () => {
  // 2 layers of 8 neurons, 2 hot each, 4 cold slots
  const c = new NeuronCache(0, 4096, 8, [8, 8], [2, 2]);
  assert.equal(c.coldSlots, 4);
  c.beginStep();
  const early = c.acquire(1, 5, 2);
  c.pin(early);
  assert.equal(c.pinnedCount, 1);
  // later steps take every other cold slot, again and again, never the pinned one
  const seen = new Set<number>();
  for (let step = 0; step < 6; step++) {
    c.beginStep();
    for (let k = 2; k < 5; k++) {
      const pos = ((k + step) % 6) + 2;
      if (c.peek(0, pos) >= 0) continue;
      const s = c.acquire(0, pos);
      if (s < 0) continue;
      assert.notEqual(s, early);
      seen.add(s);
    }
  }
  assert.equal(seen.size, 3);
  assert.equal(c.peek(1, 5), early, "still owned by what was read ahead");
  c.unpin(early);
  assert.equal(c.pinnedCount, 0);
  // its first lookup is a miss served early (exact), not a hit; its next, a cold hit
  c.beginStep();
  const counts = { hotHits: 0, coldHits: 0, aheadUsed: 0, aheadExact: 0 };
  assert.equal(c.lookup(1, 5, counts), early);
  assert.equal(c.lookup(1, 0, counts), c.hotStart[1]);
  assert.equal(c.lookup(1, 6, counts), -1);
  assert.deepEqual(counts, { hotHits: 1, coldHits: 0, aheadUsed: 1, aheadExact: 1 });
  assert.equal(c.lookup(1, 5, counts), early);
  assert.deepEqual(counts, { hotHits: 1, coldHits: 1, aheadUsed: 1, aheadExact: 1 });
  // the slot is an ordinary cold slot now; a pinned one whose read failed goes back too
  const failed = c.acquire(1, 7, 1);
  c.pin(failed);
  c.release(failed);
  assert.equal(c.pinnedCount, 0);
  assert.equal(c.peek(1, 7), -1);
  c.beginStep();
  assert.equal(c.acquire(0, 7), failed, "a released slot is the next one taken");
});

test("a bundle that follows the one just acquired on flash gets the next slot where it can be taken, so their reads coalesce; never a slot in use, in flight or read ahead", () => {
  // 1 layer x 20 neurons, 2 hot, 8 cold slots (2..9)
  const c = new NeuronCache(0, 4096, 10, [20], [2]);
  const counts = { hotHits: 0, coldHits: 0, aheadUsed: 0, aheadExact: 0 };
  // positions 3..10 read ahead into slots 2..9, then used in the order 3, 10, 9, ..., 4: the LRU
  // list, least recent first, is slots 2, 9, 8, ..., 3 (no longer the address order)
  for (let pos = 3; pos <= 10; pos++) c.pin(c.acquire(0, pos, 1));
  for (let s = 2; s <= 9; s++) c.unpin(s);
  for (const pos of [3, 10, 9, 8, 7, 6, 5, 4]) c.lookup(0, pos, counts);
  c.beginStep();
  const a = c.acquire(0, 11);
  assert.equal(a, 2, "the LRU tail");
  assert.equal(c.acquire(0, 12, false, a), 3, "12 follows 11 on flash: the slot after 11's, not the LRU tail (9)");
  assert.equal(c.acquire(0, 15), 9, "without `after`: the LRU tail");
  assert.equal(c.acquire(0, 16, false, 2), 8, "the slot after 2 is in use this step: the LRU tail");
  assert.equal(c.acquire(0, 17, false, 1), 7, "after a hot slot: the LRU tail");
  // a slot whose read is in flight, or that holds a bundle read ahead and not yet used, is not taken
  c.beginStep();
  const e = c.acquire(0, 18, 1);
  assert.equal(e, 6);
  c.pin(e);
  assert.notEqual(c.acquire(0, 19, false, 5), e);
  c.unpin(e);
  c.beginStep();
  assert.notEqual(c.acquire(0, 13, false, 5), e, "a bundle read ahead and not yet looked up keeps its slot");
});
