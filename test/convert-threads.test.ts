/**
 * `convert` on worker threads (offline/convert/convert-pool.ts) writes the bytes the calling
 * thread alone writes: GGUFs of the Hugging Face fixtures (every way a tensor is made: rows,
 * llama's rotary regrouping, Gemma's one added, fused and picked columns, MXFP4 kept or decoded),
 * stores straight from a checkpoint and from a GGUF, on a llama wide enough for a layer to be
 * several bands of Down and several bundle groups. A job that fails on a worker (a value the
 * store's type cannot hold), a NaN, and a shard cut short while it is read fail the conversion
 * naming the file and the tensor, and leave no file behind.
 */
import { test, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readdirSync, readFileSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { GGMLType } from "../src/format/ggml-types.js";
import { convertHFToGGUF, type HFOutputType } from "../src/format/hf/hf-to-gguf.js";
import { SafetensorsFile } from "../src/format/hf/safetensors.js";
import { convertToStore } from "../src/offline/convert.js";
import { ConvertPool } from "../src/offline/convert/convert-pool.js";
import { convertHFToStore } from "../src/offline/hf-to-store.js";
import { hfFixtureDir, ROOT, tempDir } from "./helpers.js";
import { hfFiles, hfPristine, PRISTINE_CONFIG } from "./fuzz/hf-cases.js";
import { safetensorsBytes, type TestTensor } from "./safetensors-writer.js";

const FIXTURES = join(ROOT, "test", "fixtures", "hf");
const NAMES = existsSync(FIXTURES)
  ? readdirSync(FIXTURES).filter((n) => existsSync(join(FIXTURES, n, "config.json")))
  : [];
const dir = tempDir("convert-threads-");
const pool = ConvertPool.start(2);
after(() => pool.close());

let outputs = 0;
/** A fresh empty directory for one output. */
function outDir(): string {
  const d = join(dir, `out-${outputs++}`);
  mkdirSync(d);
  return d;
}

const HIDDEN = 512,
  FF = 8192,
  LAYERS = 2,
  HEADS = 8,
  KV_HEADS = 4,
  VOCAB = 260;

/**
 * A llama checkpoint (the fuzz target's tokenizer) whose FFN is two bands of Down per layer and
 * several bundle groups, in two shards; `edit` may change values before they are written.
 */
function wideLlama(name: string, edit?: (tensors: TestTensor[][]) => void): string {
  const d = join(dir, name);
  mkdirSync(d);
  let seed = 1;
  const values = (n: number, scale: number) => {
    const v = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      seed = (seed * 1103515245 + 12345) >>> 0;
      v[i] = (seed / 2 ** 32 - 0.5) * scale;
    }
    return v;
  };
  const t = (tensorName: string, shape: number[], scale = 0.05): TestTensor => ({
    name: tensorName,
    shape,
    values: shape.length === 1 ? new Float32Array(shape[0]).fill(1) : values(shape[0] * shape[1], scale),
  });
  const hd = HIDDEN / HEADS;
  const shards: TestTensor[][] = [
    [t("model.embed_tokens.weight", [VOCAB, HIDDEN], 1)],
    [t("model.norm.weight", [HIDDEN])],
  ];
  for (let l = 0; l < LAYERS; l++) {
    const p = `model.layers.${l}.`;
    shards[l].push(
      t(p + "input_layernorm.weight", [HIDDEN]),
      t(p + "self_attn.q_proj.weight", [HEADS * hd, HIDDEN]),
      t(p + "self_attn.k_proj.weight", [KV_HEADS * hd, HIDDEN]),
      t(p + "self_attn.v_proj.weight", [KV_HEADS * hd, HIDDEN]),
      t(p + "self_attn.o_proj.weight", [HIDDEN, HEADS * hd]),
      t(p + "post_attention_layernorm.weight", [HIDDEN]),
      t(p + "mlp.gate_proj.weight", [FF, HIDDEN]),
      t(p + "mlp.up_proj.weight", [FF, HIDDEN]),
      t(p + "mlp.down_proj.weight", [HIDDEN, FF]),
    );
  }
  edit?.(shards);
  const weightMap: Record<string, string> = {};
  shards.forEach((list, i) => {
    const file = `model-0000${i + 1}-of-00002.safetensors`;
    writeFileSync(join(d, file), safetensorsBytes(list));
    for (const x of list) weightMap[x.name] = file;
  });
  writeFileSync(join(d, "model.safetensors.index.json"), JSON.stringify({ weight_map: weightMap }));
  const config = {
    ...PRISTINE_CONFIG,
    hidden_size: HIDDEN,
    intermediate_size: FF,
    num_hidden_layers: LAYERS,
    num_attention_heads: HEADS,
    num_key_value_heads: KV_HEADS,
    vocab_size: VOCAB,
  };
  writeFileSync(join(d, "config.json"), JSON.stringify(config));
  writeFileSync(join(d, "tokenizer.json"), hfFiles(hfPristine(), []).get("tokenizer.json")!);
  return d;
}

const wide = wideLlama("wide-llama");

/** Convert on this thread and on the pool; the two files' bytes. */
async function bothWays(convert: (output: string, pooled: boolean) => Promise<unknown>, ext: string) {
  const one = join(outDir(), `x${ext}`),
    two = join(outDir(), `x${ext}`);
  await convert(one, false);
  await convert(two, true);
  return [readFileSync(one), readFileSync(two)];
}

for (const name of NAMES)
  // f16 decodes gpt-oss's MXFP4 experts to their values, which auto and q8_0 keep
  for (const type of ["auto", "q8_0", ...(name === "gpt-oss-mxfp4" ? ["f16"] : [])] as HFOutputType[])
    test(`hf ${name} -> GGUF ${type}: the workers' file is the calling thread's, byte for byte`, async () => {
      const input = hfFixtureDir(name, join(dir, name));
      const [one, two] = await bothWays(
        (output, pooled) => convertHFToGGUF({ input, output, type, fsync: false, ...(pooled ? { runner: pool } : {}) }),
        ".gguf",
      );
      assert.ok(one.equals(two), `${name} ${type}: the files differ`);
    });

for (const type of ["bf16", "q8_0", "q4_1", "f16"] as HFOutputType[])
  test(`a wide llama -> store ${type}: the workers' store is the calling thread's, byte for byte`, async () => {
    const [one, two] = await bothWays(
      (output, pooled) =>
        convertHFToStore({ input: wide, output, type, fsync: false, ...(pooled ? { runner: pool } : {}) }),
      ".pi",
    );
    assert.ok(one.equals(two), `${type}: the stores differ`);
  });

test("a wide llama's GGUF -> store q4_1 (requantized): the workers' store is the calling thread's", async () => {
  const gguf = join(outDir(), "wide.gguf");
  await convertHFToGGUF({ input: wide, output: gguf, type: "q8_0", fsync: false, runner: pool });
  const [one, two] = await bothWays(
    (output, pooled) =>
      convertToStore({ input: gguf, output, type: "q4_1", fsync: false, ...(pooled ? { runner: pool } : {}) }),
    ".pi",
  );
  assert.ok(one.equals(two), "the stores differ");
});

/** The conversion fails with a message holding every one of `parts`, and leaves `out` empty. */
async function failsNaming(run: (out: string) => Promise<unknown>, ...parts: (string | RegExp)[]): Promise<void> {
  const out = outDir();
  await assert.rejects(run(out), (e: Error) => {
    for (const p of parts)
      assert.ok(typeof p === "string" ? e.message.includes(p) : p.test(e.message), `${p} is not in: ${e.message}`);
    return true;
  });
  assert.deepEqual(readdirSync(out), [], "nothing is left");
}

test("on workers: a value the store's type cannot hold fails the job, naming the tensor; no store is left", async () => {
  const d = wideLlama("wide-big-value", (shards) => {
    shards[1].find((x) => x.name === "model.layers.1.mlp.up_proj.weight")!.values[3 * HIDDEN + 5] = 1e6;
  });
  await failsNaming(
    (out) => convertHFToStore({ input: d, output: join(out, "x.pi"), type: "f16", fsync: false, runner: pool }),
    "blk.1.ffn_up.weight",
    "does not fit in F16",
  );
});

test("on workers: a NaN in the checkpoint is refused naming the shard and the tensor; no store is left", async () => {
  const d = wideLlama("wide-nan", (shards) => {
    shards[0].find((x) => x.name === "model.layers.0.mlp.down_proj.weight")!.values[7 * FF + 4100] = NaN;
  });
  await failsNaming(
    (out) => convertHFToStore({ input: d, output: join(out, "x.pi"), type: "q8_0", fsync: false, runner: pool }),
    "model-00001-of-00002.safetensors",
    '"model.layers.0.mlp.down_proj.weight"',
    "NaN",
  );
});

test("a NaN or infinity in Gate's or Up's rows read for a store is refused naming the shard, tensor, row and column", async () => {
  const bf16 = wideLlama("wide-up-nan", (shards) => {
    shards[1].find((x) => x.name === "model.layers.1.mlp.up_proj.weight")!.values[3 * HIDDEN + 5] = NaN;
  });
  const f16 = wideLlama("wide-gate-inf", (shards) => {
    const t = shards[0].find((x) => x.name === "model.layers.0.mlp.gate_proj.weight")!;
    t.dtype = "F16";
    t.values[(FF - 1) * HIDDEN + HIDDEN - 1] = -Infinity;
  });
  for (const runner of [pool, undefined]) {
    await failsNaming(
      (out) => convertHFToStore({ input: bf16, output: join(out, "x.pi"), type: "q8_0", fsync: false, runner }),
      'model-00002-of-00002.safetensors: tensor "model.layers.1.mlp.up_proj.weight" holds NaN (row 3, column 5)',
    );
    await failsNaming(
      (out) => convertHFToStore({ input: f16, output: join(out, "x.pi"), type: "q4_1", fsync: false, runner }),
      `model-00001-of-00002.safetensors: tensor "model.layers.0.mlp.gate_proj.weight" holds -Infinity (row ${FF - 1}, column ${HIDDEN - 1})`,
    );
  }
});

test("ConvertPool.idle() resolves once every job posted has settled, done or failed (a failed conversion waits for it before its files close)", async () => {
  const n = 1 << 16;
  const jobs = Array.from({ length: 6 }, (_, i) => {
    const src = new Uint8Array(pool.allocate(n * 2));
    const dst = new Uint8Array(pool.allocate(n + n / 16));
    // the last two fail in the worker: a read from a descriptor that is not open
    const read = i < 4 ? undefined : { fd: 1 << 20, position: 0, file: "nowhere.safetensors", tensor: "t" };
    return pool.encode({ src, read, dtype: "BF16", rows: 1, rowLen: n, type: GGMLType.Q8_0, dst });
  });
  const settled = jobs.map(() => false);
  jobs.forEach((j, i) =>
    j.then(
      () => (settled[i] = true),
      () => (settled[i] = true),
    ),
  );
  await pool.idle();
  assert.deepEqual(settled, [true, true, true, true, true, true]);
  assert.equal((await Promise.allSettled(jobs)).filter((r) => r.status === "rejected").length, 2);
});

test("on workers: a shard cut short while it is read fails naming the shard and the tensor; no file is left", async () => {
  for (const to of [".gguf", ".pi"]) {
    const d = wideLlama(`wide-cut${to}`);
    const shard = join(d, "model-00002-of-00002.safetensors");
    const f = SafetensorsFile.open(shard);
    const at = f.tensors.get("model.layers.1.mlp.gate_proj.weight")!;
    f.close();
    let cut = false;
    // once the conversion is under way, the shard loses its end: layer 1's FFN and all after it
    const onProgress = (p: { bytesDone: number }) => {
      if (!cut && p.bytesDone > 0) {
        truncateSync(shard, at.offset + 1000);
        cut = true;
      }
    };
    await failsNaming(
      (out) =>
        to === ".gguf"
          ? convertHFToGGUF({ input: d, output: join(out, "x.gguf"), fsync: false, runner: pool, onProgress })
          : convertHFToStore({
              input: d,
              output: join(out, "x.pi"),
              type: "q8_0",
              fsync: false,
              runner: pool,
              onProgress,
            }),
      shard,
      // the store reads Down first, a GGUF Gate
      /tensor "model\.layers\.1\.mlp\.(gate|up|down)_proj\.weight": truncated/,
    );
  }
});
