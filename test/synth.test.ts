import { test } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { GGUFFile } from "../src/format/gguf.js";
import { GGUFWriter, GGUFValueType } from "../src/format/gguf-writer.js";
import { GGMLType } from "../src/format/ggml-types.js";
import { dequantize } from "../src/format/quant.js";
import { f16ToF32 } from "../src/format/half.js";
import { synthesize, synthFileSize, synthRecipes, SHAPE_SPECS, type SynthType } from "../src/offline/synth.js";
import { buildSynthVocab, MIN_VOCAB, SPACE } from "../src/offline/synth-vocab.js";
import { Tokenizer } from "../src/tokenizer/index.js";
import { main as synthMain } from "../src/cli/synth.js";
import { LlamaModel } from "../src/model/model.js";
import { sha256OfFile } from "./helpers.js";

const dir = mkdtempSync(join(tmpdir(), "synth-test-"));
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));
const tmp = (name: string) => join(dir, name);

function stats(x: Float32Array) {
  let s = 0,
    s2 = 0,
    finite = true;
  for (const v of x) {
    if (!Number.isFinite(v)) finite = false;
    s += v;
    s2 += v * v;
  }
  const mean = s / x.length;
  return { mean, std: Math.sqrt(s2 / x.length - mean * mean), finite };
}

// ---------------------------------------------------------------------------------------------
// GGUF writer

test("writer: metadata of every type and tensors round-trip through GGUFFile", async () => {
  const path = tmp("rt.gguf");
  const w = new GGUFWriter(path);
  w.setMetadata("general.architecture", "llama");
  w.setMetadata("a.u32", 4000000000);
  w.setMetadata("a.i32", -5);
  w.setMetadata("a.f32", 0.25);
  w.setMetadata("a.bool", true);
  w.setMetadata("a.u64", 2n ** 40n);
  w.setMetadata("a.u8", 7, GGUFValueType.UINT8);
  w.setMetadata("a.f64", Math.PI, GGUFValueType.FLOAT64);
  w.setMetadata("a.strs", ["x", "", "ünï ▁code"]);
  w.setMetadata("a.f32s", Float32Array.from([1.5, -2]));
  w.setMetadata("a.i32s", Int32Array.from([1, -2, 3]));
  w.setMetadata("a.ints", [1, 2, 3]);
  const f32 = Float32Array.from({ length: 12 }, (_, i) => i - 3.5);
  const small = new Uint8Array(f32.buffer);
  const big = new Uint8Array(3 * 34 * 40); // Q8_0, 40 rows of 96
  for (let i = 0; i < big.length; i++) big[i] = (i * 31 + 7) & 0xff;
  w.addTensor("inline", [4, 3], GGMLType.F32, small);
  w.addTensor("odd", [5], GGMLType.F32); // 20 bytes: the next tensor must be realigned
  w.addTensor("big", [96, 40], GGMLType.Q8_0);
  await w.writeTensorData("odd", new Uint8Array(Float32Array.from([1, 2, 3, 4, 5]).buffer));
  // chunks of awkward sizes, from a generator
  await w.writeTensorData(
    "big",
    (function* () {
      for (let o = 0; o < big.length; o += 1000) yield big.subarray(o, Math.min(big.length, o + 1000));
    })(),
  );
  await w.finish();
  assert.ok(!existsSync(w.tempPath), "temp file is gone after finish");

  const f = GGUFFile.open(path);
  try {
    assert.equal(f.magic, "GGUF");
    assert.equal(f.version, 3);
    assert.equal(f.getNumber("general.alignment"), 32);
    assert.equal(f.getNumber("a.u32"), 4000000000);
    assert.equal(f.getNumber("a.i32"), -5);
    assert.equal(f.getNumber("a.f32"), 0.25);
    assert.equal(f.getBool("a.bool", false), true);
    assert.equal(f.metadata.get("a.u64"), 2 ** 40);
    assert.equal(f.getNumber("a.u8"), 7);
    assert.equal(f.getNumber("a.f64"), Math.PI);
    assert.deepEqual(f.getArray("a.strs"), ["x", "", "ünï ▁code"]);
    assert.deepEqual([...(f.getArray("a.f32s") as Float32Array)], [1.5, -2]);
    assert.deepEqual([...(f.getArray("a.i32s") as Int32Array)], [1, -2, 3]);
    assert.deepEqual(f.getArray("a.ints"), [1, 2, 3]);
    assert.deepEqual(f.tensor("inline").dims, [4, 3]);
    assert.deepEqual(f.tensorData("inline"), small);
    assert.deepEqual([...new Float32Array(f.tensorData("odd").slice().buffer)], [1, 2, 3, 4, 5]);
    assert.equal(f.tensor("big").type, GGMLType.Q8_0);
    assert.deepEqual(f.tensorData("big"), big);
    for (const t of f.tensors.values()) assert.equal(t.offset % 32, 0, `${t.name} is aligned`);
    assert.equal(f.fileSize % 32, 0, "file ends padded to the alignment");
    assert.equal(f.fileSize, w.totalBytes);
  } finally {
    f.close();
  }
});

test("writer: PWRI magic and a larger alignment", async () => {
  const path = tmp("pwri.gguf");
  const w = new GGUFWriter(path, { magic: "PWRI", alignment: 64, fsync: false });
  w.addTensor("a", [3], GGMLType.F32, new Uint8Array(12).fill(1));
  w.addTensor("b", [3], GGMLType.F32, new Uint8Array(12).fill(2));
  await w.finish();
  const f = GGUFFile.open(path);
  assert.equal(f.magic, "PWRI");
  assert.equal(f.getNumber("general.alignment"), 64);
  assert.equal(f.tensor("b").offset % 64, 0);
  assert.deepEqual(f.tensorData("b"), new Uint8Array(12).fill(2));
  f.close();
});

test("writer: an unfinished or failed write leaves no file that looks like a model", async () => {
  const path = tmp("partial.gguf");
  const w = new GGUFWriter(path, { fsync: false });
  w.addTensor("t", [64], GGMLType.F32);
  const sink = await w.tensorSink("t");
  await sink.write(new Uint8Array(100));
  // mid-write: only the temp file exists, and its magic is not a GGUF magic (or, its first
  // pages still staged in the writer's buffers, it is empty)
  assert.ok(!existsSync(path));
  assert.ok(existsSync(w.tempPath));
  assert.throws(() => GGUFFile.open(w.tempPath), /not a GGUF file|is empty/);
  // finish refuses an incomplete tensor and cleans up
  await assert.rejects(w.finish(), /incomplete: "t" \(100 of 256 bytes\)/);
  assert.ok(!existsSync(path) && !existsSync(w.tempPath));

  const w2 = new GGUFWriter(path, { fsync: false });
  w2.addTensor("t", [4], GGMLType.F32);
  const s2 = await w2.tensorSink("t");
  await assert.rejects(s2.write(new Uint8Array(17)), /holds only 16/);
  await w2.abort();
  assert.ok(!existsSync(w2.tempPath));
  assert.deepEqual(
    readdirSync(dir).filter((n) => n.startsWith("partial")),
    [],
  );
});

test("writer: misuse is a clear error", async () => {
  const w = new GGUFWriter(tmp("misuse.gguf"), { fsync: false });
  assert.throws(() => w.addTensor("q", [33, 2], GGMLType.Q4_0), /not a multiple of the Q4_0 block size 32/);
  assert.throws(() => w.addTensor("x", [4], GGMLType.F32, new Uint8Array(15)), /needs 16 bytes, got 15/);
  assert.throws(() => w.setMetadata("k", 300, GGUFValueType.UINT8), /not an integer in \[0, 255\]/);
  assert.throws(() => w.setMetadata("k", [], undefined), /item type of an empty array/);
  assert.throws(() => new GGUFWriter("x", { alignment: 24 }), /power of two/);
  w.addTensor("t", [4], GGMLType.F32);
  assert.throws(() => w.addTensor("t", [4], GGMLType.F32), /declared twice/);
  await assert.rejects(w.writeTensorData("nope", new Uint8Array(16)), /never declared/);
  await assert.rejects(w.writeTensorData("t", [new Uint8Array(8)]), /ended after 8 of 16 bytes/);
  assert.throws(() => w.setMetadata("late", 1), /header is fixed/);
  await w.abort();
});

// ---------------------------------------------------------------------------------------------
// Vocabulary

test("vocab: llama layout, no duplicates, prefix-closed pieces", () => {
  // up to Gemma 3's 262208 pieces: past about 100k a spread of them would overflow the call stack
  for (const size of [MIN_VOCAB, 512, 32000, 262208]) {
    const v = buildSynthVocab(size);
    assert.equal(v.tokens.length, size);
    assert.equal(new Set(v.tokens).size, size, "no duplicates");
    assert.deepEqual(v.tokens.slice(0, 3), ["<unk>", "<s>", "</s>"]);
    assert.deepEqual([v.types[0], v.types[1], v.types[2]], [2, 3, 3]);
    assert.equal(v.tokens[3], "<0x00>");
    assert.equal(v.tokens[3 + 0x0a], "<0x0A>");
    assert.equal(v.tokens[258], "<0xFF>");
    for (let i = 3; i < 259; i++) assert.equal(v.types[i], 6);
    const set = new Set(v.tokens);
    for (let i = 259; i < size; i++) {
      assert.equal(v.types[i], 1);
      if (i > 259) assert.ok(v.scores[i] < v.scores[i - 1], "scores descend");
      const chars = [...v.tokens[i]];
      for (let n = 2; n < chars.length; n++) assert.ok(set.has(chars.slice(0, n).join("")), `prefix of ${v.tokens[i]}`);
    }
  }
  assert.throws(() => buildSynthVocab(100), />= 260/);
  const v = buildSynthVocab(32000);
  for (const w of ["the", "Once", "upon", "time"]) assert.ok(v.tokens.includes(SPACE + w), w);
});

// ---------------------------------------------------------------------------------------------
// Synthetic models

test("tiny model: metadata and tensor table as llama.cpp expects", async () => {
  const path = tmp("tiny-q4_0.gguf");
  let last = 0;
  const r = await synthesize({
    shape: "tiny",
    act: "relu",
    type: "q4_0",
    seed: 1,
    out: path,
    fsync: false,
    onProgress: (p) => (last = p.bytesWritten / p.totalBytes),
  });
  assert.equal(last, 1);
  assert.equal(r.bytes, statSync(path).size);
  assert.equal(r.bytes, synthFileSize({ shape: "tiny", act: "relu", type: "q4_0", seed: 1 }));
  const spec = SHAPE_SPECS.tiny;
  const f = GGUFFile.open(path);
  try {
    assert.equal(f.architecture, "llama");
    assert.match(f.getString("general.name"), /synthetic/);
    assert.equal(f.getNumber("general.file_type"), 2);
    assert.equal(f.getNumber("llama.embedding_length"), spec.dim);
    assert.equal(f.getNumber("llama.block_count"), spec.layers);
    assert.equal(f.getNumber("llama.feed_forward_length"), spec.ffn);
    assert.equal(f.getNumber("llama.attention.head_count"), spec.heads);
    assert.equal(f.getNumber("llama.attention.head_count_kv"), spec.kvHeads);
    assert.equal(f.getNumber("llama.rope.dimension_count"), spec.dim / spec.heads);
    assert.equal(f.getNumber("llama.context_length"), spec.context);
    assert.equal(f.getNumber("llama.vocab_size"), spec.vocab);
    assert.equal(f.getNumber("llama.rope.freq_base"), 10000);
    assert.ok(Math.abs(f.getNumber("llama.attention.layer_norm_rms_epsilon") - 1e-5) < 1e-10);
    assert.equal(f.getString("llama.feed_forward_activation"), "relu");
    assert.equal(f.getString("tokenizer.ggml.model"), "llama");
    assert.equal((f.getArray("tokenizer.ggml.tokens") as string[]).length, spec.vocab);
    assert.equal(f.getNumber("tokenizer.ggml.bos_token_id"), 1);
    assert.equal(f.getNumber("tokenizer.ggml.eos_token_id"), 2);

    const recipes = synthRecipes(spec, "q4_0");
    assert.equal(f.tensors.size, 2 + 9 * spec.layers + 1);
    assert.deepEqual(
      [...f.tensors.keys()],
      recipes.map((t) => t.name),
    );
    const kv = (spec.dim / spec.heads) * spec.kvHeads;
    const expect: Record<string, [number[], GGMLType]> = {
      "token_embd.weight": [[spec.dim, spec.vocab], GGMLType.Q4_0],
      "output.weight": [[spec.dim, spec.vocab], GGMLType.Q4_0],
      "output_norm.weight": [[spec.dim], GGMLType.F32],
      "blk.3.attn_norm.weight": [[spec.dim], GGMLType.F32],
      "blk.3.attn_q.weight": [[spec.dim, spec.dim], GGMLType.Q4_0],
      "blk.3.attn_k.weight": [[spec.dim, kv], GGMLType.Q4_0],
      "blk.3.attn_v.weight": [[spec.dim, kv], GGMLType.Q4_0],
      "blk.3.attn_output.weight": [[spec.dim, spec.dim], GGMLType.Q4_0],
      "blk.3.ffn_norm.weight": [[spec.dim], GGMLType.F32],
      "blk.3.ffn_gate.weight": [[spec.dim, spec.ffn], GGMLType.Q4_0],
      "blk.3.ffn_up.weight": [[spec.dim, spec.ffn], GGMLType.Q4_0],
      "blk.3.ffn_down.weight": [[spec.ffn, spec.dim], GGMLType.Q4_0],
    };
    for (const [name, [dims, type]] of Object.entries(expect)) {
      assert.deepEqual(f.tensor(name).dims, dims, name);
      assert.equal(f.tensor(name).type, type, name);
    }
  } finally {
    f.close();
  }
});

test("same seed, same bytes; another seed, other weights but the same vocabulary", async () => {
  const a = tmp("det-a.gguf"),
    b = tmp("det-b.gguf"),
    c = tmp("det-c.gguf");
  await synthesize({ shape: "tiny", act: "silu", type: "q8_0", seed: 42, out: a, fsync: false });
  await synthesize({ shape: "tiny", act: "silu", type: "q8_0", seed: 42, out: b, fsync: false });
  await synthesize({ shape: "tiny", act: "silu", type: "q8_0", seed: 43, out: c, fsync: false });
  assert.equal(sha256OfFile(a), sha256OfFile(b));
  assert.notEqual(sha256OfFile(a), sha256OfFile(c));
  const fa = GGUFFile.open(a),
    fc = GGUFFile.open(c);
  try {
    assert.deepEqual(fa.getArray("tokenizer.ggml.tokens"), fc.getArray("tokenizer.ggml.tokens"));
    for (const name of fa.tensors.keys()) {
      assert.notDeepEqual(fa.tensorData(name), fc.tensorData(name), `${name} differs between seeds`);
    }
  } finally {
    fa.close();
    fc.close();
  }
});

test("every type decodes to finite values with the intended spread", async () => {
  const spec = SHAPE_SPECS.tiny;
  for (const type of ["f32", "f16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"] as Exclude<SynthType, "mxfp4">[]) {
    const path = tmp(`types-${type}.gguf`);
    await synthesize({ shape: "tiny", act: "silu", type, seed: 5, out: path, fsync: false });
    const f = GGUFFile.open(path);
    try {
      for (const r of synthRecipes(spec, type)) {
        const t = f.tensor(r.name);
        const x = dequantize(t.type, f.tensorData(r.name), t.elements);
        const s = stats(x);
        assert.ok(s.finite, `${type} ${r.name}: non-finite values`);
        // norms (ones plus a little noise) have only 256 values, so their statistics are looser
        const norm = r.kind === "norm";
        const centre = norm ? 1 : 0;
        assert.ok(Math.abs(s.mean - centre) < (norm ? 0.25 : 0.05) * r.std, `${type} ${r.name}: mean ${s.mean}`);
        assert.ok(
          Math.abs(s.std / r.std - 1) < (norm ? 0.15 : 0.05),
          `${type} ${r.name}: std ${s.std}, wanted ${r.std}`,
        );
      }
      // block scales are sane halves: nonzero, finite, and within 25% of the nominal magnitude
      if (type !== "f32" && type !== "f16") {
        const r = synthRecipes(spec, type).find((t) => t.name === "blk.0.ffn_up.weight")!;
        const data = f.tensorData(r.name);
        const bs = { q4_0: 18, q8_0: 34, q4_1: 20, q5_0: 22, q5_1: 24 }[type];
        const rms = Math.sqrt({ q4_0: 21.5, q8_0: 5461.5, q4_1: 21.25, q5_0: 85.5, q5_1: 85.25 }[type]);
        const signed = type === "q4_0" || type === "q5_0";
        let negatives = 0;
        for (let o = 0; o < data.length; o += bs) {
          const d = f16ToF32(data[o] | (data[o + 1] << 8));
          const rel = Math.abs(d) / (r.std / rms);
          assert.ok(rel > 0.74 && rel < 1.26, `${type}: block scale ${d} is off`);
          if (d < 0) negatives++;
          if (type === "q4_1" || type === "q5_1") {
            const m = f16ToF32(data[o + 2] | (data[o + 3] << 8));
            const middle = type === "q4_1" ? 7.5 : 15.5;
            assert.ok(Math.abs(m + middle * d) <= Math.abs(d) * 0.01, `${type} min centres the levels`);
          }
        }
        const blocks = data.length / bs;
        if (signed)
          assert.ok(negatives > blocks * 0.4 && negatives < blocks * 0.6, `${type} scales carry random signs`);
        else assert.equal(negatives, 0);
      }
    } finally {
      f.close();
    }
  }
});

test("the synthetic vocabulary works with the project's tokenizer", async () => {
  const path = tmp("tok.gguf");
  await synthesize({
    shape: "tiny",
    act: "silu",
    type: "q4_0",
    seed: 1,
    out: path,
    fsync: false,
    overrides: { vocab: 4000 },
  });
  const f = GGUFFile.open(path);
  try {
    const tok = Tokenizer.fromGGUF(f);
    assert.equal(tok.vocabSize, 4000);
    assert.equal(tok.bosId, 1);
    assert.equal(tok.eosId, 2);
    const text = "Once upon a time, there was a little girl.\nÜ!";
    const ids = tok.encode(text, { addBos: true });
    assert.equal(ids[0], 1, "BOS first");
    assert.equal(tok.decode(ids.slice(1), { removeLeadingSpace: true }), text);
    const tokens = f.getArray("tokenizer.ggml.tokens") as string[];
    assert.ok(ids.includes(tokens.indexOf(SPACE + "Once")), "whole-word pieces are reachable by merges");
    assert.ok(ids.includes(3 + 0x0a), "newline falls back to its byte token");
  } finally {
    f.close();
  }
});

test("activations stay finite and the logits are neither flat nor collapsed (engine forward pass)", async () => {
  const path = tmp("fw.gguf");
  await synthesize({ shape: "tiny", act: "silu", type: "f32", seed: 7, out: path, fsync: false });
  const m = await LlamaModel.load(path, { threads: 1, contextSize: 32 });
  try {
    const toks = [1, 300, 301, 400, 5, 6, 7, 8];
    const argmaxes = new Set<number>();
    for (let p = 0; p < toks.length; p++) {
      const l = m.forward([toks[p]], 1, p);
      const s = stats(l);
      assert.ok(s.finite, `position ${p}: non-finite logits`);
      // the output projection is scaled for logits with a standard deviation near 2
      assert.ok(s.std > 1 && s.std < 4, `position ${p}: logit std ${s.std}`);
      let max = -Infinity,
        arg = 0;
      for (let i = 0; i < l.length; i++) if (l[i] > max) ((max = l[i]), (arg = i));
      let z = 0;
      for (const v of l) z += Math.exp(v - max);
      const pmax = 1 / z;
      assert.ok(pmax > 5 / l.length && pmax < 0.9, `position ${p}: top probability ${pmax}`);
      argmaxes.add(arg);
    }
    assert.ok(argmaxes.size > 2, "the favourite token changes with the input");
  } finally {
    await m.dispose();
  }
});

test("abort removes the partial file", async () => {
  const path = tmp("aborted.gguf");
  const ac = new AbortController();
  await assert.rejects(
    synthesize({
      shape: "tiny",
      act: "silu",
      type: "f32",
      seed: 1,
      out: path,
      fsync: false,
      signal: ac.signal,
      onProgress: (p) => p.tensorIndex === 3 && ac.abort(),
    }),
    (e: Error) => e.name === "AbortError" || /abort/i.test(e.message),
  );
  assert.ok(!existsSync(path));
  assert.deepEqual(
    readdirSync(dir).filter((n) => n.startsWith("aborted")),
    [],
  );
});

test("bad options are clear errors", async () => {
  const base = { shape: "tiny", act: "silu", type: "q4_0", seed: 1, out: tmp("bad.gguf") } as const;
  await assert.rejects(synthesize({ ...base, shape: "2b" as never }), /unknown shape "2b"/);
  await assert.rejects(synthesize({ ...base, act: "tanh" as never }), /unknown activation "tanh"/);
  // an architecture's own activation, and only its own
  await assert.rejects(
    synthesize({ ...base, act: "gelu" }),
    /gelu is gemma3's activation; tiny takes silu, relu or drelu/,
  );
  await assert.rejects(
    synthesize({ ...base, shape: "gemma3-tiny" }),
    /gemma3-tiny is gemma3, which computes gelu: --act gelu/,
  );
  await assert.rejects(synthesize({ ...base, shape: "qwen3-tiny", act: "relu" }), /qwen3, which computes silu/);
  await assert.rejects(synthesize({ ...base, type: "q3_k" as never }), /unknown type "q3_k"/);
  await assert.rejects(synthesize({ ...base, seed: -1 }), /seed/);
  await assert.rejects(synthesize({ ...base, overrides: { heads: 7 } }), /not a multiple of heads 7/);
  await assert.rejects(synthesize({ ...base, overrides: { ffn: 100 } }), /block size 32/);
});

test("synth CLI writes the file and rejects bad flags", async () => {
  const path = tmp("cli.gguf");
  const code = await synthMain([
    "--shape",
    "tiny",
    "--act",
    "drelu",
    "--type",
    "q4_1",
    "--seed",
    "9",
    "-o",
    path,
    "--quiet",
  ]);
  assert.equal(code, 0);
  const f = GGUFFile.open(path);
  assert.equal(f.getString("llama.feed_forward_activation"), "drelu");
  assert.equal(f.getNumber("general.file_type"), 3);
  f.close();
  await assert.rejects(
    synthMain(["--shape", "huge", "-o", path]),
    /--shape must be one of tiny, 1b, 7b, mistral-7b, 13b/,
  );
  await assert.rejects(synthMain(["--type", "q3_k", "-o", path]), /--type must be one of/);
  await assert.rejects(synthMain(["--act", "tanh", "-o", path]), /--act must be one of/);
  await assert.rejects(synthMain(["--seed", "x", "-o", path]), /--seed expects an integer/);
  await assert.rejects(synthMain(["--shape", "tiny"]), /output file is required/);
  await assert.rejects(synthMain(["-o", join(dir, "no", "such", "dir.gguf")]), /does not exist/);
});
