/**
 * The GGUF reader on real files and on broken ones: every defect must become an error that names
 * the file and the problem, never a crash, a hang or a model that loads wrong.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync, writeFileSync, copyFileSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile, GGUFError, splitPaths } from "../src/format/gguf.js";
import { GGMLType } from "../src/format/ggml-types.js";
import { readConfig } from "../src/model/config.js";
import { loadModel } from "../src/index.js";
import { SHARED, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const RELU_Q8 = `${SHARED}/models/relu-stories.Q8_0.gguf`;
const original = readFileSync(STORIES);
const dir = tempDir();

function variant(name: string, mutate: (b: Buffer) => Buffer): string {
  const path = join(dir, name);
  writeFileSync(path, mutate(Buffer.from(original)));
  return path;
}

/** Offset just past a key or tensor name string (u64 length + bytes) in the header. */
function after(b: Buffer, name: string): number {
  const needle = Buffer.concat([Buffer.alloc(8), Buffer.from(name)]);
  needle.writeBigUInt64LE(BigInt(name.length), 0);
  const at = b.indexOf(needle);
  assert.ok(at > 0, `${name} not found in the test file`);
  return at + needle.length;
}

function assertGGUFError(fn: () => unknown, pattern: RegExp): void {
  assert.throws(fn, (e: unknown) => {
    assert.ok(e instanceof GGUFError, `expected a GGUFError, got ${e}`);
    assert.match(e.message, pattern);
    assert.match(e.message, /\.gguf/); // names the file
    return true;
  });
}

test("reads the real models' metadata and tensor tables", () => {
  const f = GGUFFile.open(STORIES);
  try {
    assert.equal(f.magic, "GGUF");
    assert.equal(f.version, 3);
    assert.equal(f.architecture, "llama");
    assert.equal(f.getNumber("llama.embedding_length"), 64);
    assert.equal((f.getArray("tokenizer.ggml.tokens") as string[])[1], "<s>");
    const t = f.tensor("blk.0.ffn_gate.weight");
    assert.deepEqual(t.dims, [64, 172]);
    assert.equal(t.type, GGMLType.F32);
    // a tensor read by position equals the bytes at its offset
    const on = f.tensor("output_norm.weight");
    assert.deepEqual(
      Buffer.from(f.tensorData("output_norm.weight")),
      original.subarray(on.offset, on.offset + on.bytes),
    );
    const cfg = readConfig(f);
    assert.equal(cfg.nHeadKV, 4);
    assert.equal(cfg.activation, "silu");
  } finally {
    f.close();
  }
  const q = GGUFFile.open(RELU_Q8);
  try {
    assert.equal(q.tensor("blk.0.ffn_up.weight").type, GGMLType.Q8_0);
    assert.equal(readConfig(q).activation, "relu");
  } finally {
    q.close();
  }
});

test("wrong magic", () => {
  const p = variant("magic.gguf", (b) => (b.write("GGML", 0, "latin1"), b));
  assertGGUFError(() => GGUFFile.open(p), /not a GGUF file: magic is "GGML"/);
});

test("PowerInfer PWRI magic is accepted", () => {
  const p = variant("pwri.gguf", (b) => (b.write("PWRI", 0, "latin1"), b));
  const f = GGUFFile.open(p);
  assert.equal(f.magic, "PWRI");
  assert.equal(readConfig(f).powerinfer, true);
  f.close();
});

test("unsupported version", () => {
  const p = variant("version.gguf", (b) => (b.writeUInt32LE(7, 4), b));
  assertGGUFError(() => GGUFFile.open(p), /unsupported GGUF version 7/);
});

test("truncated inside the header, and inside the tensor data", () => {
  const head = variant("trunc-head.gguf", (b) => b.subarray(0, 3000));
  assertGGUFError(() => GGUFFile.open(head), /truncated|end of file|larger than the rest/);
  const data = variant("trunc-data.gguf", (b) => b.subarray(0, b.length - 100));
  assertGGUFError(() => GGUFFile.open(data), /extends beyond the end of the file/);
  const tiny = variant("trunc-6.gguf", (b) => b.subarray(0, 6));
  assertGGUFError(() => GGUFFile.open(tiny), /truncated/);
  const empty = variant("empty.gguf", () => Buffer.alloc(0));
  assertGGUFError(() => GGUFFile.open(empty), /the file is empty \(0 bytes\)/);
});

test("absurd counts and lengths", () => {
  const kv = variant("kv-count.gguf", (b) => (b.writeBigUInt64LE(1n << 50n, 16), b));
  assertGGUFError(() => GGUFFile.open(kv), /metadata count = \d+ is larger than the rest of the file/);
  const tc = variant("tensor-count.gguf", (b) => (b.writeBigUInt64LE(1n << 40n, 8), b));
  assertGGUFError(() => GGUFFile.open(tc), /tensor count/);
  const str = variant("strlen.gguf", (b) => {
    // the length of the first key string, right after the header
    b.writeBigUInt64LE(1n << 60n, 24);
    return b;
  });
  assertGGUFError(() => GGUFFile.open(str), /length = \d+ is larger than the rest of the file/);
});

test("unknown tensor type and absurd dimensions", () => {
  const type = variant("type.gguf", (b) => {
    const at = after(b, "output_norm.weight"); // u32 ndims=1, u64 dim, u32 type
    b.writeUInt32LE(99, at + 4 + 8);
    return b;
  });
  assertGGUFError(() => GGUFFile.open(type), /tensor "output_norm.weight" has unknown type id 99/);
  const dims = variant("dims.gguf", (b) => {
    const at = after(b, "output_norm.weight");
    b.writeBigUInt64LE(1n << 45n, at + 4);
    return b;
  });
  assertGGUFError(() => GGUFFile.open(dims), /dimension 0 = \d+ is absurd/);
  const nd = variant("ndims.gguf", (b) => {
    b.writeUInt32LE(9, after(b, "output_norm.weight"));
    return b;
  });
  assertGGUFError(() => GGUFFile.open(nd), /has 9 dimensions/);
});

test("unknown architecture and missing metadata are named", async () => {
  const arch = variant("arch.gguf", (b) => {
    const at = after(b, "general.architecture"); // u32 type, u64 len, "llama"
    b.write("gpt99", at + 12, "latin1");
    return b;
  });
  await assert.rejects(loadModel({ modelPath: arch, threads: 1 }), /unsupported architecture "gpt99"/);
  const missing = variant("missing.gguf", (b) => {
    const at = after(b, "llama.embedding_length");
    b.write("X", at - 1, "latin1");
    return b;
  });
  await assert.rejects(loadModel({ modelPath: missing, threads: 1 }), /missing metadata key "llama.embedding_length"/);
  const badAct = variant("act.gguf", (b) => b); // stories has no activation key: silu default
  const f = GGUFFile.open(badAct);
  assert.equal(readConfig(f).activation, "silu");
  f.close();
});

test("a missing tensor is named", async () => {
  const p = variant("no-tensor.gguf", (b) => {
    const at = after(b, "blk.3.ffn_up.weight");
    b.write("X", at - 1, "latin1");
    return b;
  });
  await assert.rejects(loadModel({ modelPath: p, threads: 1 }), /missing tensor "blk.3.ffn_up.weight"/);
});

test("a file that does not exist", async () => {
  await assert.rejects(loadModel({ modelPath: join(dir, "nope.gguf") }), /nope\.gguf: cannot open/);
});

test("split models: all parts are found, a missing part is named", () => {
  const a = join(dir, "m-00001-of-00002.gguf");
  copyFileSync(STORIES, a);
  assertGGUFError(() => splitPaths(a), /part 2 of 2 is missing \(m-00002-of-00002.gguf\)/);
  assert.deepEqual(splitPaths(STORIES), [STORIES]);
});
