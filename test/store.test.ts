/**
 * The .pi neuron store: conversion round trips on the real relu-stories models (F32, Q8_0), a
 * PowerInfer PWRI file, a K-quant source, hot-first ordering; and every kind of damage (truncation,
 * flipped bytes in data, manifest or header, bad manifests) as an error that names the file and
 * the offset.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { existsSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile, type GGUFValue } from "../src/format/gguf.js";
import { GGUFWriter } from "../src/format/gguf-writer.js";
import { GGMLType } from "../src/format/ggml-types.js";
import { f32ToF16 } from "../src/format/half.js";
import { dequantize, dequantizeRow, quantizeRow, rowBytes } from "../src/format/quant.js";
import { crc32, crc32Portable, NeuronStore, StoreError, STORE_PAGE } from "../src/format/store/index.js";
import { convertToStore, hotFirstOrder, type ConvertResult } from "../src/offline/convert.js";
import { readConfig } from "../src/model/config.js";
import { Tokenizer } from "../src/tokenizer/index.js";
import { CLI, f32Bytes, SHARED, tempDir, uniforms } from "./helpers.js";
import { retypeFFN, rewrite } from "./rewrite.js";
import { withManifest as editManifest } from "./store-edit.js";

const RELU = `${SHARED}/models/relu-stories.gguf`;
const RELU_Q8 = `${SHARED}/models/relu-stories.Q8_0.gguf`;
const dir = tempDir("powerinfer-store-");

// readConfig is typed for GGUFFile (a class with private fields); the store offers the same surface.
const cfgOf = (f: NeuronStore | GGUFFile) => readConfig(f as GGUFFile);

async function convert(
  input: string,
  name: string,
  extra: Partial<Parameters<typeof convertToStore>[0]> = {},
): Promise<{ path: string; r: ConvertResult }> {
  const path = join(dir, name);
  const r = await convertToStore({ input, output: path, fsync: false, ...extra });
  return { path, r };
}

/** A source FFN matrix as f32, rows of `cols`. */
function srcMatrix(src: GGUFFile, name: string): Float32Array {
  const t = src.tensor(name);
  return dequantize(t.type, src.tensorData(name), t.elements);
}

/**
 * Every bundle against the source: Gate/Up rows bit for bit when `sameType`, Down column i equal
 * to the dequantized source column within the error the store reports (which must be exactly the
 * largest difference found).
 */
function checkBundles(
  store: NeuronStore,
  src: GGUFFile,
  opts: { gateUpExact: boolean; downExact: boolean; transposedSource?: boolean },
): void {
  const { nEmbd, rowBytes: rb, bundleBytes, type } = store.ffn;
  const cfg = cfgOf(src);
  const deq = new Float32Array(nEmbd);
  for (const L of store.ffn.layers) {
    const p = `blk.${L.index}.`;
    const n = L.neurons;
    assert.equal(n, cfg.nFF);
    const gate = src.tensor(p + "ffn_gate.weight"),
      up = src.tensor(p + "ffn_up.weight");
    const gateRaw = src.tensorData(gate.name),
      upRaw = src.tensorData(up.name);
    const gateRb = gate.bytes / n,
      upRb = up.bytes / n;
    const down = opts.transposedSource ? null : srcMatrix(src, p + "ffn_down.weight");
    const downT = opts.transposedSource ? src.tensorData(p + "ffn_down_t.weight") : null;
    const all = new Uint8Array(n * bundleBytes);
    store.readBundles(L.index, 0, n, all);
    // the contiguous gate-row copy (streamed when gates are not resident) is the bundles' gate part
    const gates = new Uint8Array(n * rb);
    store.readGateRows(L.index, 0, n, gates);
    for (let pos = 0; pos < n; pos++) {
      if (
        Buffer.compare(
          gates.subarray(pos * rb, (pos + 1) * rb),
          all.subarray(pos * bundleBytes, pos * bundleBytes + rb),
        ) !== 0
      )
        assert.fail(`layer ${L.index} position ${pos}: gate row copy differs from the bundle`);
    }
    let worstDown = 0,
      worstGate = 0;
    for (let pos = 0; pos < n; pos++) {
      const i = L.order[pos];
      assert.equal(L.position[i], pos);
      const b = all.subarray(pos * bundleBytes, (pos + 1) * bundleBytes);
      if (opts.gateUpExact) {
        assert.deepEqual(
          b.subarray(0, rb),
          gateRaw.subarray(i * gateRb, (i + 1) * gateRb),
          `layer ${L.index} neuron ${i}: gate row`,
        );
        assert.deepEqual(
          b.subarray(rb, 2 * rb),
          upRaw.subarray(i * upRb, (i + 1) * upRb),
          `layer ${L.index} neuron ${i}: up row`,
        );
      } else {
        const want = new Uint8Array(rb);
        const srcRow = new Float32Array(nEmbd);
        dequantizeRow(gate.type, gateRaw.subarray(i * gateRb, (i + 1) * gateRb), nEmbd, srcRow);
        quantizeRow(type, srcRow, want);
        assert.deepEqual(b.subarray(0, rb), want, `layer ${L.index} neuron ${i}: gate row converted`);
        dequantizeRow(type, b.subarray(0, rb), nEmbd, deq);
        for (let r = 0; r < nEmbd; r++) worstGate = Math.max(worstGate, Math.abs(deq[r] - srcRow[r]));
      }
      if (downT) {
        assert.deepEqual(
          b.subarray(2 * rb, 3 * rb),
          downT.subarray(i * rb, (i + 1) * rb),
          `layer ${L.index} neuron ${i}: down_t row`,
        );
      } else {
        dequantizeRow(type, b.subarray(2 * rb, 3 * rb), nEmbd, deq);
        for (let r = 0; r < nEmbd; r++) {
          const d = Math.abs(deq[r] - down![r * n + i]);
          if (opts.downExact)
            assert.equal(deq[r], down![r * n + i], `layer ${L.index} neuron ${i} row ${r}: down value`);
          worstDown = Math.max(worstDown, d);
        }
      }
      assert.ok(
        b.subarray(3 * rb).every((x) => x === 0),
        `layer ${L.index} neuron ${i}: padding is zero`,
      );
    }
    if (!downT) {
      assert.ok(L.down, "down conversion is reported");
      assert.equal(L.down!.maxAbsError, worstDown, `layer ${L.index}: reported down error is the real one`);
    } else assert.equal(L.down, null);
    if (!opts.gateUpExact)
      assert.equal(L.gate!.maxAbsError, worstGate, `layer ${L.index}: reported gate error is the real one`);
    else assert.equal(L.gate, null);
  }
}

function checkFixedAndMetadata(store: NeuronStore, src: GGUFFile): void {
  const fixedNames = [...src.tensors.keys()].filter((n) => !/ffn_(gate|up|down|down_t)\.weight$/.test(n));
  assert.deepEqual([...store.tensors.keys()].sort(), fixedNames.sort());
  for (const name of fixedNames) {
    const t = store.tensor(name);
    assert.equal(t.offset % STORE_PAGE, 0, `${name} is page aligned`);
    assert.deepEqual(t.dims, src.tensor(name).dims);
    assert.equal(t.type, src.tensor(name).type);
    assert.deepEqual(store.tensorData(name), src.tensorData(name), `${name} bytes`);
  }
  // a partial read in the middle of a tensor
  const emb = store.tensor("token_embd.weight");
  const part = new Uint8Array(1000);
  store.readTensor(emb, part, 5000, 1000);
  assert.deepEqual(part, src.tensorData("token_embd.weight").subarray(5000, 6000));
  assert.deepEqual(store.metadata, src.metadata);
  assert.deepEqual(cfgOf(store), cfgOf(src));
  const text = "Once upon a time, there was a little girl named Lily. 123 üñí ✓";
  const a = Tokenizer.fromGGUF(store),
    b = Tokenizer.fromGGUF(src);
  assert.deepEqual(a.encode(text), b.encode(text));
  assert.equal(a.decode(a.encode(text)), b.decode(b.encode(text)));
}

test("crc32: zlib's and the portable one agree, and continue across pieces", () => {
  const data = new Uint8Array(10007).map((_, i) => (i * 131 + 7) & 0xff);
  assert.equal(crc32Portable(Buffer.from("123456789")), 0xcbf43926); // the standard check value
  assert.equal(crc32(data), crc32Portable(data));
  assert.equal(crc32(data.subarray(5000), crc32(data.subarray(0, 5000))), crc32(data));
  assert.equal(crc32Portable(data.subarray(5000), crc32Portable(data.subarray(0, 5000))), crc32(data));
});

test("relu-stories F32: bundles, fixed tensors and metadata round-trip exactly", async () => {
  const { path, r } = await convert(RELU, "relu-f32.pi");
  assert.equal(r.ffnType, GGMLType.F32);
  assert.equal(r.conversion.gate, null);
  assert.equal(r.conversion.down!.maxAbsError, 0);
  const store = NeuronStore.open(path);
  const src = GGUFFile.open(RELU);
  try {
    assert.equal(store.ffn.layers.length, 6);
    assert.equal(store.ffn.rowBytes, 256 * 4);
    assert.equal(store.ffn.bundleBytes, 4096);
    for (const L of store.ffn.layers) {
      assert.equal(L.offset % STORE_PAGE, 0);
      assert.deepEqual(
        [...L.order],
        Array.from({ length: 1024 }, (_, i) => i),
        "index order without a profile",
      );
      assert.equal(L.frequency, null);
    }
    checkBundles(store, src, { gateUpExact: true, downExact: true });
    checkFixedAndMetadata(store, src);
    store.verifyAll();
  } finally {
    store.close();
    src.close();
  }
});

test("relu-stories Q8_0: gate/up bit for bit, down requantized per column within the reported error", async () => {
  const { path, r } = await convert(RELU_Q8, "relu-q8.pi");
  assert.equal(r.ffnType, GGMLType.Q8_0);
  const down = r.conversion.down!;
  assert.equal(down.fromName, "Q8_0");
  // requantizing a Q8_0 value to Q8_0 in another block costs at most about one new step (amax / 127)
  assert.ok(
    down.maxAbsError > 0 && down.maxAbsError <= down.maxAbsValue / 127,
    `down error ${down.maxAbsError} vs max |w| ${down.maxAbsValue}`,
  );
  const store = NeuronStore.open(path);
  const src = GGUFFile.open(RELU_Q8);
  try {
    assert.equal(store.ffn.rowBytes, rowBytes(GGMLType.Q8_0, 256));
    checkBundles(store, src, { gateUpExact: true, downExact: false });
    checkFixedAndMetadata(store, src);
  } finally {
    store.close();
    src.close();
  }
});

test("--type q4_0 from Q8_0: every part converted, with the errors it really has", async () => {
  const { path, r } = await convert(RELU_Q8, "relu-q4.pi", { type: "q4_0" });
  assert.equal(r.ffnType, GGMLType.Q4_0);
  assert.equal(r.conversion.gate!.fromName, "Q8_0");
  assert.ok(r.conversion.gate!.maxAbsError > 0);
  const store = NeuronStore.open(path);
  const src = GGUFFile.open(RELU_Q8);
  try {
    checkBundles(store, src, { gateUpExact: false, downExact: false });
  } finally {
    store.close();
    src.close();
  }
});

test("a hot-first profile orders bundles by frequency and is kept in the manifest", async () => {
  const src = GGUFFile.open(RELU);
  const nLayer = cfgOf(src).nLayer;
  src.close();
  const layers = Array.from({ length: nLayer }, (_, l) => ({
    frequency: Array.from(uniforms(1024, 100 + l), (v) => Math.round(Math.abs(v) * 50) / 50),
  }));
  const profilePath = join(dir, "profile.json");
  writeFileSync(profilePath, JSON.stringify({ layers, tokens: 12345 }));
  const { path, r } = await convert(RELU, "relu-hot.pi", { profile: profilePath });
  assert.ok(r.ordered);
  const store = NeuronStore.open(path);
  const gguf = GGUFFile.open(RELU);
  try {
    assert.deepEqual(store.manifest.profile, { file: "profile.json", tokens: 12345 });
    for (const L of store.ffn.layers) {
      const f = layers[L.index].frequency;
      assert.deepEqual([...L.order], [...hotFirstOrder(f)]);
      for (let p = 1; p < L.neurons; p++) {
        const a = f[L.order[p - 1]],
          b = f[L.order[p]];
        assert.ok(
          a > b || (a === b && L.order[p - 1] < L.order[p]),
          `layer ${L.index} position ${p}: hot first, ties by index`,
        );
      }
      assert.deepEqual([...L.frequency!], [...Float32Array.from(f)]);
    }
    assert.notDeepEqual([...store.ffn.layers[0].order].slice(0, 10), [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]);
    checkBundles(store, gguf, { gateUpExact: true, downExact: true });
  } finally {
    store.close();
    gguf.close();
  }
  await assert.rejects(
    convertToStore({ input: RELU, output: join(dir, "bad.pi"), profile: { layers: layers.slice(1) } }),
    /has 5 layers, the model 6/,
  );
  await assert.rejects(
    convertToStore({
      input: RELU,
      output: join(dir, "bad.pi"),
      profile: { layers: [{ frequency: [1] }, ...layers.slice(1)] },
    }),
    /layers\[0\]\.frequency has 1 entries, layer 0 has 1024 neurons/,
  );
  assert.ok(!existsSync(join(dir, "bad.pi")));
});

/** relu-stories rewritten as PowerInfer writes it: PWRI magic, ffn_down_t, predictors, threshold. */
async function makePWRI(path: string, downType: GGMLType): Promise<void> {
  const src = GGUFFile.open(RELU);
  const cfg = cfgOf(src);
  const w = new GGUFWriter(path, { magic: "PWRI", fsync: false });
  for (const [k, v] of src.metadata) w.setMetadata(k, v as Exclude<GGUFValue, GGUFValue[]> as never);
  w.setMetadata("powerinfer.sparse_threshold", 0.25);
  for (const t of src.tensors.values()) {
    const m = /^blk\.(\d+)\.ffn_down\.weight$/.exec(t.name);
    if (!m) {
      w.addTensor(t.name, t.dims, t.type, src.tensorData(t.name));
      continue;
    }
    const down = srcMatrix(src, t.name);
    const tr = new Float32Array(down.length);
    for (let r = 0; r < cfg.nEmbd; r++) for (let i = 0; i < cfg.nFF; i++) tr[i * cfg.nEmbd + r] = down[r * cfg.nFF + i];
    const bytes = downType === GGMLType.F32 ? f32Bytes(tr) : new Uint8Array(rowBytes(downType, cfg.nEmbd) * cfg.nFF);
    if (downType !== GGMLType.F32) {
      const rb = rowBytes(downType, cfg.nEmbd);
      for (let i = 0; i < cfg.nFF; i++)
        quantizeRow(downType, tr.subarray(i * cfg.nEmbd, (i + 1) * cfg.nEmbd), bytes.subarray(i * rb, (i + 1) * rb));
    }
    w.addTensor(`blk.${m[1]}.ffn_down_t.weight`, [cfg.nEmbd, cfg.nFF], downType, bytes);
    w.addTensor(
      `blk.${m[1]}.fc1.weight`,
      [cfg.nEmbd, 64],
      GGMLType.F32,
      f32Bytes(uniforms(cfg.nEmbd * 64, 7 + Number(m[1]))),
    );
    w.addTensor(
      `blk.${m[1]}.fc2.weight`,
      [64, cfg.nFF],
      GGMLType.F32,
      f32Bytes(uniforms(64 * cfg.nFF, 70 + Number(m[1]))),
    );
  }
  await w.finish();
  src.close();
}

test("PowerInfer PWRI: ffn_down_t copied without requantization, predictors and threshold kept", async () => {
  const pwri = join(dir, "relu-pwri.gguf");
  await makePWRI(pwri, GGMLType.F32);
  const { path, r } = await convert(pwri, "relu-pwri.pi");
  assert.equal(r.conversion.down, null);
  const store = NeuronStore.open(path);
  const src = GGUFFile.open(pwri);
  try {
    assert.equal(store.magic, "PWRI");
    const cfg = cfgOf(store);
    assert.equal(cfg.powerinfer, true);
    assert.equal(cfg.sparseThreshold, 0.25);
    assert.ok(store.tensors.has("blk.5.fc1.weight") && store.tensors.has("blk.5.fc2.weight"));
    assert.ok(!store.tensors.has("blk.0.ffn_down_t.weight"));
    checkBundles(store, src, { gateUpExact: true, downExact: true, transposedSource: true });
    checkFixedAndMetadata(store, src);
    assert.throws(() => store.tensor("blk.0.ffn_down_t.weight"), /neuron bundles/);
  } finally {
    store.close();
    src.close();
  }
});

test("PWRI with an F16 ffn_down_t and --type f32: converted with the error reported", async () => {
  const pwri = join(dir, "relu-pwri-f16.gguf");
  await makePWRI(pwri, GGMLType.F16);
  const { r } = await convert(pwri, "relu-pwri-f16.pi", { type: "f32" });
  // F16 -> F32 is exact
  assert.equal(r.conversion.down!.fromName, "F16");
  assert.equal(r.conversion.down!.maxAbsError, 0);
});

/** Random but valid Q4_K bytes for `rows` rows of `cols` (sane f16 scales). */
function randomQ4K(rows: number, cols: number, seed: number): Uint8Array {
  const rb = rowBytes(GGMLType.Q4_K, cols);
  const out = new Uint8Array(rows * rb);
  const noise = uniforms(out.length, seed);
  for (let i = 0; i < out.length; i++) out[i] = Math.floor((noise[i] * 0.5 + 0.5) * 255.99);
  for (let b = 0; b < out.length; b += 144) {
    const d = f32ToF16(0.001 + Math.abs(noise[b]) * 0.002),
      dmin = f32ToF16(0.0005 + Math.abs(noise[b + 1]) * 0.001);
    out[b] = d & 0xff;
    out[b + 1] = d >> 8;
    out[b + 2] = dmin & 0xff;
    out[b + 3] = dmin >> 8;
  }
  return out;
}

test("--type keep keeps a type a store holds (Q5_1, F16); run reads both", async () => {
  for (const type of [GGMLType.Q5_1, GGMLType.F16]) {
    const name = type === GGMLType.Q5_1 ? "q5_1" : "f16";
    const path = join(dir, `relu-keep-${name}.gguf`);
    await retypeFFN(RELU, path, type);
    const { path: out, r } = await convert(path, `relu-keep-${name}.pi`);
    assert.equal(r.ffnType, type, name);
    // gate and up rows copied as they are; Down requantized per column (exactly, for F16)
    assert.equal(r.conversion.gate, null);
    assert.equal(r.conversion.up, null);
    if (type === GGMLType.F16) assert.equal(r.conversion.down!.maxAbsError, 0);
    const run = spawnSync(process.execPath, [CLI, "run", "-m", out, "-p", "Once", "-n", "2", "--temp", "0"], {
      encoding: "utf8",
    });
    assert.equal(run.status, 0, run.stderr);
  }
});

test("a K-quant FFN (no quantizer) is stored in the nearest type, Q4_K -> Q4_1, with its error", async () => {
  const src = GGUFFile.open(RELU);
  const cfg = cfgOf(src);
  const kpath = join(dir, "relu-q4k.gguf");
  const w = new GGUFWriter(kpath, { fsync: false });
  for (const [k, v] of src.metadata) w.setMetadata(k, v as never);
  let seed = 1;
  for (const t of src.tensors.values()) {
    if (/ffn_(gate|up|down)\.weight$/.test(t.name))
      w.addTensor(t.name, t.dims, GGMLType.Q4_K, randomQ4K(t.dims[1], t.dims[0], seed++));
    else w.addTensor(t.name, t.dims, t.type, src.tensorData(t.name));
  }
  await w.finish();
  src.close();
  const { path, r } = await convert(kpath, "relu-q4k.pi");
  assert.equal(r.ffnType, GGMLType.Q4_1);
  for (const kind of ["gate", "up", "down"] as const) {
    const c = r.conversion[kind]!;
    assert.equal(c.fromName, "Q4_K");
    assert.ok(c.maxAbsError > 0 && c.maxAbsError < c.maxAbsValue / 4, `${kind}: ${c.maxAbsError} of ${c.maxAbsValue}`);
  }
  const store = NeuronStore.open(path);
  const gguf = GGUFFile.open(kpath);
  try {
    assert.equal(cfg.nEmbd % 256, 0);
    checkBundles(store, gguf, { gateUpExact: false, downExact: false });
  } finally {
    store.close();
    gguf.close();
  }
});

// --- damage ---------------------------------------------------------------------------------------

function damaged(good: string, name: string, edit: (b: Buffer) => Buffer): string {
  const p = join(dir, name);
  writeFileSync(p, edit(Buffer.from(readFileSync(good))));
  return p;
}

function expectStoreError(fn: () => unknown, pattern: RegExp, offset?: number): StoreError {
  let caught: StoreError | undefined;
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof StoreError, `expected a StoreError, got ${e}`);
    assert.match(e.message, pattern);
    assert.match(e.message, /\.pi/, "names the file");
    if (offset !== undefined) {
      assert.equal(e.offset, offset);
      assert.match(e.message, new RegExp(`offset ${offset}\\b`));
    }
    caught = e;
    return true;
  });
  return caught!;
}

test("truncated, corrupt and foreign files: clear errors naming the file and the offset", async () => {
  const { path: good } = await convert(RELU_Q8, "good.pi");
  const size = readFileSync(good).length;
  const store = NeuronStore.open(good);
  const layer2 = store.ffn.layers[2];
  const manifestAt = store.checksummed.end;
  const embAt = store.tensor("token_embd.weight").offset;
  store.close();

  // truncation anywhere past the header loses the manifest
  for (const cut of [size - 1, manifestAt + 10, layer2.offset + 5000]) {
    expectStoreError(
      () => NeuronStore.open(damaged(good, `cut-${cut}.pi`, (b) => b.subarray(0, cut))),
      /file truncated: the manifest at offset \d+/,
      manifestAt,
    );
  }
  expectStoreError(
    () => NeuronStore.open(damaged(good, "longer.pi", (b) => Buffer.concat([b, Buffer.alloc(10)]))),
    /10 unexpected bytes after the end of the store/,
    size,
  );
  expectStoreError(
    () => NeuronStore.open(damaged(good, "cut-100.pi", (b) => b.subarray(0, 100))),
    /file truncated: a store begins with a 4096-byte header page, the file has 100 bytes/,
    0,
  );

  // a flipped byte in a bundle: opening works, reading that bundle (or verifying) fails
  const hit = layer2.offset + 3 * layer2.bundleBytes + 17;
  const flipped = damaged(good, "flip-ffn.pi", (b) => {
    b[hit] ^= 0x10;
    return b;
  });
  const s = NeuronStore.open(flipped);
  try {
    const chunk = hit - (hit % STORE_PAGE);
    const e = expectStoreError(
      () => s.readBundles(2, 3, 1, new Uint8Array(s.ffn.bundleBytes)),
      /checksum mismatch .*layer 2 FFN, bundle at stored position 3 \(neuron 3\)/,
      chunk,
    );
    assert.match(e.message, /corrupt/);
    expectStoreError(() => s.verifyAll(), /checksum mismatch/, chunk);
    s.readBundles(2, 4, 1, new Uint8Array(s.ffn.bundleBytes)); // its neighbour is fine
    // the flash reader's hook reports the same
    const v = new Uint8Array(s.ffn.bundleBytes);
    preadInto(flipped, v, chunk);
    expectStoreError(() => s.verifier("always")(chunk, v, 0, STORE_PAGE), /checksum mismatch/, chunk);
    expectStoreError(() => s.verifier("once")(chunk, v, 0, STORE_PAGE), /checksum mismatch/, chunk);
  } finally {
    s.close();
  }

  // a flipped byte in a fixed tensor fails when the tensor is loaded
  const f2 = NeuronStore.open(
    damaged(good, "flip-fixed.pi", (b) => {
      b[embAt + 9000] ^= 1;
      return b;
    }),
  );
  expectStoreError(
    () => f2.tensorData("token_embd.weight"),
    /checksum mismatch .*fixed tensor token_embd\.weight/,
    embAt + 8192,
  );
  f2.close();

  // manifest and header damage is caught at open
  expectStoreError(
    () =>
      NeuronStore.open(
        damaged(good, "flip-manifest.pi", (b) => {
          b[manifestAt + 40] ^= 2;
          return b;
        }),
      ),
    /manifest checksum mismatch/,
    manifestAt,
  );
  expectStoreError(
    () =>
      NeuronStore.open(
        damaged(good, "flip-header.pi", (b) => {
          b[20] ^= 1;
          return b;
        }),
      ),
    /header checksum mismatch/,
    0,
  );
  expectStoreError(
    () =>
      NeuronStore.open(
        damaged(good, "version.pi", (b) => {
          b[8] = 7;
          return b;
        }),
      ),
    /store format version 7 is not supported/,
    8,
  );
  expectStoreError(
    () =>
      NeuronStore.open(
        damaged(good, "magic.pi", (b) => {
          b.write("NOTASTOR", 0, "latin1");
          return b;
        }),
      ),
    /not a \.pi neuron store: magic is "NOTASTOR"/,
    0,
  );
  expectStoreError(
    () =>
      NeuronStore.open(
        damaged(good, "zero.pi", (b) => {
          b.fill(0, 0, 8);
          return b;
        }),
      ),
    /unfinished conversion/,
    0,
  );
  expectStoreError(
    () =>
      NeuronStore.open(
        damaged(good, "reserved.pi", (b) => {
          b[100] = 1;
          return b;
        }),
      ),
    /reserved area/,
    100,
  );
  const gguf = join(dir, "model-as.pi");
  writeFileSync(gguf, readFileSync(RELU_Q8));
  expectStoreError(() => NeuronStore.open(gguf), /GGUF model, not a \.pi neuron store: convert it first/, 0);
  expectStoreError(() => NeuronStore.open(join(dir, "missing.pi")), /cannot open/);
});

/** Rewrite a store's manifest (with valid checksums) to test the semantic checks. */
const withManifest = (good: string, name: string, edit: (m: Record<string, any>) => void): string =>
  editManifest(good, join(dir, name), edit);

test("manifests that check out byte-wise but not in meaning are refused", async () => {
  const { path: good } = await convert(RELU_Q8, "good2.pi");
  const manifestAt = NeuronStore.open(good).checksummed.end;
  const cases: [string, (m: Record<string, any>) => void, RegExp][] = [
    [
      "order",
      (m) => {
        const o = Int32Array.from({ length: 1024 }, (_, i) => i);
        o[5] = 1;
        m.ffn.layers[1].order = Buffer.from(o.buffer).toString("base64");
      },
      /ffn layer 1: order is not a permutation \(entry 5 = 1\)/,
    ],
    [
      "layer-off",
      (m) => {
        m.ffn.layers[5].offset = manifestAt;
      },
      /ffn layer 5: bytes \[\d+, \d+\) lie outside the data region/,
    ],
    [
      "unaligned",
      (m) => {
        m.ffn.layers[0].offset += 100;
      },
      /ffn layer 0: offset \d+ is not a multiple of 4096/,
    ],
    [
      "rowbytes",
      (m) => {
        m.ffn.rowBytes = 100;
      },
      /ffn\.rowBytes 100 should be 272/,
    ],
    [
      "fixed",
      (m) => {
        m.fixed[0].bytes += 1;
      },
      /fixed tensor "[^"]+": .* cannot take \d+ bytes/,
    ],
    [
      "type",
      (m) => {
        m.ffn.type = 12;
      },
      /ffn\.type 12 is not a type a store may hold/,
    ],
    [
      "crcs",
      (m) => {
        m.checksums.crc32 = m.checksums.crc32.slice(0, 16);
      },
      /checksums\.crc32 has \d+ entries/,
    ],
    [
      "meta",
      (m) => {
        m.metadata[0][2] = 5;
        m.metadata[0][1] = 8;
      },
      /metadata "[^"]+": expected a string, found 5/,
    ],
    [
      "json",
      (m) => {
        m.format = "something else";
      },
      /format is "something else"/,
    ],
  ];
  for (const [name, edit, pattern] of cases) {
    expectStoreError(() => NeuronStore.open(withManifest(good, `m-${name}.pi`, edit)), pattern, manifestAt);
  }
});

function preadInto(path: string, dst: Uint8Array, offset: number): void {
  dst.set(readFileSync(path).subarray(offset, offset + dst.length));
}

test("a weight the store's type cannot hold (F32 above F16's range) is refused naming the tensor, no file left", async () => {
  const big = await rewrite(RELU, "relu-big-up.gguf", {
    tensors: (src) => {
      const t = src.tensor("blk.1.ffn_up.weight");
      const f = srcMatrix(src, t.name);
      f[777] = 1e6;
      return new Map([[t.name, [t.dims, f]]]);
    },
  });
  const out = join(dir, "relu-big-up.pi");
  await assert.rejects(
    convertToStore({ input: big, output: out, type: "f16", fsync: false }),
    /blk\.1\.ffn_up\.weight: the value 1000000 does not fit in F16 \(it becomes Infinity\): convert with one of --type bf16, f32, q8_0/,
  );
  assert.ok(!existsSync(out));
  // the same value in BF16 is finite: that store is written
  const { r } = await convert(big, "relu-big-up-bf16.pi", { type: "bf16" });
  assert.equal(r.ffnType, GGMLType.BF16);
});

test("an aborted conversion leaves no file behind", async () => {
  const ac = new AbortController();
  const out = join(dir, "aborted.pi");
  let calls = 0;
  await assert.rejects(
    convertToStore({
      input: RELU,
      output: out,
      signal: ac.signal,
      onProgress: () => {
        if (++calls === 3) ac.abort(new Error("stop here"));
      },
    }),
    /stop here/,
  );
  assert.ok(!existsSync(out));
  assert.deepEqual(
    readdirSync(dir).filter((f) => f.startsWith("aborted.pi")),
    [],
  );
});

test("powerinfer convert: CLI writes a store, shows progress on stderr, refuses bad flags", () => {
  const out = join(dir, "cli.pi");
  const r = spawnSync(process.execPath, [CLI, "convert", RELU_Q8, "-o", out, "--type", "q8_0"], { encoding: "utf8" });
  assert.equal(r.status, 0, r.stderr);
  assert.equal(r.stdout, "");
  assert.match(r.stderr, /^convert: wrote [\d.]+ MB in [\d.]+ s/m);
  assert.match(r.stderr, /down +requantized per column: max \|error\|/);
  assert.doesNotMatch(r.stderr, /warning/);
  const s = NeuronStore.open(out);
  assert.equal(s.ffn.type, GGMLType.Q8_0);
  s.close();
  // every type --type names is one run reads: Q5_1 bundles, quietly written, then run
  const q5 = join(dir, "cli-q5.pi");
  const w = spawnSync(process.execPath, [CLI, "convert", RELU_Q8, "-o", q5, "--type", "q5_1", "-q"], {
    encoding: "utf8",
  });
  assert.equal(w.status, 0, w.stderr);
  assert.equal(w.stderr, "");
  const run = spawnSync(process.execPath, [CLI, "run", "-m", q5, "-p", "hi", "-n", "1"], { encoding: "utf8" });
  assert.equal(run.status, 0, run.stderr);
  const bad = spawnSync(process.execPath, [CLI, "convert", RELU_Q8, "-o", out, "--type", "q3_k"], { encoding: "utf8" });
  assert.equal(bad.status, 2);
  assert.match(bad.stderr, /--type must be one of keep, f32/);
  const noOut = spawnSync(process.execPath, [CLI, "convert", RELU_Q8], { encoding: "utf8" });
  assert.equal(noOut.status, 2);
  assert.match(noOut.stderr, /-o MODEL\.pi/);
  const notModel = spawnSync(process.execPath, [CLI, "convert", out, "-o", join(dir, "x.pi"), "-q"], {
    encoding: "utf8",
  });
  assert.equal(notModel.status, 1);
  assert.match(notModel.stderr, /not a GGUF file/);
});
