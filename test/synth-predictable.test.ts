/**
 * Predictable synthetic models (`synth --act relu --sparsity S --gate-rank R`): gate rows drawn
 * from a low-dimensional subspace, so a small predictor can tell which neurons fire, and the
 * predictor the construction implies. The tests measure the planted predictors against the
 * neurons that really fire in a dense run, carry them into a store with `convert --predictors`,
 * and run predictor mode under a small cache against the store's dense run.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../src/format/gguf.js";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel } from "../src/model/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { PREDICTOR_MODEL_KEY } from "../src/offline/predictor-files.js";
import { synthesize, type PlantedPredictor, type SynthType } from "../src/offline/synth.js";
import { CLI, greedyAsync, randomTokens, tempDir } from "./helpers.js";

const dir = tempDir("synth-predictable-");

interface Counts {
  tp: number;
  fp: number;
  fn: number;
  fired: number;
  all: number;
}

/** Run the dense model over random tokens; count the planted predictors' calls against the real gates. */
async function score(path: string, predictors: PlantedPredictor[], tokens: number): Promise<Counts[]> {
  const model = await LlamaModel.load(path, { threads: 2, contextSize: tokens });
  const counts = predictors.map(() => ({ tp: 0, fp: 0, fn: 0, fired: 0, all: 0 }));
  try {
    const { nEmbd, nFF, nVocab } = model.config;
    model.setFFNObserver((o) => {
      const p = predictors[o.layer];
      const c = counts[o.layer];
      const h = new Float64Array(p.hidden);
      for (let t = 0; t < o.n; t++) {
        // the predictor reads the residual before the FFN norm, in plain f64 arithmetic here
        for (let k = 0; k < p.hidden; k++) {
          let s = 0;
          for (let j = 0; j < nEmbd; j++) s += p.fc1[k * nEmbd + j] * o.residual[t * nEmbd + j];
          h[k] = s > 0 ? s : 0;
        }
        for (let i = 0; i < nFF; i++) {
          let s = 0;
          for (let k = 0; k < p.hidden; k++) s += p.fc2[i * p.hidden + k] * h[k];
          const fires = o.gate[t * nFF + i] > 0;
          const said = s > p.threshold;
          if (fires && said) c.tp++;
          else if (said) c.fp++;
          else if (fires) c.fn++;
          if (fires) c.fired++;
          c.all++;
        }
      }
    });
    const ids = randomTokens(tokens, nVocab, 9);
    model.forward(ids, ids.length, 0);
  } finally {
    await model.dispose();
  }
  return counts;
}

for (const type of ["q4_1", "q8_0", "f16"] as SynthType[]) {
  test(`${type}: the planted predictors find the neurons that really fire (recall >= 99.5%), and the planted sparsity holds`, async () => {
    const out = join(dir, `rank-${type}.gguf`);
    const r = await synthesize({
      shape: "tiny",
      act: "relu",
      type,
      seed: 4,
      out,
      fsync: false,
      sparsity: 0.9,
      gateRank: 16,
    });
    const preds = r.predictors!;
    assert.equal(preds.length, 4);
    for (const p of preds) {
      assert.equal(p.hidden, 33);
      assert.equal(p.nIn, 256);
      assert.equal(p.nOut, 768);
    }
    const counts = await score(out, preds, 160);
    counts.forEach((c, l) => {
      const recall = c.tp / (c.tp + c.fn);
      const precision = c.tp / (c.tp + c.fp);
      const firing = c.fired / c.all;
      assert.ok(recall >= 0.995, `layer ${l}: recall ${recall}`);
      // the margin covers 3 deviations of the quantization noise: the finer the type, the fewer false alarms
      assert.ok(precision >= (type === "q4_1" ? 0.6 : 0.9), `layer ${l}: precision ${precision}`);
      assert.ok(Math.abs(firing - 0.1) < 0.03, `layer ${l}: ${firing} of the neurons fire, planted 0.1`);
    });
    if (type === "q4_1")
      assert.ok(
        preds.every((p) => p.noiseShare > 0.03 && p.noiseShare < 0.15),
        `noise share ${preds.map((p) => p.noiseShare)}`,
      );
  });
}

test("synth --gate-rank writes the predictors beside the model; convert --predictors carries them; predictor mode under a small cache gives the dense tokens", async () => {
  const model = join(dir, "cli.gguf");
  const r = spawnSync(
    process.execPath,
    [
      CLI,
      "synth",
      "--shape",
      "tiny",
      "--act",
      "relu",
      "--sparsity",
      "0.9",
      "--gate-rank",
      "16",
      "--type",
      "q8_0",
      "-s",
      "2",
      "-o",
      model,
    ],
    { encoding: "utf8" },
  );
  assert.equal(r.status, 0, r.stderr);
  const predictors = join(dir, "cli.predictors.gguf");
  assert.ok(existsSync(predictors), r.stderr);
  assert.match(
    r.stderr,
    /gate rank 16: planted predictors \(hidden 33, quantization noise [\d.]+% .*\) -> .*cli\.predictors\.gguf/,
  );
  const pf = GGUFFile.open(predictors);
  try {
    assert.equal(JSON.parse(pf.getString(PREDICTOR_MODEL_KEY)).nLayer, 4);
    assert.deepEqual(pf.tensor("blk.3.fc2.weight").dims, [33, 768]);
  } finally {
    pf.close();
  }

  const pi = join(dir, "cli.pi");
  const c = spawnSync(process.execPath, [CLI, "convert", model, "-o", pi, "--predictors", predictors], {
    encoding: "utf8",
  });
  assert.equal(c.status, 0, c.stderr);
  assert.match(c.stderr, /predictors of 4 layers from/);
  const store = NeuronStore.open(pi);
  assert.ok(store.tensors.has("blk.0.fc1.weight") && store.tensors.has("blk.3.fc2.weight"));
  store.close();

  const ids = randomTokens(12, 512, 3);
  const run = async (sparsity: "dense" | "predictor") => {
    // a quarter of the FFN in the cache
    const m = await LlamaModel.load(pi, {
      threads: 2,
      contextSize: 64,
      offload: { sparsity, cacheBytes: 4 * 768 * 4096 * 0.25 },
    });
    try {
      const out = (await greedyAsync(m, ids, 20)).ids;
      return { out, stats: m.offloaded!.snapshot() };
    } finally {
      await m.dispose();
    }
  };
  const dense = await run("dense");
  const pred = await run("predictor");
  assert.deepEqual(pred.out, dense.out);
  assert.ok(
    pred.stats.neuronsComputed < 0.5 * pred.stats.neuronsTotal,
    `${pred.stats.neuronsComputed} of ${pred.stats.neuronsTotal} computed`,
  );
  assert.ok(pred.stats.misses > 0, "some cold neurons were read from the store");
});

test("bad predictable-model requests are refused with what to change", async () => {
  const out = join(dir, "bad.gguf");
  await assert.rejects(
    synthesize({ shape: "tiny", act: "silu", type: "q8_0", seed: 1, out, gateRank: 8 }),
    /gateRank .* needs act relu and a sparsity/,
  );
  await assert.rejects(
    synthesize({ shape: "tiny", act: "drelu", type: "q8_0", seed: 1, out, sparsity: 0.9, gateRank: 8 }),
    /needs act relu/,
  );
  await assert.rejects(
    synthesize({ shape: "tiny", act: "relu", type: "q8_0", seed: 1, out, sparsity: 0.9, gateRank: 0 }),
    /gateRank must be an integer/,
  );
  await assert.rejects(
    synthesize({ shape: "tiny", act: "relu", type: "q8_0", seed: 1, out, sparsity: 0.9, gateRank: 300 }),
    /below the residual width 224/,
  );
  await assert.rejects(
    synthesize({
      shape: "tiny",
      act: "relu",
      type: "q8_0",
      seed: 1,
      out,
      sparsity: 0.9,
      predictorsOut: join(dir, "p.gguf"),
    }),
    /predictorsOut needs gateRank/,
  );
  const cli = (...a: string[]) => spawnSync(process.execPath, [CLI, ...a], { encoding: "utf8" });
  let r = cli("synth", "--act", "relu", "--gate-rank", "8", "-o", out);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--gate-rank .* give --act relu and --sparsity too/);
  r = cli("synth", "--act", "relu", "--sparsity", "0.9", "--predictors", join(dir, "p.gguf"), "-o", out);
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--predictors .* give --gate-rank too/);

  // predictors of another model (another seed: same shape, other weights)
  const a = join(dir, "a.gguf"),
    b = join(dir, "b.gguf");
  await synthesize({
    shape: "tiny",
    act: "relu",
    type: "q8_0",
    seed: 1,
    out: a,
    fsync: false,
    sparsity: 0.9,
    gateRank: 8,
    predictorsOut: join(dir, "a.predictors.gguf"),
  });
  await synthesize({ shape: "tiny", act: "relu", type: "q8_0", seed: 2, out: b, fsync: false, sparsity: 0.9 });
  await assert.rejects(
    convertToStore({ input: b, output: join(dir, "b.pi"), predictors: join(dir, "a.predictors.gguf"), fsync: false }),
    /a\.predictors\.gguf holds predictors of another model: .*weights differ/,
  );
  assert.ok(!existsSync(join(dir, "b.pi")), "no store is left behind");
  // a whole model file (no recorded fingerprint): its own weights say whose it is
  await assert.rejects(
    convertToStore({ input: b, output: join(dir, "b.pi"), predictors: a, fsync: false }),
    /a\.gguf holds predictors of another model: .*weights differ/,
  );
  // a file without predictors
  await assert.rejects(
    convertToStore({ input: b, output: join(dir, "b.pi"), predictors: b, fsync: false }),
    /b\.gguf: no predictor for layer 0/,
  );
  // a file that does not say whose predictors it holds
  await assert.rejects(
    convertToStore({ input: b, output: join(dir, "b.pi"), predictors: join(dir, "a.gguf.missing"), fsync: false }),
    /a\.gguf\.missing/,
  );
  r = cli("convert", b, "-o", join(dir, "b.pi"), "--predictors", join(dir, "nope.gguf"));
  assert.equal(r.status, 2);
  assert.match(r.stderr, /--predictors: .*nope\.gguf does not exist/);
});
