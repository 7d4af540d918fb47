/**
 * Perplexity as llama-perplexity computes it: checked against an independent plain-TS computation
 * on the reference forward pass, on real models (relu-stories near its reference value; a neuron
 * store in gate mode equal to the dense model), and bad inputs. Also the corpus reader.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { promisify } from "node:util";
import { GGUFFile } from "../src/format/gguf.js";
import { LlamaModel } from "../src/model/model.js";
import { ReferenceModel } from "../src/model/reference.js";
import { convertToStore } from "../src/offline/convert.js";
import { corpusTokens, firstInvalidUtf8, readCorpus } from "../src/offline/corpus.js";
import { perplexity, PerplexityError } from "../src/offline/perplexity.js";
import { Tokenizer } from "../src/tokenizer/index.js";
import { CLI, SHARED, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const RELU = `${SHARED}/models/relu-stories.gguf`;
const HELDOUT = `${SHARED}/data/stories-heldout.txt`;
const run = promisify(execFile);

function tokenizerOf(path: string): Tokenizer {
  const f = GGUFFile.open(path);
  try {
    return Tokenizer.fromGGUF(f);
  } finally {
    f.close();
  }
}

const relDiff = (a: number, b: number) => Math.abs(a - b) / Math.abs(b);

test("perplexity equals an independent computation on the reference forward pass (stories260K)", async () => {
  const text = readFileSync(HELDOUT, "utf8").slice(0, 2000);
  const tok = tokenizerOf(STORIES);
  const ids = tok.encode(text, { addBos: true }); // the whole text, BOS first, as llama.cpp
  const nCtx = 24,
    nChunks = 3;

  // Independent: the reference model, token by token; chunk k = ids[k*nCtx ..], first token BOS,
  // positions nCtx/2 .. nCtx-2 scored against the next token, in double precision.
  const file = GGUFFile.open(STORIES);
  // both with an f32 KV cache: this checks the chunking and scoring to 1e-4, which the f16
  // cache's rounding (one f16 step where the two forward passes round differently) would blur
  const F32_KV = { k: "f32", v: "f32" } as const;
  const ref = new ReferenceModel(file, nCtx, F32_KV);
  file.close();
  const nlls: number[] = [];
  const running: number[] = [];
  for (let c = 0; c < nChunks; c++) {
    const chunk = ids.slice(c * nCtx, (c + 1) * nCtx);
    chunk[0] = tok.bosId;
    for (let p = 0; p < nCtx - 1; p++) {
      const logits = ref.forward(chunk[p], p);
      if (p < nCtx / 2) continue;
      let m = -Infinity;
      for (const v of logits) m = Math.max(m, v);
      let s = 0;
      for (const v of logits) s += Math.exp(v - m);
      nlls.push(-(logits[chunk[p + 1]] - m - Math.log(s)));
    }
    running.push(Math.exp(nlls.reduce((a, b) => a + b, 0) / nlls.length));
  }
  const mean = nlls.reduce((a, b) => a + b, 0) / nlls.length;
  const sd = Math.sqrt(nlls.reduce((a, b) => a + (b - mean) ** 2, 0) / nlls.length);
  const want = Math.exp(mean);
  const wantErr = (want * sd) / Math.sqrt(nlls.length - 1);

  const tokens = corpusTokens(tok, text);
  assert.deepEqual(Array.from(tokens), ids);
  // batch 7 splits each chunk's batches across the scored boundary
  for (const batch of [nCtx, 7]) {
    const model = await LlamaModel.load(STORIES, { threads: 2, contextSize: nCtx, batchSize: batch, kvCache: F32_KV });
    const r = await perplexity(model, tokens, { contextSize: nCtx, chunks: nChunks, bos: tok.bosId });
    await model.dispose();
    assert.equal(r.count, nChunks * (nCtx - 1 - nCtx / 2));
    assert.equal(r.mode, "batched");
    assert.ok(relDiff(r.ppl, want) < 1e-4, `batch ${batch}: ppl ${r.ppl} vs independent ${want}`);
    assert.ok(relDiff(r.stdError, wantErr) < 1e-3, `batch ${batch}: +/- ${r.stdError} vs ${wantErr}`);
    r.perChunk.forEach((p, i) => assert.ok(relDiff(p, running[i]) < 1e-4, `chunk ${i + 1}: ${p} vs ${running[i]}`));
  }
});

test("relu-stories on the held-out text is near its reference perplexity, and a neuron store in gate mode gives the dense value", async () => {
  const tok = tokenizerOf(RELU);
  const tokens = corpusTokens(tok, readCorpus(HELDOUT));
  const dense = await LlamaModel.load(RELU, { threads: 2, contextSize: 256, batchSize: 256 });
  const r = await perplexity(dense, tokens, { contextSize: 256, chunks: 6, bos: tok.bosId, measureSparsity: true });
  // The reference 4.03 scores every token of 819 BOS-started sequences; llama.cpp's protocol
  // scores second halves of 256-token chunks cut across stories: close, not equal.
  assert.ok(r.ppl > 3.4 && r.ppl < 5, `relu-stories held-out perplexity ${r.ppl} (reference 4.03 by another protocol)`);
  assert.ok(r.sparsity! > 0.8 && r.sparsity! < 0.92, `ReLU FFN sparsity ${r.sparsity} (reference 85.8%)`);

  const short = await perplexity(dense, tokens, { contextSize: 64, chunks: 2, bos: tok.bosId });
  await dense.dispose();
  const dir = tempDir();
  const pi = join(dir, "relu.pi");
  await convertToStore({ input: RELU, output: pi, fsync: false });
  const store = await LlamaModel.load(pi, {
    threads: 2,
    contextSize: 64,
    batchSize: 64,
    offload: { sparsity: "gate" },
  });
  const s = await perplexity(store, tokens, { contextSize: 64, chunks: 2, bos: tok.bosId, measureSparsity: true });
  await store.dispose();
  assert.equal(s.mode, "token-by-token");
  assert.ok(relDiff(s.ppl, short.ppl) < 1e-4, `store gate mode ${s.ppl} vs dense ${short.ppl}`);
  assert.ok(s.sparsity! > 0.5, `the store computed only the firing neurons (skipped ${s.sparsity})`);
});

test("perplexity refuses a text shorter than two contexts and a context larger than the model's", async () => {
  const model = await LlamaModel.load(STORIES, { threads: 1, contextSize: 32, batchSize: 32 });
  try {
    await assert.rejects(
      perplexity(
        model,
        Int32Array.from({ length: 63 }, () => 5),
        { contextSize: 32, bos: 1 },
      ),
      /only 63 tokens.*at least 64/,
    );
    await assert.rejects(
      perplexity(model, new Int32Array(200), { contextSize: 64, bos: 1 }),
      /larger than the model's KV cache/,
    );
    await assert.rejects(
      perplexity(
        model,
        Int32Array.from({ length: 64 }, () => 9999),
        { contextSize: 32, bos: 1 },
      ),
      PerplexityError,
    );
  } finally {
    await model.dispose();
  }
});

test("powerinfer perplexity prints llama-perplexity's lines, and bad files give clear errors", async () => {
  const { stdout } = await run(process.execPath, [
    CLI,
    "perplexity",
    "-m",
    STORIES,
    "-f",
    HELDOUT,
    "-c",
    "32",
    "--chunks",
    "3",
    "-t",
    "1",
  ]);
  assert.match(stdout, /^\[1\]\d+\.\d{4},\[2\]\d+\.\d{4},\[3\]\d+\.\d{4},\n/);
  const m = /Final estimate: PPL = (\d+\.\d{4}) \+\/- (\d+\.\d{5})/.exec(stdout);
  assert.ok(m, stdout);
  assert.equal(m[1], /\[3\](\d+\.\d{4})/.exec(stdout)![1], "the final value is the last running estimate");

  const dir = tempDir();
  const empty = join(dir, "empty.txt");
  writeFileSync(empty, "");
  const binary = join(dir, "model.bin");
  writeFileSync(binary, Buffer.from([0x47, 0x47, 0x55, 0x46, 3, 0, 0, 0]));
  const latin1 = join(dir, "latin1.txt");
  writeFileSync(latin1, Buffer.from("caf\xe9 au lait", "latin1"));
  const short = join(dir, "short.txt");
  writeFileSync(short, "Once upon a time, there was a little girl.");
  const cases: [string[], RegExp][] = [
    [["-f", join(dir, "missing.txt")], /missing\.txt does not exist/],
    [["-f", empty], /empty\.txt is empty/],
    [["-f", binary], /model\.bin is not a text file: NUL byte at byte offset 5/],
    [["-f", latin1], /latin1\.txt is not UTF-8 text: invalid byte 0xe9 at byte offset 3/],
    [["-f", short, "-c", "32"], /tokenizes to only \d+ tokens; a context of 32 needs at least 64/],
    [["-f", HELDOUT, "--thresholds", join(dir, "none.json")], /profile .*none\.json does not exist/],
  ];
  for (const [extra, re] of cases) {
    await assert.rejects(
      run(process.execPath, [CLI, "perplexity", "-m", STORIES, ...extra]),
      (e: { stderr: string; code: number }) => {
        assert.match(e.stderr, re);
        assert.notEqual(e.code, 0);
        return true;
      },
    );
  }
});

test("readCorpus and corpusTokens", () => {
  assert.equal(firstInvalidUtf8(Buffer.from("héllo ✓ 😀")), -1);
  assert.equal(firstInvalidUtf8(Uint8Array.from([0x61, 0xc3])), 1); // truncated
  assert.equal(firstInvalidUtf8(Uint8Array.from([0x61, 0xc0, 0x80])), 1); // overlong
  assert.equal(firstInvalidUtf8(Uint8Array.from([0xed, 0xa0, 0x80])), 0); // surrogate
  assert.equal(firstInvalidUtf8(Uint8Array.from([0x61, 0x62, 0xe2, 0x28, 0xa1])), 2);
  const dir = tempDir();
  const ws = join(dir, "ws.txt");
  writeFileSync(ws, " \n\t\n");
  assert.throws(() => readCorpus(ws), /holds only whitespace/);
  assert.throws(() => readCorpus(dir), /is a directory/);
  const bom = join(dir, "bom.txt");
  writeFileSync(bom, "\ufeffHello");
  assert.equal(readCorpus(bom), "Hello");

  const tok = tokenizerOf(STORIES);
  const text = readFileSync(HELDOUT, "utf8").slice(0, 60000);
  const all = corpusTokens(tok, text);
  assert.equal(all[0], tok.bosId);
  for (const n of [1, 100, 2500])
    assert.deepEqual(
      Array.from(corpusTokens(tok, text, { maxTokens: n })),
      Array.from(all.subarray(0, n)),
      `first ${n}`,
    );
  assert.notEqual(corpusTokens(tok, text, { addBos: false })[0], tok.bosId);
});
