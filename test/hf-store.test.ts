/**
 * `convert DIR -o x.pi` builds the store from the checkpoint in place (offline/hf-to-store.ts).
 * Against the old way, the GGUF of the same directory converted to a store: the metadata, the
 * fixed tensors and every bundle's Gate and Up rows (and the gate-row copies) are equal byte for
 * byte, and every group sits where it sat (Gate's and Up's records name the checkpoint's type they
 * were quantized from, where the GGUF's store copied the GGUF's rows); Down's column of neuron i is the checkpoint's column
 * quantized once (exactly quantizeRow of the f32 GGUF's values), with its error in the manifest.
 * No file but the store (and its partial name while written) ever appears in the output
 * directory, and an abort leaves none (bad directories: test/hf-convert.test.ts).
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from "node:fs";
import { SafetensorsFile } from "../src/format/hf/safetensors.js";
import { join } from "node:path";
import { traitsBytes, typeName, typeTraits } from "../src/format/ggml-types.js";
import { GGUFFile } from "../src/format/gguf.js";
import { convertHFToGGUF, type HFOutputType } from "../src/format/hf/hf-to-gguf.js";
import { dequantizeRow, quantizeRow } from "../src/format/quant.js";
import { NeuronStore, type StoreConversion, type StoreManifest } from "../src/format/store/index.js";
import { convertToStore, type ActivationProfile } from "../src/offline/convert.js";
import { findFFN } from "../src/offline/convert/source-ffn.js";
import { hfSource } from "../src/offline/convert/hf-source.js";
import { convertHFToStore } from "../src/offline/hf-to-store.js";
import { modelFingerprint } from "../src/offline/profile.js";
import { hfFixtureDir, ROOT, tempDir } from "./helpers.js";
import { hfFiles, hfPristine } from "./fuzz/hf-cases.js";

const FIXTURES = join(ROOT, "test", "fixtures", "hf");
const dir = tempDir("hf-store-");

const readJson = <T>(p: string): T => JSON.parse(readFileSync(p, "utf8")) as T;

/** The fixtures a store can be made of: rows of whole 32-value blocks. */
const STORABLE = existsSync(FIXTURES)
  ? readdirSync(FIXTURES).filter((n) => {
      const cfg = join(FIXTURES, n, "config.json");
      if (!existsSync(cfg)) return false;
      const c = readJson<{ hidden_size: number; architectures: string[] }>(cfg);
      return c.hidden_size % 32 === 0;
    })
  : [];

/** A fixture's whole directory, or the fuzz target's 32-wide llama ("narrow-llama"), made once. */
function modelDir(name: string): string {
  const d = join(dir, "models", name);
  if (name !== "narrow-llama") return hfFixtureDir(name, d);
  if (!existsSync(d)) {
    mkdirSync(d, { recursive: true });
    for (const [f, bytes] of hfFiles(hfPristine(), [])) writeFileSync(join(d, f), bytes);
  }
  return d;
}

/** Convert straight to a store in an empty directory, noting every name that appears there meanwhile. */
async function direct(
  input: string,
  type: HFOutputType,
  tag: string,
  profile?: ActivationProfile,
): Promise<{ path: string; seen: Set<string> }> {
  const out = join(dir, `direct-${tag}`);
  mkdirSync(out, { recursive: true });
  const path = join(out, "model.pi");
  const seen = new Set<string>();
  await convertHFToStore({
    input,
    output: path,
    type,
    profile,
    fsync: false,
    onProgress: () => {
      for (const f of readdirSync(out)) seen.add(f);
    },
  });
  for (const f of readdirSync(out)) seen.add(f);
  return { path, seen };
}

/** The old way: the directory's GGUF, then the GGUF's store (its FFN type kept). */
async function throughGGUF(
  input: string,
  type: HFOutputType,
  tag: string,
  profile?: ActivationProfile,
): Promise<{ store: string; gguf: string }> {
  const gguf = join(dir, `old-${tag}.gguf`),
    store = join(dir, `old-${tag}.pi`);
  await convertHFToGGUF({ input, output: gguf, type, fsync: false });
  await convertToStore({ input: gguf, output: store, type: "keep", profile, fsync: false });
  return { store, gguf };
}

function manifestOf(path: string): StoreManifest {
  const s = NeuronStore.open(path);
  try {
    return s.manifest;
  } finally {
    s.close();
  }
}

const orderOf = (b64: string) => {
  const raw = Buffer.from(b64, "base64");
  return new Int32Array(raw.buffer, raw.byteOffset, raw.length / 4);
};

/**
 * A profile of the model in `f32` (its fingerprint, so that it is checked against the checkpoint
 * read in place), made-up frequencies that shuffle every group's order, and thresholds.
 */
function profileOf(f32: string): ActivationProfile {
  const g = GGUFFile.open(f32);
  try {
    const groups = findFFN(g).layers;
    return {
      model: modelFingerprint(g),
      tokens: 100,
      layers: groups.map((L, l) => ({
        frequency: Array.from({ length: L.neurons }, (_, i) => ((i * 37 + l * 11) % 101) / 101),
        threshold: 0.01 * (l + 1),
      })),
    };
  } finally {
    g.close();
  }
}

const CASES: [string, HFOutputType, boolean][] = [
  ...[...STORABLE, "narrow-llama"].flatMap((n) =>
    (["f32", "q8_0", "q4_0"] as HFOutputType[]).map((t) => [n, t, false] as [string, HFOutputType, boolean]),
  ),
  ["narrow-llama", "bf16", false],
  ["narrow-llama", "f16", false],
  ["narrow-llama", "q8_0", true],
  ...(STORABLE.includes("smallthinker") ? [["smallthinker", "q4_0", true] as [string, HFOutputType, boolean]] : []),
];

for (const [name, type, profiled] of CASES) {
  test(`hf ${name} ${type}${profiled ? " with a profile" : ""}: the direct store equals the GGUF's store but Down, which is the checkpoint's columns quantized once`, async () => {
    const input = modelDir(name);
    // the type of the checkpoint's FFN values: MXFP4 experts (gpt-oss as published), else BF16
    const cfg = readJson<{ quantization_config?: { quant_method?: string } }>(join(input, "config.json"));
    const srcType = cfg.quantization_config?.quant_method === "mxfp4" ? "MXFP4" : "BF16";
    const tag = `${name}-${type}${profiled ? "-profiled" : ""}`;
    // Down from the f32 GGUF: the checkpoint's values exactly (BF16 widens exactly, MXFP4 decodes exactly)
    const f32 = join(dir, `f32-${name}.gguf`);
    if (!existsSync(f32)) await convertHFToGGUF({ input, output: f32, type: "f32", fsync: false });
    const profile = profiled ? profileOf(f32) : undefined;
    const { path, seen } = await direct(input, type, tag, profile);
    assert.deepEqual(
      [...seen].filter((f) => f !== "model.pi" && !f.startsWith("model.pi.partial-")),
      [],
      "only the store is written",
    );
    const old = await throughGGUF(input, type, tag, profile);
    const a = manifestOf(path),
      b = manifestOf(old.store);
    assert.deepEqual(a.metadata, b.metadata, "metadata");
    assert.deepEqual(a.profile, b.profile, "the profile's record");
    if (profiled) assert.ok(a.profile && orderOf(a.ffn.layers[0].order)[0] !== 0, "ordered by the profile");
    assert.deepEqual(a.fixed, b.fixed, "fixed tensors: names, types, shapes and offsets");
    const { conversion: ca, layers: la, ...ffnA } = a.ffn;
    const { conversion: cb, layers: lb, ...ffnB } = b.ffn;
    assert.deepEqual(ffnA, ffnB, "the FFN's type and shape");
    // Gate and Up: the same bytes, but quantized once from the checkpoint's values, which the record names
    const fromCheckpoint = (c: StoreConversion | null, what: string) =>
      typeName(a.ffn.type) === srcType ? assert.equal(c, null, what) : assert.equal(c?.fromName, srcType, what);
    for (const [k, c] of [
      ["gate", ca.gate],
      ["up", ca.up],
    ] as const) {
      fromCheckpoint(c, `${k}: its conversion`);
      assert.equal(cb[k], null, `${k}: the GGUF's store copies the GGUF's rows`);
    }
    assert.equal(la.length, lb.length);
    const bytesA = readFileSync(path),
      bytesB = readFileSync(old.store);
    for (const t of a.fixed)
      assert.ok(
        bytesA.subarray(t.offset, t.offset + t.bytes).equals(bytesB.subarray(t.offset, t.offset + t.bytes)),
        `${t.name}: bytes`,
      );

    const g = GGUFFile.open(f32);
    try {
      const groups = findFFN(g).layers;
      const { type: ffnType, nEmbd, rowBytes, bundleBytes, parts } = a.ffn;
      // an MXFP4 store's down columns are Q8_0
      const downType = a.ffn.downType ?? ffnType;
      const downBytes = traitsBytes(typeTraits(downType)!, nEmbd);
      const column = new Float32Array(nEmbd),
        want = new Uint8Array(downBytes),
        got = new Float32Array(nEmbd);
      let maxErr = 0;
      for (let l = 0; l < la.length; l++) {
        const { down: da, gate: _ga, up: _ua, ...restA } = la[l];
        const { down: _db, gate: _gb, up: _ub, ...restB } = lb[l];
        assert.deepEqual(restA, restB, `group ${l}: offset, neurons, order, gate rows`);
        fromCheckpoint(la[l].gate, `group ${l}: Gate's conversion`);
        fromCheckpoint(la[l].up, `group ${l}: Up's conversion`);
        assert.ok(da, `group ${l}: Down's conversion is recorded`);
        assert.equal(da.fromName, srcType, `group ${l}: Down converted from the checkpoint's type`);
        const n = la[l].neurons;
        const order = orderOf(la[l].order);
        const down = groups[l].down;
        const values = new Float32Array(down.bytes / 4);
        const raw = new Uint8Array(down.bytes);
        g.readTensor(down.t, raw, down.base, down.bytes);
        values.set(new Float32Array(raw.buffer, 0, values.length));
        for (let p = 0; p < n; p++) {
          const at = la[l].offset + p * bundleBytes;
          // Gate and Up rows (and gpt-oss's biases after the down column) as the GGUF's store has them
          const end = at + parts.down + downBytes;
          assert.ok(
            bytesA.subarray(at, at + parts.down).equals(bytesB.subarray(at, at + parts.down)) &&
              bytesA.subarray(end, at + bundleBytes).equals(bytesB.subarray(end, at + bundleBytes)),
            `group ${l} position ${p}: Gate, Up and the biases`,
          );
          const neuron = order[p];
          for (let r = 0; r < nEmbd; r++) column[r] = values[r * n + neuron];
          quantizeRow(downType, column, want);
          const stored = bytesA.subarray(at + parts.down, at + parts.down + downBytes);
          assert.ok(
            Buffer.from(want).equals(stored),
            `group ${l} position ${p} (neuron ${neuron}): Down column quantized once`,
          );
          dequantizeRow(downType, stored, nEmbd, got);
          for (let r = 0; r < nEmbd; r++) maxErr = Math.max(maxErr, Math.abs(got[r] - column[r]));
        }
        const gr = la[l].gateRows!;
        assert.ok(
          bytesA.subarray(gr, gr + n * rowBytes).equals(bytesB.subarray(gr, gr + n * rowBytes)),
          `group ${l}: gate rows`,
        );
      }
      assert.ok(ca.down, "Down's conversion in all");
      assert.equal(ca.down.maxAbsError, maxErr, "the manifest's Down error is the stored columns' error");
      // BF16 and MXFP4 values are exact in F32 and BF16 (and in F16 where in its range)
      const to = typeName(downType);
      if (to === "F32" || to === "BF16") assert.equal(maxErr, 0, "Down exact");
      else if (to === "F16") assert.ok(maxErr <= ca.down.maxAbsValue * 2 ** -11, `Down error ${maxErr}`);
      else assert.ok(maxErr > 0 && maxErr < ca.down.maxAbsValue / 4, `Down error ${maxErr}`);
    } finally {
      g.close();
    }
  });
}

/**
 * Every fixture's checkpoint read in place against its f32 GGUF (whatever its width: this reads,
 * it makes no store): every tensor that can be read in place (all but llama's rotary-regrouped
 * q and k) gives the GGUF's bytes, and each group's Gate and Up rows (a few, out of order) and
 * bands of Down's columns its values. Covers each way a plan makes the FFN: renames, phi3's fused
 * gate/up, stacked experts, transformers' fused experts read down the matrix (gpt-oss), MXFP4
 * blocks (gpt-oss-mxfp4), gpt-oss's fused biases.
 */
for (const name of [...(existsSync(FIXTURES) ? readdirSync(FIXTURES) : []), "narrow-llama"].filter(
  (n) => n === "narrow-llama" || existsSync(join(FIXTURES, n, "config.json")),
)) {
  test(`hf ${name}: the checkpoint read in place is its f32 GGUF`, async () => {
    const input = modelDir(name);
    const f32 = join(dir, `f32-${name}.gguf`);
    if (!existsSync(f32)) await convertHFToGGUF({ input, output: f32, type: "f32", fsync: false });
    const g = GGUFFile.open(f32);
    const { source } = hfSource(input, "f32");
    try {
      let read = 0;
      for (const t of g.tensors.values()) {
        let bytes: Uint8Array;
        try {
          bytes = source.model.tensorData(t.name);
        } catch (e) {
          assert.match((e as Error).message, /cannot be read in place/);
          assert.match(t.name, /attn_[qk]\.weight$/, `${t.name}: only q and k are regrouped`);
          continue;
        }
        assert.ok(Buffer.from(bytes).equals(Buffer.from(g.tensorData(t.name))), `${t.name}: bytes`);
        read++;
      }
      assert.ok(read > g.tensors.size / 2, `${read} of ${g.tensors.size} tensors read in place`);
      const want = findFFN(g).layers,
        got = findFFN(source.model).layers;
      assert.equal(got.length, want.length);
      const matrix = (m: (typeof want)[number]["gate"]) => {
        const raw = new Uint8Array(m.bytes);
        g.readTensor(m.t, raw, m.base, raw.length);
        return new Float32Array(raw.buffer);
      };
      for (let l = 0; l < got.length; l++) {
        const n = got[l].neurons;
        for (const kind of ["gate", "up"] as const) {
          const m = got[l][kind],
            rowLen = m.t.dims[0];
          const all = matrix(want[l][kind]);
          const idx = Int32Array.from([5, 6, 7, 2, 0, n - 1]);
          const vals = new Float32Array(idx.length * rowLen);
          source.readRowValues(m, idx, vals);
          for (let k = 0; k < idx.length; k++)
            assert.deepEqual(
              vals.subarray(k * rowLen, (k + 1) * rowLen),
              all.subarray(idx[k] * rowLen, (idx[k] + 1) * rowLen),
              `group ${l} ${kind} row ${idx[k]}`,
            );
        }
        const m = got[l].down,
          rows = m.rows;
        const all = matrix(want[l].down);
        for (const [c0, w] of [
          [0, n],
          [3, 5],
          [n - 7, 7],
        ]) {
          const tile = new Float32Array(rows * w);
          source.readDownBand(m, c0, w, tile);
          for (let r = 0; r < rows; r++)
            for (let c = 0; c < w; c++)
              assert.equal(tile[r * w + c], all[r * n + c0 + c], `group ${l} Down row ${r} column ${c0 + c}`);
        }
      }
    } finally {
      source.close();
      g.close();
    }
  });
}

test("hf -o x.pi: an abort mid-way leaves no store", async () => {
  const out = join(dir, "aborted");
  mkdirSync(out);
  const ac = new AbortController();
  let calls = 0;
  await assert.rejects(
    convertHFToStore({
      input: modelDir("narrow-llama"),
      output: join(out, "x.pi"),
      type: "q8_0",
      fsync: false,
      signal: ac.signal,
      onProgress: (p) => {
        // once the FFN has begun: a store half written
        if (p.stage === "ffn" && ++calls === 2) ac.abort(new Error("stop here"));
      },
    }),
    /stop here/,
  );
  assert.deepEqual(readdirSync(out), []);
});

test("hf -o x.pi: a NaN or infinity in the checkpoint is refused naming the tensor, and leaves no store", async () => {
  for (const [tensor, bits] of [
    ["model.layers.0.self_attn.q_proj.weight", 0x7fc0], // NaN, in a fixed tensor
    ["model.layers.1.mlp.up_proj.weight", 0x7f80], // +infinity, in Up
    ["model.layers.0.mlp.down_proj.weight", 0xff80], // -infinity, in Down
  ] as const) {
    const d = join(dir, `nonfinite-${tensor}`);
    mkdirSync(d);
    for (const [f, bytes] of hfFiles(hfPristine(), [])) writeFileSync(join(d, f), bytes);
    const shard = readJson<{ weight_map: Record<string, string> }>(join(d, "model.safetensors.index.json")).weight_map[
      tensor
    ];
    const f = SafetensorsFile.open(join(d, shard));
    const at = f.tensors.get(tensor)!.offset + 2 * 5; // its sixth value, BF16
    f.close();
    const bytes = readFileSync(join(d, shard));
    bytes.writeUInt16LE(bits, at);
    writeFileSync(join(d, shard), bytes);
    const out = join(d, "out");
    mkdirSync(out);
    await assert.rejects(
      convertHFToStore({ input: d, output: join(out, "x.pi"), type: "q8_0", fsync: false }),
      (e: Error) => {
        assert.ok(
          e.message.includes(tensor.replace(/^model\.layers\.(\d)\.self_attn\.q_proj/, "blk.$1.attn_q")) ||
            e.message.includes(tensor),
          e.message,
        );
        assert.match(e.message, /NaN|Infinity|non-finite|not finite/i);
        return true;
      },
    );
    assert.deepEqual(readdirSync(out), [], `${tensor}: nothing is left`);
  }
});
