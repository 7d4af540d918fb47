/**
 * The safetensors reader (src/format/hf/safetensors.ts) on files made here: values read back in
 * each dtype and from any element, shards joined by their index, and every malformed file
 * refused with an error naming the file and the tensor or offset.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { rmSync, truncateSync, writeFileSync, mkdirSync } from "node:fs";
import { join } from "node:path";
import { SafetensorsCheckpoint, SafetensorsFile } from "../src/format/hf/safetensors.js";
import { roundF16 } from "../src/format/half.js";
import { gaussians, tempDir } from "./helpers.js";
import { safetensorsBytes, writeSafetensors } from "./safetensors-writer.js";

const dir = tempDir("safetensors-");
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

function throwsNaming(f: () => unknown, ...parts: string[]): void {
  assert.throws(f, (e: Error) => {
    for (const p of parts) assert.ok(e.message.includes(p), `"${e.message}" should name ${p}`);
    return true;
  });
}

test("safetensors: F32, F16 and BF16 read back from any element", () => {
  const v = gaussians(6 * 5, 1);
  const path = join(dir, "three.safetensors");
  writeSafetensors(path, [
    { name: "a", shape: [6, 5], values: v, dtype: "F32" },
    { name: "b", shape: [6, 5], values: v, dtype: "F16" },
    { name: "c", shape: [30], values: v, dtype: "BF16" },
  ]);
  const f = SafetensorsFile.open(path);
  try {
    assert.deepEqual([...f.tensors.keys()], ["a", "b", "c"]);
    assert.equal(f.metadata.format, "pt");
    const out = new Float32Array(7);
    f.readF32(f.tensors.get("a")!, 11, out);
    assert.deepEqual(out, v.subarray(11, 18));
    f.readF32(f.tensors.get("b")!, 11, out);
    assert.deepEqual(out, v.subarray(11, 18).map(roundF16));
    f.readF32(f.tensors.get("c")!, 23, out);
    // bf16 keeps the top 16 bits, rounded to nearest even
    for (let i = 0; i < 7; i++) assert.ok(Math.abs(out[i] - v[23 + i]) <= Math.abs(v[23 + i]) / 128);
    throwsNaming(() => f.readF32(f.tensors.get("c")!, 25, out), '"c"', "outside");
  } finally {
    f.close();
  }
});

test("safetensors: a malformed file is refused naming the file and the tensor or offset", () => {
  const good = [
    { name: "w", shape: [4, 8], values: gaussians(32, 2) },
    { name: "n", shape: [8], values: gaussians(8, 3) },
  ];
  const at = (name: string, bytes: Uint8Array) => {
    const p = join(dir, name);
    writeFileSync(p, bytes);
    return p;
  };
  const bad = (name: string, bytes: Uint8Array, ...parts: string[]) =>
    throwsNaming(() => SafetensorsFile.open(at(name, bytes)), name, ...parts);
  const bytes = safetensorsBytes(good);
  bad("short.safetensors", bytes.subarray(0, 5), "truncated header");
  bad("cut-header.safetensors", bytes.subarray(0, 40), "truncated header");
  bad("cut-data.safetensors", bytes.subarray(0, bytes.length - 3), "truncated data", '"n"');
  const huge = bytes.slice();
  new DataView(huge.buffer).setBigUint64(0, 1n << 40n, true);
  bad("huge.safetensors", huge, "header length");
  bad(
    "overlap.safetensors",
    safetensorsBytes(good, (h) => (h.n.data_offsets = [0, 16])),
    '"w"',
    '"n"',
    "overlap",
  );
  bad(
    "size.safetensors",
    safetensorsBytes(good, (h) => (h.w.shape = [4, 9])),
    '"w"',
    "[4, 9]",
    "needs 72 bytes",
  );
  bad(
    "dtype.safetensors",
    safetensorsBytes(good, (h) => (h.w.dtype = "Q4")),
    '"w"',
    "unknown dtype",
  );
  bad(
    "order.safetensors",
    safetensorsBytes(good, (h) => (h.n.data_offsets = [80, 64])),
    '"n"',
    "end before",
  );
  bad(
    "shape.safetensors",
    safetensorsBytes(good, (h) => (h.n.shape = [-8])),
    '"n"',
    "shape",
  );
  const notJson = bytes.slice();
  notJson[8] = 0x41;
  bad("json.safetensors", notJson, "not JSON");
  // a dtype the format defines but convert cannot widen: refused on reading, naming the tensor
  const u8 = SafetensorsFile.open(
    at(
      "u8.safetensors",
      safetensorsBytes(good, (h) => ((h.n.dtype = "U8"), (h.n.shape = [16]))),
    ),
  );
  try {
    throwsNaming(() => u8.readF32(u8.tensors.get("n")!, 0, new Float32Array(4)), "u8.safetensors", '"n"', "U8");
  } finally {
    u8.close();
  }
});

test("safetensors: shards joined by their index; a missing shard or tensor is named", () => {
  const ck = join(dir, "ck");
  mkdirSync(ck);
  writeSafetensors(join(ck, "model-00001-of-00002.safetensors"), [
    { name: "a", shape: [2, 4], values: gaussians(8, 4) },
  ]);
  writeSafetensors(join(ck, "model-00002-of-00002.safetensors"), [{ name: "b", shape: [4], values: gaussians(4, 5) }]);
  const index = (map: Record<string, string>) =>
    writeFileSync(join(ck, "model.safetensors.index.json"), JSON.stringify({ metadata: {}, weight_map: map }));
  index({ a: "model-00001-of-00002.safetensors", b: "model-00002-of-00002.safetensors" });
  const c = SafetensorsCheckpoint.open(ck);
  assert.deepEqual([...c.tensors.keys()].sort(), ["a", "b"]);
  assert.equal(c.tensors.get("b")!.file, join(ck, "model-00002-of-00002.safetensors"));
  c.close();
  index({ a: "model-00001-of-00002.safetensors", b: "model-00003-of-00002.safetensors" });
  throwsNaming(() => SafetensorsCheckpoint.open(ck), "missing shard", "model-00003-of-00002.safetensors", '"b"');
  index({
    a: "model-00001-of-00002.safetensors",
    b: "model-00002-of-00002.safetensors",
    c: "model-00002-of-00002.safetensors",
  });
  throwsNaming(() => SafetensorsCheckpoint.open(ck), '"c"', "model-00002-of-00002.safetensors", "does not hold it");
  index({ a: "model-00001-of-00002.safetensors" });
  throwsNaming(() => SafetensorsCheckpoint.open(ck), "model-00002-of-00002.safetensors", "not named by");
  rmSync(join(ck, "model-00002-of-00002.safetensors"));
  writeSafetensors(join(ck, "model-00001-of-00002.safetensors"), [
    { name: "a", shape: [2, 4], values: gaussians(8, 4) },
    { name: "b", shape: [4], values: gaussians(4, 5) },
  ]);
  throwsNaming(() => SafetensorsCheckpoint.open(ck), '"b"', "model-00001-of-00002.safetensors", "not listed");
  writeSafetensors(join(ck, "model-00002-of-00002.safetensors"), [{ name: "b", shape: [4], values: gaussians(4, 5) }]);
  index({ a: "../model-00001-of-00002.safetensors" });
  throwsNaming(() => SafetensorsCheckpoint.open(ck), '"a"', "not a file name");
  truncateSync(join(ck, "model-00002-of-00002.safetensors"), 20);
  index({ a: "model-00001-of-00002.safetensors", b: "model-00002-of-00002.safetensors" });
  throwsNaming(() => SafetensorsCheckpoint.open(ck), "model-00002-of-00002.safetensors", "truncated header");
});
