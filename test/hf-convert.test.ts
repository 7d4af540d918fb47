/**
 * `convert DIR` on the Hugging Face checkpoints under test/fixtures/hf/ (tiny random models saved
 * by transformers in BF16, sharded; made by scripts/make-hf-fixtures.py). Two oracles:
 * - llama.cpp's converter (test/reference/hf/<name>.llamacpp-convert.json): our GGUF holds the
 *   same tensors (name, type, shape, sha256 of the bytes) at f32 and q8_0;
 * - transformers (test/reference/hf/<name>.transformers.json): greedy ids on 6 prompts x 24 tokens,
 *   and at every teacher-forced step the top-8 logits within 1e-3 of the max logit, from the GGUF
 *   and from a neuron store (-o x.pi) read under a budget that leaves most of the FFN on flash.
 * - llama.cpp itself (node-llama-cpp in bench/.peer, where installed) loads our f32 GGUF and
 *   decodes transformers' greedy ids.
 * gpt-oss-mxfp4 (gpt-oss as published, experts in MXFP4): auto keeps them, equal to llama.cpp's
 * converter's bf16 output byte for byte; f32/f16/bf16 hold their exact values. smallthinker (no
 * transformers class): the engine runs our GGUF as it ran llama.cpp's converter's
 * (test/reference/hf/smallthinker.prompts.json).
 * Then the bad directories: each refused with an error naming the file and the tensor or key.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readdirSync, readFileSync, rmSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { pathToFileURL } from "node:url";
import { gunzipSync } from "node:zlib";
import { GGUFFile, YARN_TRUNCATE_KEY } from "../src/format/gguf.js";
import { typeName } from "../src/format/ggml-types.js";
import { convertHFToGGUF, ggufModelName } from "../src/format/hf/hf-to-gguf.js";
import { SafetensorsFile, widenToF32 } from "../src/format/hf/safetensors.js";
import { dequantizeMXFP4 } from "../src/format/mxfp4.js";
import { LlamaModel } from "../src/model/model.js";
import { convertHFToStore } from "../src/offline/hf-to-store.js";
import { argmax, greedyAsync, hfFixtureDir, loadMostlyOnFlash, maxDiff, ROOT, tempDir } from "./helpers.js";
import { hfFiles, hfPristine } from "./fuzz/hf-cases.js";
import { writeSafetensors, type TestTensor } from "./safetensors-writer.js";

const FIXTURES = join(ROOT, "test", "fixtures", "hf");
const REFERENCES = join(ROOT, "test", "reference", "hf");
const NAMES = existsSync(FIXTURES)
  ? readdirSync(FIXTURES).filter((n) => existsSync(join(FIXTURES, n, "config.json")))
  : [];

const dir = tempDir("hf-convert-");
/** transformers computes attention in f32: so does the engine here (its default KV cache is f16, as llama.cpp's) */
const F32_KV = { k: "f32", v: "f32" } as const;
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

/** NAME.prompts.json: prompt ids, and the engine's run of llama.cpp's converter's f32 GGUF. */
interface PromptsReference {
  promptIds: number[][];
  engineOnLlamaCppGGUF: Omit<TransformersReference, "promptIds">;
}

interface TransformersReference {
  promptIds: number[][];
  greedy: number[][];
  steps: { top: [number, number][]; max: number }[][];
}

/** A complete Hugging Face directory: the fixture's files plus the tokenizer it names. */
function hfDir(name: string, into = join(dir, name)): string {
  return hfFixtureDir(name, into);
}

type OutType = "auto" | "f32" | "f16" | "bf16" | "q8_0";
const converted = new Map<string, Promise<string>>();
function gguf(name: string, type: OutType): Promise<string> {
  const key = `${name}.${type}`;
  let p = converted.get(key);
  if (!p) {
    const output = join(dir, `${key}.gguf`);
    p = convertHFToGGUF({ input: hfDir(name), output, type, fsync: false }).then(() => output);
    converted.set(key, p);
  }
  return p;
}

/**
 * Teacher forcing over the reference's tokens: at each step our logits' top 1 is transformers'
 * greedy pick and its top 8 are within 1e-3 of the max logit; then transformers' pick is fed in.
 */
async function checkAgainstTransformers(model: LlamaModel, ref: TransformersReference, what: string): Promise<number> {
  let worst = 0;
  for (let p = 0; p < ref.promptIds.length; p++) {
    const prompt = ref.promptIds[p];
    await model.forwardAsync(prompt, prompt.length, 0);
    let pos = prompt.length;
    for (let s = 0; s < ref.greedy[p].length; s++) {
      const step = ref.steps[p][s];
      const logits = model.logits;
      const tol = 1e-3 * Math.abs(step.max);
      for (const [id, logit] of step.top) {
        const d = Math.abs(logits[id] - logit);
        worst = Math.max(worst, d / Math.abs(step.max));
        assert.ok(d <= tol, `${what}: prompt ${p} step ${s}: logit of ${id} is ${logits[id]}, transformers' ${logit}`);
      }
      assert.equal(argmax(logits), ref.greedy[p][s], `${what}: prompt ${p} step ${s}: greedy id`);
      await model.forwardAsync([ref.greedy[p][s]], 1, pos++);
    }
  }
  return worst;
}

function readJson<T>(path: string): T {
  return JSON.parse(readFileSync(path, "utf8")) as T;
}

const sha256 = (b: Uint8Array) => createHash("sha256").update(b).digest("hex");

interface LlamaCppOutput {
  metadata: Record<string, { type: string; value: unknown }>;
  tensors: { name: string; type: string; ne: number[]; sha256: string }[];
}

/** llama.cpp's converter's output for one --outtype. */
function llamaCppOutput(path: string, type: string): LlamaCppOutput {
  const out = readJson<{ outputs: Record<string, LlamaCppOutput> }>(path).outputs[type];
  assert.ok(out, `${path} has no ${type} conversion`);
  return out;
}

/**
 * Keys written where llama.cpp's converter leaves llama.cpp to a default the checkpoint does not
 * follow: Gemma 3's attention period (6 by default, when layer_types repeat every 3 layers);
 * gpt-oss's `truncate: false` YaRN (llama.cpp rounds the ramp's ends to whole pairs, [2, 5] for
 * this fixture's 16-wide heads where transformers uses [2.02, 4.35]: that is why llama.cpp's ids
 * differ from transformers' on prompts 1 and 3, and ours match transformers' on all 6).
 */
const DELIBERATE_EXTRAS = ["attention.sliding_window_pattern", YARN_TRUNCATE_KEY];

/**
 * The model's keys (general.architecture, type, file_type, quantization_version and every
 * `<arch>.` key) equal llama.cpp's converter's, and ours have none it lacks. The vocabulary's
 * keys are src/format/hf-tokenizer.ts's business (test/tokenizer-hf.test.ts).
 */
function checkModelMetadata(f: GGUFFile, want: LlamaCppOutput["metadata"], differ: string[] = []): void {
  const arch = String(want["general.architecture"].value);
  const model = (k: string) =>
    k.startsWith(`${arch}.`) ||
    ["general.architecture", "general.type", "general.file_type", "general.quantization_version"].includes(k);
  for (const [k, { value }] of Object.entries(want)) {
    if (!model(k) || differ.includes(k)) continue;
    const ours = f.metadata.get(k);
    if (typeof value === "number" && typeof ours === "number")
      assert.equal(Math.fround(ours), Math.fround(value), `metadata ${k}`);
    else assert.deepEqual(ours, value, `metadata ${k}`);
  }
  for (const k of f.metadata.keys())
    if (model(k) && !DELIBERATE_EXTRAS.includes(k.slice(arch.length + 1)))
      assert.ok(k in want, `metadata ${k}: llama.cpp's converter does not write it`);
}

/** Whether a fixture's config declares MXFP4 weights (gpt-oss as published). */
function declaresMxfp4(name: string): boolean {
  const q = readJson<{ quantization_config?: { quant_method?: string } }>(join(FIXTURES, name, "config.json"));
  return q.quantization_config?.quant_method === "mxfp4";
}

function tensorBytes(f: GGUFFile, name: string): Uint8Array {
  const t = f.tensors.get(name)!;
  const bytes = new Uint8Array(t.bytes);
  f.readTensor(t, bytes, 0, t.bytes);
  return bytes;
}

/**
 * Our `ours` output against llama.cpp's converter's `theirs`: the same tensor names, types, shapes
 * and bytes, and the same model metadata. Where ours is a float type over MXFP4 experts, which
 * llama.cpp's converter keeps as MXFP4 whatever the type, those tensors are our float type
 * holding exactly the values of the MXFP4 bytes our "auto" output keeps (whose bytes are
 * llama.cpp's: the auto test), and general.file_type says the float type, not MOSTLY_MXFP4_MOE.
 */
async function compareWithLlamaCpp(name: string, ours: OutType, theirs: string, refPath: string): Promise<void> {
  const ref = llamaCppOutput(refPath, theirs);
  const dequantized = declaresMxfp4(name) && ["f32", "f16", "bf16"].includes(ours);
  const f = GGUFFile.open(await gguf(name, ours));
  const kept = dequantized ? GGUFFile.open(await gguf(name, "auto")) : undefined;
  try {
    checkModelMetadata(f, ref.metadata, dequantized ? ["general.file_type"] : []);
    assert.deepEqual([...f.tensors.keys()].sort(), ref.tensors.map((t) => t.name).sort(), "the same tensor names");
    let values = 0;
    for (const w of ref.tensors) {
      const t = f.tensors.get(w.name)!;
      assert.deepEqual(t.dims, w.ne, `${w.name}: shape (ggml order)`);
      const bytes = tensorBytes(f, w.name);
      if (kept && w.type === "MXFP4") {
        assert.equal(typeName(t.type).toLowerCase(), ours, `${w.name}: type`);
        const n = w.ne.reduce((a, b) => a * b, 1);
        const want = new Float32Array(n);
        dequantizeMXFP4(tensorBytes(kept, w.name), n, want, 0);
        const got = new Float32Array(n);
        widenToF32(ours.toUpperCase(), bytes, got);
        assert.deepEqual(got, want, `${w.name}: the MXFP4 values`);
        values++;
        continue;
      }
      assert.equal(typeName(t.type).toLowerCase(), w.type.toLowerCase(), `${w.name}: type`);
      assert.equal(sha256(bytes), w.sha256, `${w.name}: bytes`);
    }
    if (kept) assert.ok(values > 0, "some MXFP4 tensors were compared as values");
  } finally {
    f.close();
    kept?.close();
  }
}

for (const name of NAMES) {
  const transformersRef = join(REFERENCES, `${name}.transformers.json`);
  const llamaCppRef = join(REFERENCES, `${name}.llamacpp-convert.json`);

  // the types llama.cpp's converter wrote for this fixture (f32, q8_0, bf16 at least)
  const types = existsSync(llamaCppRef)
    ? Object.keys(readJson<{ outputs: Record<string, unknown> }>(llamaCppRef).outputs).filter((t) =>
        ["f32", "f16", "bf16", "q8_0"].includes(t),
      )
    : ["f32", "q8_0"];
  for (const type of types as OutType[])
    test(
      `hf ${name}: ${type} tensors and model metadata are llama.cpp's converter's, byte for byte`,
      { skip: !existsSync(llamaCppRef) },
      () => compareWithLlamaCpp(name, type, type, llamaCppRef),
    );
  // auto keeps MXFP4 experts and the checkpoint's BF16 elsewhere: what llama.cpp's bf16 writes
  if (declaresMxfp4(name))
    test(
      `hf ${name}: auto keeps the MXFP4 experts: llama.cpp's converter's bf16 output, byte for byte`,
      { skip: !existsSync(llamaCppRef) },
      () => compareWithLlamaCpp(name, "auto", "bf16", llamaCppRef),
    );

  test(
    `hf ${name}: the f32 GGUF gives transformers' greedy ids and logits`,
    { skip: !existsSync(transformersRef) },
    async () => {
      const ref = readJson<TransformersReference>(transformersRef);
      const model = await LlamaModel.load(await gguf(name, "f32"), { threads: 1, contextSize: 64, kvCache: F32_KV });
      try {
        await checkAgainstTransformers(model, ref, `${name} f32 GGUF`);
      } finally {
        await model.dispose();
      }
    },
  );

  // no transformers class (smallthinker): the engine must run our GGUF as it ran llama.cpp's converter's
  const promptsRef = join(REFERENCES, `${name}.prompts.json`);
  const engineRef = !existsSync(transformersRef) && existsSync(promptsRef);
  /** transformers' reference, or for a checkpoint without one the engine's run of llama.cpp's GGUF */
  const reference = (): TransformersReference => {
    if (!engineRef) return readJson<TransformersReference>(transformersRef);
    const ref = readJson<PromptsReference>(promptsRef);
    return { promptIds: ref.promptIds, ...ref.engineOnLlamaCppGGUF };
  };
  const whose = engineRef ? "the ids of llama.cpp's converter's f32 GGUF" : "transformers' ids";
  if (engineRef)
    test(`hf ${name}: the f32 GGUF runs as llama.cpp's converter's f32 GGUF did`, async () => {
      const model = await LlamaModel.load(await gguf(name, "f32"), { threads: 1, contextSize: 64, kvCache: F32_KV });
      try {
        await checkAgainstTransformers(model, reference(), `${name} f32 GGUF`);
      } finally {
        await model.dispose();
      }
    });

  // The sparse kernels take rows of whole 32-value blocks: a narrower model has no store.
  const hidden = readJson<{ hidden_size: number }>(join(FIXTURES, name, "config.json")).hidden_size;
  const storeSkip =
    !existsSync(transformersRef) && !engineRef
      ? "no transformers reference"
      : hidden % 32 !== 0
        ? `hidden_size ${hidden} is not a multiple of 32, which a neuron store's rows need`
        : false;
  test(`hf ${name}: -o x.pi runs under a budget with ${whose}`, { skip: storeSkip }, async () => {
    const ref = reference();
    const store = join(dir, `${name}.pi`);
    await convertHFToStore({ input: hfDir(name), output: store, type: "f32", fsync: false });
    const { model } = await loadMostlyOnFlash(store, 1, 64, F32_KV);
    try {
      await checkAgainstTransformers(model, ref, `${name} store`);
    } finally {
      await model.dispose();
    }
  });
}

/**
 * Vocabulary arrays llama.cpp's converter writes differently, on purpose or by its inputs:
 * - scores of a SentencePiece vocabulary read from tokenizer.json (phi3, mistral, mixtral, and
 *   gpt-oss-mxfp4 and smallthinker, which carry Mistral's tokenizer): ours
 *   come from the merges' order; llama.cpp's converter, without tokenizer.model, writes -1000 for
 *   every token (gguf-py's LlamaHfVocab), and for phi3 it read a tokenizer.model that
 *   scripts/hf-fixtures-llamacpp-convert.py made up with scores -id;
 * - gemma3's token types and merges: without tokenizer.model llama.cpp's Gemma 3 converter
 *   writes the vocabulary as byte-level BPE (tokenizer.ggml.model gpt2, with merges); ours is
 *   SentencePiece, as the published tokenizer.model makes it (the same tokens).
 */
const VOCAB_ARRAYS_DIFFER: Record<string, string[]> = {
  phi3: ["tokenizer.ggml.scores"],
  mistral: ["tokenizer.ggml.scores"],
  mixtral: ["tokenizer.ggml.scores"],
  "gpt-oss-mxfp4": ["tokenizer.ggml.scores"],
  smallthinker: ["tokenizer.ggml.scores"],
  gemma3: ["tokenizer.ggml.token_type", "tokenizer.ggml.merges"],
};

/** A metadata array's bytes as a GGUF stores them after the item type and count. */
function arrayBytes(v: unknown): Uint8Array {
  if (ArrayBuffer.isView(v)) return new Uint8Array(v.buffer, v.byteOffset, v.byteLength);
  const parts: Buffer[] = [];
  for (const s of v as string[]) {
    const b = Buffer.from(s, "utf8");
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(b.length));
    parts.push(len, b);
  }
  return Buffer.concat(parts);
}

/** node-llama-cpp (the llama.cpp version the engine is compared with), where bench/offload.ts installed it. */
const PEER = join(ROOT, "bench", ".peer", "node_modules", "node-llama-cpp");
const noPeer = existsSync(join(PEER, "package.json"))
  ? false
  : "llama.cpp is not installed (node-llama-cpp in bench/.peer, which npm run bench:offload installs)";

/**
 * Fixtures where llama.cpp runs a GGUF otherwise than transformers, whoever converted it: there
 * our GGUF must give llama.cpp's ids from its own converter's GGUF. gpt-oss: llama.cpp rounds
 * YaRN's ramp outwards whatever `rope.scaling.yarn_truncate` says (see DELIBERATE_EXTRAS).
 */
const LLAMACPP_RUNS_OTHERWISE = ["gpt-oss"];

/** llama.cpp's greedy ids for each prompt (ids in, ids out: no tokenizer involved). */
async function llamaCppGreedy(path: string, prompts: number[][], n: number): Promise<number[][]> {
  const { getLlama } = await import(pathToFileURL(join(PEER, "dist", "index.js")).href);
  const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
  try {
    const model = await llama.loadModel({ modelPath: path });
    const out: number[][] = [];
    for (const prompt of prompts) {
      // a fresh context per prompt, F32 KV cache and no flash attention, as the reference's run
      const context = await model.createContext({
        contextSize: 128,
        batchSize: 128,
        threads: 1,
        flashAttention: false,
        experimentalKvCacheKeyType: "F32",
        experimentalKvCacheValueType: "F32",
      });
      const ids: number[] = [];
      for await (const id of context.getSequence().evaluate(prompt, { temperature: 0 })) {
        ids.push(id);
        if (ids.length >= n) break;
      }
      await context.dispose();
      out.push(ids);
    }
    await model.dispose();
    return out;
  } finally {
    await llama.dispose();
  }
}

for (const name of NAMES) {
  const transformersRef = join(REFERENCES, `${name}.transformers.json`);
  const llamaCppRef = join(REFERENCES, `${name}.llamacpp-convert.json`);

  test(
    `hf ${name}: the vocabulary arrays are llama.cpp's converter's (but where its inputs differ)`,
    { skip: !existsSync(llamaCppRef) },
    async () => {
      const want = llamaCppOutput(llamaCppRef, "f32").metadata;
      const f = GGUFFile.open(await gguf(name, "f32"));
      try {
        const compared: string[] = [];
        for (const [k, { value }] of Object.entries(want)) {
          const v = value as { length?: number; sha256?: string };
          if (!k.startsWith("tokenizer.") || typeof v?.sha256 !== "string") continue;
          if (VOCAB_ARRAYS_DIFFER[name]?.includes(k)) continue;
          const ours = f.metadata.get(k);
          assert.ok(ours !== undefined, `${k}: missing`);
          assert.equal((ours as unknown[]).length, v.length, `${k}: length`);
          assert.equal(sha256(arrayBytes(ours)), v.sha256, `${k}: the items`);
          compared.push(k);
        }
        assert.ok(compared.includes("tokenizer.ggml.tokens"), "the tokens at least");
      } finally {
        f.close();
      }
    },
  );

  // MXFP4 experts: llama.cpp runs them as MXFP4 (its f32 output keeps them), so it loads our auto
  // output (MXFP4 experts, BF16 elsewhere) and must give its ids from its own converter's bf16;
  // without a transformers reference, its ids from its own converter's f32
  const mxfp4 = declaresMxfp4(name);
  const promptsRef = join(REFERENCES, `${name}.prompts.json`);
  const ownIds = mxfp4 || !existsSync(transformersRef) || LLAMACPP_RUNS_OTHERWISE.includes(name);
  test(
    `hf ${name}: llama.cpp loads the ${mxfp4 ? "auto" : "f32"} GGUF and decodes ${ownIds ? `the ids of its own converter's ${mxfp4 ? "bf16" : "f32"} GGUF` : "transformers' greedy ids"}`,
    {
      skip:
        noPeer ||
        (!existsSync(transformersRef) && !existsSync(promptsRef) && "no transformers reference nor prompt ids"),
    },
    async () => {
      const ref = readJson<{ promptIds: number[][]; greedy?: number[][] }>(
        existsSync(transformersRef) ? transformersRef : promptsRef,
      );
      let want = ref.greedy!;
      if (ownIds) {
        const key = mxfp4 ? "llamacpp_bf16" : "llamacpp";
        const own = readJson<Record<string, { greedy?: number[][] } | undefined>>(llamaCppRef)[key]?.greedy;
        assert.ok(own, `${llamaCppRef}: llama.cpp's own ids (${key}) are missing`);
        want = own;
      }
      const got = await llamaCppGreedy(await gguf(name, mxfp4 ? "auto" : "f32"), ref.promptIds, want[0].length);
      for (let p = 0; p < want.length; p++) assert.deepEqual(got[p], want[p], `prompt ${p}`);
    },
  );
}

/**
 * llama.cpp refuses a file whose general.name says Phi-3 when a token its Phi-3 rule looks up is
 * missing (hf-to-gguf.ts): the phi3 fixture's tokenizer (mistral's) has no "<|endoftext|>", so its
 * GGUF has no name; Phi-3's real vocabulary keeps it.
 */
test("hf: general.name is left out only where llama.cpp's Phi-3 rule would refuse the vocabulary", async () => {
  const phi3 = join(ROOT, "test", "fixtures", "tokenizers", "phi3", "ggml-vocab-phi-3.gguf.gz");
  const real = join(dir, "ggml-vocab-phi-3.gguf");
  writeFileSync(real, gunzipSync(readFileSync(phi3)));
  const f = GGUFFile.open(real);
  const tokens = f.metadata.get("tokenizer.ggml.tokens") as string[];
  f.close();
  assert.equal(ggufModelName("/models/Phi-3.5-mini-instruct", tokens), "Phi-3.5-mini-instruct");
  const without = tokens.map((t) => (t === "<|endoftext|>" ? "[PAD]" : t));
  assert.equal(ggufModelName("/models/Phi-3.5-mini-instruct", without), undefined);
  assert.equal(ggufModelName("/models/phi3-finetune", without), undefined);
  assert.equal(ggufModelName("/models/Mistral-7B", without), "Mistral-7B");
  if (NAMES.includes("phi3")) {
    const g = GGUFFile.open(await gguf("phi3", "f32"));
    try {
      assert.ok(!g.metadata.has("general.name"), "the phi3 fixture's GGUF (mistral's tokenizer) has no name");
    } finally {
      g.close();
    }
  }
  if (NAMES.includes("mistral")) {
    const g = GGUFFile.open(await gguf("mistral", "f32"));
    try {
      assert.equal(g.metadata.get("general.name"), "mistral");
    } finally {
      g.close();
    }
  }
});

function editConfig(d: string, edit: (j: Record<string, unknown>) => void): void {
  const j = readJson<Record<string, unknown>>(join(d, "config.json"));
  edit(j);
  writeFileSync(join(d, "config.json"), JSON.stringify(j));
}

/** A copy of a fixture directory to break. */
function brokenCopy(name: string, label: string): string {
  return hfDir(name, join(dir, `bad-${label}`));
}

/** Both outputs, a GGUF and a store, are refused naming `parts`, and leave nothing that looks like a model. */
async function refuses(d: string, ...parts: string[]): Promise<void> {
  const named = (e: Error) => {
    for (const p of parts) assert.ok(e.message.includes(p), `"${e.message}" should name ${p}`);
    return true;
  };
  await assert.rejects(convertHFToGGUF({ input: d, output: join(d, "out.gguf"), type: "f32", fsync: false }), named);
  await assert.rejects(convertHFToStore({ input: d, output: join(d, "out.pi"), type: "f32", fsync: false }), named);
  assert.ok(!readdirSync(d).some((f) => f.startsWith("out.")), "nothing that looks like a model is left");
}

const first = NAMES.includes("llama3") ? "llama3" : NAMES[0];
test("hf: bad directories are refused naming the file and the tensor or key", { skip: !first }, async () => {
  const editJson = (path: string, edit: (j: Record<string, unknown>) => void) => {
    const j = readJson<Record<string, unknown>>(path);
    edit(j);
    writeFileSync(path, JSON.stringify(j));
  };
  const index = (d: string) =>
    readJson<{ weight_map: Record<string, string> }>(join(d, "model.safetensors.index.json"));
  const shards = (d: string) => [...new Set(Object.values(index(d).weight_map))].sort();

  let d = brokenCopy(first, "header");
  truncateSync(join(d, shards(d)[0]), 30);
  await refuses(d, shards(d)[0], "truncated header");

  d = brokenCopy(first, "data");
  const big = join(d, shards(d)[0]);
  const f = SafetensorsFile.open(big);
  const last = [...f.tensors.values()].sort((a, b) => b.offset - a.offset)[0];
  f.close();
  truncateSync(big, last.offset + 2);
  await refuses(d, shards(d)[0], "truncated data", `"${last.name}"`);

  d = brokenCopy(first, "shard");
  const gone = shards(d)[1];
  rmSync(join(d, gone));
  await refuses(d, "missing shard", gone);

  d = brokenCopy(first, "index");
  editJson(join(d, "model.safetensors.index.json"), (j) => {
    (j.weight_map as Record<string, string>)["model.layers.0.mlp.extra.weight"] = shards(d)[0];
  });
  await refuses(d, '"model.layers.0.mlp.extra.weight"', shards(d)[0], "does not hold it");

  d = brokenCopy(first, "arch");
  editJson(join(d, "config.json"), (j) => (j.architectures = ["MambaForCausalLM"]));
  await refuses(d, "config.json", '"architectures"', "MambaForCausalLM");

  d = brokenCopy(first, "shape");
  editJson(join(d, "config.json"), (j) => (j.intermediate_size = (j.intermediate_size as number) + 8));
  await refuses(d, "model.layers.0.mlp.gate_proj.weight", "config.json", "shape");

  d = brokenCopy(first, "rope");
  editJson(join(d, "config.json"), (j) => {
    j.rope_scaling = { rope_type: "dynamic", factor: 2 };
    delete j.rope_parameters;
  });
  await refuses(d, "config.json", "rope_scaling.rope_type", "dynamic");

  d = brokenCopy(first, "leftover");
  const extra: TestTensor = { name: "model.layers.0.mlp.extra.weight", shape: [4], values: new Float32Array(4) };
  writeSafetensors(join(d, "model-extra.safetensors"), [extra]);
  editJson(join(d, "model.safetensors.index.json"), (j) => {
    (j.weight_map as Record<string, string>)[extra.name] = "model-extra.safetensors";
  });
  await refuses(d, "model-extra.safetensors", `"${extra.name}"`, "not used");
});

test(
  "hf gpt-oss: another window layout, other YaRN parameters and SwiGLU clamp are refused",
  { skip: !NAMES.includes("gpt-oss") },
  async () => {
    let d = brokenCopy("gpt-oss", "gptoss-layers");
    editConfig(d, (j) => (j.layer_types = ["full_attention", "sliding_attention"]));
    await refuses(d, "config.json", '"layer_types"', "[0]");

    d = brokenCopy("gpt-oss", "gptoss-yarn");
    editConfig(d, (j) => ((j.rope_parameters as Record<string, unknown>).mscale = 0.5));
    await refuses(d, "config.json", '"rope_parameters.mscale"');

    d = brokenCopy("gpt-oss", "gptoss-swiglu");
    editConfig(d, (j) => (j.swiglu_limit = 10));
    await refuses(d, "config.json", '"swiglu_limit"', "7");
  },
);

type StHeader = Record<string, { dtype: string; shape: number[]; data_offsets: number[] }>;

/** Rewrites the header of the shard holding `tensor` (its data unchanged); returns the shard's name. */
function editShardHeader(d: string, tensor: string, edit: (h: StHeader) => void): string {
  const shard = readJson<{ weight_map: Record<string, string> }>(join(d, "model.safetensors.index.json")).weight_map[
    tensor
  ];
  const path = join(d, shard);
  const file = readFileSync(path);
  const len = Number(file.readBigUInt64LE(0));
  const header = JSON.parse(file.subarray(8, 8 + len).toString("utf8")) as StHeader;
  edit(header);
  const json = Buffer.from(JSON.stringify(header), "utf8");
  const size = Buffer.alloc(8);
  size.writeBigUInt64LE(BigInt(json.length));
  writeFileSync(path, Buffer.concat([size, json, file.subarray(8 + len)]));
  return shard;
}

test(
  "hf gpt-oss-mxfp4: blocks without scales, wrong MXFP4 shapes and undeclared U8 tensors are refused naming the tensor",
  { skip: !NAMES.includes("gpt-oss-mxfp4") },
  async () => {
    const m = "model.layers.0.mlp.experts.";
    let d = brokenCopy("gpt-oss-mxfp4", "mxfp4-noscales");
    const scales = m + "gate_up_proj_scales";
    editShardHeader(d, scales, (h) => delete h[scales]);
    const indexPath = join(d, "model.safetensors.index.json");
    const index = readJson<{ weight_map: Record<string, string> }>(indexPath);
    delete index.weight_map[scales];
    writeFileSync(indexPath, JSON.stringify(index));
    await refuses(d, `"${scales}"`, "missing");

    d = brokenCopy("gpt-oss-mxfp4", "mxfp4-shape");
    const blocks = m + "down_proj_blocks";
    // the same bytes seen as half as many rows of twice the blocks
    const shard = editShardHeader(d, blocks, (h) => {
      const [e, rows, nb, b] = h[blocks].shape;
      h[blocks].shape = [e, rows / 2, nb * 2, b];
    });
    await refuses(d, shard, `"${blocks}"`, "shape", "config.json");

    d = brokenCopy("gpt-oss-mxfp4", "mxfp4-undeclared");
    editConfig(d, (j) => delete j.quantization_config);
    await refuses(d, "_blocks", "U8", "quantization_config");

    d = brokenCopy("gpt-oss-mxfp4", "mxfp4-method");
    editConfig(d, (j) => ((j.quantization_config as Record<string, unknown>).quant_method = "fp8"));
    await refuses(d, "config.json", '"quantization_config.quant_method"', "fp8");
  },
);

test(
  "hf gpt-oss-mxfp4: f16 holds the MXFP4 values exactly, and a scale past f16's range is refused, not rounded",
  { skip: !NAMES.includes("gpt-oss-mxfp4") },
  async () => {
    const name = "blk.0.ffn_down_exps.weight";
    const kept = GGUFFile.open(await gguf("gpt-oss-mxfp4", "auto"));
    const f16 = GGUFFile.open(await gguf("gpt-oss-mxfp4", "f16"));
    try {
      const n = f16.tensors.get(name)!.dims.reduce((a, b) => a * b, 1);
      const want = new Float32Array(n);
      dequantizeMXFP4(tensorBytes(kept, name), n, want, 0);
      const got = new Float32Array(n);
      widenToF32("F16", tensorBytes(f16, name), got);
      assert.deepEqual(got, want);
    } finally {
      kept.close();
      f16.close();
    }
    // one block's exponent 2^73: exact in bf16, past f16's range
    const d = brokenCopy("gpt-oss-mxfp4", "mxfp4-f16");
    const scales = "model.layers.0.mlp.experts.down_proj_scales";
    const shard = readJson<{ weight_map: Record<string, string> }>(join(d, "model.safetensors.index.json")).weight_map[
      scales
    ];
    const sf = SafetensorsFile.open(join(d, shard));
    const offset = sf.tensors.get(scales)!.offset;
    sf.close();
    const bytes = readFileSync(join(d, shard));
    bytes[offset] = 200;
    writeFileSync(join(d, shard), bytes);
    const output = join(d, "out.gguf");
    await assert.rejects(convertHFToGGUF({ input: d, output, type: "f16", fsync: false }), (e: Error) => {
      assert.ok(e.message.includes(`"${name}"`) && e.message.includes("f16"), e.message);
      return true;
    });
    await convertHFToGGUF({ input: d, output, type: "bf16", fsync: false });
  },
);

/**
 * The fixtures are too narrow for a store (rows of whole 32-value blocks): the fuzz target's tiny
 * llama directory (hidden 32, Llama 3 RoPE, BF16 shards) goes to a GGUF and to a store, and the
 * store, read under a budget that leaves three quarters of the FFN on flash, gives the GGUF's
 * greedy ids and logits (test/hf-store.test.ts compares the store with the GGUF's byte by byte).
 */
test("hf: -o x.pi gives the GGUF's ids under a budget (a 32-wide llama)", async () => {
  const d = join(dir, "narrow-llama");
  mkdirSync(d);
  for (const [name, bytes] of hfFiles(hfPristine(), [])) writeFileSync(join(d, name), bytes);
  const gg = join(dir, "narrow.gguf"),
    pi = join(dir, "narrow.pi");
  await convertHFToGGUF({ input: d, output: gg, type: "f32", fsync: false });
  await convertHFToStore({ input: d, output: pi, type: "f32", fsync: false });
  const prompt = [257, 72, 101, 108, 108, 111, 256, 119, 111, 114, 108, 100];
  const mem = await LlamaModel.load(gg, { threads: 1, contextSize: 64, kvCache: F32_KV });
  const want = await greedyAsync(mem, prompt, 16);
  await mem.dispose();
  const { model } = await loadMostlyOnFlash(pi, 1, 64, F32_KV);
  try {
    const got = await greedyAsync(model, prompt, 16);
    assert.deepEqual(got.ids, want.ids);
    for (let s = 0; s < want.logits.length; s++)
      assert.ok(maxDiff(got.logits[s], want.logits[s]) < 1e-4, `step ${s}: logits`);
  } finally {
    await model.dispose();
  }
});
