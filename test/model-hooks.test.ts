/**
 * The model's hooks for offline tools: the FFN observer (what profiling and predictor training
 * read), logits of every position (perplexity), and per-layer activation thresholds (SiLU
 * sparsity), the same in the dense path and in an offloaded model's gate mode.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { LlamaModel } from "../src/model/model.js";
import { ReferenceModel } from "../src/model/reference.js";
import { GGUFFile } from "../src/format/gguf.js";
import { convertToStore } from "../src/offline/convert.js";
import { maxDiff, SHARED, silu, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const RELU = `${SHARED}/models/relu-stories.gguf`;
const PROMPT = [1, 403, 407, 261, 378, 429, 297, 488, 300, 85];

test("the FFN observer sees the gate and up projections the reference forward pass computes", async () => {
  const model = await LlamaModel.load(STORIES, { threads: 2, contextSize: 32 });
  const { nLayer, nFF } = model.config;
  const seen: Float32Array[][] = []; // [layer][token] act(gate) * up
  let residualRows = 0;
  model.setFFNObserver((o) => {
    assert.equal(o.n, PROMPT.length);
    assert.equal(o.residual.length, o.n * model.config.nEmbd);
    residualRows += o.n;
    const rows: Float32Array[] = [];
    for (let t = 0; t < o.n; t++) {
      const r = new Float32Array(nFF);
      for (let i = 0; i < nFF; i++) r[i] = silu(o.gate[t * nFF + i]) * o.up[t * nFF + i];
      rows.push(r);
    }
    seen[o.layer] = rows;
  });
  model.forward(PROMPT, PROMPT.length, 0);
  model.setFFNObserver(null);
  model.forward([5], 1, PROMPT.length); // no observer: nothing more recorded
  assert.equal(residualRows, nLayer * PROMPT.length);
  await model.dispose();

  const file = GGUFFile.open(STORIES);
  const ref = new ReferenceModel(file, 32);
  let tok = 0;
  let worst = 0;
  ref.onFFN = (l, act) => {
    worst = Math.max(worst, maxDiff(act, seen[l][tok]));
  };
  for (tok = 0; tok < PROMPT.length; tok++) ref.forward(PROMPT[tok], tok);
  file.close();
  assert.ok(worst < 1e-3, `observer vs reference activations: max difference ${worst}`);
});

test("forwardAll gives each position the logits of a token-by-token run", async () => {
  const model = await LlamaModel.load(RELU, { threads: 2, contextSize: 32 });
  const nVocab = model.config.nVocab;
  const all = new Float32Array(PROMPT.length * nVocab);
  model.forwardAll(PROMPT, PROMPT.length, 0, all);
  for (let t = 0; t < PROMPT.length; t++) {
    const one = model.forward([PROMPT[t]], 1, t);
    const d = maxDiff(one, all.subarray(t * nVocab, (t + 1) * nVocab));
    assert.ok(d < 1e-3, `position ${t}: max logit difference ${d}`);
  }
  assert.throws(() => model.forwardAll(PROMPT, PROMPT.length, 0, new Float32Array(10)), /out holds 10 floats/);
  await model.dispose();
});

test("activation thresholds: the dense cut and the offloaded gate mode agree, and the cut really drops neurons", async () => {
  const dir = tempDir();
  const pi = join(dir, "stories.pi");
  await convertToStore({ input: STORIES, output: pi, fsync: false });
  const cut = [0.05, 0.05, 0.05, 0.05, 0.05];

  const plain = await LlamaModel.load(STORIES, { threads: 2, contextSize: 32 });
  const plainLogits = plain.forward(PROMPT, PROMPT.length, 0).slice();
  await plain.dispose();

  const dense = await LlamaModel.load(STORIES, { threads: 2, contextSize: 32, activationThresholds: cut });
  let zero = 0;
  let total = 0;
  dense.setFFNObserver((o) => {
    for (let i = 0; i < o.gate.length; i++) {
      total++;
      if (Math.abs(silu(o.gate[i])) <= 0.05) zero++;
    }
  });
  const denseLogits = dense.forward(PROMPT, PROMPT.length, 0).slice();
  await dense.dispose();
  assert.ok(zero > 0.1 * total, `the cut should zero a real share of activations (${zero} of ${total})`);
  assert.ok(maxDiff(plainLogits, denseLogits) > 1e-3, "the cut changes the logits");

  const off = await LlamaModel.load(pi, {
    threads: 2,
    contextSize: 32,
    activationThresholds: cut,
    offload: { sparsity: "gate", cacheBytes: 1 << 20 },
  });
  const offLogits = (await off.forwardAsync(PROMPT, PROMPT.length, 0)).slice();
  // one token more through the per-token path
  const dense2 = await LlamaModel.load(STORIES, { threads: 2, contextSize: 32, activationThresholds: cut });
  dense2.forward(PROMPT, PROMPT.length, 0);
  const d2 = dense2.forward([42], 1, PROMPT.length).slice();
  const o2 = (await off.forwardAsync([42], 1, PROMPT.length)).slice();
  const s = off.offloaded!.snapshot();
  await off.dispose();
  await dense2.dispose();
  assert.ok(maxDiff(denseLogits, offLogits) < 1e-3, `batched: ${maxDiff(denseLogits, offLogits)}`);
  assert.ok(maxDiff(d2, o2) < 1e-3, `per token: ${maxDiff(d2, o2)}`);
  assert.ok(
    s.neuronsComputed < 0.9 * s.neuronsTotal,
    `gate mode with a cut computes fewer neurons (${s.neuronsComputed} of ${s.neuronsTotal})`,
  );

  await assert.rejects(
    LlamaModel.load(STORIES, { activationThresholds: [0.1, 0.1] }),
    /2 thresholds, the model has 5 layers/,
  );
  await assert.rejects(
    LlamaModel.load(STORIES, { activationThresholds: [0.1, 0.1, -1, 0.1, 0.1] }),
    /threshold of layer 2 is -1/,
  );
});
