/**
 * Activation profiling: the counting and quantile pieces on known data, threshold calibration on
 * a real SiLU model (stories260K), ReLU frequencies against the reference sparsity, the profile's
 * journey into a store (hot-first order, thresholds in the metadata) and onto a GGUF
 * (--thresholds), and the refusals: another model's profile, no thresholds, bad corpora.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { GGUFFile } from "../src/format/gguf.js";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel, THRESHOLDS_KEY } from "../src/model/model.js";
import { convertToStore, hotFirstOrder } from "../src/offline/convert.js";
import { corpusTokens, readCorpus } from "../src/offline/corpus.js";
import { perplexity } from "../src/offline/perplexity.js";
import {
  FiringCounts,
  fingerprintOfPath,
  MagnitudeHistogram,
  profileModel,
  readProfile,
  thresholdsForModel,
  type ProfileFile,
} from "../src/offline/profile.js";
import { parseArgs } from "../src/cli/args.js";
import { LOAD_FLAGS, loadOptions } from "../src/cli/model-flags.js";
import { Tokenizer } from "../src/tokenizer/index.js";
import { CLI, SHARED, silu, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const RELU = `${SHARED}/models/relu-stories.gguf`;
const RELU_Q8 = `${SHARED}/models/relu-stories.Q8_0.gguf`;
const TRAIN = `${SHARED}/data/stories-train.txt`;
const HELDOUT = `${SHARED}/data/stories-heldout.txt`;
const run = promisify(execFile);

test("FiringCounts counts firings and adjacent pairs; the histogram quantile cuts the asked share", () => {
  const c = new FiringCounts(4);
  // rows: neuron magnitudes; threshold 0.5
  c.add(Float32Array.from([0.9, 0.6, 0.1, 0.7, /**/ 0.2, 0.8, 0.9, 0.5, /**/ 1, 1, 1, 1]), 3, 0.5);
  assert.deepEqual(Array.from(c.fired), [2, 3, 2, 2]);
  assert.deepEqual(Array.from(c.pairs), [2, 2, 1]);
  assert.equal(c.tokens, 3);
  assert.equal(c.sparsity, 1 - 9 / 12);

  const h = new MagnitudeHistogram();
  const n = 100000;
  const vals = new Float32Array(n);
  let seed = 7;
  for (let i = 0; i < n; i++) {
    seed = (seed * 1103515245 + 12345) >>> 0;
    vals[i] = Math.exp((seed / 2 ** 32) * 12 - 9); // log-uniform over 12 e-folds
  }
  h.add(new Uint32Array(vals.buffer), n);
  for (const q of [0.1, 0.5, 0.9]) {
    const t = h.quantile(q);
    let below = 0;
    for (const v of vals) if (v <= t) below++;
    assert.ok(Math.abs(below / n - q) < 0.003, `quantile ${q}: threshold ${t} cuts ${below / n}`);
  }
});

test("stories260K (SiLU): thresholds calibrated to 50% sparsity cut half the activations, as the model applies them", async () => {
  const r = await profileModel({
    model: STORIES,
    corpus: TRAIN,
    tokens: 1200,
    contextSize: 128,
    targetSparsity: 0.5,
    threads: 2,
  });
  const p = r.profile;
  assert.equal(p.tokens, 1200);
  assert.equal(p.targetSparsity, 0.5);
  assert.match(p.criterion, /\|silu\(gate\)\| > threshold/);
  assert.equal(p.layers.length, 5);
  for (const [l, L] of p.layers.entries()) {
    assert.equal(L.frequency.length, 172);
    assert.equal(L.coactivation!.length, 171);
    assert.ok(L.threshold! > 0, `layer ${l} threshold ${L.threshold}`);
    for (let i = 0; i < 171; i++) assert.ok(L.coactivation![i] <= Math.min(L.frequency[i], L.frequency[i + 1]) + 1e-7);
    // Layer 0 sees the calibration's own inputs (nothing is cut before it): exactly the target.
    // Deeper layers see inputs shifted by the cuts above them: near it.
    const tol = l === 0 ? 0.003 : 0.05;
    assert.ok(Math.abs(L.sparsity! - 0.5) < tol, `layer ${l}: measured sparsity ${L.sparsity}`);
  }
  assert.equal(r.notes.length, 0);

  // Independent count of layer 2 with the thresholds applied by the model (as the runtime will).
  const tok = (() => {
    const f = GGUFFile.open(STORIES);
    try {
      return Tokenizer.fromGGUF(f);
    } finally {
      f.close();
    }
  })();
  const ids = corpusTokens(tok, readCorpus(TRAIN), { maxTokens: 1200 });
  const cut = Float32Array.from(p.layers, (L) => L.threshold!);
  const model = await LlamaModel.load(STORIES, {
    threads: 2,
    contextSize: 128,
    batchSize: 128,
    activationThresholds: cut,
  });
  const fired = new Float64Array(172);
  model.setFFNObserver((o) => {
    if (o.layer !== 2) return;
    for (let t = 0; t < o.n; t++)
      for (let i = 0; i < 172; i++) if (Math.abs(silu(o.gate[t * 172 + i])) > cut[2]) fired[i]++;
  });
  for (let s = 0; s < ids.length; s += 128) {
    const w = ids.slice(s, s + 128);
    w[0] = tok.bosId;
    model.forward(w, w.length, 0);
  }
  await model.dispose();
  let worst = 0;
  for (let i = 0; i < 172; i++) worst = Math.max(worst, Math.abs(fired[i] / 1200 - p.layers[2].frequency[i]));
  assert.ok(worst <= 2 / 1200, `layer 2 frequencies vs an independent count: max difference ${worst}`);

  // Without thresholds a SiLU profile says so.
  const plain = await profileModel({ model: STORIES, corpus: TRAIN, tokens: 200, contextSize: 64, threads: 2 });
  assert.match(plain.notes.join("\n"), /almost never exactly zero.*--target-sparsity/);
  assert.ok(plain.profile.layers.every((L) => L.threshold === undefined && L.sparsity! < 0.01));
});

test("relu-stories: frequencies match the reference sparsity, --target-sparsity is refused, quantizations share the fingerprint", async () => {
  const r = await profileModel({ model: RELU, corpus: HELDOUT, tokens: 1500, contextSize: 256, threads: 2 });
  const ref = JSON.parse(readFileSync(`${SHARED}/reference/relu-stories.json`, "utf8")).ffn_activation_sparsity
    .per_layer_zero_frac as number[];
  r.profile.layers.forEach((L, l) =>
    assert.ok(Math.abs(L.sparsity! - ref[l]) < 0.05, `layer ${l}: ${L.sparsity} vs reference ${ref[l]}`),
  );
  assert.equal(r.profile.criterion, "gate > 0");
  assert.equal(r.notes.length, 0);
  await assert.rejects(
    profileModel({ model: RELU, corpus: HELDOUT, tokens: 100, targetSparsity: 0.5 }),
    /uses relu.*nothing to calibrate/,
  );
  assert.deepEqual(fingerprintOfPath(RELU_Q8), fingerprintOfPath(RELU));
  assert.notEqual(fingerprintOfPath(STORIES).hash, fingerprintOfPath(RELU).hash);
});

test("a calibrated profile goes into a store (hot-first, thresholds in the metadata) and onto a GGUF (--thresholds); another model's is refused", async () => {
  const dir = tempDir();
  const profPath = join(dir, "stories.json");
  // through the CLI: writes the file, prints the table
  const { stderr } = await run(process.execPath, [
    CLI,
    "profile",
    "-m",
    STORIES,
    "--corpus",
    TRAIN,
    "--tokens",
    "600",
    "-c",
    "64",
    "-t",
    "2",
    "--target-sparsity",
    "0.5",
    "-o",
    profPath,
  ]);
  assert.match(stderr, /layer\s+threshold\s+sparsity/);
  const prof = readProfile(profPath) as ProfileFile;
  assert.equal(prof.model.file, "stories260K.gguf");
  assert.equal(prof.corpus.file, "stories-train.txt");
  const cut = Float32Array.from(prof.layers, (L) => L.threshold!);

  const pi = join(dir, "stories.pi");
  await convertToStore({ input: STORIES, output: pi, profile: profPath, fsync: false });
  const store = NeuronStore.open(pi);
  assert.deepEqual(store.getArray(THRESHOLDS_KEY), cut);
  assert.deepEqual(store.layer(3).order, hotFirstOrder(prof.layers[3].frequency));
  store.close();

  // The store in gate mode applies them with no flag, and scores as the GGUF with --thresholds does.
  const args = parseArgs(["-m", STORIES, "--thresholds", profPath], LOAD_FLAGS);
  const opts = loadOptions("perplexity", args);
  assert.deepEqual(opts.activationThresholds, cut);
  const tok = (() => {
    const f = GGUFFile.open(STORIES);
    try {
      return Tokenizer.fromGGUF(f);
    } finally {
      f.close();
    }
  })();
  const tokens = corpusTokens(tok, readCorpus(HELDOUT), { maxTokens: 200 });
  const dense = await LlamaModel.load(STORIES, {
    threads: 2,
    contextSize: 48,
    activationThresholds: opts.activationThresholds,
  });
  const d = await perplexity(dense, tokens, { contextSize: 48, chunks: 2, bos: tok.bosId, measureSparsity: true });
  await dense.dispose();
  const off = await LlamaModel.load(pi, { threads: 2, contextSize: 48, offload: { sparsity: "gate" } });
  assert.deepEqual(off.thresholds, cut);
  const o = await perplexity(off, tokens, { contextSize: 48, chunks: 2, bos: tok.bosId, measureSparsity: true });
  await off.dispose();
  // Not to the bit: the two sum the down projections in other orders (bundles against a matrix),
  // and a threshold turns a last-bit difference in a layer's input into a neuron kept or cut, so
  // the scores part by a few 1e-4 (5.7e-4 once the F32 matvec changed its order). Without the
  // thresholds the score moves by some 30%: the tolerance still tells applied from ignored.
  const plain = await LlamaModel.load(STORIES, { threads: 2, contextSize: 48 });
  const u = await perplexity(plain, tokens, { contextSize: 48, chunks: 2, bos: tok.bosId });
  await plain.dispose();
  assert.ok(Math.abs(u.ppl - d.ppl) / d.ppl > 0.1, `thresholds moved the score from ${u.ppl} to ${d.ppl} only`);
  assert.ok(Math.abs(o.ppl - d.ppl) / d.ppl < 2e-3, `store gate ${o.ppl} vs GGUF with thresholds ${d.ppl}`);
  assert.ok(d.sparsity! > 0.35 && o.sparsity! > 0.35, `sparsity dense ${d.sparsity}, store ${o.sparsity}`);
  assert.ok(Math.abs(d.sparsity! - o.sparsity!) < 0.01, `sparsity dense ${d.sparsity}, store ${o.sparsity}`);

  // Another model: a different shape, or the same shape with other weights.
  const reluProf = join(dir, "relu.json");
  writeFileSync(reluProf, JSON.stringify({ ...prof, model: { ...prof.model, nEmbd: 256, file: "relu-stories.gguf" } }));
  await assert.rejects(
    convertToStore({ input: STORIES, output: join(dir, "x.pi"), profile: reluProf }),
    /from another model \(profiled on relu-stories\.gguf\): its nEmbd is 256/,
  );
  const other = join(dir, "other.json");
  writeFileSync(other, JSON.stringify({ ...prof, model: { ...prof.model, hash: "sha256:" + "0".repeat(64) } }));
  await assert.rejects(
    convertToStore({ input: STORIES, output: join(dir, "x.pi"), profile: other }),
    /same shape, but the weights differ/,
  );
  assert.throws(() => thresholdsForModel(other, STORIES), /from another model/);
  assert.throws(() => thresholdsForModel(profPath, RELU), /from another model.*nLayer is 5/);
  // A profile without thresholds cannot be applied.
  const noCut = join(dir, "nocut.json");
  writeFileSync(noCut, JSON.stringify({ ...prof, layers: prof.layers.map(({ threshold: _t, ...L }) => L) }));
  assert.throws(
    () => thresholdsForModel(noCut, STORIES),
    /has no activation thresholds: make one with powerinfer profile/,
  );
});

test("profile refuses bad corpora and a neuron store", async () => {
  const dir = tempDir();
  const empty = join(dir, "empty.txt");
  writeFileSync(empty, "");
  const bin = join(dir, "data.bin");
  writeFileSync(bin, Uint8Array.from([1, 2, 3, 0, 5]));
  await assert.rejects(profileModel({ model: STORIES, corpus: empty }), /corpus .*empty\.txt is empty/);
  await assert.rejects(
    profileModel({ model: STORIES, corpus: bin }),
    /data\.bin is not a text file: NUL byte at byte offset 3/,
  );
  await assert.rejects(profileModel({ model: STORIES, corpus: join(dir, "nope.txt") }), /nope\.txt does not exist/);
  await assert.rejects(profileModel({ model: STORIES, corpus: TRAIN, targetSparsity: 1 }), /between 0 and 1/);
  const pi = join(dir, "s.pi");
  await convertToStore({ input: STORIES, output: pi, fsync: false });
  await assert.rejects(profileModel({ model: pi, corpus: TRAIN }), /is a neuron store: .*give the GGUF model/);
  await assert.rejects(
    run(process.execPath, [CLI, "profile", "-m", STORIES, "--corpus", empty, "-o", join(dir, "p.json")]),
    (e: { stderr: string; code: number }) => {
      assert.match(e.stderr, /empty\.txt is empty/);
      assert.equal(e.code, 1);
      return true;
    },
  );
});
