/**
 * Activation predictors requantized to Q8_0 at load (LoadOptions.predictorType, default "q8_0"):
 * the hidden width padded with zeros to a multiple of 32 (fc1 zero rows, fc2 zero columns).
 * A planted predictor of a tiny predictable model (hidden 33, F16) is loaded both ways; the
 * padding must contribute exactly nothing and the scores must agree within Q8_0's rounding.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { GGMLType } from "../src/format/ggml-types.js";
import { NeuronStore } from "../src/format/store/index.js";
import { dequantize } from "../src/format/quant.js";
import { LlamaModel } from "../src/model/model.js";
import { WeightLoader, type Matrix } from "../src/model/weight-loader.js";
import { convertToStore } from "../src/offline/convert.js";
import { plannedFiring, synthesize } from "../src/offline/synth.js";
import { Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import { activationBytes, prepareKernel } from "../src/runtime/weight-kernels.js";
import { randomTokens, tempDir, uniforms } from "./helpers.js";

const dir = tempDir("predictor-q8-");
const gguf = join(dir, "m.gguf");
const preds = join(dir, "m.predictors.gguf");
const pi = join(dir, "m.pi");
let made: Promise<void> | undefined;
/** The tiny predictable model (F16 planted predictors, hidden 33) and its store with them. */
function model(): Promise<void> {
  return (made ??= (async () => {
    await synthesize({
      shape: "tiny",
      act: "relu",
      type: "q8_0",
      seed: 4,
      out: gguf,
      fsync: false,
      sparsity: 0.9,
      gateRank: 16,
      predictorsOut: preds,
    });
    await convertToStore({ input: gguf, output: pi, predictors: preds, fsync: false });
  })());
}

/** matvec of a loaded matrix on f32 input x (prepared for its kernel) in a bare pool. */
function matvec(arena: Arena, pool: ThreadPool, m: Matrix, x: Float32Array): Float32Array {
  const px = arena.alloc(x.length * 4, 64);
  arena.f32(px, x.length).set(x);
  let pa = px;
  if (m.kernel.act !== "f32") {
    pa = arena.alloc(activationBytes(m.kernel.act, m.cols) + 64, 64);
    pool.kernels[prepareKernel(m.kernel.act)!](px, pa, m.cols, 1);
  }
  const py = arena.alloc(m.rows * 4, 64);
  pool.run(m.matvecFn, [m.ptr, pa, py, m.rows, m.cols], 5, m.rows, 16);
  return Float32Array.from(arena.f32(py, m.rows));
}

test("WeightLoader.q8Matrix: padded fc1 rows and fc2 columns are exactly zero; real ones match the F16 values", async () => {
  await model();
  const store = NeuronStore.open(pi);
  const arena = new Arena(16 << 20);
  const pool = await ThreadPool.create(arena.memory, 1);
  try {
    const t1 = store.tensor("blk.1.fc1.weight"),
      t2 = store.tensor("blk.1.fc2.weight");
    assert.equal(t1.type, GGMLType.F16);
    const [nEmbd, hidden] = t1.dims;
    const nFF = t2.dims[1];
    assert.equal(hidden, 33);
    const loader = new WeightLoader(store, arena, pool);
    const fc1 = loader.q8Matrix("blk.1.fc1.weight", nEmbd, hidden, nEmbd, 64);
    const fc2 = loader.q8Matrix("blk.1.fc2.weight", hidden, nFF, 64, nFF);
    assert.deepEqual([fc1.rows, fc1.cols, fc2.rows, fc2.cols], [64, nEmbd, nFF, 64]);
    assert.equal(fc1.kernel.type, GGMLType.Q8_0);
    const w1 = dequantize(t1.type, store.tensorData("blk.1.fc1.weight"), hidden * nEmbd);
    const w2 = dequantize(t2.type, store.tensorData("blk.1.fc2.weight"), nFF * hidden);

    // fc1: rows 33..63 give exactly 0 for any input; the real rows match the f64 product
    const x = uniforms(nEmbd, 7);
    const y1 = matvec(arena, pool, fc1, x);
    for (let r = hidden; r < 64; r++) assert.equal(y1[r], 0, `fc1 padding row ${r}`);
    const scale1 = Math.max(
      ...Array.from({ length: hidden }, (_, r) =>
        w1.subarray(r * nEmbd, (r + 1) * nEmbd).reduce((a, v) => a + Math.abs(v), 0),
      ),
    );
    for (let r = 0; r < hidden; r++) {
      let want = 0;
      for (let c = 0; c < nEmbd; c++) want += w1[r * nEmbd + c] * x[c];
      assert.ok(Math.abs(y1[r] - want) <= 0.01 * scale1, `fc1 row ${r}: ${y1[r]} vs ${want} (scale ${scale1})`);
    }

    // fc2: the padded columns read nothing (input only there: every output exactly 0) ...
    const pad = new Float32Array(64);
    for (let c = hidden; c < 64; c++) pad[c] = 1 + c;
    const y0 = matvec(arena, pool, fc2, pad);
    assert.ok(
      y0.every((v) => v === 0),
      `fc2 reads its padded columns: ${y0.find((v) => v !== 0)}`,
    );
    // ... and the real ones match
    const h = uniforms(64, 11).map((v, c) => (c < hidden ? Math.abs(v) : 0));
    const y2 = matvec(arena, pool, fc2, h);
    let scale2 = 0;
    for (let i = 0; i < w2.length; i++) scale2 = Math.max(scale2, Math.abs(w2[i]));
    for (let r = 0; r < nFF; r++) {
      let want = 0;
      for (let c = 0; c < hidden; c++) want += w2[r * hidden + c] * h[c];
      assert.ok(Math.abs(y2[r] - want) <= 0.01 * scale2 * hidden, `fc2 row ${r}: ${y2[r]} vs ${want}`);
    }
    // a column width that is no multiple of 32 is refused
    assert.throws(() => loader.q8Matrix("blk.1.fc2.weight", hidden, nFF, 48 + 1, nFF), /multiple of 32/);
  } finally {
    await pool.dispose();
    store.close();
  }
});

test("predictorType q8_0 vs original: the same picks on real residuals within Q8_0 rounding; padding stays 0; decode gives the same tokens", async () => {
  await model();
  // real residuals (the predictor's input) and firing from the dense model
  const dense = await LlamaModel.load(gguf, { threads: 1, contextSize: 48 });
  const { nEmbd, nFF, nLayer } = dense.config;
  const rows: { layer: number; x: Float32Array; fired: Uint8Array }[] = [];
  try {
    dense.setFFNObserver((o) => {
      for (let t = 0; t < o.n; t += 3) {
        const fired = new Uint8Array(nFF);
        for (let i = 0; i < nFF; i++) fired[i] = o.gate[t * nFF + i] > 0 ? 1 : 0;
        rows.push({ layer: o.layer, x: o.residual.slice(t * nEmbd, (t + 1) * nEmbd), fired });
      }
    });
    const ids = randomTokens(48, dense.config.nVocab, 5);
    dense.forward(ids, ids.length, 0);
  } finally {
    await dense.dispose();
  }

  const load = (predictorType: "q8_0" | "original") =>
    LlamaModel.load(pi, {
      threads: 1,
      contextSize: 32,
      predictorType,
      offload: { sparsity: "predictor", cacheBytes: 1 << 20, onWarning: () => {} },
    });
  const q8 = await load("q8_0");
  const orig = await load("original");
  try {
    for (let l = 0; l < nLayer; l++) {
      assert.deepEqual(q8.predictorWidth(l), { type: GGMLType.Q8_0, hidden: 64 });
      assert.deepEqual(orig.predictorWidth(l), { type: GGMLType.F16, hidden: 33 });
    }
    const thr = q8.config.sparseThreshold;
    let differ = 0,
      all = 0;
    const c = { q8: { tp: 0, fp: 0, fn: 0 }, orig: { tp: 0, fp: 0, fn: 0 } };
    for (const { layer, x, fired } of rows) {
      const hidden = new Float32Array(64).fill(NaN);
      const a = q8.predictorScores(layer, x, hidden);
      const b = orig.predictorScores(layer, x);
      for (let k = 33; k < 64; k++)
        assert.equal(hidden[k], 0, `layer ${layer}: hidden unit ${k} (padding) is ${hidden[k]}`);
      let scale = 0;
      for (let i = 0; i < nFF; i++) scale = Math.max(scale, Math.abs(b[i]));
      for (let i = 0; i < nFF; i++) {
        assert.ok(
          Math.abs(a[i] - b[i]) <= 0.02 * scale,
          `layer ${layer} neuron ${i}: q8 ${a[i]} vs original ${b[i]} (row max ${scale})`,
        );
        const pa = a[i] > thr,
          pb = b[i] > thr;
        if (pa !== pb) differ++;
        all++;
        for (const [p, k] of [
          [pa, "q8"],
          [pb, "orig"],
        ] as const) {
          if (p && fired[i]) c[k].tp++;
          else if (p) c[k].fp++;
          else if (fired[i]) c[k].fn++;
        }
      }
    }
    const recall = (k: "q8" | "orig") => c[k].tp / (c[k].tp + c[k].fn);
    const precision = (k: "q8" | "orig") => c[k].tp / (c[k].tp + c[k].fp);
    console.log(
      `${rows.length} rows: picks differ for ${differ} of ${all}; recall q8 ${recall("q8").toFixed(4)} original ${recall("orig").toFixed(4)}; precision q8 ${precision("q8").toFixed(4)} original ${precision("orig").toFixed(4)}`,
    );
    assert.ok(differ <= 0.01 * all, `picks differ for ${differ} of ${all}`);
    assert.ok(recall("q8") >= recall("orig") - 0.01, `recall q8 ${recall("q8")} vs original ${recall("orig")}`);
    assert.ok(recall("q8") >= 0.99, `recall q8 ${recall("q8")}`);

    // decode runs on the packed predictor: the same tokens either way
    const ids = randomTokens(8, q8.config.nVocab, 3);
    const run = async (m: LlamaModel) => {
      const out: number[] = [];
      let logits = await m.forwardAsync(ids, ids.length, 0);
      for (let pos = ids.length; out.length < 10; pos++) {
        let best = 0;
        for (let v = 1; v < logits.length; v++) if (logits[v] > logits[best]) best = v;
        out.push(best);
        logits = await m.forwardAsync([best], 1, pos);
      }
      return out;
    };
    assert.deepEqual(await run(q8), await run(orig));
    await assert.rejects(
      LlamaModel.load(pi, { predictorType: "f16" as "q8_0" }),
      /predictorType must be "q8_0" or "original", got "f16"/,
    );
  } finally {
    await q8.dispose();
    await orig.dispose();
  }
});

// The offloaded FFN reads a stored position's score at that position: Predictor.load packs fc2's
// rows in the store's order. A hot-first store of the same model must give the index-order
// store's scores to the bit once predictorScores puts them back at their neurons.
test("a hot-first store: fc2 rows loaded in stored order, predictorScores the same bits as the index-order store's", async () => {
  await model();
  const hotPi = join(dir, "m.hot.pi");
  const layers = NeuronStore.open(pi);
  const { nLayer, nFF } = { nLayer: layers.ffn.layers.length, nFF: layers.layer(0).neurons };
  const nEmbd = layers.tensor("blk.0.fc1.weight").dims[0];
  layers.close();
  const profile = {
    layers: Array.from({ length: nLayer }, (_, l) => ({ frequency: Array.from(plannedFiring(4, l, nFF, 0.9)) })),
  };
  await convertToStore({ input: gguf, output: hotPi, predictors: preds, profile, fsync: false });
  const hot = NeuronStore.open(hotPi);
  let moved = 0;
  for (let l = 0; l < nLayer; l++) moved += hot.layer(l).order.filter((n, k) => n !== k).length;
  hot.close();
  assert.ok(moved > nFF, `the profile reorders the neurons (${moved} moved)`);

  for (const predictorType of ["q8_0", "original"] as const) {
    const load = (path: string) =>
      LlamaModel.load(path, {
        threads: 1,
        contextSize: 16,
        predictorType,
        offload: { sparsity: "predictor", cacheBytes: 1 << 20, onWarning: () => {} },
      });
    const a = await load(pi);
    const b = await load(hotPi);
    try {
      for (let l = 0; l < nLayer; l++) {
        const x = uniforms(nEmbd, 100 + l);
        const sa = a.predictorScores(l, x),
          sb = b.predictorScores(l, x);
        for (let i = 0; i < nFF; i++)
          assert.ok(Object.is(sa[i], sb[i]), `${predictorType} layer ${l} neuron ${i}: ${sb[i]} vs ${sa[i]}`);
      }
    } finally {
      await a.dispose();
      await b.dispose();
    }
  }
});
