/**
 * A neuron store's manifest must describe the file's layout exactly: regions (fixed tensors,
 * bundle arrays, gate-row copies, bytes declared unused) that do not overlap and leave no
 * undeclared gap. Before, a manifest that moved a fixed tensor by 4096 bytes (with every checksum
 * recomputed, so each chunk still verified) loaded and generated different text with exit 0.
 * Also: NaN in a store's fixed tensor is named at load, like a GGUF's.
 */
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { NeuronStore } from "../src/format/store/index.js";
import { convertToStore } from "../src/offline/convert.js";
import { addPredictorsToStore } from "../src/offline/predictor-files.js";
import { loadModel } from "../src/index.js";
import { CLI, SHARED, tempDir } from "./helpers.js";
import { withManifest } from "./store-edit.js";

const RELU = `${SHARED}/models/relu-stories.gguf`;
const RELU_Q8 = `${SHARED}/models/relu-stories.Q8_0.gguf`;
const dir = tempDir("powerinfer-layout-");
let good: string;

before(async () => {
  good = join(dir, "good.pi");
  await convertToStore({ input: RELU_Q8, output: good, fsync: false });
});

type Manifest = Record<string, any>;

/**
 * A copy of `src` with its manifest edited and, optionally, its data edited too; every checksum
 * (chunks, manifest, header) recomputed, so only the layout checks can object.
 */
const rewritten = (src: string, name: string, edit: (m: Manifest) => void, data?: (b: Buffer) => void): string =>
  withManifest(src, join(dir, name), edit, data);

const fixedIndex = (m: Manifest, name: string) => m.fixed.findIndex((t: { name: string }) => t.name === name);

test("a fixed tensor moved by 4096 bytes either way: refused at open, naming both regions", () => {
  const fwd = rewritten(good, "fwd.pi", (m) => (m.fixed[fixedIndex(m, "blk.1.attn_norm.weight")].offset += 4096));
  assert.throws(
    () => NeuronStore.open(fwd),
    /fwd\.pi: manifest: layout: fixed tensor "[^"]+" \[\d+, \d+\) overlaps fixed tensor "[^"]+" \[\d+, \d+\)/,
  );
  const back = rewritten(good, "back.pi", (m) => (m.fixed[fixedIndex(m, "blk.2.attn_q.weight")].offset -= 4096));
  assert.throws(() => NeuronStore.open(back), /back\.pi: manifest: layout: .*"blk\.2\.attn_q\.weight"/);
  assert.throws(() => NeuronStore.open(fwd), /"blk\.1\.attn_norm\.weight"/);
  // and the CLI says so instead of generating other text with exit 0
  const r = spawnSync(process.execPath, [CLI, "run", "-m", fwd, "-p", "Once", "-n", "4", "--temp", "0"], {
    encoding: "utf8",
  });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /^powerinfer: .*fwd\.pi: manifest: layout: .* overlaps/m);
});

test("bundles and gate-row copies moved, and bytes left undescribed, are refused too", () => {
  const gates = rewritten(good, "gates.pi", (m) => (m.ffn.layers[2].gateRows += 4096));
  assert.throws(() => NeuronStore.open(gates), /layout: .*layer 2 gate rows.* overlaps|overlaps .*layer 2 gate rows/);
  const bundles = rewritten(good, "bundles.pi", (m) => (m.ffn.layers[4].offset -= 8192));
  assert.throws(() => NeuronStore.open(bundles), /layout: .*layer 4 bundles.* overlaps|overlaps .*layer 4 bundles/);
  // a tensor dropped from the manifest leaves its bytes described by nothing
  const gap = rewritten(good, "gap.pi", (m) => m.fixed.splice(fixedIndex(m, "blk.3.ffn_norm.weight"), 1));
  assert.throws(
    () => NeuronStore.open(gap),
    /gap\.pi: manifest: layout: bytes \[\d+, \d+\) are described by nothing in the manifest/,
  );
  // unused regions are regions too: one over a live tensor overlaps it
  const unused = rewritten(good, "unused.pi", (m) => {
    const t = m.fixed[fixedIndex(m, "output_norm.weight")];
    m.unused = [{ offset: t.offset, bytes: 4096, what: "test" }];
  });
  assert.throws(() => NeuronStore.open(unused), /layout: .*unused.* overlaps|overlaps .*unused/);
});

test("a store written before the unused list: gaps tolerated (replaced predictors left some), overlaps not", () => {
  const old = rewritten(good, "old.pi", (m) => delete m.unused);
  NeuronStore.open(old).close();
  const oldGap = rewritten(good, "old-gap.pi", (m) => {
    delete m.unused;
    m.fixed.splice(fixedIndex(m, "blk.3.ffn_norm.weight"), 1);
  });
  NeuronStore.open(oldGap).close();
  const oldMoved = rewritten(good, "old-moved.pi", (m) => {
    delete m.unused;
    m.fixed[fixedIndex(m, "blk.1.attn_norm.weight")].offset += 4096;
  });
  assert.throws(() => NeuronStore.open(oldMoved), /layout: .* overlaps /);
});

test("the FFN must have the model's layers and width", () => {
  const layers = rewritten(good, "layers.pi", (m) => m.ffn.layers.pop());
  assert.throws(() => NeuronStore.open(layers), /manifest: ffn has 5 layers, the model \(llama\.block_count\) has 6/);
});

test("predictors replaced in a store: the old ones are declared unused, and the store opens", async () => {
  const plain = join(dir, "plain.pi");
  await convertToStore({ input: RELU, output: plain, fsync: false });
  const predictors = Array.from({ length: 6 }, (_, l) => ({
    hidden: 32,
    nIn: 256,
    nOut: 1024,
    fc1: Float32Array.from({ length: 32 * 256 }, (_, i) => Math.sin(i + l) / 16),
    fc2: Float32Array.from({ length: 1024 * 32 }, (_, i) => Math.cos(i * 3 + l) / 16),
    threshold: 0,
  }));
  await addPredictorsToStore({ store: plain, model: RELU, predictors, fsync: false });
  await addPredictorsToStore({ store: plain, model: RELU, predictors, fsync: false });
  const s = NeuronStore.open(plain);
  try {
    s.verifyAll();
    const unused = s.manifest.unused ?? [];
    assert.equal(unused.length, 12, "6 fc1 and 6 fc2 of the first predictors");
    assert.ok(unused.every((u) => /^replaced predictor blk\.\d\.fc[12]\.weight$/.test(u.what)));
  } finally {
    s.close();
  }
});

test("NaN in a store's fixed tensor (chunk checksum recomputed) is named at load with the store", async () => {
  const src = NeuronStore.open(good);
  const t = src.tensor("blk.0.attn_v.weight");
  src.close();
  // Q8_0 [256, 128]: 8 blocks of 34 bytes per row; the scale of row 5, block 1
  const path = rewritten(
    good,
    "nan.pi",
    () => undefined,
    (b) => b.writeUInt16LE(0x7e00, t.offset + (5 * 8 + 1) * 34),
  );
  await assert.rejects(
    loadModel({ modelPath: path, threads: 1 }),
    /nan\.pi: tensor "blk\.0\.attn_v\.weight" \(Q8_0\) holds NaN in the scale of the block at row 5, columns 32\.\.63/,
  );
});

test("entries whose offsets were swapped (the layout still tiles) are refused by their order", () => {
  const layers = rewritten(good, "swapped-layers.pi", (m) => {
    const [a, b] = [m.ffn.layers[1], m.ffn.layers[2]];
    [a.offset, b.offset, a.gateRows, b.gateRows] = [b.offset, a.offset, b.gateRows, a.gateRows];
  });
  assert.throws(() => NeuronStore.open(layers), /layout: ffn layer 2 bundles at \d+ do not come after layer 1's/);
  const norms = rewritten(good, "swapped-norms.pi", (m) => {
    const a = m.fixed[fixedIndex(m, "blk.0.attn_norm.weight")];
    const b = m.fixed[fixedIndex(m, "blk.0.ffn_norm.weight")];
    [a.offset, b.offset] = [b.offset, a.offset];
  });
  assert.throws(
    () => NeuronStore.open(norms),
    /layout: fixed tensor "[^"]+" at \d+ comes after "[^"]+" at \d+ in the manifest but not in the file/,
  );
  const gates = rewritten(good, "gates-elsewhere.pi", (m) => {
    const [a, b] = [m.ffn.layers[0], m.ffn.layers[1]];
    [a.gateRows, b.gateRows] = [b.gateRows, a.gateRows];
  });
  assert.throws(() => NeuronStore.open(gates), /layout: ffn layer 0 gate rows at \d+ do not follow its bundles/);
});
