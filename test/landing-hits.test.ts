/**
 * Landing hits (predictor mode) in the fixed summation order: a step picks before the reads ahead
 * for its layer have landed. A pick whose slot is still being read (pinned) is never computed
 * over a half-read bundle, and the neurons after it in its segment wait for it (the order of the
 * sums does not depend on what landed when); one whose read failed (its slot released) is read
 * again, in its turn.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { NeuronCache } from "../src/io/neuron-cache.js";
import { Arena } from "../src/runtime/arena.js";
import { SUM_SEGMENTS, type SparseFFN } from "../src/runtime/sparse-kernels.js";
import { NeuronLists } from "../src/model/offload/neuron-lists.js";
import { beginFFNStep, newFFNStep, type FFNStep } from "../src/model/offload/ffn-step.js";
import { FixedOrder } from "../src/model/offload/fixed-order.js";

/**
 * One layer of 64 neurons (segments of 4), 2 hot, 5 cold slots; a sparse FFN whose kernel records
 * the bundle addresses each wave gives it, per segment.
 */
function setup() {
  const arena = new Arena();
  const cache = new NeuronCache(arena.alloc(7 * 4096, 4096), 4096, 7, [64], [2]);
  const items = arena.alloc(12 * SUM_SEGMENTS, 64);
  const computed: [number, number][] = [];
  let lists: NeuronLists;
  const sparse = {
    items,
    segments: (list: number, _gates: number, nItems: number) => {
      for (let i = 0; i < nItems; i++) {
        const [from, to, seg] = lists.i32.subarray((items >>> 2) + 3 * i, (items >>> 2) + 3 * i + 3);
        for (let k = from; k < to; k++) computed.push([seg, lists.i32[(list >>> 2) + k]]);
      }
    },
  } as unknown as SparseFFN;
  const order = new FixedOrder(64, sparse, cache, "relu", true);
  lists = new NeuronLists(arena, 64, cache, "relu", "predictor", order);
  lists.takeViews(arena);
  const wave = (step: FFNStep) => order.wave(step, lists.hitList, lists.hitGates, lists.i32, lists.f32);
  /** a step of layer 0 begun, as OffloadedFFN begins one */
  const begin = () => {
    order.begin();
    return beginFFNStep(newFFNStep(), 0, 0, 1);
  };
  return { cache, lists, order, wave, begin, computed };
}

test("landing hits: picks in slots still being read wait for them, and so do the neurons after them in their segment", () => {
  const { cache, lists, order, wave, begin, computed } = setup();
  assert.equal(order.segSize, 4);
  // read ahead: positions 5 and 6 in flight, 7 and 9 landed earlier
  const s5 = cache.acquire(0, 5, 1),
    s6 = cache.acquire(0, 6, 1),
    s7 = cache.acquire(0, 7, 1),
    s9 = cache.acquire(0, 9, 1);
  cache.pin(s5);
  cache.pin(s6);
  const step = begin();
  cache.beginStep();
  for (const k of [0, 5, 6, 7, 8, 9]) lists.file(step, k, 1);
  step.filedBelow = 64;
  assert.equal(step.hits, 3, "hot 0, landed 7 and 9 are hits");
  assert.deepEqual([step.landing, step.misses], [2, 1]);
  assert.equal(lists.missPos[0], 8);
  // only hot 0 (segment 0) computes: 7 waits behind 5 and 6 (segment 1), 9 behind the miss 8 (segment 2)
  assert.equal(wave(step), 1);
  assert.deepEqual(computed, [[0, cache.address(cache.peek(0, 0))]]);
  assert.equal(order.done(step), false);

  // 5's read lands, 6's fails (its slot released): 5 computes, 7 still waits behind 6
  computed.length = 0;
  cache.unpin(s5);
  cache.release(s6);
  assert.equal(wave(step), 1);
  assert.deepEqual(computed, [[1, cache.address(s5)]]);
  const out = new Int32Array(64);
  assert.deepEqual(
    Array.from(out.subarray(0, order.needed(step, out))),
    [6, 8],
    "the failed read's pick is read again, in order",
  );

  // 6 and 8 read: the rest computes, each segment in position order
  computed.length = 0;
  const s6b = cache.acquire(0, 6),
    s8 = cache.acquire(0, 8);
  assert.equal(wave(step), 4);
  assert.deepEqual(computed, [
    [1, cache.address(s6b)],
    [1, cache.address(s7)],
    [2, cache.address(s8)],
    [2, cache.address(s9)],
  ]);
  assert.equal(order.done(step), true);
});

test("fixed order: a wave stops at what the gate source has not filed yet", () => {
  const { cache, lists, order, wave, begin, computed } = setup();
  const step = begin();
  cache.beginStep();
  lists.file(step, 0, 1);
  lists.file(step, 1, 1);
  step.filedBelow = 1;
  assert.equal(wave(step), 1, "position 1 is past what was filed");
  step.filedBelow = 64;
  assert.equal(wave(step), 1);
  assert.deepEqual(
    computed.map(([s]) => s),
    [0, 0],
  );
  assert.equal(order.done(step), true);
});
