/**
 * Per-expert activation predictors on moe-stories (8 dReLU experts, top-2): training one per
 * (layer, expert) on the tokens routed to it, a predictors-only file put into a store by
 * convert, predictor mode from that store against the store's dense mode, and predictor files
 * made for another number of experts.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { GGUFFile } from "../src/format/gguf.js";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel } from "../src/model/model.js";
import { BUDGET_ROOM } from "../src/model/offload/layout.js";
import { convertToStore } from "../src/offline/convert.js";
import { corpusTokens, readCorpus } from "../src/offline/corpus.js";
import { perplexity } from "../src/offline/perplexity.js";
import { PREDICTOR_EXPERTS_KEY } from "../src/model/offload/predictor.js";
import { writePredictorFile } from "../src/offline/predictor-files.js";
import { modelFingerprint } from "../src/offline/profile.js";
import { trainPredictors } from "../src/offline/train-predictors.js";
import { Tokenizer } from "../src/tokenizer/index.js";
import { SHARED, tempDir } from "./helpers.js";
import { rewrite } from "./rewrite.js";

const MOE = `${SHARED}/models/moe-stories.gguf`;
const TRAIN = `${SHARED}/data/stories-train.txt`;
const HELDOUT = `${SHARED}/data/stories-heldout.txt`;
const dir = tempDir("powerinfer-moe-pred-");

test("per-expert predictors: trained on each expert's routed tokens, written, converted into a store, run in predictor mode", async () => {
  const r = await trainPredictors({
    model: MOE,
    corpus: TRAIN,
    heldout: HELDOUT,
    tokens: 12000,
    heldoutTokens: 1000,
    epochs: 4,
    minHidden: 64,
    maxHidden: 64,
    threads: 2,
  });
  assert.equal(r.criterion, "gate > 0 and up > 0");
  assert.equal(r.layers.length, 48);
  // a mixture's default margin is wider: 0.95 + 2/5 of 0.05
  assert.ok(Math.abs(r.calibrationRecall - 0.97) < 1e-12);
  for (let l = 0; l < 6; l++) {
    const experts = r.layers.slice(l * 8, l * 8 + 8);
    assert.deepEqual(
      experts.map((L) => [L.layer, L.expert]),
      [0, 1, 2, 3, 4, 5, 6, 7].map((e) => [l, e]),
    );
    // every training token is routed to 2 experts
    const samples = experts.reduce((a, L) => a + L.samples!, 0);
    assert.equal(samples, 2 * (r.tokens.train + r.tokens.validation), `layer ${l}`);
  }
  for (const L of r.layers) {
    const what = `layer ${L.layer} expert ${L.expert}`;
    // calibrated on a few hundred routed tokens: within a few points on unseen text
    assert.ok(L.heldout.recall >= 0.9, `${what}: held-out recall ${L.heldout.recall}`);
    // better than choosing neurons blindly (precision = the true active share); 2-3 thousand
    // samples per expert make weak predictors (the default budget gives each ~15 thousand)
    assert.ok(
      L.heldout.precision >= 1.3 * L.heldout.trueShare,
      `${what}: precision ${L.heldout.precision} vs true active share ${L.heldout.trueShare}`,
    );
  }

  const src = GGUFFile.open(MOE);
  const fingerprint = modelFingerprint(src);
  src.close();
  const predFile = join(dir, "moe.predictors.gguf");
  await writePredictorFile({
    output: predFile,
    predictors: r.predictors,
    model: fingerprint,
    origin: "test",
    experts: 8,
    fsync: false,
  });
  const pi = join(dir, "moe.pi");
  const conv = await convertToStore({ input: MOE, output: pi, predictors: predFile, fsync: false });
  assert.equal(conv.layers, 6);
  assert.equal(conv.experts, 8);
  assert.equal(conv.predictorGroups, 48);
  const s = NeuronStore.open(pi);
  assert.ok(s.tensors.has("blk.5.fc1.7.weight") && s.tensors.has("blk.5.fc2.7.weight"));
  const allFFN = s.ffn.layers.length * s.ffn.layers[0].neurons * s.ffn.bundleBytes;
  s.close();

  // predictor mode vs the store's dense mode on the same held-out chunks, a quarter of the
  // experts' bundles in memory
  const tok = Tokenizer.fromGGUF(GGUFFile.open(MOE));
  const ids = corpusTokens(tok, readCorpus(HELDOUT), { maxTokens: 1024 });
  const ppl: Record<string, number> = {};
  for (const sparsity of ["dense", "predictor"] as const) {
    const fixed = (await LlamaModel.layoutOf(pi, { threads: 2, contextSize: 128, offload: { sparsity } })).fixed;
    const model = await LlamaModel.load(pi, {
      threads: 2,
      contextSize: 128,
      memoryBudget: Math.ceil((fixed + allFFN / 4) / BUDGET_ROOM),
      offload: { sparsity },
    });
    try {
      assert.equal(model.offloaded!.mode, sparsity);
      const p = await perplexity(model, ids, { contextSize: 128, chunks: 6, bos: tok.bosId });
      ppl[sparsity] = p.ppl;
      const st = model.offloaded!.snapshot();
      if (sparsity === "predictor")
        // the predictors choose: a routed expert's likely neurons, not all of them
        assert.ok(st.neuronsComputed < 0.3 * st.neuronsTotal, `${st.neuronsComputed} of ${st.neuronsTotal} computed`);
    } finally {
      await model.dispose();
    }
  }
  const rel = ppl.predictor / ppl.dense - 1;
  console.log(
    `moe-stories, small per-expert predictors: perplexity ${ppl.predictor} vs dense ${ppl.dense} (${(100 * rel).toFixed(2)}%)`,
  );
  assert.ok(Math.abs(rel) < 0.03, `predictor perplexity ${ppl.predictor} vs dense ${ppl.dense}`);

  // predictors made for another number of experts: refused by convert, naming file, tensor, field
  const refused = async (name: string, r: Parameters<typeof rewrite>[2], pattern: RegExp) => {
    const bad = await rewrite(predFile, name, r);
    await assert.rejects(
      convertToStore({ input: MOE, output: join(dir, `${name}.pi`), predictors: bad, fsync: false }),
      (e: Error) => {
        assert.match(e.message, new RegExp(`${name}\\.gguf`), "names the file");
        assert.match(e.message, pattern);
        return true;
      },
    );
  };
  await refused(
    "experts-key",
    { metadata: { [PREDICTOR_EXPERTS_KEY]: 4 } },
    /metadata powerinfer\.predictors\.experts = 4: predictors for 4 experts per layer, but the model has 8 \(llama\.expert_count\)/,
  );
  await refused(
    "ninth-expert",
    { tensors: () => new Map([["blk.0.fc1.8.weight", [[256, 64], new Float32Array(256 * 64)]]]) },
    /tensor blk\.0\.fc1\.8\.weight is the predictor of expert 8, but the model has 8 experts per layer \(llama\.expert_count\)/,
  );
  await refused(
    "layer-predictor",
    { tensors: () => new Map([["blk.2.fc1.weight", [[256, 64], new Float32Array(256 * 64)]]]) },
    /tensor blk\.2\.fc1\.weight is a whole layer's predictor, but the model is a mixture of 8 experts/,
  );
});
