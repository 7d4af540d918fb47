/**
 * Activation predictors from safetensors (`convert --predictors FILE.safetensors|DIR`, and
 * `convert DIR -o x.pi` of a checkpoint that carries them) in PowerInfer's and TurboSparse's
 * names: the same numbers as a predictors-only GGUF give the same store tensors, byte for byte,
 * and stores that run with the same greedy ids and the same predictor scores (so the same picks).
 * Then the bad inputs: each refused naming the file, the tensor and expected vs found.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../src/format/gguf.js";
import { convertHFToGGUF } from "../src/format/hf/hf-to-gguf.js";
import { bf16ToF32, f16ToF32, f32ToBF16, f32ToF16 } from "../src/format/half.js";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel } from "../src/model/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { convertHFToStore } from "../src/offline/hf-to-store.js";
import { writePredictorFile } from "../src/offline/predictor-files.js";
import { modelFingerprint } from "../src/offline/profile.js";
import type { PredictorWeights } from "../src/predictor-training/predictor-train.js";
import { gaussians, greedyAsync, randomTokens, SHARED, tempDir } from "./helpers.js";
import { hfFiles, hfPristine } from "./fuzz/hf-cases.js";
import { writeSafetensors, type TestTensor } from "./safetensors-writer.js";

const RELU = `${SHARED}/models/relu-stories.gguf`;
const MOE = `${SHARED}/models/moe-stories.Q8_0.gguf`;
const dir = tempDir("predictor-safetensors-");
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** Values a BF16 holds exactly, so that F32 and BF16 files hold the same numbers. */
function bf16Exact(v: Float32Array): Float32Array {
  return v.map((x) => bf16ToF32(f32ToBF16(x)));
}

/** Random predictors of `hidden` for a model nEmbd -> nFF over `layers` layers. */
function predictors(layers: number, nEmbd: number, nFF: number, hidden: number): PredictorWeights[] {
  return Array.from({ length: layers }, (_, l) => ({
    hidden,
    nIn: nEmbd,
    nOut: nFF,
    fc1: bf16Exact(gaussians(hidden * nEmbd, 100 + l, 1 / Math.sqrt(nEmbd))),
    fc2: bf16Exact(gaussians(nFF * hidden, 200 + l, 1 / Math.sqrt(hidden))),
    threshold: 0,
  }));
}

/** TurboSparse's names in one file: model.layers.L.mlp.predictor.fc1/fc2.weight, torch shapes. */
function mergedTensors(ps: PredictorWeights[], dtype: TestTensor["dtype"]): TestTensor[] {
  return ps.flatMap((p, l) => [
    { name: `model.layers.${l}.mlp.predictor.fc1.weight`, shape: [p.hidden, p.nIn], values: p.fc1, dtype },
    { name: `model.layers.${l}.mlp.predictor.fc2.weight`, shape: [p.nOut, p.hidden], values: p.fc2, dtype },
  ]);
}

const fixedBytes = (s: NeuronStore, name: string) => Buffer.from(s.tensorData(name));

test(
  "relu-stories: predictors from a GGUF, a TurboSparse-style safetensors and PowerInfer's per-layer files give the same store and picks",
  { skip: !existsSync(RELU) && `${RELU} is missing` },
  async () => {
    const model = GGUFFile.open(RELU);
    const fingerprint = modelFingerprint(model);
    model.close();
    const { nLayer, nEmbd, nFF } = fingerprint;
    const ps = predictors(nLayer, nEmbd, nFF, 32);

    const gguf = join(dir, "relu.predictors.gguf");
    await writePredictorFile({ output: gguf, predictors: ps, model: fingerprint, origin: "test", type: "f32" });
    // one file, F32 (as TurboSparse's checkpoints merge them, here without the model's tensors)
    const merged = join(dir, "relu.predictors.safetensors");
    writeSafetensors(merged, mergedTensors(ps, "F32"));
    // PowerInfer's layout, one file per layer, in BF16 (widened to F32 on the way in)
    const perLayer = join(dir, "per-layer");
    mkdirSync(perLayer);
    ps.forEach((p, l) =>
      writeSafetensors(join(perLayer, `model_${l}.safetensors`), [
        { name: "fc1.weight", shape: [p.hidden, p.nIn], values: p.fc1, dtype: "BF16" },
        { name: "fc2.weight", shape: [p.nOut, p.hidden], values: p.fc2, dtype: "BF16" },
      ]),
    );

    const stores: string[] = [];
    for (const [label, src] of [
      ["gguf", gguf],
      ["merged", merged],
      ["per-layer", perLayer],
    ]) {
      const out = join(dir, `relu-${label}.pi`);
      const r = await convertToStore({ input: RELU, output: out, predictors: src, fsync: false });
      assert.equal(r.predictorGroups, nLayer, `${label}: a predictor per layer`);
      stores.push(out);
    }

    // the same fixed tensors and threshold, byte for byte
    const opened = stores.map((s) => NeuronStore.open(s));
    try {
      for (const s of opened) s.verifyAll();
      for (let l = 0; l < nLayer; l++)
        for (const fc of ["fc1", "fc2"]) {
          const name = `blk.${l}.${fc}.weight`;
          const want = fixedBytes(opened[0], name);
          assert.deepEqual(
            new Float32Array(want.buffer, want.byteOffset, want.length / 4),
            fc === "fc1" ? ps[l].fc1 : ps[l].fc2,
            `${name}: the GGUF's numbers`,
          );
          for (let i = 1; i < opened.length; i++)
            assert.ok(fixedBytes(opened[i], name).equals(want), `${stores[i]}: ${name} is the GGUF store's`);
        }
      for (const s of opened) assert.equal(s.getNumber("powerinfer.sparse_threshold"), 0);
    } finally {
      for (const s of opened) s.close();
    }

    // run in predictor mode: the same ids, and the same scores (so the same picks) on the same inputs
    const load = (path: string) =>
      LlamaModel.load(path, {
        threads: 1,
        contextSize: 48,
        predictorType: "original",
        offload: { sparsity: "predictor", cacheBytes: 1 << 20, onWarning: () => {} },
      });
    let want: number[] | undefined;
    const scores: Float32Array[][] = [];
    for (const path of stores) {
      const m = await load(path);
      try {
        const ids = (await greedyAsync(m, randomTokens(8, m.config.nVocab, 3), 12)).ids;
        if (!want) want = ids;
        else assert.deepEqual(ids, want, `${path}: greedy ids`);
        scores.push(Array.from({ length: nLayer }, (_, l) => m.predictorScores(l, gaussians(nEmbd, 300 + l))));
      } finally {
        await m.dispose();
      }
    }
    let picked = 0;
    for (let l = 0; l < nLayer; l++) {
      for (let i = 1; i < scores.length; i++)
        assert.deepEqual(scores[i][l], scores[0][l], `${stores[i]}: layer ${l} predictor scores`);
      picked += scores[0][l].filter((s) => s > 0).length;
    }
    // random predictors pick about half: neither none nor all, so equal picks mean something
    assert.ok(picked > 0.2 * nLayer * nFF && picked < 0.8 * nLayer * nFF, `${picked} picks`);
  },
);

/**
 * TurboSparse-Mixtral's names, one predictor per expert
 * (`model.layers.L.block_sparse_moe.experts.E.predictor.fc1.weight`), in F16: the store a
 * predictors-only GGUF of the same F16 numbers gives, byte for byte.
 */
test(
  "moe-stories: per-expert predictors in TurboSparse-Mixtral's names are the GGUF's",
  { skip: !existsSync(MOE) && `${MOE} is missing` },
  async () => {
    const model = GGUFFile.open(MOE);
    const fingerprint = modelFingerprint(model);
    const experts = model.getNumber(`${model.architecture}.expert_count`);
    model.close();
    const { nLayer, nEmbd, nFF } = fingerprint;
    const f16 = (v: Float32Array) => v.map((x) => f16ToF32(f32ToF16(x)));
    const ps = predictors(nLayer * experts, nEmbd, nFF, 16).map((p) => ({ ...p, fc1: f16(p.fc1), fc2: f16(p.fc2) }));
    const gguf = join(dir, "moe.predictors.gguf");
    await writePredictorFile({
      output: gguf,
      predictors: ps,
      model: fingerprint,
      origin: "test",
      experts,
      type: "f16",
    });
    const st = join(dir, "moe.predictors.safetensors");
    writeSafetensors(
      st,
      ps.flatMap((p, g) => {
        const at = `model.layers.${Math.floor(g / experts)}.block_sparse_moe.experts.${g % experts}.predictor`;
        return [
          { name: `${at}.fc1.weight`, shape: [p.hidden, p.nIn], values: p.fc1, dtype: "F16" as const },
          { name: `${at}.fc2.weight`, shape: [p.nOut, p.hidden], values: p.fc2, dtype: "F16" as const },
        ];
      }),
    );
    const stores = [join(dir, "moe-gguf.pi"), join(dir, "moe-st.pi")];
    for (const [i, src] of [gguf, st].entries()) {
      const r = await convertToStore({ input: MOE, output: stores[i], predictors: src, fsync: false });
      assert.equal(r.predictorGroups, nLayer * experts);
    }
    const [a, b] = stores.map((s) => NeuronStore.open(s));
    try {
      for (let l = 0; l < nLayer; l++)
        for (let e = 0; e < experts; e++)
          for (const fc of ["fc1", "fc2"]) {
            const name = `blk.${l}.${fc}.${e}.weight`;
            assert.ok(fixedBytes(b, name).equals(fixedBytes(a, name)), `${name}: the GGUF store's bytes`);
          }
    } finally {
      a.close();
      b.close();
    }
    // a mixture needs one predictor per expert: a layer's is refused
    const layerWise = join(dir, "moe-layerwise.safetensors");
    writeSafetensors(layerWise, mergedTensors(predictors(nLayer, nEmbd, nFF, 16), "F32"));
    await assert.rejects(
      convertToStore({ input: MOE, output: join(dir, "moe-bad.pi"), predictors: layerWise, fsync: false }),
      /"model\.layers\.\d+\.mlp\.predictor\.fc[12]\.weight" is a whole layer's predictor, but the model is a mixture of \d+ experts/,
    );
  },
);

test(
  "predictors in safetensors: a missing layer, a wrong shape, another model's layer, none at all, a NaN are refused by name",
  { skip: !existsSync(RELU) && `${RELU} is missing` },
  async () => {
    const model = GGUFFile.open(RELU);
    const { nLayer, nEmbd, nFF } = modelFingerprint(model);
    model.close();
    const ps = predictors(nLayer, nEmbd, nFF, 16);
    const refuses = async (label: string, tensors: TestTensor[], ...parts: (string | RegExp)[]) => {
      const path = join(dir, `bad-${label}.safetensors`);
      writeSafetensors(path, tensors);
      const out = join(dir, `bad-${label}.pi`);
      await assert.rejects(convertToStore({ input: RELU, output: out, predictors: path, fsync: false }), (e: Error) => {
        for (const p of parts)
          assert.ok(
            typeof p === "string" ? e.message.includes(p) : p.test(e.message),
            `"${e.message}" should say ${p}`,
          );
        return true;
      });
      assert.ok(!existsSync(out), `${label}: no store is left`);
    };
    const all = mergedTensors(ps, "F32");

    await refuses(
      "missing",
      all.filter((t) => t.name !== "model.layers.3.mlp.predictor.fc2.weight"),
      "no predictor for layer 3",
      "model.layers.3.mlp.predictor.fc2.weight",
    );
    const narrow = all.map((t) =>
      t.name === "model.layers.2.mlp.predictor.fc1.weight"
        ? { ...t, shape: [16, nEmbd - 1], values: t.values.subarray(0, 16 * (nEmbd - 1)) }
        : t,
    );
    await refuses(
      "shape",
      narrow,
      'tensor "model.layers.2.mlp.predictor.fc1.weight"',
      `has shape [16, ${nEmbd - 1}]`,
      `expected [hidden <= ${nFF}, ${nEmbd}]`,
    );
    const wrongHidden = all.map((t) =>
      t.name === "model.layers.4.mlp.predictor.fc2.weight" ? { ...t, shape: [nFF / 2, 32] } : t,
    );
    await refuses(
      "fc2",
      wrongHidden,
      'tensor "model.layers.4.mlp.predictor.fc2.weight"',
      `has shape [${nFF / 2}, 32]`,
      `expected [${nFF}, 16]`,
    );
    const extra = mergedTensors(predictors(nLayer + 1, nEmbd, nFF, 16), "F32");
    await refuses(
      "extra",
      extra,
      `"model.layers.${nLayer}.mlp.predictor.fc1.weight"`,
      `the model has ${nLayer} layers`,
    );
    const experts = all.map((t) => ({ ...t, name: t.name.replace(".mlp.", ".block_sparse_moe.experts.0.") }));
    await refuses("experts", experts, "an expert's predictor", "the model has no experts");
    await refuses(
      "none",
      [{ name: "lm_head.weight", shape: [4], values: new Float32Array(4) }],
      "no predictor tensors",
    );
    const nan = all.map((t) =>
      t.name === "model.layers.1.mlp.predictor.fc2.weight"
        ? { ...t, values: t.values.map((v, i) => (i === 77 ? NaN : v)) }
        : t,
    );
    await refuses("nan", nan, 'tensor "model.layers.1.mlp.predictor.fc2.weight" holds NaN at element 77');
  },
);

/**
 * A checkpoint that carries its predictors (TurboSparse): -o x.gguf leaves them out and says so
 * (llama.cpp has no place for them); -o x.pi puts them in the store, the same bytes as
 * --predictors with the tensors alone.
 */
test("hf: a checkpoint's own predictors go into its store, not into its GGUF", async () => {
  const d = join(dir, "turbo-llama");
  mkdirSync(d);
  const files = hfFiles(hfPristine(), []);
  for (const [name, bytes] of files) writeFileSync(join(d, name), bytes);
  const cfg = JSON.parse(readFileSync(join(d, "config.json"), "utf8")) as {
    hidden_size: number;
    intermediate_size: number;
    num_hidden_layers: number;
  };
  const ps = predictors(cfg.num_hidden_layers, cfg.hidden_size, cfg.intermediate_size, 8);
  const shard = "model-predictors.safetensors";
  const tensors = mergedTensors(ps, "BF16");
  writeSafetensors(join(d, shard), tensors);
  const index = JSON.parse(readFileSync(join(d, "model.safetensors.index.json"), "utf8")) as {
    weight_map: Record<string, string>;
  };
  for (const t of tensors) index.weight_map[t.name] = shard;
  writeFileSync(join(d, "model.safetensors.index.json"), JSON.stringify(index));

  const gg = join(dir, "turbo.gguf");
  const r = await convertHFToGGUF({ input: d, output: gg, type: "f32", fsync: false });
  assert.equal(r.predictorsLeftOut, 2 * cfg.num_hidden_layers);
  const f = GGUFFile.open(gg);
  try {
    assert.ok(![...f.tensors.keys()].some((n) => /\.fc[12]\./.test(n)), "no predictor in the GGUF");
  } finally {
    f.close();
  }

  const pi = join(dir, "turbo.pi");
  const { store } = await convertHFToStore({ input: d, output: pi, type: "f32", fsync: false });
  assert.equal(store.predictorGroups, cfg.num_hidden_layers);
  const alone = join(dir, "turbo-alone.safetensors");
  writeSafetensors(alone, tensors);
  const pi2 = join(dir, "turbo-alone.pi");
  await convertToStore({ input: gg, output: pi2, predictors: alone, fsync: false });
  const a = NeuronStore.open(pi),
    b = NeuronStore.open(pi2);
  try {
    for (let l = 0; l < cfg.num_hidden_layers; l++)
      for (const [fc, values] of [
        ["fc1", ps[l].fc1],
        ["fc2", ps[l].fc2],
      ] as const) {
        const name = `blk.${l}.${fc}.weight`;
        const got = fixedBytes(a, name);
        assert.deepEqual(new Float32Array(got.buffer, got.byteOffset, got.length / 4), values, `${name}: BF16 widened`);
        assert.ok(fixedBytes(b, name).equals(got), `${name}: the same as --predictors gives`);
      }
  } finally {
    a.close();
    b.close();
  }
});
