/**
 * Synthetic mixtures of experts (synth --shape mixtral-tiny / mixtral): the tensor table and
 * metadata llama.cpp's Mixtral layout expects, every weight type, routing that follows the token,
 * planted sparsity and predictors per expert, bad requests; and a SiLU Mixtral whose greedy ids
 * llama.cpp computed (test/reference/synth-mixtral.llamacpp.json, made by
 * scripts/llamacpp-reference.mjs), in memory and from a store that leaves most experts on
 * flash.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { readFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { GGMLType } from "../src/format/ggml-types.js";
import { GGUFFile } from "../src/format/gguf.js";
import { NeuronStore } from "../src/format/store/index.js";
import { readConfig } from "../src/model/config.js";
import { LlamaModel } from "../src/model/model.js";
import { PREDICTOR_EXPERTS_KEY } from "../src/model/offload/predictor.js";
import { convertToStore } from "../src/offline/convert.js";
import {
  plannedFiring,
  SHAPE_SPECS,
  synthesize,
  synthFileSize,
  synthRecipes,
  SYNTH_TYPES,
  type SynthOptions,
} from "../src/offline/synth.js";
import { CLI, greedyAsync, loadMostlyOnFlash, randomTokens, ROOT, sha256OfFile, tempDir } from "./helpers.js";

const dir = tempDir("synth-mixtral-");
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

async function make(name: string, o: Partial<SynthOptions>): Promise<string> {
  const out = join(dir, `${name}.gguf`);
  await synthesize({ shape: "mixtral-tiny", act: "silu", type: "q4_0", seed: 3, out, fsync: false, ...o });
  return out;
}

function cli(...args: string[]) {
  return spawnSync(process.execPath, [CLI, ...args], { encoding: "utf8" });
}

test("mixtral: the tensor table of Mixtral-8x7B in llama.cpp's layout (router F32 [dim, 8], experts [dim, ffn, 8] and [ffn, dim, 8])", () => {
  const spec = SHAPE_SPECS.mixtral;
  assert.deepEqual(
    [spec.dim, spec.layers, spec.heads, spec.kvHeads, spec.ffn, spec.experts, spec.expertsUsed, spec.vocab],
    [4096, 32, 32, 8, 14336, 8, 2, 32000],
  );
  const recipes = synthRecipes(spec, "q4_0");
  const by = new Map(recipes.map((r) => [r.name, r]));
  assert.equal(recipes.length, 2 + 32 * 10 + 1);
  assert.deepEqual(by.get("blk.31.ffn_gate_inp.weight")!.dims, [4096, 8]);
  assert.equal(by.get("blk.31.ffn_gate_inp.weight")!.type, GGMLType.F32);
  assert.deepEqual(by.get("blk.0.ffn_gate_exps.weight")!.dims, [4096, 14336, 8]);
  assert.deepEqual(by.get("blk.0.ffn_up_exps.weight")!.dims, [4096, 14336, 8]);
  assert.deepEqual(by.get("blk.0.ffn_down_exps.weight")!.dims, [14336, 4096, 8]);
  assert.equal(by.get("blk.0.ffn_down_exps.weight")!.type, GGMLType.Q4_0);
  assert.equal(by.get("blk.0.ffn_down_exps.weight")!.bytes, (14336 * 4096 * 8 * 18) / 32);
  assert.ok(!by.has("blk.0.ffn_gate.weight"), "no dense FFN tensors in a mixture");
  // about 26 GB at Q4_0, 13 layers' worth of it... and one layer keeps the widths
  const full = synthFileSize({ shape: "mixtral", act: "relu", type: "q4_0", seed: 0 });
  assert.ok(full > 26e9 && full < 27e9, `${full}`);
  const one = synthFileSize({ shape: "mixtral", act: "relu", type: "q4_0", seed: 0, overrides: { layers: 1 } });
  assert.ok(one > 0.95e9 && one < 0.98e9, `${one}`);
});

test("mixtral-tiny in every type: metadata and tensors as llama.cpp reads a Mixtral, the size announced, a forward pass", async () => {
  for (const type of SYNTH_TYPES) {
    const path = await make(`types-${type}`, { type });
    assert.equal(
      readFileSync(path).length,
      synthFileSize({ shape: "mixtral-tiny", act: "silu", type, seed: 3 }),
      `${type}: size`,
    );
    const f = GGUFFile.open(path);
    try {
      assert.equal(f.getNumber("llama.expert_count"), 4);
      assert.equal(f.getNumber("llama.expert_used_count"), 2);
      assert.equal(f.getString("llama.feed_forward_activation"), "silu");
      assert.equal(f.getNumber("llama.feed_forward_length"), 256);
      const c = readConfig(f);
      assert.deepEqual([c.nExpert, c.nExpertUsed, c.nFF, c.nLayer], [4, 2, 256, 2]);
      assert.equal(f.tensor("blk.1.ffn_gate_inp.weight").type, GGMLType.F32);
      assert.deepEqual(f.tensor("blk.1.ffn_gate_inp.weight").dims, [128, 4]);
      assert.deepEqual(f.tensor("blk.1.ffn_gate_exps.weight").dims, [128, 256, 4]);
      assert.deepEqual(f.tensor("blk.1.ffn_down_exps.weight").dims, [256, 128, 4]);
    } finally {
      f.close();
    }
    const m = await LlamaModel.load(path, { threads: 2, contextSize: 32 });
    try {
      m.forward([1, 5, 300], 3, 0);
      assert.ok(m.logits.every(Number.isFinite), `${type}: finite logits`);
    } finally {
      await m.dispose();
    }
  }
});

test("an expert's bytes depend on its index, not on how many experts the tensor holds (expert-major: e's rows follow e-1's)", async () => {
  const four = await make("four", {});
  const two = await make("two", { overrides: { experts: 2 } });
  const a = GGUFFile.open(four);
  const b = GGUFFile.open(two);
  try {
    for (const kind of ["gate", "up", "down"]) {
      const t4 = a.tensor(`blk.0.ffn_${kind}_exps.weight`);
      const t2 = b.tensor(`blk.0.ffn_${kind}_exps.weight`);
      assert.equal(t4.bytes, 2 * t2.bytes);
      const x = new Uint8Array(t2.bytes);
      const y = new Uint8Array(t2.bytes);
      a.readTensor(t4, x, 0, t2.bytes);
      b.readTensor(t2, y, 0, t2.bytes);
      assert.ok(Buffer.from(x).equals(Buffer.from(y)), `${kind}: experts 0 and 1`);
    }
  } finally {
    a.close();
    b.close();
  }
});

/** Route and fire over random tokens: per layer, routing slots per expert; per (layer, expert) each neuron's firing count. */
async function observe(path: string, tokens: number) {
  const m = await LlamaModel.load(path, { threads: 2, contextSize: tokens });
  const { nLayer, nExpert, nFF, activation } = m.config;
  const routed = Array.from({ length: nLayer }, () => new Array<number>(nExpert).fill(0));
  const fires = Array.from({ length: nLayer * nExpert }, () => new Float64Array(nFF));
  m.setFFNObserver((o) => {
    routed[o.layer][o.expert!] += o.n;
    const f = fires[o.layer * nExpert + o.expert!];
    for (let t = 0; t < o.n; t++)
      for (let i = 0; i < nFF; i++) {
        const g = o.gate[t * nFF + i];
        if (g > 0 && (activation !== "drelu" || o.up[t * nFF + i] > 0)) f[i]++;
      }
  });
  try {
    randomTokens(tokens, m.config.nVocab, 9).forEach((t, pos) => m.forward([t], 1, pos));
  } finally {
    await m.dispose();
  }
  return { routed, fires };
}

function correlation(a: ArrayLike<number>, b: ArrayLike<number>): number {
  let sa = 0,
    sb = 0,
    saa = 0,
    sbb = 0,
    sab = 0;
  const n = a.length;
  for (let i = 0; i < n; i++) {
    sa += a[i];
    sb += b[i];
    saa += a[i] * a[i];
    sbb += b[i] * b[i];
    sab += a[i] * b[i];
  }
  return (sab - (sa * sb) / n) / Math.sqrt((saa - (sa * sa) / n) * (sbb - (sb * sb) / n));
}

for (const [act, type, sparsity] of [
  ["relu", "q4_0", 0.9],
  ["drelu", "q8_0", 0.8],
] as const) {
  test(`planted ${act} sparsity ${sparsity} per expert (${type}): a routed expert fires ~${(1 - sparsity).toFixed(1)} of its neurons, its own hot ones; tokens spread over the experts`, async () => {
    const path = await make(`planted-${act}`, { act, type, sparsity });
    const tokens = 160;
    const { routed, fires } = await observe(path, tokens);
    const E = 4;
    for (let l = 0; l < 2; l++) {
      // every token takes 2 slots; each expert gets a fair share of them (no expert takes all)
      assert.equal(
        routed[l].reduce((a, b) => a + b, 0),
        2 * tokens,
      );
      for (let e = 0; e < E; e++)
        assert.ok(routed[l][e] > 0.1 * 2 * tokens, `layer ${l}: routing slots ${routed[l].join(", ")}`);
      let fired = 0;
      for (let e = 0; e < E; e++) {
        const f = fires[l * E + e];
        const n = routed[l][e];
        fired += f.reduce((a, b) => a + b, 0);
        // the expert's own planted frequencies, not its neighbour's
        const own = correlation(f, plannedFiring(3, l, 256, sparsity, undefined, e));
        const other = correlation(f, plannedFiring(3, l, 256, sparsity, undefined, (e + 1) % E));
        assert.ok(
          own > 0.6 && own > other + 0.3,
          `layer ${l} expert ${e} (${n} tokens): correlation ${own} vs ${other}`,
        );
      }
      const share = fired / (2 * tokens * 256);
      assert.ok(Math.abs(share - (1 - sparsity)) < 0.03, `layer ${l}: ${share} of routed neurons fire`);
    }
  });
}

test("planted predictors per expert (gate rank 8): each finds the neurons its expert really fires (recall >= 99.5%)", async () => {
  const out = join(dir, "recall.gguf");
  const r = await synthesize({
    shape: "mixtral-tiny",
    act: "relu",
    type: "q8_0",
    seed: 4,
    out,
    fsync: false,
    sparsity: 0.9,
    gateRank: 8,
  });
  const preds = r.predictors!;
  assert.equal(preds.length, 2 * 4, "one per (layer, expert)");
  const m = await LlamaModel.load(out, { threads: 2, contextSize: 128 });
  const { nEmbd: d, nFF } = m.config;
  const counts = preds.map(() => ({ tp: 0, fn: 0, fired: 0, all: 0 }));
  const h = new Float32Array(preds[0].hidden);
  m.setFFNObserver((o) => {
    const g = o.layer * 4 + o.expert!;
    const p = preds[g];
    const c = counts[g];
    for (let t = 0; t < o.n; t++) {
      const x = o.residual.subarray(o.tokens![t] * d, (o.tokens![t] + 1) * d);
      for (let k = 0; k < p.hidden; k++) {
        let s = 0;
        for (let j = 0; j < d; j++) s += p.fc1[k * d + j] * x[j];
        h[k] = Math.max(0, s);
      }
      for (let i = 0; i < nFF; i++) {
        let s = 0;
        for (let k = 0; k < p.hidden; k++) s += p.fc2[i * p.hidden + k] * h[k];
        const fired = o.gate[t * nFF + i] > 0;
        c.all++;
        if (fired) c.fired++;
        if (fired && s > p.threshold) c.tp++;
        else if (fired) c.fn++;
      }
    }
  });
  try {
    randomTokens(128, 512, 2).forEach((t, pos) => m.forward([t], 1, pos));
  } finally {
    await m.dispose();
  }
  counts.forEach((c, g) => {
    assert.ok(c.fired > 0.05 * c.all, `group ${g}: ${c.fired} of ${c.all} fired`);
    assert.ok(c.tp / c.fired >= 0.995, `layer ${g >> 2} expert ${g & 3}: recall ${c.tp / c.fired}`);
  });
});

test("synth --shape mixtral-tiny --gate-rank: predictors per expert, carried by convert --predictors, predictor mode gives the dense tokens", async () => {
  const model = join(dir, "pred.gguf");
  const r = cli(
    "synth",
    "--shape",
    "mixtral-tiny",
    "--act",
    "relu",
    "--sparsity",
    "0.9",
    "--gate-rank",
    "8",
    "--type",
    "q8_0",
    "-s",
    "4",
    "-o",
    model,
  );
  assert.equal(r.status, 0, r.stderr);
  assert.match(r.stderr, /mixtral-tiny \(a toy Mixtral, 4 experts, 2 used\)/);
  const predictors = join(dir, "pred.predictors.gguf");
  const pf = GGUFFile.open(predictors);
  try {
    assert.equal(pf.getNumber(PREDICTOR_EXPERTS_KEY), 4);
    for (let l = 0; l < 2; l++)
      for (let e = 0; e < 4; e++) {
        assert.deepEqual(pf.tensor(`blk.${l}.fc1.${e}.weight`).dims, [128, 17]);
        assert.deepEqual(pf.tensor(`blk.${l}.fc2.${e}.weight`).dims, [17, 256]);
      }
    assert.ok(!pf.tensors.has("blk.0.fc1.weight"));
  } finally {
    pf.close();
  }
  const pi = join(dir, "pred.pi");
  await convertToStore({ input: model, output: pi, predictors, fsync: false });
  const s = NeuronStore.open(pi);
  assert.equal(s.ffn.experts, 4);
  assert.ok(s.tensors.has("blk.1.fc1.3.weight") && s.tensors.has("blk.1.fc2.3.weight"));
  const bundles = s.ffn.layers.length * s.ffn.layers[0].neurons * s.ffn.bundleBytes;
  s.close();

  const ids = randomTokens(10, 512, 6);
  const run = async (sparsity: "dense" | "predictor") => {
    // the predictors as written (f16): requantized to q8_0 their scores carry noise beyond the
    // planted margin, and on a model this small a missed neuron can flip a near tie
    const m = await LlamaModel.load(pi, {
      threads: 2,
      contextSize: 64,
      predictorType: "original",
      offload: { sparsity, cacheBytes: bundles / 4 },
    });
    try {
      const out = (await greedyAsync(m, ids, 16)).ids;
      return { out, stats: m.offloaded!.snapshot() };
    } finally {
      await m.dispose();
    }
  };
  const dense = await run("dense");
  const pred = await run("predictor");
  assert.deepEqual(pred.out, dense.out);
  assert.ok(
    pred.stats.neuronsComputed < 0.25 * pred.stats.neuronsTotal,
    `${pred.stats.neuronsComputed} of ${pred.stats.neuronsTotal} computed`,
  );
});

test("synth: mixture options that do not fit the shape are refused, saying why", async () => {
  let r = cli("synth", "--shape", "tiny", "--experts-used", "2", "-o", join(dir, "x.gguf"));
  assert.equal(r.status, 2, r.stderr);
  assert.match(
    r.stderr,
    /--experts-used routes tokens among a mixture's experts, and --shape tiny is dense \(mixtures: mixtral-tiny, mixtral, qwen3moe-tiny, qwen3-30b-a3b, smallthinker-tiny, smallthinker-4b, smallthinker-21b, gpt-oss-tiny, gpt-oss-20b\)/,
  );
  r = cli("synth", "--shape", "mixtral-tiny", "--experts-used", "5", "-o", join(dir, "x.gguf"));
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--experts-used 5: --shape mixtral-tiny has 4 experts per layer/);
  r = cli(
    "synth",
    "--shape",
    "mixtral-tiny",
    "--act",
    "relu",
    "--sparsity",
    "0.9",
    "--gate-rank",
    "100",
    "-o",
    join(dir, "x.gguf"),
  );
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--gate-rank 100 must be below the residual width of --shape mixtral-tiny \(96\)/);
  r = cli("synth", "--shape", "mixtral", "--act", "silu", "--sparsity", "0.9", "-o", join(dir, "x.gguf"));
  assert.equal(r.status, 2, r.stderr);
  assert.match(r.stderr, /--sparsity needs --act relu or drelu/);
  await assert.rejects(
    make("one-expert", { overrides: { experts: 1 } }),
    /experts must be 0 \(dense\) or an integer of at least 2, got 1/,
  );
  await assert.rejects(
    make("dense-used", { shape: "tiny", overrides: { expertsUsed: 2 } }),
    /expertsUsed 2 needs a mixture of experts/,
  );
  // --layers keeps the widths
  r = cli("synth", "--shape", "mixtral-tiny", "--layers", "1", "-q", "-o", join(dir, "one.gguf"));
  assert.equal(r.status, 0, r.stderr);
  const f = GGUFFile.open(join(dir, "one.gguf"));
  try {
    assert.equal(f.getNumber("llama.block_count"), 1);
    assert.deepEqual(f.tensor("blk.0.ffn_up_exps.weight").dims, [128, 256, 4]);
    assert.ok(!f.tensors.has("blk.1.attn_q.weight"));
  } finally {
    f.close();
  }
});

// ---------------------------------------------------------------------------------------------
// Against llama.cpp

interface LlamaRef {
  synth: Pick<SynthOptions, "shape" | "act" | "type" | "seed">;
  gguf_sha256: string;
  prompts: { prompt_ids: number[]; greedy_ids: number[] }[];
}
const ref: LlamaRef = JSON.parse(readFileSync(join(ROOT, "test", "reference", "synth-mixtral.llamacpp.json"), "utf8"));
let refModel = "";
/** The reference's model, made again: the same bytes llama.cpp ran (else the fixture is stale). */
async function refGguf(): Promise<string> {
  if (!refModel) {
    refModel = join(dir, "ref.gguf");
    await synthesize({ ...ref.synth, out: refModel, fsync: false });
    assert.equal(
      sha256OfFile(refModel),
      ref.gguf_sha256,
      "synth no longer writes the model llama.cpp ran: remake the fixture with scripts/llamacpp-reference.mjs",
    );
  }
  return refModel;
}

for (const threads of [1, 2]) {
  test(`synthetic SiLU Mixtral in memory: llama.cpp's greedy ids (${threads} thread(s))`, async () => {
    const m = await LlamaModel.load(await refGguf(), { threads, contextSize: 64 });
    try {
      for (const p of ref.prompts)
        assert.deepEqual(
          (await greedyAsync(m, p.prompt_ids, p.greedy_ids.length)).ids,
          p.greedy_ids,
          `prompt ${p.prompt_ids}`,
        );
    } finally {
      await m.dispose();
    }
  });
}

let refStore = "";
for (const threads of [1, 2]) {
  test(`synthetic SiLU Mixtral from a store, most experts on flash: llama.cpp's greedy ids (${threads} thread(s))`, async () => {
    if (!refStore) {
      refStore = join(dir, "ref.pi");
      await convertToStore({ input: await refGguf(), output: refStore, fsync: false });
    }
    const s = NeuronStore.open(refStore);
    assert.equal(s.ffn.experts, 4);
    s.close();
    const { model: m, allFFN } = await loadMostlyOnFlash(refStore, threads);
    try {
      assert.ok(m.offloaded!.layout.cacheBytes < allFFN / 2, `cache ${m.offloaded!.layout.cacheBytes} of ${allFFN}`);
      for (const p of ref.prompts)
        assert.deepEqual(
          (await greedyAsync(m, p.prompt_ids, p.greedy_ids.length)).ids,
          p.greedy_ids,
          `prompt ${p.prompt_ids}`,
        );
      const st = m.offloaded!.snapshot();
      assert.ok(st.misses > 0 && st.bytesRead > 0, "experts' bundles were read from flash");
    } finally {
      await m.dispose();
    }
  });
}
