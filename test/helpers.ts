/** Paths and small utilities shared by the tests. */
import { fileURLToPath } from "node:url";
import { dirname, join, resolve } from "node:path";
import { createHash } from "node:crypto";
import {
  copyFileSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { gunzipSync } from "node:zlib";
import { tmpdir } from "node:os";
import assert from "node:assert/strict";
import { GGUFFile } from "../src/format/gguf.js";
import { NeuronStore } from "../src/format/store/index.js";
import { ReferenceModel } from "../src/model/reference.js";
import { LlamaModel, type LoadOptions } from "../src/model/model.js";
import { BUDGET_ROOM, type SparsityMode } from "../src/model/offload/layout.js";

/** The repository root (tests run from dist/test). */
export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "..", "..");
/** ../shared beside the repository: real tiny models, references, corpora. */
export const SHARED = process.env.POWERINFER_SHARED ?? resolve(ROOT, "..", "shared");
/** The `powerinfer` command as npm installs it (it loads the compiled CLI). */
export const CLI = join(ROOT, "bin", "powerinfer.cjs");

const made: string[] = [];
// Each test file runs in its own process: its temporary directories go when it exits (they held
// ~1 GB of stores per full run, and 300 leftover runs filled the disk).
process.on("exit", () => {
  for (const d of made) rmSync(d, { recursive: true, force: true });
});

/** A fresh temporary directory, removed when the test process exits. */
export function tempDir(prefix = "powerinfer-test-"): string {
  const d = mkdtempSync(join(tmpdir(), prefix));
  made.push(d);
  return d;
}

// ---------------------------------------------------------------------------------------------
// Seeded pseudo-random numbers, so failures reproduce. Tests' tolerances and expected values were
// set against these exact sequences: change none of them.

/** Uniform numbers in [0, 1) from xorshift32 (seed 0 acts as 1). */
export function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296;
  };
}

/** rng(seed)'s stream mapped to [-1, 1). */
export function signedRng(seed: number): () => number {
  const r = rng(seed);
  return () => r() * 2 - 1;
}

/** n normal values of deviation `scale` (Box-Muller on rng(seed)), as f32. */
export function gaussians(n: number, seed: number, scale = 1): Float32Array {
  const r = rng(seed),
    out = new Float32Array(n);
  for (let i = 0; i < n; i++) out[i] = scale * Math.sqrt(-2 * Math.log(r() + 1e-12)) * Math.cos(2 * Math.PI * r());
  return out;
}

/** n values uniform in [-scale, scale) from a 32-bit LCG (the one randomTokens uses), as f32. */
export function uniforms(n: number, seed: number, scale = 1): Float32Array {
  const a = new Float32Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i++) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    a[i] = ((s / 2 ** 32) * 2 - 1) * scale;
  }
  return a;
}

/** BOS (id 1), then seeded pseudo-random token ids in [3, vocab) (no control tokens). */
export function randomTokens(n: number, vocab: number, seed: number): number[] {
  const out = [1];
  let s = seed >>> 0;
  while (out.length < n) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out.push(3 + Math.floor((s / 2 ** 32) * (vocab - 3)));
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Small pieces of arithmetic and I/O

/** Index of the largest value (the first on ties). */
export function argmax(v: ArrayLike<number>): number {
  let best = 0;
  for (let i = 1; i < v.length; i++) if (v[i] > v[best]) best = i;
  return best;
}

/** Greedy ids and the logits of every generated position. */
export interface Greedy {
  ids: number[];
  logits: Float32Array[];
}

/**
 * Greedy decode of n tokens with the raw model (no tokenizer, no stop at EOS), the prompt as one
 * batch or (batch false) token by token.
 */
export function greedy(model: LlamaModel, promptIds: number[], n: number, batch = true): Greedy {
  let pos = 0;
  if (batch) {
    model.forward(promptIds, promptIds.length, 0);
    pos = promptIds.length;
  } else for (const id of promptIds) model.forward([id], 1, pos++);
  const out: Greedy = { ids: [], logits: [] };
  for (let i = 0; i < n; i++) {
    out.logits.push(model.logits.slice());
    out.ids.push(argmax(model.logits));
    if (i + 1 < n) model.forward([out.ids[i]], 1, pos++);
  }
  return out;
}

/** greedy() through forwardAsync (memory or a store alike), the prompt as one batch. */
export async function greedyAsync(model: LlamaModel, promptIds: number[], n: number): Promise<Greedy> {
  await model.forwardAsync(promptIds, promptIds.length, 0);
  let pos = promptIds.length;
  const out: Greedy = { ids: [], logits: [] };
  for (let i = 0; i < n; i++) {
    out.logits.push(model.logits.slice());
    out.ids.push(argmax(model.logits));
    if (i + 1 < n) await model.forwardAsync([out.ids[i]], 1, pos++);
  }
  return out;
}

/** Largest |a[i] - b[i]|. */
export function maxDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

export const silu = (x: number) => x / (1 + Math.exp(-x));

/** The bytes of an f32 array (a view, not a copy). */
export function f32Bytes(a: Float32Array): Uint8Array {
  return new Uint8Array(a.buffer, a.byteOffset, a.byteLength);
}

/** SHA-256 of a file's contents, in hex. */
export const sha256OfFile = (path: string) => createHash("sha256").update(readFileSync(path)).digest("hex");

/**
 * A store loaded (in the mode asked, else the one a run picks) under a budget that leaves three quarters of its FFN on flash: the
 * cache capped at a quarter of the bundles. The fixed part counts this process's resident memory
 * at load, which drifts by megabytes between two loads (garbage collection, the thread pool):
 * next to a few MiB of bundles that drift would move the cache, so the cache is capped and the
 * budget leaves room for it. Returns the model and the FFN's bytes.
 */
export async function loadMostlyOnFlash(
  store: string,
  threads: number,
  contextSize = 64,
  kvCache?: LoadOptions["kvCache"],
  /** default: the mode a run picks (gate where gates skip neurons, dense where every neuron fires) */
  sparsity?: SparsityMode,
  /**
   * 0: no hot region, where packed hot slots (bundles mostly padding, as tiny MXFP4 ones are)
   * would hold every neuron in a quarter of the bundles' bytes
   */
  hotFraction?: number,
): Promise<{ model: LlamaModel; allFFN: number }> {
  const s = NeuronStore.open(store);
  const allFFN = s.ffn.layers.length * s.ffn.layers[0].neurons * s.ffn.bundleBytes;
  s.close();
  const offload = { sparsity, hotFraction, cacheBytes: allFFN / 4 };
  const fixed = (await LlamaModel.layoutOf(store, { threads, contextSize, offload })).fixed;
  const model = await LlamaModel.load(store, {
    threads,
    contextSize,
    memoryBudget: Math.ceil((fixed + allFFN / 4 + 64 * 2 ** 20) / BUDGET_ROOM),
    offload,
    kvCache,
  });
  return { model, allFFN };
}

/**
 * Feeds `ids` one token at a time to the model at `path` and to the plain-TS reference; every
 * logit must be within `tolerance` of the reference's largest magnitude at each position.
 */
export async function matchesReference(path: string, ids: number[], tolerance: number, what: string): Promise<void> {
  const file = GGUFFile.open(path);
  const reference = new ReferenceModel(file, 16);
  const m = await LlamaModel.load(path, { threads: 2, contextSize: 16 });
  try {
    for (let i = 0; i < ids.length; i++) {
      const want = reference.forward(ids[i], i);
      await m.forwardAsync([ids[i]], 1, i);
      let max = 0;
      for (const v of want) max = Math.max(max, Math.abs(v));
      for (let j = 0; j < want.length; j++)
        assert.ok(
          Math.abs(m.logits[j] - want[j]) <= tolerance * max,
          `${what} position ${i} logit ${j}: ${m.logits[j]} vs ${want[j]}`,
        );
    }
  } finally {
    await m.dispose();
    file.close();
  }
}

/**
 * A whole Hugging Face directory of test/fixtures/hf/NAME assembled in `into` (its checkpoint, and
 * the tokenizer files its tokenizer.from names, stored once under test/fixtures/tokenizers).
 */
export function hfFixtureDir(name: string, into: string): string {
  if (existsSync(into)) return into;
  mkdirSync(into, { recursive: true });
  const src = join(ROOT, "test", "fixtures", "hf", name);
  for (const f of readdirSync(src))
    if (f !== "tokenizer.from" && f !== "README.md") copyFileSync(join(src, f), join(into, f));
  const tok = join(ROOT, "test", "fixtures", "tokenizers", readFileSync(join(src, "tokenizer.from"), "utf8").trim());
  writeFileSync(join(into, "tokenizer.json"), gunzipSync(readFileSync(join(tok, "tokenizer.json.gz"))));
  copyFileSync(join(tok, "tokenizer_config.json"), join(into, "tokenizer_config.json"));
  return into;
}
