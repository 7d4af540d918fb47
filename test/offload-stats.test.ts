/**
 * The offloaded FFN's figures, derived in one place (src/model/offload/stats.ts): the difference
 * of two snapshots, per group too, and the hit rate and computed share every report shows.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { newGroupStats, newStats, offloadFigures, statsSince } from "../src/model/offload/stats.js";

test("statsSince: every total and every group's counter as after minus before", () => {
  const before = {
    ...newStats(),
    steps: 4,
    neuronsTotal: 400,
    neuronsComputed: 100,
    hotHits: 30,
    coldHits: 10,
    misses: 60,
  };
  before.groups = newGroupStats(2, 0);
  before.groups.misses.set([20, 40]);
  const after = {
    ...before,
    steps: 6,
    neuronsTotal: 600,
    neuronsComputed: 180,
    hotHits: 50,
    coldHits: 20,
    misses: 70,
    bytesRead: 4096,
  };
  after.groups = newGroupStats(2, 0);
  after.groups.misses.set([25, 45]);
  const d = statsSince(before, after);
  assert.deepEqual(
    [d.steps, d.neuronsTotal, d.neuronsComputed, d.hotHits, d.coldHits, d.misses, d.bytesRead],
    [2, 200, 80, 20, 10, 10, 4096],
  );
  assert.deepEqual([...d.groups!.misses], [5, 5]);
  assert.deepEqual([...after.groups.misses], [25, 45], "the snapshots are left as they were");
});

test("offloadFigures: hits over lookups and computed over total, 0 when nothing ran", () => {
  const f = offloadFigures({ hotHits: 30, coldHits: 10, misses: 60, neuronsComputed: 100, neuronsTotal: 400 });
  assert.deepEqual(f, { hits: 40, lookups: 100, hitRate: 0.4, computedShare: 0.25 });
  assert.deepEqual(offloadFigures(newStats()), { hits: 0, lookups: 0, hitRate: 0, computedShare: 0 });
});
