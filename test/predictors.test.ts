/**
 * Predictor training: the training kernels against their plain-TS references on odd sizes; the
 * threshold choice; a small training run on relu-stories whose held-out figures are recounted
 * independently; the PWRI GGUF and store outputs, run with --sparsity predictor against dense;
 * the CLI's refusals.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { copyFileSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { GGMLType } from "../src/format/ggml-types.js";
import { GGUFFile } from "../src/format/gguf.js";
import { f16ToF32 } from "../src/format/half.js";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel } from "../src/model/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { corpusTokens, readCorpus } from "../src/offline/corpus.js";
import { addPredictorsToStore, writePredictorGGUF } from "../src/offline/predictor-files.js";
import { trainPredictors, type TrainPredictorsResult } from "../src/offline/train-predictors.js";
import {
  maskWords,
  PredictorTrainer,
  QualityCounter,
  thresholdForRecall,
} from "../src/predictor-training/predictor-train.js";
import { Tokenizer } from "../src/tokenizer/index.js";
import { CLI, greedyAsync, SHARED, signedRng, tempDir } from "./helpers.js";
import { Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import {
  TrainKernels,
  maskBit,
  refAdam,
  refBce,
  refMmNN,
  refMmNT,
  refMmTN,
  refRelu,
  refReluGrad,
} from "../src/predictor-training/train-kernels.js";

function close(got: Float32Array, want: Float32Array, tol: number, what: string): void {
  assert.equal(got.length, want.length, `${what}: length`);
  let worst = 0,
    at = -1;
  for (let i = 0; i < got.length; i++) {
    const d = Math.abs(got[i] - want[i]) / (1 + Math.abs(want[i]));
    if (!(d <= worst)) {
      worst = d;
      at = i;
    }
  }
  assert.ok(worst <= tol, `${what}: element ${at} is ${got[at]}, reference ${want[at]} (relative error ${worst})`);
}

test("training kernels match their references on odd sizes, with 1 and 2 threads", async () => {
  for (const threads of [1, 2]) {
    const arena = new Arena(64 << 20);
    const pool = await ThreadPool.create(arena.memory, threads);
    pool.minParallelWork = 0; // split even small jobs, so the 2-thread run really splits
    const k = new TrainKernels(pool);
    const r = signedRng(7 + threads);
    const put = (a: Float32Array) => {
      const p = arena.alloc(a.length * 4 + 16, 64);
      arena.f32(p, a.length).set(a);
      return p;
    };
    const fill = (n: number) => Float32Array.from({ length: n }, r);
    try {
      for (const [m, n, kk] of [
        [1, 1, 1],
        [3, 5, 7],
        [7, 19, 13],
        [17, 33, 65],
        [6, 16, 4],
        [9, 37, 130],
      ]) {
        for (const acc of [false, true]) {
          // C = A . B^T
          let A = fill(m * kk),
            B = fill(n * kk),
            C0 = fill(m * n);
          let want = C0.slice();
          refMmNT(A, B, want, m, n, kk, acc);
          let pc = put(C0);
          k.mmNT(put(A), put(B), pc, m, n, kk, acc);
          close(arena.f32(pc, m * n).slice(), want, 1e-5, `mmNT ${m}x${n}x${kk} acc=${acc} threads=${threads}`);
          // C = A . B
          A = fill(m * kk);
          B = fill(kk * n);
          C0 = fill(m * n);
          want = C0.slice();
          refMmNN(A, B, want, m, n, kk, acc);
          pc = put(C0);
          k.mmNN(put(A), put(B), pc, m, n, kk, acc);
          close(arena.f32(pc, m * n).slice(), want, 1e-5, `mmNN ${m}x${n}x${kk} acc=${acc} threads=${threads}`);
          // C = A^T . B
          A = fill(kk * m);
          B = fill(kk * n);
          C0 = fill(m * n);
          want = C0.slice();
          refMmTN(A, B, want, m, n, kk, acc);
          pc = put(C0);
          k.mmTN(put(A), put(B), pc, m, n, kk, acc);
          close(arena.f32(pc, m * n).slice(), want, 1e-5, `mmTN ${m}x${n}x${kk} acc=${acc} threads=${threads}`);
        }
      }
      // elementwise kernels on a length that is not a multiple of 4 (or of the 64-element chunks)
      const len = 1031;
      const x = fill(len);
      const px = put(x);
      k.relu(px, len);
      const wantRelu = x.slice();
      refRelu(wantRelu);
      close(arena.f32(px, len).slice(), wantRelu, 0, "relu");
      const g = fill(len),
        h = fill(len);
      const pg = put(g);
      k.reluGrad(pg, put(h), len);
      const wantG = g.slice();
      refReluGrad(wantG, h);
      close(arena.f32(pg, len).slice(), wantG, 0, "reluGrad");

      // BCE: 5 rows of 70 outputs (3 words per row), logits up to +-20, both weights
      const rows = 5,
        nOut = 70,
        words = 3;
      const s = Float32Array.from({ length: rows * nOut }, () => r() * 20);
      const mask = Uint32Array.from({ length: rows * words }, () => (r() * 2 ** 31) >>> 0);
      const ps = put(s);
      const pm = arena.alloc(mask.length * 4, 64);
      new Uint32Array(arena.memory.buffer, pm, mask.length).set(mask);
      const pds = arena.alloc(rows * nOut * 4, 64),
        pl = arena.alloc(rows * 4, 64);
      k.bce(ps, pm, pds, rows, nOut, words, 3.5, 0.25, pl);
      const wantDs = new Float32Array(rows * nOut),
        wantLoss = new Float32Array(rows);
      refBce(s, mask, wantDs, rows, nOut, words, 3.5, 0.25, wantLoss);
      close(arena.f32(pds, rows * nOut).slice(), wantDs, 1e-5, "bce gradient");
      close(arena.f32(pl, rows).slice(), wantLoss, 1e-4, "bce loss");

      // Adam, three steps on 1031 parameters
      const w = fill(len),
        mo = new Float32Array(len),
        v = new Float32Array(len);
      const pw = put(w),
        pmo = put(mo),
        pv = put(v);
      const ww = w.slice(),
        mm = mo.slice(),
        vv = v.slice();
      for (let t = 1; t <= 3; t++) {
        const grad = fill(len);
        const pgr = put(grad);
        k.adam(pw, pgr, pmo, pv, len, t, 0.01);
        refAdam(ww, grad, mm, vv, t, 0.01);
      }
      close(arena.f32(pw, len).slice(), ww, 1e-5, "adam weights");
      close(arena.f32(pv, len).slice(), vv, 1e-5, "adam second moment");
    } finally {
      await pool.dispose();
    }
  }
});

// ---------------------------------------------------------------------------------------------
// Training on relu-stories, measured independently; PWRI GGUF and store outputs end to end

const RELU = `${SHARED}/models/relu-stories.gguf`;
const STORIES = `${SHARED}/models/stories260K.gguf`;
const TRAIN = `${SHARED}/data/stories-train.txt`;
const HELDOUT = `${SHARED}/data/stories-heldout.txt`;
const run = promisify(execFile);

test("thresholdForRecall keeps the asked share of positives above the threshold", () => {
  const pos = Float32Array.from({ length: 1000 }, (_, i) => ((i * 37) % 1000) - 500);
  for (const recall of [0.5, 0.9, 0.95, 0.999, 1]) {
    const t = thresholdForRecall(pos, recall);
    const above = pos.filter((v) => v > t).length;
    assert.ok(above >= recall * 1000, `recall ${recall}: ${above} above ${t}`);
    // the largest such threshold: one positive more below it would break the target
    assert.ok(above < recall * 1000 + 1, `recall ${recall}: ${above} above ${t}, not the largest threshold`);
  }
  // -Infinity (samples no threshold lets through) count as misses; the best reachable is kept
  const some = Float32Array.from([-Infinity, -Infinity, 1, 2, 3, 4]);
  const t = thresholdForRecall(some, 0.95);
  assert.ok(t < 1 && Number.isFinite(t));
  assert.throws(() => thresholdForRecall(some, 1.5), /recall target/);
});

test("PredictorTrainer learns a synthetic ReLU mask; its validation figures hold for the folded weights at threshold 0", async () => {
  // x: 48 dims with per-dimension scales from 0.1 to 10 (as a residual's); the mask: neuron k
  // fires when (W x)_k > 0, W random of rank 8, so a width-32 MLP can represent it
  const nIn = 48,
    nOut = 96,
    n = 6000,
    rank = 8;
  const r = signedRng(3);
  const A = Float32Array.from({ length: nOut * rank }, r),
    B = Float32Array.from({ length: rank * nIn }, r);
  const x = new Float32Array(n * nIn);
  for (let i = 0; i < x.length; i++) x[i] = r() * 10 ** (((i % nIn) / (nIn - 1)) * 2 - 1);
  const words = maskWords(nOut);
  const mask = new Uint32Array(n * words);
  const z = new Float64Array(rank);
  for (let t = 0; t < n; t++) {
    for (let q = 0; q < rank; q++) {
      let s = 0;
      for (let i = 0; i < nIn; i++) s += B[q * nIn + i] * x[t * nIn + i];
      z[q] = s;
    }
    for (let k = 0; k < nOut; k++) {
      let s = 0;
      for (let q = 0; q < rank; q++) s += A[k * rank + q] * z[q];
      // an offset makes positives rarer than half, as in a real FFN
      if (s > 0.3 * Math.abs(z[0])) mask[t * words + (k >>> 5)] |= 1 << (k & 31);
    }
  }
  const data = { n, nIn, nOut, words, x, mask };
  const trainer = await PredictorTrainer.create(nIn, nOut, 32, 1, 64);
  try {
    const trainEnd = 5000;
    const p = trainer.train(data, trainEnd, { hidden: 32, epochs: 6, recall: 0.95, seed: 5 });
    assert.equal(p.threshold, 0);
    assert.ok(p.validation.recall >= 0.95, `validation recall ${p.validation.recall}`);
    assert.ok(
      p.validation.precision >= 0.8,
      `validation precision ${p.validation.precision}: the trainer did not learn the mask`,
    );
    // recount the validation samples with the folded weights in f64, raw (unscaled) inputs
    let tp = 0,
      fp = 0,
      fn = 0;
    const h = new Float64Array(32);
    for (let t = trainEnd; t < n; t++) {
      for (let j = 0; j < 32; j++) {
        let s = 0;
        for (let i = 0; i < nIn; i++) s += p.fc1[j * nIn + i] * x[t * nIn + i];
        h[j] = Math.max(s, 0);
      }
      for (let k = 0; k < nOut; k++) {
        let s = 0;
        for (let j = 0; j < 32; j++) s += p.fc2[k * 32 + j] * h[j];
        const y = maskBit(mask, words, t, k);
        if (s > 0) {
          if (y) tp++;
          else fp++;
        } else if (y) fn++;
      }
    }
    assert.ok(
      Math.abs(tp / (tp + fn) - p.validation.recall) < 2e-3,
      `recounted recall ${tp / (tp + fn)} vs ${p.validation.recall}`,
    );
    assert.ok(
      Math.abs(tp / (tp + fp) - p.validation.precision) < 2e-3,
      `recounted precision ${tp / (tp + fp)} vs ${p.validation.precision}`,
    );
    // score() computes what the engine would: the same decisions for the first rows
    const scores = trainer.score(p, x.subarray(trainEnd * nIn), 64);
    const q = new QualityCounter(nOut);
    q.add(scores, mask, trainEnd, 64, words, 0);
    assert.ok(q.result().recall > 0.9);
  } finally {
    await trainer.dispose();
  }
});

let trained: TrainPredictorsResult | undefined;
const TRAIN_OPTS = {
  model: RELU,
  corpus: TRAIN,
  heldout: HELDOUT,
  tokens: 3000,
  heldoutTokens: 1000,
  epochs: 4,
  minHidden: 64,
  maxHidden: 64,
  threads: 1,
} as const;

test("a small training budget gives informative predictors; the held-out figures match an independent count", async () => {
  trained = await trainPredictors(TRAIN_OPTS);
  const r = trained;
  assert.equal(r.criterion, "gate > 0");
  assert.equal(r.layers.length, 6);
  assert.equal(r.tokens.heldout, 1000);
  for (const L of r.layers) {
    assert.equal(L.hidden, 64);
    assert.ok(L.validation.recall >= 0.96 - 1e-9, `layer ${L.layer}: validation recall ${L.validation.recall}`);
    // calibrated on 300 validation tokens: within a few points on unseen text
    assert.ok(L.heldout.recall >= 0.9, `layer ${L.layer}: held-out recall ${L.heldout.recall}`);
    // better than choosing neurons blindly (precision = the true active share)
    assert.ok(
      L.heldout.precision >= 1.5 * L.heldout.trueShare,
      `layer ${L.layer}: precision ${L.heldout.precision} vs true active share ${L.heldout.trueShare}`,
    );
    assert.equal(r.predictors[L.layer].threshold, 0);
  }

  // Independent count: the same held-out windows through the dense model, the predictors
  // evaluated in plain f64 JS on the observed residuals.
  const model = await LlamaModel.load(RELU, { threads: 1, contextSize: 256, batchSize: 256 });
  try {
    const tok = Tokenizer.fromGGUF(model.file);
    const ids = corpusTokens(tok, readCorpus(HELDOUT), { maxTokens: 1000 });
    const { nEmbd, nFF } = model.config;
    const counts = r.layers.map(() => ({ tp: 0, fp: 0, fn: 0 }));
    model.setFFNObserver((o) => {
      const p = r.predictors[o.layer];
      const hid = new Float64Array(p.hidden);
      for (let t = 0; t < o.n; t++) {
        const x = o.residual.subarray(t * nEmbd, (t + 1) * nEmbd);
        for (let j = 0; j < p.hidden; j++) {
          let s = 0;
          for (let i = 0; i < nEmbd; i++) s += p.fc1[j * nEmbd + i] * x[i];
          hid[j] = s > 0 ? s : 0;
        }
        for (let k = 0; k < nFF; k++) {
          let s = 0;
          for (let j = 0; j < p.hidden; j++) s += p.fc2[k * p.hidden + j] * hid[j];
          const predicted = s > p.threshold,
            fired = o.gate[t * nFF + k] > 0;
          const c = counts[o.layer];
          if (predicted && fired) c.tp++;
          else if (predicted) c.fp++;
          else if (fired) c.fn++;
        }
      }
    });
    const win = new Int32Array(256);
    for (let s = 0; s < ids.length; s += 256) {
      const n = Math.min(256, ids.length - s);
      win.set(ids.subarray(s, s + n));
      win[0] = tok.bosId;
      model.forward(win, n, 0);
    }
    for (const L of r.layers) {
      const c = counts[L.layer];
      const recall = c.tp / (c.tp + c.fn),
        precision = c.tp / (c.tp + c.fp);
      // f32 kernels vs f64 here: a handful of scores right at the threshold may differ
      assert.ok(
        Math.abs(recall - L.heldout.recall) < 2e-3,
        `layer ${L.layer}: reported recall ${L.heldout.recall}, counted ${recall}`,
      );
      assert.ok(
        Math.abs(precision - L.heldout.precision) < 2e-3,
        `layer ${L.layer}: reported precision ${L.heldout.precision}, counted ${precision}`,
      );
      assert.ok(Math.abs((c.tp + c.fn) / (1000 * nFF) - L.heldout.trueShare) < 1e-9);
    }
  } finally {
    await model.dispose();
  }
});

test("PWRI GGUF: written, read back, converted to a store, run with --sparsity predictor; --store adds the same predictors", async (t) => {
  const r = trained ?? (await trainPredictors(TRAIN_OPTS));
  const dir = tempDir("predictors-");
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const pwri = join(dir, "relu.pwri.gguf");
  await writePredictorGGUF({ input: RELU, output: pwri, predictors: r.predictors, fsync: false });

  // read back: every key and tensor of the input, plus the predictors and the threshold
  const src = GGUFFile.open(RELU),
    out = GGUFFile.open(pwri);
  try {
    assert.equal(out.magic, "PWRI");
    assert.equal(out.getNumber("powerinfer.sparse_threshold"), 0);
    for (const [k, v] of src.metadata) assert.deepEqual(out.metadata.get(k), v, `metadata ${k}`);
    for (const t of src.tensors.values()) {
      const o = out.tensor(t.name);
      assert.deepEqual([o.dims, o.type], [t.dims, t.type], t.name);
      assert.ok(Buffer.from(out.tensorData(t.name)).equals(Buffer.from(src.tensorData(t.name))), `${t.name} bytes`);
    }
    for (let l = 0; l < 6; l++) {
      const p = r.predictors[l];
      assert.deepEqual(out.tensor(`blk.${l}.fc1.weight`).dims, [256, p.hidden]);
      assert.deepEqual(out.tensor(`blk.${l}.fc2.weight`).dims, [p.hidden, 1024]);
      assert.deepEqual(new Float32Array(out.tensorData(`blk.${l}.fc2.weight`).slice().buffer), p.fc2);
    }
  } finally {
    src.close();
    out.close();
  }

  // F16 predictors: PowerInfer's default type; the values are the f32 ones rounded
  const pwri16 = join(dir, "relu.pwri-f16.gguf");
  await writePredictorGGUF({ input: RELU, output: pwri16, predictors: r.predictors, type: "f16", fsync: false });
  const g16 = GGUFFile.open(pwri16);
  try {
    const t = g16.tensor("blk.4.fc1.weight");
    assert.equal(t.type, GGMLType.F16);
    const half = new Uint16Array(g16.tensorData(t.name).slice().buffer);
    const want = r.predictors[4].fc1;
    assert.equal(half.length, want.length);
    for (let i = 0; i < half.length; i++)
      assert.ok(Math.abs(f16ToF32(half[i]) - want[i]) <= Math.abs(want[i]) * 2 ** -11 + 2 ** -24, `fc1[${i}]`);
  } finally {
    g16.close();
  }

  // convert carries fc1/fc2 and the threshold into the store
  const fromPwri = join(dir, "from-pwri.pi");
  await convertToStore({ input: pwri, output: fromPwri, fsync: false });
  // --store: predictors added to a store converted from the dense model
  const plain = join(dir, "plain.pi");
  await convertToStore({ input: RELU, output: plain, fsync: false });
  const before = NeuronStore.open(plain);
  const bundlesBefore = new Uint8Array(4 * before.ffn.bundleBytes);
  before.readBundles(3, 100, 4, bundlesBefore);
  before.close();
  await addPredictorsToStore({ store: plain, model: RELU, predictors: r.predictors, fsync: false });
  for (const path of [fromPwri, plain]) {
    const s = NeuronStore.open(path);
    try {
      s.verifyAll();
      assert.equal(s.getNumber("powerinfer.sparse_threshold"), 0);
      for (let l = 0; l < 6; l++)
        assert.deepEqual(
          new Float32Array(s.tensorData(`blk.${l}.fc1.weight`).slice().buffer),
          r.predictors[l].fc1,
          `${path} fc1 of layer ${l}`,
        );
      const b = new Uint8Array(bundlesBefore.length);
      s.readBundles(3, 100, 4, b);
      assert.ok(Buffer.from(b).equals(Buffer.from(bundlesBefore)), `${path}: FFN bundles unchanged`);
    } finally {
      s.close();
    }
  }

  // a hot-first store (neurons stored in another order than the predictor scores them)
  const hotFirst = join(dir, "hot-first.pi");
  const rnd = (i: number) => ((i * 2654435761) >>> 0) / 2 ** 32;
  await convertToStore({
    input: RELU,
    output: hotFirst,
    fsync: false,
    profile: {
      layers: Array.from({ length: 6 }, (_, l) => ({
        frequency: Array.from({ length: 1024 }, (_, i) => rnd(i + 7 * l)),
      })),
    },
  });
  await addPredictorsToStore({ store: hotFirst, model: RELU, predictors: r.predictors, fsync: false });

  // a store that fails its checksums mid-copy: an error, and the file stays exactly as it was
  const bad = join(dir, "bad.pi");
  copyFileSync(plain, bad);
  const bytes = readFileSync(bad);
  const at = NeuronStore.open(bad);
  const flip = at.bundleOffset(2, 7) + 100;
  at.close();
  bytes[flip] ^= 0x40;
  writeFileSync(bad, bytes);
  await assert.rejects(
    addPredictorsToStore({ store: bad, model: RELU, predictors: r.predictors, fsync: false }),
    /checksum mismatch.*layer 2 FFN/,
  );
  assert.ok(readFileSync(bad).equals(bytes), "the failed store was changed");
  assert.deepEqual(
    readdirSync(dir).filter((f) => f.includes(".partial-")),
    [],
  );

  // run: dense vs predictor from both stores, every neuron chosen by the predictor (no hot region)
  const tok = Tokenizer.fromGGUF(GGUFFile.open(RELU));
  const prompt = tok.encode("Once upon a time", { addBos: true });
  const dense = await LlamaModel.load(RELU, { threads: 1, contextSize: 64 });
  const want = (await greedyAsync(dense, prompt, 16)).ids;
  await dense.dispose();
  const runs: number[][] = [];
  for (const path of [fromPwri, plain, hotFirst]) {
    const m = await LlamaModel.load(path, {
      threads: 1,
      contextSize: 64,
      offload: { sparsity: "predictor", cacheBytes: 4 << 20, hotFraction: 0, direct: "auto", onWarning: () => {} },
    });
    try {
      runs.push((await greedyAsync(m, prompt, 16)).ids);
      const s = m.offloaded!.snapshot();
      // the predictor really chooses: fewer neurons than all, more than the ones that fire
      assert.ok(
        s.neuronsComputed < s.neuronsTotal && s.neuronsComputed > 0.1 * s.neuronsTotal,
        `computed ${s.neuronsComputed} of ${s.neuronsTotal}`,
      );
    } finally {
      await m.dispose();
    }
  }
  // the same predictors and bundles: the same tokens whichever way they came, in whatever order stored
  assert.deepEqual(runs[1], runs[0]);
  assert.deepEqual(runs[2], runs[0]);
  let same = 0;
  while (same < want.length && runs[0][same] === want[same]) same++;
  console.log(
    `predictor (small budget) vs dense, greedy: first ${same} of ${want.length} tokens equal\n  dense:     ${JSON.stringify(tok.decode(want))}\n  predictor: ${JSON.stringify(tok.decode(runs[0]))}`,
  );
  // 95% recall misses a few neurons per token: the text may drift, but not from the start
  assert.ok(same >= 4, `predictor and dense differ from token ${same}`);
});

/** Run the CLI expecting a failure; returns [exit code, stderr]. */
async function fails(args: string[]): Promise<[number, string]> {
  try {
    await run(process.execPath, [CLI, "train-predictors", ...args]);
  } catch (e) {
    const err = e as { code: number; stderr: string };
    return [err.code, err.stderr];
  }
  assert.fail(`train-predictors ${args.join(" ")} succeeded`);
}

test("train-predictors refuses bad input with clear errors", async (t) => {
  const dir = tempDir("predictors-cli-");
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const tiny = join(dir, "tiny.txt");
  writeFileSync(tiny, "Once upon a time, there was a cat.\n");
  const store = join(dir, "stories260K.pi");
  await convertToStore({ input: STORIES, output: store, fsync: false });
  const cases: [string[], RegExp][] = [
    [["-m", RELU], /--corpus FILE is required/],
    [["--corpus", TRAIN], /-m MODEL\.gguf is required/],
    [["-m", RELU, "--corpus", join(dir, "missing.txt")], /--corpus .*missing\.txt does not exist/],
    [["-m", store, "--corpus", TRAIN], /is a neuron store; training observes the dense FFN/],
    [["-m", RELU, "--corpus", TRAIN, "--recall", "1.5"], /--recall must be between 0 and 1/],
    [["-m", RELU, "--corpus", TRAIN, "--type", "q8_0"], /--type must be f32 or f16/],
    [["-m", RELU, "--corpus", TRAIN, "--store", store], /was not converted from .*relu-stories\.gguf/],
    [["-m", RELU, "--corpus", TRAIN, "-o", RELU], /would overwrite the model/],
    [["-m", RELU, "--corpus", tiny], /only \d+ training tokens/],
    [["-m", STORIES, "--corpus", tiny, "--heldout", tiny], /uses silu: .*every neuron fires.*--thresholds/],
  ];
  for (const [args, want] of cases) {
    const [code, stderr] = await fails(args);
    assert.notEqual(code, 0, args.join(" "));
    assert.match(stderr, want, `train-predictors ${args.join(" ")}`);
  }
});
