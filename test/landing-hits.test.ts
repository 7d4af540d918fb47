/**
 * Landing hits (predictor mode): a step picks before the reads ahead for its layer have landed.
 * A pick whose slot is still being read (pinned) is filed apart and computed only after the reads
 * land; one whose read failed (its slot released) is read again as a miss; a slot still pinned
 * then is an error, never a computation over a half-read bundle.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { NeuronCache } from "../src/io/neuron-cache.js";
import { Arena } from "../src/runtime/arena.js";
import type { FlashReader } from "../src/io/flash-reader.js";
import type { SparseFFN } from "../src/runtime/sparse-kernels.js";
import { NeuronLists } from "../src/model/offload/neuron-lists.js";
import { NeuronCompute } from "../src/model/offload/neuron-compute.js";
import { newStats } from "../src/model/offload/stats.js";

/** One layer of 10 neurons, 2 hot, 5 cold slots; a compute whose kernel records the bundle addresses it is given. */
function setup() {
  const arena = new Arena();
  const cache = new NeuronCache(arena.alloc(7 * 4096, 4096), 4096, 7, [10], [2]);
  const lists = new NeuronLists(arena, 10, cache, "relu", "predictor");
  lists.takeViews(arena);
  const computed: number[] = [];
  const sparse = {
    ffn: (list: number, count: number) => {
      for (let i = 0; i < count; i++) computed.push(lists.i32[(list >>> 2) + i]);
    },
  } as unknown as SparseFFN;
  const compute = new NeuronCompute(sparse, cache, {} as FlashReader, "relu", true, newStats());
  return { cache, lists, compute, computed };
}

test("landing hits: picks in slots still being read wait for them; a failed read's pick becomes a miss", () => {
  const { cache, lists, compute, computed } = setup();
  // read ahead: positions 5 and 6 in flight, 7 landed earlier
  const s5 = cache.acquire(0, 5, 1),
    s6 = cache.acquire(0, 6, 1),
    s7 = cache.acquire(0, 7, 1);
  cache.pin(s5);
  cache.pin(s6);
  lists.begin(0, 0);
  cache.beginStep();
  for (const k of [0, 5, 6, 7, 8]) lists.file(k, 1);
  assert.equal(lists.hits, 2, "hot 0 and landed 7 are hits");
  assert.deepEqual([lists.landing, lists.misses], [2, 1]);
  assert.deepEqual(Array.from(lists.landingPos.subarray(0, 2)), [5, 6]);
  assert.equal(lists.missPos[0], 8);
  // a slot still being read is never computed
  assert.throws(() => compute.landed(lists), /still being read/);
  assert.deepEqual(computed, []);

  // again: 5's read lands, 6's fails (its slot released)
  lists.begin(0, 0);
  cache.beginStep();
  for (const k of [0, 5, 6, 7, 8]) lists.file(k, 1);
  cache.unpin(s5);
  cache.release(s6);
  compute.landed(lists);
  assert.deepEqual(computed, [cache.address(s5)], "only the landed bundle is computed");
  assert.equal(lists.landing, 0);
  assert.deepEqual(
    Array.from(lists.missPos.subarray(0, lists.misses)),
    [8, 6],
    "the failed read's pick is read as a miss",
  );
  assert.ok(cache.peek(0, 7) === s7);
});
