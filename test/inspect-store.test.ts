/**
 * `powerinfer inspect` on a neuron store: header, manifest, metadata, fixed tensors, FFN layers,
 * bundle layout, predictors and checksums, as text and as JSON (before: "not a GGUF file: magic is
 * PIST"); `--verify` checks every chunk and names a damaged one.
 */
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { copyFileSync, openSync, writeSync, closeSync } from "node:fs";
import { join } from "node:path";
import { convertToStore } from "../src/offline/convert.js";
import { NeuronStore } from "../src/format/store/index.js";
import { CLI, SHARED, tempDir } from "./helpers.js";

const RELU_Q8 = `${SHARED}/models/relu-stories.Q8_0.gguf`;
const dir = tempDir("powerinfer-inspect-");
let store: string;

before(async () => {
  store = join(dir, "relu.pi");
  await convertToStore({ input: RELU_Q8, output: store, fsync: false });
});

function cli(...args: string[]) {
  const r = spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8", timeout: 60_000 });
  return { code: r.status, stdout: r.stdout, stderr: r.stderr };
}

test("inspect STORE.pi: header, metadata, tensors, FFN layout, predictors, checksums", () => {
  const s = NeuronStore.open(store);
  const manifestAt = s.checksummed.end;
  s.close();
  const r = cli("inspect", store);
  assert.equal(r.code, 0, r.stderr);
  const out = r.stdout;
  assert.match(out, /^format: powerinfer-ts neuron store v2, /m);
  assert.match(
    out,
    new RegExp(`^header: manifest at ${manifestAt} \\(\\d+ bytes, crc32 [0-9a-f]{8}\\), flags 0$`, "m"),
  );
  assert.match(out, /^source: relu-stories\.Q8_0\.gguf \(GGUF, \d+ bytes\)$/m);
  assert.match(out, /general\.architecture = "llama"/);
  assert.match(out, /^fixed tensors \(\d+, /m);
  assert.match(out, /blk\.0\.attn_q\.weight\s+Q8_0\s+\[256, 256\]/);
  assert.match(out, /^ffn: Q8_0, nEmbd 256, row 272 bytes, bundle 4096 bytes \(gate 0, up 272, down 544\), 6 layers$/m);
  assert.match(
    out,
    /^ {2}layer 0: 1024 neurons, bundles at \d+ \(4194304 bytes\), gate rows at \d+, order: index order$/m,
  );
  assert.match(out, /^predictors: none$/m);
  assert.match(out, /^checksums: crc32 over \d+ chunks of 4096 bytes, \[4096, \d+\)$/m);
  assert.match(out, /^layout: \d+ regions tile \[4096, \d+\) with no gap or overlap$/m);
});

test("inspect --json STORE.pi: the same, machine-readable", () => {
  const r = cli("inspect", "--json", store);
  assert.equal(r.code, 0, r.stderr);
  const j = JSON.parse(r.stdout);
  assert.equal(j.format, "powerinfer-ts store");
  assert.equal(j.version, 2);
  assert.equal(j.metadata["llama.block_count"], 6);
  assert.equal(j.ffn.layers.length, 6);
  assert.equal(j.ffn.layers[0].neurons, 1024);
  assert.equal(j.ffn.bundleBytes, 4096);
  assert.ok(j.tensors.some((t: { name: string; type: string }) => t.name === "output.weight" && t.type === "Q8_0"));
  assert.equal(j.checksums.chunks, (j.checksums.end - 4096) / 4096);
  assert.deepEqual(j.predictors, []);
});

test("inspect --verify STORE.pi: every chunk checked; a damaged one named", () => {
  const ok = cli("inspect", "--verify", store);
  assert.equal(ok.code, 0, ok.stderr);
  assert.match(ok.stdout, /^verified: every chunk matches its checksum$/m);
  const bad = join(dir, "bad.pi");
  copyFileSync(store, bad);
  const s = NeuronStore.open(bad);
  const at = s.bundleOffset(3, 17) + 5;
  s.close();
  const fd = openSync(bad, "r+");
  writeSync(fd, new Uint8Array([0x55]), 0, 1, at);
  closeSync(fd);
  const r = cli("inspect", "--verify", bad);
  assert.equal(r.code, 1);
  assert.match(r.stderr, /checksum mismatch in the 4096-byte chunk at \d+ \(layer 3 FFN, bundle at stored position 17/);
});
