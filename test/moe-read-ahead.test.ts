/**
 * The mixture-of-experts runtime from a store under a small neuron cache (a quarter of the
 * experts' bundles), predictor mode: per-expert counters that add up to the totals and follow the
 * routing, and read-ahead (the next routed expert's exact picks while the first computes, the next
 * layer's likely experts after a layer) that leaves the outputs as they were: the reference's ids
 * and logits when every neuron is picked, the same ids and logits as without read-ahead with the
 * trained predictors.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../src/format/gguf.js";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel } from "../src/model/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { writePredictorFile } from "../src/offline/predictor-files.js";
import { modelFingerprint } from "../src/offline/profile.js";
import { trainPredictors } from "../src/offline/train-predictors.js";
import { expertSummary, GROUP_FIELDS, type OffloadStats } from "../src/model/offload/stats.js";
import { runResult } from "../src/cli/run-json.js";
import { expertStatsText } from "../src/cli/expert-stats.js";
import type { GenerationStats } from "../src/generate/generator.js";
import { Tracer } from "../src/runtime/tracer.js";
import { argmax, f32Bytes, greedyAsync, SHARED, tempDir } from "./helpers.js";

const MOE = `${SHARED}/models/moe-stories.gguf`;
const ref = JSON.parse(readFileSync(`${SHARED}/reference/moe-stories.json`, "utf8"));
const dir = tempDir("powerinfer-moe-ra-");

interface Ref {
  prompt_ids: number[];
  greedy_ids: number[];
  logits_first3: number[][];
  expert_ids_per_position: number[][][];
}

let storePath = "";
/** moe-stories with small per-expert predictors (trained briefly: the outputs' exactness does not depend on them) */
async function store(): Promise<string> {
  if (storePath) return storePath;
  const r = await trainPredictors({
    model: MOE,
    corpus: `${SHARED}/data/stories-train.txt`,
    heldout: `${SHARED}/data/stories-heldout.txt`,
    tokens: 6000,
    heldoutTokens: 500,
    epochs: 2,
    minHidden: 64,
    maxHidden: 64,
    threads: 2,
  });
  const src = GGUFFile.open(MOE);
  const model = modelFingerprint(src);
  src.close();
  const predictors = join(dir, "moe.predictors.gguf");
  await writePredictorFile({
    output: predictors,
    predictors: r.predictors,
    model,
    origin: "test",
    experts: 8,
    fsync: false,
  });
  storePath = join(dir, "moe.pi");
  await convertToStore({ input: MOE, output: storePath, predictors, fsync: false });
  return storePath;
}

async function load(
  threads: number,
  lookahead: boolean,
  threshold?: number,
  expertReadAhead?: "both" | "expert" | "layer",
  sparsity: "predictor" | "dense" = "predictor",
  tracer?: Tracer,
): Promise<LlamaModel> {
  const pi = await store();
  const s = NeuronStore.open(pi);
  const allFFN = s.ffn.layers.length * s.ffn.layers[0].neurons * s.ffn.bundleBytes;
  s.close();
  return LlamaModel.load(pi, {
    threads,
    contextSize: 128,
    offload: { sparsity, cacheBytes: Math.floor(allFFN / 4), lookahead, threshold, expertReadAhead, tracer },
    tracer,
  });
}

/** Per-group counters add up to the totals; hit rates in [0, 1]. */
function checkGroups(st: OffloadStats): void {
  const g = st.groups!;
  assert.equal(g.experts, 8);
  const sum = (a: Float64Array) => a.reduce((x, y) => x + y, 0);
  assert.equal(sum(g.steps), st.steps);
  assert.equal(sum(g.neuronsComputed), st.neuronsComputed);
  assert.equal(sum(g.hotHits), st.hotHits);
  assert.equal(sum(g.coldHits), st.coldHits);
  assert.equal(sum(g.misses), st.misses);
  assert.equal(sum(g.readAhead), st.readAhead);
  assert.equal(sum(g.readAheadUsed), st.readAheadUsed);
  const experts = expertSummary(g);
  assert.equal(experts.length, 8);
  assert.ok(Math.abs(experts.reduce((a, e) => a + e.routedShare, 0) - 1) < 1e-9);
  for (const e of experts) {
    assert.ok(e.hitRate >= 0 && e.hitRate <= 1, `expert ${e.expert}: hit rate ${e.hitRate}`);
    assert.ok(e.readAheadUsed <= e.readAhead, `expert ${e.expert}: ${e.readAheadUsed} used of ${e.readAhead}`);
    for (const f of GROUP_FIELDS) assert.ok(g[f].every((v) => v >= 0 && Number.isFinite(v)));
  }
}

for (const threads of [1, 2]) {
  test(`moe-stories, predictor mode picking every neuron, read-ahead on: the reference's ids and logits, per-expert routed counts as the reference routes (${threads} thread(s))`, async () => {
    const model = await load(threads, true, -1e30, "both");
    try {
      assert.ok(model.offloaded!.readsAheadExpert && model.offloaded!.readsAheadLayer);
      const routed = new Float64Array(6 * 8);
      for (const r of (ref.prompts as Ref[]).slice(0, 2)) {
        const { ids, logits } = await greedyAsync(model, r.prompt_ids, r.greedy_ids.length);
        assert.deepEqual(ids, r.greedy_ids);
        for (let k = 0; k < r.logits_first3.length; k++) {
          const want = r.logits_first3[k];
          const scale = Math.max(...want.map(Math.abs));
          let worst = 0;
          for (let i = 0; i < want.length; i++) worst = Math.max(worst, Math.abs(logits[k][i] - want[i]));
          assert.ok(worst <= 1e-3 * scale, `position ${k}: max |diff| ${worst}`);
        }
        // positions run: the prompt and every generated token but the last
        const positions = r.prompt_ids.length + r.greedy_ids.length - 1;
        for (let p = 0; p < positions; p++)
          for (let l = 0; l < 6; l++) for (const e of r.expert_ids_per_position[p][l]) routed[l * 8 + e]++;
      }
      const st = model.offloaded!.snapshot();
      assert.deepEqual(Array.from(st.groups!.steps), Array.from(routed), "tokens routed per (layer, expert)");
      checkGroups(st);
      assert.ok(st.misses > 0 && st.bytesRead > 0, "experts' bundles were read from flash");
      assert.ok(st.readAhead > 0 && st.readAheadUsed > 0, `read ahead ${st.readAhead}, used ${st.readAheadUsed}`);
      assert.ok(st.readAheadUsed <= st.readAhead);
      // the next routed expert's picks on the same input are exact: every bundle read for it is used
      assert.ok(st.readAheadExact! > 0);
      assert.equal(st.readAheadExactUsed, st.readAheadExact);
    } finally {
      await model.dispose();
    }
  });
}

test("moe-stories, trained per-expert predictors: read-ahead (the default, and both kinds) gives the ids and logits of read-ahead off; its counts per expert", async () => {
  const runs: { ids: number[][]; logits: Float32Array[][]; st: OffloadStats }[] = [];
  for (const [lookahead, kind] of [
    [false, undefined],
    [true, undefined],
    [true, "both"],
  ] as const) {
    const model = await load(2, lookahead, undefined, kind);
    try {
      const ids: number[][] = [];
      const logits: Float32Array[][] = [];
      for (const r of ref.prompts as Ref[]) {
        const g = await greedyAsync(model, r.prompt_ids, 32);
        ids.push(g.ids);
        logits.push(g.logits);
      }
      runs.push({ ids, logits, st: model.offloaded!.snapshot() });
    } finally {
      await model.dispose();
    }
  }
  const [off, on, both] = runs;
  for (const on of [runs[1], both]) {
    assert.deepEqual(on.ids, off.ids);
    // The same neurons, summed in the same fixed order whenever their bundles came in
    // (src/model/offload/fixed-order.ts): the same logits, bit for bit, and so the same picks.
    for (let p = 0; p < on.logits.length; p++)
      for (let k = 0; k < on.logits[p].length; k++)
        assert.ok(
          Buffer.compare(f32Bytes(on.logits[p][k]), f32Bytes(off.logits[p][k])) === 0,
          `prompt ${p} position ${k}: the logits differ in their bits`,
        );
    assert.deepEqual(Array.from(on.st.groups!.steps), Array.from(off.st.groups!.steps), "the same routing");
    assert.equal(on.st.neuronsComputed, off.st.neuronsComputed);
    checkGroups(on.st);
    assert.ok(on.st.readAhead > 0 && on.st.readAheadUsed > 0 && on.st.readAheadUsed <= on.st.readAhead);
    assert.ok(on.st.readAheadExact! > 0);
    assert.equal(on.st.readAheadExactUsed, on.st.readAheadExact);
  }
  assert.equal(off.st.readAhead, 0);
  checkGroups(off.st);
  // the default reads ahead the next routed expert only: nothing for nothing, no more bundles read than without
  assert.equal(on.st.readAhead, on.st.readAheadExact);
  // (within 1%: a miss is given the slot next to its flash neighbour's when it can be, so which
  // slot a miss evicts depends on the order the reads were issued in; NeuronCache.takable)
  assert.ok(
    Math.abs(on.st.misses - off.st.misses) <= 0.01 * off.st.misses,
    `misses ${on.st.misses} vs ${off.st.misses}`,
  );
  // both: the next layer's likely experts too, issued and partly used (the router on the residual before the next attention)
  assert.ok(both.st.readAhead - both.st.readAheadExact! > 0);
  assert.ok(both.st.readAheadUsed - both.st.readAheadExactUsed! > 0);
  // run --json: per expert and per layer x expert; run --stats-experts: the table
  const moe = runResult("", [], {} as GenerationStats, on.st).stats.moe!;
  assert.equal(moe.experts.length, 8);
  assert.equal(moe.layers.length, 6);
  for (const L of moe.layers) assert.equal(L.routed.length, 8);
  assert.equal(
    moe.layers.reduce((a, L) => a + L.routed.reduce((x, y) => x + y, 0), 0),
    on.st.steps,
  );
  const text = expertStatsText(on.st.groups!, true).split("\n");
  assert.match(text[0], /^experts \(summed over 6 layers\)/);
  assert.equal(text.filter((l) => /^ +\d+ +[\d.]+% +hit +[\d.]+%/.test(l)).length, 8, "a line per expert");
  assert.equal(text.filter((l) => /^ +\d+ +(\d+ \/ ([\d.]+%|-) *){8}$/.test(l)).length, 6, "a row per layer");
  console.log(
    `read-ahead: default ${on.st.readAheadExact} exact (next routed expert), all used; both: ` +
      `${both.st.readAhead - both.st.readAheadExact!} for the next layer's likely experts, ` +
      `${both.st.readAheadUsed - both.st.readAheadExactUsed!} used; bundles read ${off.st.misses} without, ${on.st.misses} default, ${both.st.misses} both`,
  );
});

test("moe-stories read-ahead (both kinds) with failing reads: an error naming the file, never a token from a slot whose read failed; the step again gives the clean run's tokens", async () => {
  const pi = await store();
  const s = NeuronStore.open(pi);
  const allFFN = s.ffn.layers.length * s.ffn.layers[0].neurons * s.ffn.bundleBytes;
  s.close();
  const prompt = (ref.prompts as Ref[])[1].prompt_ids;
  /** prompt, then 4 greedy tokens; reads fail while `fail()` says so once armed (after the prompt); a failed step is run again with reads working */
  const run = async (fail: () => boolean): Promise<{ ids: number[]; failures: number }> => {
    let armed = false;
    const model = await LlamaModel.load(pi, {
      threads: 1,
      contextSize: 64,
      offload: {
        sparsity: "predictor",
        cacheBytes: Math.floor(allFFN / 4),
        expertReadAhead: "both",
        fault: () => (armed && fail() ? Object.assign(new Error("EIO: i/o error"), { code: "EIO" }) : null),
      },
    });
    const ids: number[] = [];
    let failures = 0;
    try {
      let logits = await model.forwardAsync(prompt, prompt.length, 0);
      armed = true;
      for (let i = 0; i < 4; i++) {
        ids.push(argmax(logits));
        try {
          logits = await model.forwardAsync([ids[i]], 1, prompt.length + i);
        } catch (e) {
          assert.match(String(e), /moe\.pi.*EIO|EIO.*moe\.pi/s);
          failures++;
          armed = false;
          logits = await model.forwardAsync([ids[i]], 1, prompt.length + i);
        }
      }
      ids.push(argmax(logits));
    } finally {
      await model.dispose();
    }
    return { ids, failures };
  };
  let reads = 0;
  const clean = await run(() => (reads++, false));
  assert.equal(clean.failures, 0);
  assert.ok(reads > 100, `${reads} reads`);
  for (let i = 0; i < 6; i++) {
    const k = 1 + Math.floor((i * (reads - 1)) / 5);
    let n = 0;
    const got = await run(() => ++n >= k);
    assert.equal(got.failures, 1, `reads ${k}.. of ${reads} failed`);
    assert.deepEqual(got.ids, clean.ids, `reads ${k}.. of ${reads} failed, then the step ran again`);
  }
});

test("moe-stories in dense mode: each token's routed experts are read ahead all at once when the layer has routed (every bundle not in memory, all used), and the ids and logits are the reference's", async () => {
  const file = join(dir, "dense-trace.json");
  const tracer = new Tracer(file, "moe-dense");
  const model = await load(2, true, undefined, undefined, "dense", tracer);
  const r = (ref.prompts as Ref[])[0];
  let st: OffloadStats;
  try {
    const { ids, logits } = await greedyAsync(model, r.prompt_ids, r.greedy_ids.length);
    assert.deepEqual(ids, r.greedy_ids);
    const want = r.logits_first3[0];
    const scale = Math.max(...want.map(Math.abs));
    for (let i = 0; i < want.length; i++) assert.ok(Math.abs(logits[0][i] - want[i]) <= 1e-3 * scale);
    st = model.offloaded!.snapshot();
  } finally {
    await model.dispose();
    tracer.close();
  }
  assert.equal(st.neuronsComputed, st.neuronsTotal, "dense mode computes every neuron");
  assert.ok(st.readAheadExact! > 0 && st.readAheadExactUsed === st.readAheadExact, "every bundle read ahead is used");
  type Event = { name: string; ph: string; args?: Record<string, number> };
  const spans = (JSON.parse(readFileSync(file, "utf8")) as Event[]).filter((e) => e.ph === "X");
  const upfront = spans.filter((e) => e.name === "read-ahead exact");
  // one per decoded token and layer, for the token's two routed experts at once
  assert.equal(upfront.length, (r.greedy_ids.length - 1) * 6);
  assert.ok(upfront.every((e) => e.args!.experts === 2));
  assert.ok(upfront.some((e) => e.args!.bundles > 0));
});
