import { test } from "node:test";
import assert from "node:assert/strict";
import { Sampler, SAMPLER_DEFAULTS, Xoshiro128 } from "../src/generate/sampler.js";

const f32 = (a: number[]) => Float32Array.from(a);

/** Empirical frequency of each token over `draws` samples. */
function histogram(s: Sampler, logits: Float32Array, draws: number): number[] {
  const h = new Array(logits.length).fill(0);
  for (let i = 0; i < draws; i++) h[s.sample(logits)]++;
  return h;
}

function softmax(l: number[], t = 1): number[] {
  const m = Math.max(...l);
  const e = l.map((v) => Math.exp((v - m) / t));
  const s = e.reduce((a, b) => a + b, 0);
  return e.map((v) => v / s);
}

/** Pearson chi-square of observed counts against expected probabilities (zero-probability cells must be empty). */
function chiSquare(h: number[], p: number[], draws: number): number {
  let chi = 0;
  for (let i = 0; i < h.length; i++) {
    if (p[i] === 0) {
      assert.equal(h[i], 0, `token ${i} has probability 0 but was drawn ${h[i]} times`);
      continue;
    }
    const e = p[i] * draws;
    chi += (h[i] - e) ** 2 / e;
  }
  return chi;
}

test("defaults are llama-server's", () => {
  const s = new Sampler({ seed: 1 });
  assert.equal(s.temperature, 0.8);
  assert.equal(s.topK, 40);
  assert.equal(s.topP, 0.95);
  assert.equal(s.minP, 0.05);
  assert.equal(s.repeatPenalty, 1);
  assert.equal(s.repeatLastN, 64);
  assert.equal(SAMPLER_DEFAULTS.temperature, 0.8);
});

test("greedy picks the argmax, ties to the lowest id", () => {
  const s = new Sampler({ temperature: 0 });
  assert.equal(s.sample(f32([0.1, 3, -1, 2.9])), 1);
  assert.equal(s.sample(f32([1, 5, 5, 2])), 1);
  assert.equal(s.sample(f32([-Infinity, -Infinity, -7, -Infinity])), 2);
  assert.equal(s.sample(f32([NaN, 0, NaN, 1])), 3);
  assert.throws(() => s.sample(f32([-Infinity, -Infinity, -Infinity, -Infinity])), /-Infinity/);
});

test("the logits passed in are not modified", () => {
  const s = new Sampler({ seed: 3, repeatPenalty: 2 });
  s.accept(0);
  const l = f32([2, 1, 0, -1]);
  s.sample(l);
  assert.deepEqual([...l], [2, 1, 0, -1]);
});

test("top_k keeps exactly the k best (ties by lowest id)", () => {
  // temperature huge -> near-uniform over the survivors, so every survivor shows up
  const s = new Sampler({ seed: 7, topK: 3, topP: 1, minP: 0, temperature: 1e6 });
  const logits = f32([0, 5, 1, 5, 4, 5, 3, 2]); // best 3: ids 1, 3, 5 (all 5)
  const h = histogram(s, logits, 3000);
  assert.deepEqual(
    h.map((c, i) => (c > 0 ? i : -1)).filter((i) => i >= 0),
    [1, 3, 5],
  );
  const s2 = new Sampler({ seed: 7, topK: 2, topP: 1, minP: 0, temperature: 1e6 });
  const h2 = histogram(s2, logits, 2000);
  assert.deepEqual(
    h2.map((c, i) => (c > 0 ? i : -1)).filter((i) => i >= 0),
    [1, 3],
  );
});

test("top_k selection matches a full sort on random logits", () => {
  const rng = new Xoshiro128(99);
  for (const [n, k] of [
    [1000, 40],
    [517, 1],
    [64, 63],
    [2000, 500],
  ]) {
    const logits = new Float32Array(n);
    // coarse values so that ties are frequent
    for (let i = 0; i < n; i++) logits[i] = Math.floor(rng.nextFloat() * 50);
    const expected = [...logits.keys()].sort((a, b) => logits[b] - logits[a] || a - b).slice(0, k);
    const s = new Sampler({ seed: 1, topK: k, topP: 1, minP: 0, temperature: 1e9 });
    const seen = new Set<number>();
    for (let i = 0; i < 40 * k; i++) seen.add(s.sample(logits));
    for (const t of seen) assert.ok(expected.includes(t), `n=${n} k=${k}: token ${t} is outside the top k`);
    assert.ok(seen.size > k * 0.9, `n=${n} k=${k}: only ${seen.size} distinct tokens drawn`);
  }
});

test("top_p keeps the smallest prefix reaching p of the temperature-1 distribution", () => {
  // probabilities 0.5, 0.25, 0.125, 0.0625, 0.0625
  const logits = f32([Math.log(0.5), Math.log(0.25), Math.log(0.125), Math.log(0.0625), Math.log(0.0625)]);
  const survivors = (p: number, temperature = 1e6) => {
    const s = new Sampler({ seed: 11, topK: 0, topP: p, minP: 0, temperature });
    const h = histogram(s, logits, 4000);
    return h.map((c, i) => (c > 0 ? i : -1)).filter((i) => i >= 0);
  };
  assert.deepEqual(survivors(0.5), [0]);
  assert.deepEqual(survivors(0.6), [0, 1]);
  assert.deepEqual(survivors(0.74), [0, 1]);
  assert.deepEqual(survivors(0.8), [0, 1, 2]);
  assert.deepEqual(survivors(1), [0, 1, 2, 3, 4]);
  // top_p is computed before temperature: a high temperature does not widen the cut
  assert.deepEqual(survivors(0.6, 1e6), [0, 1]);
});

test("top_p without top_k on a large vocabulary matches a reference cut", () => {
  const rng = new Xoshiro128(321);
  for (const [n, spread, p] of [
    [3000, 40, 0.9],
    [3000, 12, 0.9],
    [3000, 2, 0.5],
    [1500, 0.01, 0.95],
  ] as const) {
    const logits = new Float32Array(n);
    for (let i = 0; i < n; i++) logits[i] = (rng.nextFloat() - 0.5) * spread;
    logits[17] = logits[18] = 5; // a tie
    const order = [...logits.keys()].sort((a, b) => logits[b] - logits[a] || a - b);
    const max = logits[order[0]];
    const total = order.reduce((acc, i) => acc + Math.exp(logits[i] - max), 0);
    let cum = 0,
      keep = 0;
    while (cum < p * total) cum += Math.exp(logits[order[keep++]] - max);
    const expected = new Set(order.slice(0, keep));
    const s = new Sampler({ seed: 8, topK: 0, topP: p, minP: 0, temperature: 1e9 });
    const seen = new Set<number>();
    for (let i = 0; i < 12 * keep + 50; i++) seen.add(s.sample(logits));
    for (const t of seen) assert.ok(expected.has(t), `n=${n} p=${p}: token ${t} is outside the nucleus of ${keep}`);
    assert.ok(seen.size >= keep * 0.95, `n=${n} p=${p}: ${seen.size} of ${keep} nucleus tokens drawn`);
  }
});

test("min_p drops tokens below min_p times the best probability", () => {
  // relative probabilities 1, 0.5, 0.2, 0.04
  const logits = f32([0, Math.log(0.5), Math.log(0.2), Math.log(0.04)]);
  const survivors = (minP: number) => {
    const s = new Sampler({ seed: 5, topK: 0, topP: 1, minP, temperature: 1e6 });
    const h = histogram(s, logits, 3000);
    return h.map((c, i) => (c > 0 ? i : -1)).filter((i) => i >= 0);
  };
  assert.deepEqual(survivors(0.05), [0, 1, 2]);
  assert.deepEqual(survivors(0.3), [0, 1]);
  assert.deepEqual(survivors(0.01), [0, 1, 2, 3]);
  assert.deepEqual(survivors(1), [0]);
});

test("repeat penalty divides positive and multiplies negative logits of recent tokens", () => {
  const s = new Sampler({ temperature: 0, repeatPenalty: 2, repeatLastN: 2 });
  const logits = f32([3, 2, -1, -1.5]);
  assert.equal(s.sample(logits), 0);
  s.accept(0); // 3 -> 1.5: id 1 (2) wins
  assert.equal(s.sample(logits), 1);
  s.accept(1); // 2 -> 1: id 0 (1.5) wins again
  assert.equal(s.sample(logits), 0);
  s.accept(2); // window is now [1, 2]: id 0 is back to 3
  assert.equal(s.sample(logits), 0);
  // a repeated token is penalised once, not once per occurrence
  const s2 = new Sampler({ temperature: 0, repeatPenalty: 2, repeatLastN: 8 });
  for (let i = 0; i < 5; i++) s2.accept(0);
  assert.equal(s2.sample(f32([3, 1.6])), 1); // 3/2 = 1.5 < 1.6
  assert.equal(s2.sample(f32([3, 1.4])), 0); // 1.5 > 1.4 (it would be 0.09 if applied 5 times)
  // negative logits get more negative
  const s3 = new Sampler({ temperature: 0, repeatPenalty: 2 });
  s3.accept(0);
  assert.equal(s3.sample(f32([-1, -1.5])), 1); // -2 < -1.5
  s3.reset();
  assert.equal(s3.sample(f32([-1, -1.5])), 0);
});

test("frequency and presence penalties subtract per count and once", () => {
  const s = new Sampler({ temperature: 0, frequencyPenalty: 0.5, presencePenalty: 0 });
  s.accept(0);
  s.accept(0);
  assert.equal(s.sample(f32([2, 1.1])), 1); // 2 - 2 * 0.5 = 1 < 1.1
  const s2 = new Sampler({ temperature: 0, presencePenalty: 0.5 });
  s2.accept(0);
  s2.accept(0);
  assert.equal(s2.sample(f32([2, 1.1])), 0); // 2 - 0.5 = 1.5 > 1.1
});

test("same seed, same tokens; another seed, other tokens", () => {
  const n = 300;
  const rng = new Xoshiro128(2024);
  const logits = new Float32Array(n);
  for (let i = 0; i < n; i++) logits[i] = rng.nextFloat() * 4;
  const run = (seed: number) => {
    const s = new Sampler({ seed, topK: 0, topP: 1, minP: 0, temperature: 1 });
    const out: number[] = [];
    for (let i = 0; i < 200; i++) {
      const t = s.sample(logits);
      s.accept(t);
      out.push(t);
    }
    return out;
  };
  assert.deepEqual(run(42), run(42));
  assert.notDeepEqual(run(42), run(43));
  // reset() restarts the stream
  const s = new Sampler({ seed: 9 });
  const a = [s.sample(logits), s.sample(logits), s.sample(logits)];
  s.reset();
  assert.deepEqual([s.sample(logits), s.sample(logits), s.sample(logits)], a);
});

test("draws follow softmax(logits / T) (chi-square)", () => {
  const logits = [1.0, 0.5, 0.0, -0.5, 2.0, 1.5, -1.0, 0.2];
  const draws = 40000;
  // 7 degrees of freedom: P(chi2 > 30) is about 1e-4, a fixed seed makes it reproducible anyway
  for (const T of [1, 0.5, 2]) {
    const s = new Sampler({ seed: 1234 + T * 10, topK: 0, topP: 1, minP: 0, temperature: T });
    const h = histogram(s, f32(logits), draws);
    const chi = chiSquare(h, softmax(logits, T), draws);
    assert.ok(chi < 30, `T=${T}: chi-square ${chi.toFixed(1)} is too large`);
  }
  // with the full default chain the expected distribution is the renormalised survivors
  const s = new Sampler({ seed: 77, topK: 3, topP: 1, minP: 0, temperature: 0.8 });
  const top = [4, 5, 0];
  const p = new Array(logits.length).fill(0);
  const pt = softmax(
    top.map((i) => logits[i]),
    0.8,
  );
  top.forEach((id, j) => (p[id] = pt[j]));
  const h = histogram(s, f32(logits), draws);
  assert.ok(chiSquare(h, p, draws) < 20);
});

test("a biased sampler is caught by the chi-square check (the test can fail)", () => {
  const logits = [1.0, 0.5, 0.0, -0.5];
  const s = new Sampler({ seed: 3, topK: 0, topP: 1, minP: 0, temperature: 1 });
  const h = histogram(s, f32(logits), 20000);
  // the same counts against a wrong temperature must be rejected
  assert.ok(chiSquare(h, softmax(logits, 1.3), 20000) > 30);
});

test("PRNG floats are uniform in [0, 1)", () => {
  const r = new Xoshiro128(5);
  const bins = new Array(16).fill(0);
  let min = 1,
    max = 0;
  for (let i = 0; i < 64000; i++) {
    const x = r.nextFloat();
    min = Math.min(min, x);
    max = Math.max(max, x);
    bins[Math.floor(x * 16)]++;
  }
  assert.ok(min >= 0 && max < 1);
  assert.ok(chiSquare(bins, new Array(16).fill(1 / 16), 64000) < 45);
});

test("bad options and a changed vocabulary are clear errors", () => {
  assert.throws(() => new Sampler({ topP: 1.5 }), /topP/);
  assert.throws(() => new Sampler({ minP: -0.1 }), /minP/);
  assert.throws(() => new Sampler({ repeatPenalty: 0 }), /repeatPenalty/);
  assert.throws(() => new Sampler({ temperature: NaN }), /temperature/);
  assert.throws(() => new Sampler({ seed: 1.5 }), /seed/);
  const s = new Sampler({ seed: 1 });
  s.sample(new Float32Array(10));
  assert.throws(() => s.sample(new Float32Array(11)), /changed/);
});
