/**
 * Every architecture variant the engine claims (llama, mistral, qwen2 with Q/K/V biases and NeoX
 * RoPE, bamboo with dReLU, PowerInfer PWRI files with transposed Down, split files) checked
 * against the plain-TypeScript reference forward pass. The variants are made from the real
 * relu-stories weights by rewriting its GGUF, so the numbers are those of a trained model.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { GGUFFile } from "../src/format/gguf.js";
import { rewrite } from "./rewrite.js";
import { LlamaModel } from "../src/model/model.js";
import { ReferenceModel } from "../src/model/reference.js";
import { SHARED, uniforms } from "./helpers.js";

const RELU = `${SHARED}/models/relu-stories.gguf`;
const PROMPT = [1, 403, 407, 261, 378];

/** Greedy-decode 8 tokens with both the engine and the reference; logits must agree closely. */
async function compareWithReference(path: string, threads = 2): Promise<number[]> {
  const file = GGUFFile.open(path);
  const ref = new ReferenceModel(file, 32);
  file.close();
  const model = await LlamaModel.load(path, { threads, contextSize: 32 });
  try {
    let fast: Float32Array<ArrayBufferLike> = model.forward(PROMPT, PROMPT.length, 0);
    let slow: Float32Array<ArrayBufferLike> = new Float32Array(0);
    for (let i = 0; i < PROMPT.length; i++) slow = ref.forward(PROMPT[i], i);
    const ids: number[] = [];
    for (let step = 0; step < 8; step++) {
      const scale = Math.max(...slow.map(Math.abs));
      let worst = 0;
      for (let i = 0; i < slow.length; i++) worst = Math.max(worst, Math.abs(fast[i] - slow[i]));
      assert.ok(
        worst <= 1e-3 * scale,
        `${path} step ${step}: engine vs reference logits differ by ${worst} (scale ${scale})`,
      );
      const id = slow.indexOf(Math.max(...slow));
      assert.equal(fast.indexOf(Math.max(...fast)), id, `${path} step ${step}: greedy token`);
      ids.push(id);
      const pos = PROMPT.length + step;
      fast = model.forward([id], 1, pos);
      slow = ref.forward(id, pos);
    }
    return ids;
  } finally {
    await model.dispose();
  }
}

test("llama (relu-stories as it is): engine equals the reference", async () => {
  await compareWithReference(RELU, 1);
});

test("mistral: same computation as llama under another name", async () => {
  const p = await rewrite(RELU, "mistral", { arch: "mistral" });
  const m = await LlamaModel.load(p, { threads: 1, contextSize: 16 });
  assert.equal(m.config.architecture, "mistral");
  assert.equal(m.config.activation, "relu");
  await m.dispose();
  assert.deepEqual(await compareWithReference(p), await compareWithReference(RELU));
});

test("qwen2: Q/K/V biases and NeoX RoPE pairing", async () => {
  const p = await rewrite(RELU, "qwen2", {
    arch: "qwen2",
    tensors: () => {
      const m = new Map<string, [number[], Float32Array]>();
      for (let l = 0; l < 6; l++) {
        m.set(`blk.${l}.attn_q.bias`, [[256], uniforms(256, 10 + l, 0.3)]);
        m.set(`blk.${l}.attn_k.bias`, [[128], uniforms(128, 20 + l, 0.3)]);
        m.set(`blk.${l}.attn_v.bias`, [[128], uniforms(128, 30 + l, 0.3)]);
      }
      return m;
    },
  });
  const m = await LlamaModel.load(p, { threads: 1, contextSize: 16 });
  assert.equal(m.config.qkvBias, true);
  assert.equal(m.config.ropePairing, "neox");
  await m.dispose();
  await compareWithReference(p);
});

test("bamboo: dReLU (relu on gate and up) from the architecture", async () => {
  const p = await rewrite(RELU, "bamboo", { arch: "bamboo", dropKeys: ["llama.feed_forward_activation"] });
  const m = await LlamaModel.load(p, { threads: 1, contextSize: 16 });
  assert.equal(m.config.activation, "drelu");
  await m.dispose();
  await compareWithReference(p);
});

test("PowerInfer PWRI file: transposed Down and predictor tensors load and run dense", async () => {
  const p = await rewrite(RELU, "pwri", {
    magic: "PWRI",
    metadata: { "powerinfer.sparse_threshold": 0.5 },
    tensors: (src) => {
      const m = new Map<string, [number[], Float32Array] | undefined>();
      for (let l = 0; l < 6; l++) {
        const down = new Float32Array(src.tensorData(`blk.${l}.ffn_down.weight`).buffer.slice(0));
        const t = new Float32Array(down.length); // [256 rows][1024 cols] -> [1024 rows][256 cols]
        for (let r = 0; r < 256; r++) for (let c = 0; c < 1024; c++) t[c * 256 + r] = down[r * 1024 + c];
        m.set(`blk.${l}.ffn_down.weight`, undefined);
        m.set(`blk.${l}.ffn_down_t.weight`, [[256, 1024], t]);
        m.set(`blk.${l}.fc1.weight`, [[256, 64], uniforms(256 * 64, l, 0.1)]);
        m.set(`blk.${l}.fc2.weight`, [[64, 1024], uniforms(64 * 1024, l + 7, 0.1)]);
      }
      return m;
    },
  });
  const m = await LlamaModel.load(p, { threads: 1, contextSize: 16 });
  assert.equal(m.config.powerinfer, true);
  assert.equal(m.config.sparseThreshold, 0.5);
  await m.dispose();
  assert.deepEqual(await compareWithReference(p), await compareWithReference(RELU));
});

test("split model: three parts load as one", async () => {
  const p = await rewrite(RELU, "split", {}, 3);
  assert.match(p, /split-00001-of-00003\.gguf$/);
  const f = GGUFFile.open(p);
  assert.equal(f.paths.length, 3);
  assert.equal(f.tensors.size, 3 + 6 * 9);
  f.close();
  assert.deepEqual(await compareWithReference(p), await compareWithReference(RELU));
});
