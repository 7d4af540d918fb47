/**
 * NaN or infinity in a weight is found while the model loads and named with its tensor, position
 * and file: F32 and F16 values, and the f16 scales of quantized blocks. Before, an F32 NaN loaded
 * and the run died at the first token with "every logit is -Infinity or NaN", naming nothing.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { copyFileSync, openSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";
import { spawnSync } from "node:child_process";
import { loadModel } from "../src/index.js";
import { GGUFFile } from "../src/format/gguf.js";
import { GGUFWriter } from "../src/format/gguf-writer.js";
import { GGMLType } from "../src/format/ggml-types.js";
import { f32ToF16 } from "../src/format/half.js";
import { findNonFinite } from "../src/format/finite-check.js";
import { CLI, SHARED, tempDir } from "./helpers.js";

const STORIES = `${SHARED}/models/stories260K.gguf`;
const RELU_Q8 = `${SHARED}/models/relu-stories.Q8_0.gguf`;
const dir = tempDir("powerinfer-finite-");

/** A copy of `src` with `bytes` written `at` bytes into tensor `name`. */
function patched(src: string, name: string, out: string, at: number, bytes: Uint8Array): string {
  const f = GGUFFile.open(src);
  const offset = f.tensor(name).offset + at;
  f.close();
  const path = join(dir, out);
  copyFileSync(src, path);
  const fd = openSync(path, "r+");
  writeSync(fd, bytes, 0, bytes.length, offset);
  closeSync(fd);
  return path;
}

const f32 = (v: number) => new Uint8Array(new Float32Array([v]).buffer);
const u16 = (v: number) => new Uint8Array(new Uint16Array([v]).buffer);

test("an F32 NaN in a matrix: loading fails naming the tensor, row, column and file", async () => {
  // blk.2.attn_q.weight is [64, 64]: value 3*64+5 is row 3, column 5
  const path = patched(STORIES, "blk.2.attn_q.weight", "nan-q.gguf", (3 * 64 + 5) * 4, f32(NaN));
  await assert.rejects(
    loadModel({ modelPath: path, threads: 1 }),
    /nan-q\.gguf: tensor "blk\.2\.attn_q\.weight" \(F32\) holds NaN at row 3, column 5 \(byte offset \d+\)/,
  );
  // the CLI: one line, exit 1, before any token
  const r = spawnSync(process.execPath, [CLI, "run", "-m", path, "-p", "x", "-n", "4"], { encoding: "utf8" });
  assert.equal(r.status, 1, r.stderr);
  assert.match(r.stderr, /^powerinfer: \S*nan-q\.gguf: tensor "blk\.2\.attn_q\.weight" \(F32\) holds NaN at row 3/m);
});

test("an F32 infinity in a norm vector and in the embedding table is found too", async () => {
  const norm = patched(STORIES, "output_norm.weight", "inf-norm.gguf", 7 * 4, f32(-Infinity));
  await assert.rejects(
    loadModel({ modelPath: norm, threads: 1 }),
    /inf-norm\.gguf: tensor "output_norm\.weight" \(F32\) holds -Infinity at row 0, column 7/,
  );
  const embd = patched(STORIES, "token_embd.weight", "inf-embd.gguf", (100 * 64 + 1) * 4, f32(Infinity));
  await assert.rejects(
    loadModel({ modelPath: embd, threads: 1 }),
    /inf-embd\.gguf: tensor "token_embd\.weight" \(F32\) holds Infinity at row 100, column 1/,
  );
});

test("an F16 infinity: named with its tensor and file (the kernel's own check named neither)", async () => {
  const src = GGUFFile.open(STORIES);
  const path = join(dir, "f16-inf.gguf");
  const w = new GGUFWriter(path, { fsync: false });
  for (const [k, v] of src.metadata) w.setMetadata(k, v as never);
  for (const t of src.tensors.values()) {
    const data = src.tensorData(t.name);
    if (t.name !== "blk.1.attn_k.weight") {
      w.addTensor(t.name, t.dims, t.type, data);
      continue;
    }
    const values = new Float32Array(data.buffer, data.byteOffset, t.elements);
    const half = Uint16Array.from(values, (v) => f32ToF16(v));
    half[2 * 64 + 9] = 0x7c00; // +inf at row 2, column 9
    w.addTensor(t.name, t.dims, GGMLType.F16, new Uint8Array(half.buffer));
  }
  await w.finish();
  src.close();
  await assert.rejects(
    loadModel({ modelPath: path, threads: 1 }),
    /f16-inf\.gguf: tensor "blk\.1\.attn_k\.weight" \(F16\) holds Infinity at row 2, column 9/,
  );
});

test("a NaN block scale in a Q8_0 matrix: named with the block's row and first column", async () => {
  // blk.3.ffn_up.weight is Q8_0 [256, 1024]: 8 blocks of 34 bytes per row; row 10, block 2
  const path = patched(RELU_Q8, "blk.3.ffn_up.weight", "q8-nan.gguf", (10 * 8 + 2) * 34, u16(0x7e00));
  await assert.rejects(
    loadModel({ modelPath: path, threads: 1 }),
    /q8-nan\.gguf: tensor "blk\.3\.ffn_up\.weight" \(Q8_0\) holds NaN in the scale of the block at row 10, columns 64\.\.95/,
  );
});

test("findNonFinite: every type's first bad value, and none in finite data", () => {
  const vals = new Float32Array([1, -2, 0, 3.5, Infinity, NaN]);
  assert.deepEqual(findNonFinite(GGMLType.F32, new Uint8Array(vals.buffer), 0), { element: 4, value: Infinity });
  assert.equal(findNonFinite(GGMLType.F32, new Uint8Array(vals.buffer, 0, 16), 0), null);
  // an unaligned view is read all the same
  const shifted = new Uint8Array(25);
  shifted.set(new Uint8Array(vals.buffer), 1);
  assert.deepEqual(findNonFinite(GGMLType.F32, shifted.subarray(1), 0), { element: 4, value: Infinity });
  const h = new Uint16Array([0x3c00, 0xfc00]);
  assert.deepEqual(findNonFinite(GGMLType.F16, new Uint8Array(h.buffer), 0), { element: 1, value: -Infinity });
  const bf = new Uint16Array([0x3f80, 0x7fc0]);
  assert.deepEqual(findNonFinite(GGMLType.BF16, new Uint8Array(bf.buffer), 0), { element: 1, value: NaN });
  // a Q4_1 block's min (bytes 2..3) counts as much as its scale
  const q41 = new Uint8Array(40);
  new DataView(q41.buffer).setUint16(20 + 2, 0x7c00, true);
  assert.deepEqual(findNonFinite(GGMLType.Q4_1, q41, 0), { element: 32, value: Infinity, scale: true });
  // the byte offset into the tensor decides where a piece starts
  assert.deepEqual(findNonFinite(GGMLType.F32, new Uint8Array(vals.buffer, 16), 16), { element: 4, value: Infinity });
  // MXFP4: an exponent byte from 253 on lets the block's +-12 half-scales overflow f32; 252 does not
  const mx = new Uint8Array(17 * 3).fill(0x77);
  mx[0] = 252;
  mx[17] = 120;
  assert.equal(findNonFinite(GGMLType.MXFP4, mx, 0), null);
  mx[34] = 253;
  assert.deepEqual(findNonFinite(GGMLType.MXFP4, mx, 0), { element: 64, value: Infinity, scale: true });
});
