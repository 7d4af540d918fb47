/**
 * Activation predictors converted at load (LoadOptions.predictorType, default "q8_0"): fc1 to
 * Q8_0, fc2 to Q8_0 (packed, or in GGUF's rows) or F16 (whichever pair packs smaller for the
 * shape), the hidden width padded with zeros (fc1 zero rows, fc2 zero columns). The planted
 * predictors of two tiny predictable models (F16; hidden 33, where fc2 goes F16, and hidden 31,
 * SmallThinker-4B's, where it goes Q8_0 rows) are loaded both ways; the padding must contribute
 * exactly nothing, the scores must agree within the rounding of the types kept, and the bytes
 * counted must be those allocated.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { GGMLType } from "../src/format/ggml-types.js";
import { NeuronStore } from "../src/format/store/index.js";
import { dequantize, quantizeRow, rowBytes } from "../src/format/quant.js";
import { LlamaModel } from "../src/model/model.js";
import { WeightLoader, type Matrix } from "../src/model/weight-loader.js";
import { readConfig, type ModelConfig } from "../src/model/config.js";
import { residentBytes } from "../src/model/resident-bytes.js";
import { fc2Balance, Predictor, predictorBytes, predictorShapes } from "../src/model/offload/predictor.js";
import { GGUFFile, type ModelFile } from "../src/format/gguf.js";
import { GGUFWriter } from "../src/format/gguf-writer.js";
import { convertToStore } from "../src/offline/convert.js";
import { plannedFiring, synthesize } from "../src/offline/synth.js";
import type { SynthShape } from "../src/offline/synth/shapes.js";
import { ARENA_START, Arena } from "../src/runtime/arena.js";
import { ThreadPool } from "../src/runtime/pool.js";
import {
  activationBytes,
  layoutKernel,
  layoutName,
  prepareKernel,
  weightKernel,
} from "../src/runtime/weight-kernels.js";
import { randomTokens, tempDir, uniforms } from "./helpers.js";

const dir = tempDir("predictor-q8-");
/** A tiny predictable model's files: the GGUF, its planted predictors, its store with them. */
interface Tiny {
  gguf: string;
  preds: string;
  pi: string;
}
const made = new Map<string, Promise<Tiny>>();
/**
 * The tiny predictable model of `shape` and gate rank `rank` (F16 planted predictors, hidden
 * 2 rank + 1: 33 by default) and its store.
 */
function model(shape: SynthShape = "tiny", rank = 16): Promise<Tiny> {
  const name = `${shape}-${rank}`;
  let m = made.get(name);
  if (!m) {
    const f = {
      gguf: join(dir, `${name}.gguf`),
      preds: join(dir, `${name}.predictors.gguf`),
      pi: join(dir, `${name}.pi`),
    };
    m = (async () => {
      await synthesize({
        shape,
        act: "relu",
        type: "q8_0",
        seed: 4,
        out: f.gguf,
        fsync: false,
        sparsity: 0.9,
        gateRank: rank,
        predictorsOut: f.preds,
      });
      await convertToStore({ input: f.gguf, output: f.pi, predictors: f.preds, fsync: false });
      return f;
    })();
    made.set(name, m);
  }
  return m;
}

/**
 * fc2 as tiny models keep it: [shape, gate rank, fc2's type and layout, hidden in memory]. At
 * hidden 33, F16 pads to 40 and Q8_0 rows to 64: F16's pair is the smaller where fc1's padded rows
 * cost more than fc2's bytes save (nFF below 2.25 nEmbd: llama3-tiny's 512 x 256, not tiny's 768 x 256).
 */
const TINY_FC2 = [
  ["tiny", 16, GGMLType.Q8_0, "rows", 64],
  ["tiny", 15, GGMLType.Q8_0, "rows", 32], // hidden 31 -> 32, SmallThinker-4B's
  ["llama3-tiny", 16, GGMLType.F16, null, 40],
] as const;

/** fn over `file`, a bare arena and a one-thread pool over it; all closed after. */
async function withArena<F extends ModelFile>(file: F, fn: (file: F, arena: Arena, pool: ThreadPool) => void) {
  const arena = new Arena(16 << 20);
  const pool = await ThreadPool.create(arena.memory, 1);
  try {
    fn(file, arena, pool);
  } finally {
    await pool.dispose();
    file.close();
  }
}

/** The tiny model's store, made first. */
const tinyStore = async (shape: SynthShape = "tiny", rank = 16) => NeuronStore.open((await model(shape, rank)).pi);

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

test("WeightLoader.requantMatrix to Q8_0 (packed, and fc2 in rows): padded fc1 rows and fc2 columns are exactly zero; real ones match the F16 values", async () => {
  await withArena(await tinyStore(), (store, arena, pool) => {
    const t1 = store.tensor("blk.1.fc1.weight"),
      t2 = store.tensor("blk.1.fc2.weight");
    assert.equal(t1.type, GGMLType.F16);
    const [nEmbd, hidden] = t1.dims;
    const nFF = t2.dims[1];
    assert.equal(hidden, 33);
    const loader = new WeightLoader(store, arena, pool);
    const fc1 = loader.requantMatrix("blk.1.fc1.weight", nEmbd, hidden, nEmbd, 64, GGMLType.Q8_0);
    assert.deepEqual([fc1.rows, fc1.cols], [64, nEmbd]);
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

    for (const to of [GGMLType.Q8_0, layoutKernel(GGMLType.Q8_0, "rows")]) {
      const fc2 = loader.requantMatrix("blk.1.fc2.weight", hidden, nFF, 64, nFF, to);
      const what = layoutName(fc2.kernel.type, fc2.kernel.layout);
      assert.deepEqual([fc2.rows, fc2.cols, fc2.kernel], [nFF, 64, typeof to === "number" ? weightKernel(to) : to]);
      // fc2: the padded columns read nothing (input only there: every output exactly 0) ...
      const pad = new Float32Array(64);
      for (let c = hidden; c < 64; c++) pad[c] = 1 + c;
      const y0 = matvec(arena, pool, fc2, pad);
      assert.ok(
        y0.every((v) => v === 0),
        `${what} fc2 reads its padded columns: ${y0.find((v) => v !== 0)}`,
      );
      // ... and the real ones match
      const h = uniforms(64, 11).map((v, c) => (c < hidden ? Math.abs(v) : 0));
      const y2 = matvec(arena, pool, fc2, h);
      let scale2 = 0;
      for (let i = 0; i < w2.length; i++) scale2 = Math.max(scale2, Math.abs(w2[i]));
      for (let r = 0; r < nFF; r++) {
        let want = 0;
        for (let c = 0; c < hidden; c++) want += w2[r * hidden + c] * h[c];
        assert.ok(Math.abs(y2[r] - want) <= 0.01 * scale2 * hidden, `${what} fc2 row ${r}: ${y2[r]} vs ${want}`);
      }
      if (fc2.kernel.layout !== "rows") continue;
      // in rows, memory holds ggml's Q8_0 rows of the file's values, zeros past them, and nothing more
      const rb = rowBytes(GGMLType.Q8_0, 64);
      assert.equal(fc2.kernel.packedBytes(nFF, 64), nFF * rb);
      const want = new Uint8Array(nFF * rb);
      const row = new Float32Array(64);
      for (let r = 0; r < nFF; r++) {
        row.set(w2.subarray(r * hidden, (r + 1) * hidden));
        quantizeRow(GGMLType.Q8_0, row, want.subarray(r * rb, (r + 1) * rb));
      }
      assert.deepEqual(arena.u8(fc2.ptr, nFF * rb), want);
    }
    // a column width that is no multiple of 32 is refused
    assert.throws(
      () => loader.requantMatrix("blk.1.fc2.weight", hidden, nFF, 48 + 1, nFF, GGMLType.Q8_0),
      /as Q8_0 \(columns must pad to a multiple of 32\)/,
    );
  });
});

test("WeightLoader.requantMatrix to F16: the file's F16 bits in rowOrder, padded columns and rows exactly zero", async () => {
  await withArena(await tinyStore(), (store, arena, pool) => {
    const name = "blk.1.fc2.weight";
    const [hidden, nFF] = store.tensor(name).dims;
    const loader = new WeightLoader(store, arena, pool);
    const order = Int32Array.from({ length: nFF }, (_, r) => (r * 7) % nFF); // nFF is odd to 7: a permutation
    assert.equal(new Set(order).size, nFF);
    const fc2 = loader.requantMatrix(name, hidden, nFF, 40, nFF + 3, GGMLType.F16, order);
    assert.deepEqual([fc2.kernel.type, fc2.rows, fc2.cols], [GGMLType.F16, nFF + 3, 40]);
    // F16 packs GGUF's rows: row r holds the file's row order[r], then zeros; the padding rows are zero
    const file = new Uint16Array(store.tensorData(name).slice().buffer);
    const mem = new Uint16Array(arena.u8(fc2.ptr, (nFF + 3) * 40 * 2).slice().buffer);
    let wrong = 0;
    for (let r = 0; r < nFF + 3; r++)
      for (let c = 0; c < 40; c++) {
        const want = r < nFF && c < hidden ? file[order[r] * hidden + c] : 0;
        if (mem[r * 40 + c] !== want) wrong++;
      }
    assert.equal(wrong, 0, `${wrong} halves differ from the file's (or from zero in the padding)`);
    // the padded columns read nothing
    const pad = new Float32Array(40);
    for (let c = hidden; c < 40; c++) pad[c] = 1 + c;
    assert.ok(matvec(arena, pool, fc2, pad).every((v) => v === 0));
    assert.throws(
      () => loader.requantMatrix(name, hidden, nFF, hidden - 1, nFF, GGMLType.F16),
      /cannot pad \d+ x 33 to \d+ x 32 as F16/,
    );
    assert.throws(() => loader.requantMatrix(name, hidden, nFF, 40, nFF, GGMLType.Q4_0), /only Q8_0 and F16/);
  });
});

// An F32 or BF16 weight past F16's range cannot be kept as F16. Loading refuses it, naming it,
// rather than falling back to Q8_0: the bytes fc2 takes were laid out before any weight was read.
test("WeightLoader.requantMatrix: a weight F16 cannot hold is refused with its tensor, file row and column", async () => {
  const path = join(dir, "wide-values.gguf");
  const w = new GGUFWriter(path, { fsync: false });
  w.setMetadata("general.architecture", "llama");
  const [cols, rows] = [40, 8];
  const values = new Float32Array(cols * rows).map((_, i) => ((i % 13) - 6) / 8);
  values[3 * cols + 5] = 70000;
  const edge = new Float32Array(cols * rows);
  edge[2 * cols + 1] = -65519; // rounds to F16's largest, -65504
  w.addTensor("big.weight", [cols, rows], GGMLType.F32, new Uint8Array(values.buffer));
  w.addTensor("edge.weight", [cols, rows], GGMLType.F32, new Uint8Array(edge.buffer));
  await w.finish();
  await withArena(GGUFFile.open(path), (file, arena, pool) => {
    const loader = new WeightLoader(file, arena, pool);
    const refused =
      /wide-values\.gguf: tensor "big\.weight" has weight 70000 at row 3, column 5, beyond what F16 holds/;
    assert.throws(() => loader.requantMatrix("big.weight", cols, rows, cols, rows, GGMLType.F16), refused);
    // in another row order, the file's row is named (memory row 4 here)
    const reversed = Int32Array.from({ length: rows }, (_, r) => rows - 1 - r);
    assert.throws(() => loader.requantMatrix("big.weight", cols, rows, cols, rows, GGMLType.F16, reversed), refused);
    // Q8_0 holds it (its block scale is 70000 / 127)
    const q = loader.requantMatrix("big.weight", cols, rows, 64, rows, GGMLType.Q8_0);
    const x = new Float32Array(64);
    x[5] = 1;
    assert.ok(Math.abs(matvec(arena, pool, q, x)[3] - 70000) <= 70000 / 254);
    const e = loader.requantMatrix("edge.weight", cols, rows, cols, rows, GGMLType.F16);
    const y = new Float32Array(cols);
    y[1] = 1;
    assert.equal(matvec(arena, pool, e, y)[2], -65504);
  });
});

test("predictorShapes: fc2 within one 128-column group as Q8_0 rows or F16, whichever pair packs smaller, else Q8_0 packed", () => {
  const q8 = weightKernel(GGMLType.Q8_0),
    rows = layoutKernel(GGMLType.Q8_0, "rows");
  /** Layer 0's predictor of a file with F16 predictors of this shape. */
  const shape = (nEmbd: number, nFF: number, hidden: number, type: "q8_0" | "original" = "q8_0") => {
    const dims = (name: string) => (name.includes(".fc1.") ? [nEmbd, hidden] : [hidden, nFF]);
    const file = { path: "p.gguf", tensor: (name: string) => ({ name, type: GGMLType.F16, dims: dims(name) }) };
    const cfg = { nLayer: 1, nExpert: 0, nEmbd, nFF } as ModelConfig;
    return predictorShapes(file as unknown as ModelFile, cfg, type)[0];
  };
  // SmallThinker-4B's experts: hidden 31 -> 32. Packed as Q8_0, fc2's rows would each pad to 128
  // columns; as F16 they take 64 bytes; in Q8_0's GGUF rows 34.
  const st = shape(1536, 768, 31);
  assert.deepEqual(
    [st.fc1Type, st.fc1Act, st.fc2Type, st.fc2Layout, st.fc2Act, st.hidden, st.fileHidden, st.requantized],
    [GGMLType.Q8_0, q8.act, GGMLType.Q8_0, "rows", "q16_0", 32, 31, true],
  );
  assert.equal(st.fc2Bytes, 768 * 34);
  assert.equal(q8.packedBytes(768, 32), 110592, "Q8_0 packed would take 4.2x as much");
  assert.equal(weightKernel(GGMLType.F16).packedBytes(768, 32), 49152, "F16 1.9x");
  assert.equal(st.fc1Bytes, q8.packedBytes(32, 1536));
  assert.equal(predictorBytes(st), st.fc1Bytes + st.fc2Bytes);
  // [hidden in the file, fc2's type and layout, hidden in memory]
  const cases: [number, GGMLType, "rows" | null, number][] = [
    [33, GGMLType.F16, null, 40], // F16 69120 + 61440 bytes against rows 110592 + 52224 (fc1 padded to 64 rows)
    [48, GGMLType.F16, null, 48], // F16 82944 + 73728 against rows 110592 + 52224
    [49, GGMLType.Q8_0, "rows", 64], // F16 (56 wide) 96768 + 86016 against rows 110592 + 52224
    [64, GGMLType.Q8_0, "rows", 64],
    [96, GGMLType.Q8_0, "rows", 96], // rows 165888 + 78336 against Q8_0 packed 165888 + 110592
    [128, GGMLType.Q8_0, "rows", 128], // rows 104448 against packed 110592 for fc2
    [129, GGMLType.Q8_0, null, 160], // past one group: Q8_0 packed (F16 or rows would be smaller)
    [256, GGMLType.Q8_0, null, 256],
  ];
  for (const [h, type, layout, width] of cases) {
    const s = shape(1536, 768, h);
    assert.deepEqual([s.fc2Type, s.fc2Layout, s.hidden], [type, layout, width], `hidden ${h}`);
    const k = layoutKernel(type, layout);
    assert.equal(s.fc2Act, k.act);
    assert.equal(s.fc2Bytes, k.packedBytes(768, width));
    if (layout === "rows") assert.equal(s.fc2Bytes, rows.packedBytes(768, width));
  }
  // as stored: no padding, each matrix its own type
  const o = shape(1536, 768, 31, "original");
  assert.deepEqual(
    [o.fc1Type, o.fc2Type, o.fc2Layout, o.hidden, o.requantized],
    [GGMLType.F16, GGMLType.F16, null, 31, false],
  );
  assert.equal(o.fc2Bytes, 768 * 31 * 2);
});

for (const [shape, rank, fc2Type, fc2Layout, width] of TINY_FC2) {
  const fc2 = layoutKernel(fc2Type, fc2Layout);
  test(`the predictors' bytes counted (residentBytes) are the bytes Predictor.load allocates (${shape} hidden ${2 * rank + 1}: fc2 ${layoutName(fc2Type, fc2Layout)})`, async () => {
    await withArena(await tinyStore(shape, rank), (store, arena, pool) => {
      const cfg = readConfig(store);
      const shapes = predictorShapes(store, cfg);
      for (const s of shapes) {
        assert.deepEqual([s.fc2Type, s.fc2Layout, s.fc2Act, s.hidden], [fc2Type, fc2Layout, fc2.act, width]);
        assert.equal(s.fc2Bytes, fc2Layout ? cfg.nFF * (width / 32) * 34 : cfg.nFF * width * 2);
      }
      arena.alloc(0, 64);
      const before = arena.used;
      const p = Predictor.load(new WeightLoader(store, arena, pool), cfg, shapes, {
        rowOrder: (g) => store.layer(g).order,
      });
      arena.alloc(0, 64); // up to where the next allocation starts, as the counts are of 64-byte-aligned allocations
      const allocated = arena.used - before;
      for (const m of p.fc2) assert.equal(m.kernel, fc2, "fc2 loaded with the kernel its shape names");
      const r = (predictors: boolean) => residentBytes(store, cfg, { batchSize: 2, contextSize: 16, predictors });
      const [withP, without] = [r(true), r(false)];
      assert.equal(withP.weights - without.weights, allocated);
      // fc1, fc2, and the f32 hidden row
      assert.equal(allocated, shapes.reduce((a, s) => a + predictorBytes(s), 0) + Math.ceil((width * 4) / 64) * 64);
      // fc2's input, prepared in its own format (F16's f32_eo, Q8_0 rows' q16_0), has a buffer of its own
      assert.equal(withP.quantized.get(fc2.act), 2 * activationBytes(fc2.act, width) + 64);
      assert.equal(without.quantized.get(fc2.act), undefined);
    });
  });
}

for (const [shape, rank, fc2Type, fc2Layout, width] of TINY_FC2)
  test(`predictorType q8_0 vs original (${shape} hidden ${2 * rank + 1}: fc2 ${layoutName(fc2Type, fc2Layout)}): scores within Q8_0 rounding of the file's, the same picks on real residuals; padding stays 0; decode gives the same tokens`, async () => {
    const { gguf, pi } = await model(shape, rank);
    const fileHidden = 2 * rank + 1;
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
      // what the layout counts for the model's own wasm memory is what loading allocated
      for (const m of [q8, orig]) {
        const r = m.offloaded!.layout.fixedResident;
        assert.equal(m.fixedArenaBytes, ARENA_START + r.weights + r.buffers + r.kv, "resident bytes as loaded");
      }
      for (let l = 0; l < nLayer; l++) {
        // fc2 as the pair packs smallest (TINY_FC2)
        assert.deepEqual(q8.predictorWidth(l), { fc1Type: GGMLType.Q8_0, fc2Type, fc2Layout, hidden: width });
        assert.deepEqual(orig.predictorWidth(l), {
          fc1Type: GGMLType.F16,
          fc2Type: GGMLType.F16,
          fc2Layout: null,
          hidden: fileHidden,
        });
      }
      // each layer's fc2 as the file holds it (row i: neuron i's fileHidden weights), its columns
      // divided by the powers of two its hidden units were multiplied by where fc2 is Q8_0
      const file = NeuronStore.open(pi);
      const w2 = Array.from({ length: nLayer }, (_, l) => {
        const name = `blk.${l}.fc2.weight`;
        const w = dequantize(GGMLType.F16, file.tensorData(name), nFF * fileHidden);
        if (fc2Type !== GGMLType.Q8_0) return w;
        const colMax = new Float64Array(fileHidden);
        for (let i = 0; i < w.length; i++) colMax[i % fileHidden] = Math.max(colMax[i % fileHidden], Math.abs(w[i]));
        const s = fc2Balance(colMax);
        assert.ok(
          s.some((v) => v !== 1),
          "a planted predictor's constant unit is evened out",
        );
        return w.map((v, i) => v / s[i % fileHidden]);
      });
      file.close();
      const thr = q8.config.sparseThreshold;
      let differ = 0,
        all = 0;
      const c = { q8: { tp: 0, fp: 0, fn: 0 }, orig: { tp: 0, fp: 0, fn: 0 } };
      for (const { layer, x, fired } of rows) {
        const hidden = new Float32Array(width).fill(NaN);
        const a = q8.predictorScores(layer, x, hidden);
        const b = orig.predictorScores(layer, x);
        for (let k = fileHidden; k < width; k++)
          assert.equal(hidden[k], 0, `layer ${layer}: hidden unit ${k} (padding) is ${hidden[k]}`);
        let scale = 0;
        for (let i = 0; i < nFF; i++) scale = Math.max(scale, Math.abs(b[i]));
        const h = hidden.subarray(0, fileHidden);
        const hMax = h.reduce((m, v) => Math.max(m, Math.abs(v)), 0),
          hSum = h.reduce((m, v) => m + Math.abs(v), 0);
        for (let i = 0; i < nFF; i++) {
          // fc2 on q8's hidden row against the file's weights: F16 exact (f32 sums), Q8_0 within
          // its rounding of the weights, each at most 0.57 of its block's step (amax / 127, the
          // scale an f16; hidden 64 is two blocks: the row's max bounds both), and of the hidden
          // values (amax / 32767: q16_0)
          const w = w2[layer].subarray(i * fileHidden, (i + 1) * fileHidden);
          let want = 0,
            mag = 0,
            wMax = 0,
            wSum = 0;
          for (let j = 0; j < fileHidden; j++) {
            want += w[j] * h[j];
            mag += Math.abs(w[j] * h[j]);
            wMax = Math.max(wMax, Math.abs(w[j]));
            wSum += Math.abs(w[j]);
          }
          const rounding = fc2Type === GGMLType.F16 ? 0 : (wMax * hSum) / 220 + (hMax * wSum) / 60000;
          assert.ok(
            Math.abs(a[i] - want) <= rounding + 1e-5 * mag,
            `layer ${layer} neuron ${i}: q8 ${a[i]} vs the file's fc2 on its hidden row ${want} (rounding ${rounding})`,
          );
          // against the original's: fc1's Q8_0 rounding on top
          assert.ok(
            Math.abs(a[i] - b[i]) <= 0.02 * scale + rounding,
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
for (const [shape, rank, fc2Type, fc2Layout] of TINY_FC2)
  test(`a hot-first store (${shape} hidden ${2 * rank + 1}): fc2 rows (${layoutName(fc2Type, fc2Layout)}) loaded in stored order, predictorScores the same bits as the index-order store's`, async () => {
    const { gguf, preds, pi } = await model(shape, rank);
    const hotPi = join(dir, `${shape}-${rank}.hot.pi`);
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
