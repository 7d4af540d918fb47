/**
 * Planted activation sparsity in synthetic models (`synth --act relu|drelu --sparsity S`): the
 * zeros must come out of the weights. So these tests run the model (a copy of the reference
 * forward pass's arithmetic that also records each FFN neuron's output) on a few hundred random
 * tokens and count the exact zeros per layer, in every block type, and check the per-neuron
 * frequencies against the planted power law.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { rmSync } from "node:fs";
import { join } from "node:path";
import { GGUFFile } from "../src/format/gguf.js";
import { dequantize } from "../src/format/quant.js";
import type { ModelConfig } from "../src/model/config.js";
import { ReferenceModel } from "../src/model/reference.js";
import { LlamaModel } from "../src/model/model.js";
import {
  FIRING_CAP,
  FIRING_FLOOR,
  normCdf,
  normQuantile,
  plannedFiring,
  powerLawFrequencies,
  synthesize,
  synthRecipes,
  SHAPE_SPECS,
  type SynthActivation,
  type SynthOptions,
  type SynthType,
} from "../src/offline/synth.js";
import { main as synthMain } from "../src/cli/synth.js";
import { randomTokens, sha256OfFile, tempDir } from "./helpers.js";

const dir = tempDir("synth-sparsity-");
process.on("exit", () => rmSync(dir, { recursive: true, force: true }));

async function make(
  name: string,
  o: Partial<SynthOptions> & { act: SynthActivation; type: SynthType },
): Promise<string> {
  const out = join(dir, `${name}.gguf`);
  await synthesize({ shape: "tiny", seed: 11, out, fsync: false, ...o });
  return out;
}

// ---------------------------------------------------------------------------------------------
// A probe: the reference forward pass (src/model/reference.ts), recording which FFN outputs are
// zero through its observer hooks.

class Probe {
  readonly c: ModelConfig;
  readonly ref: ReferenceModel;
  /** per layer: how often each neuron's output was non-zero, and the summed share of zeros */
  readonly fires: Float64Array[];
  readonly zeroShare: Float64Array;
  tokens = 0;
  /** largest |residual| seen */
  maxAbs = 0;

  constructor(file: GGUFFile, ctx: number) {
    this.ref = new ReferenceModel(file, ctx);
    const c = (this.c = this.ref.config);
    this.fires = Array.from({ length: c.nLayer }, () => new Float64Array(c.nFF));
    this.zeroShare = new Float64Array(c.nLayer);
    this.ref.onFFN = (l, act) => {
      let zeros = 0;
      const fires = this.fires[l];
      for (let i = 0; i < act.length; i++) {
        if (act[i] === 0) zeros++;
        else fires[i]++;
      }
      this.zeroShare[l] += zeros / act.length;
    };
    this.ref.onResidual = (x) => {
      for (const v of x) this.maxAbs = Math.max(this.maxAbs, Math.abs(v));
    };
  }

  forward(token: number, pos: number): Float32Array {
    this.tokens++;
    return this.ref.forward(token, pos);
  }
}

interface Measured {
  /** share of zero FFN outputs per layer, averaged over tokens */
  zero: number[];
  /** per layer, each neuron's firing frequency */
  freq: Float64Array[];
  logitStd: number[];
  maxAbs: number;
}

function measure(path: string, tokens: number, seed = 5): Measured {
  const f = GGUFFile.open(path);
  const probe = new Probe(f, tokens);
  f.close();
  const logitStd: number[] = [];
  randomTokens(tokens, probe.c.nVocab, seed).forEach((t, pos) => {
    const l = probe.forward(t, pos);
    let s = 0,
      s2 = 0;
    for (const v of l) {
      assert.ok(Number.isFinite(v), `${path}: non-finite logit at position ${pos}`);
      s += v;
      s2 += v * v;
    }
    logitStd.push(Math.sqrt(s2 / l.length - (s / l.length) ** 2));
  });
  return {
    zero: Array.from(probe.zeroShare, (z) => z / probe.tokens),
    freq: probe.fires.map((a) => a.map((n) => n / probe.tokens)),
    logitStd,
    maxAbs: probe.maxAbs,
  };
}

/** share of all firings that come from the most active 10% of neurons */
function top10Share(freq: Float64Array): number {
  const s = Array.from(freq).sort((a, b) => b - a);
  const total = s.reduce((a, b) => a + b, 0);
  return s.slice(0, Math.ceil(s.length / 10)).reduce((a, b) => a + b, 0) / total;
}

function correlation(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const n = a.length;
  let sa = 0,
    sb = 0,
    sab = 0,
    saa = 0,
    sbb = 0;
  for (let i = 0; i < n; i++) {
    sa += a[i];
    sb += b[i];
    sab += a[i] * b[i];
    saa += a[i] * a[i];
    sbb += b[i] * b[i];
  }
  return (sab / n - (sa / n) * (sb / n)) / Math.sqrt((saa / n - (sa / n) ** 2) * (sbb / n - (sb / n) ** 2));
}

// ---------------------------------------------------------------------------------------------

const CASES: { act: SynthActivation; type: SynthType; sparsity: number }[] = [
  { act: "relu", type: "q4_1", sparsity: 0.9 },
  { act: "drelu", type: "q4_0", sparsity: 0.9 },
  { act: "relu", type: "q8_0", sparsity: 0.5 },
  { act: "drelu", type: "f16", sparsity: 0.5 },
];

for (const { act, type, sparsity } of CASES) {
  test(`${act} ${type} --sparsity ${sparsity}: the real share of zeros is the target in every layer, with power-law frequencies`, async () => {
    const path = await make(`m-${act}-${type}-${sparsity}`, { act, type, sparsity });
    const m = measure(path, 128);
    const spec = SHAPE_SPECS.tiny;
    for (let l = 0; l < spec.layers; l++) {
      assert.ok(
        Math.abs(m.zero[l] - sparsity) <= 0.05,
        `layer ${l}: ${m.zero[l].toFixed(4)} of the FFN outputs are zero, planted ${sparsity}`,
      );
      // each neuron fires about as often as planted: the rank each one got survives
      const planned = plannedFiring(11, l, spec.ffn, sparsity);
      const r = correlation(planned, m.freq[l]);
      assert.ok(r > 0.9, `layer ${l}: measured and planned per-neuron frequencies correlate only ${r.toFixed(3)}`);
      // skewed: at 0.9 the top 10% give about half the firings (uniform frequencies: 10%);
      // at 0.5 the cap at 0.95 limits the skew to about 19%
      const share = top10Share(m.freq[l]);
      assert.ok(
        share > (sparsity === 0.9 ? 0.4 : 0.16),
        `layer ${l}: the top 10% of neurons give ${share.toFixed(3)} of the firings`,
      );
      // and the hot neurons are scattered over the matrix, not gathered at the front
      const hot = Array.from(m.freq[l].keys())
        .sort((a, b) => m.freq[l][b] - m.freq[l][a])
        .slice(0, spec.ffn / 10);
      const front = hot.filter((i) => i < spec.ffn / 10).length / hot.length;
      assert.ok(
        front < 0.3,
        `layer ${l}: ${(front * 100).toFixed(0)}% of the hottest neurons sit in the first tenth of the rows`,
      );
    }
    // logits neither flat nor exploding (the output layer is scaled for a deviation near 2)
    const meanStd = m.logitStd.reduce((a, b) => a + b, 0) / m.logitStd.length;
    assert.ok(meanStd > 1 && meanStd < 4, `logit deviation ${meanStd}`);
  });
}

test("32 layers stay finite and every layer keeps its sparsity", async () => {
  for (const [act, type] of [
    ["relu", "f32"],
    ["drelu", "q4_1"],
  ] as const) {
    const path = await make(`deep-${act}`, {
      act,
      type,
      sparsity: 0.9,
      overrides: { layers: 32, dim: 96, ffn: 256, heads: 3, kvHeads: 1 },
    });
    const m = measure(path, 48);
    assert.ok(m.maxAbs < 100, `${act}: residual reaches ${m.maxAbs}`);
    m.zero.forEach((z, l) => assert.ok(Math.abs(z - 0.9) <= 0.05, `${act} layer ${l}: ${z.toFixed(4)} zeros`));
  }
});

test("the engine runs a sparse model as the reference does", async () => {
  const path = await make("engine", { act: "relu", type: "q4_1", sparsity: 0.9 });
  const f = GGUFFile.open(path);
  const ref = new ReferenceModel(f, 32);
  f.close();
  const model = await LlamaModel.load(path, { threads: 1, contextSize: 32 });
  try {
    let agree = 0;
    const toks = randomTokens(12, SHAPE_SPECS.tiny.vocab, 3);
    for (let pos = 0; pos < toks.length; pos++) {
      const a = model.forward([toks[pos]], 1, pos);
      const b = ref.forward(toks[pos], pos);
      const scale = Math.max(...b.map(Math.abs));
      let worst = 0;
      for (let i = 0; i < b.length; i++) worst = Math.max(worst, Math.abs(a[i] - b[i]));
      // the engine rounds activations to 8 bits per block, as llama.cpp does: a plain random
      // Q4_1 model shows about 2% here, and the planted constant must not make it worse
      assert.ok(
        worst <= 0.05 * scale,
        `position ${pos}: engine and reference logits differ by ${worst} (scale ${scale})`,
      );
      if (a.indexOf(Math.max(...a)) === b.indexOf(Math.max(...b))) agree++;
    }
    assert.ok(agree >= 10, `greedy tokens agree at only ${agree} of 12 positions`);
  } finally {
    await model.dispose();
  }
});

test("the file tells the engine nothing about which neuron fires", async () => {
  const type = "q4_0";
  const path = await make("layout", { act: "relu", type, sparsity: 0.8, alpha: 1.5 });
  const f = GGUFFile.open(path);
  try {
    assert.equal(f.getString("llama.feed_forward_activation"), "relu");
    assert.ok(Math.abs(f.getNumber("synth.sparsity") - 0.8) < 1e-6);
    assert.equal(f.getNumber("synth.alpha"), 1.5);
    assert.match(f.getString("general.name"), /sparsity0\.8/);
    const synthKeys = [...f.metadata.keys()].filter((k) => k.startsWith("synth.")).sort();
    assert.deepEqual(synthKeys, ["synth.alpha", "synth.seed", "synth.shape", "synth.sparsity"]);
    // the same tensors as a plain model: no per-neuron table, no predictor
    const spec = SHAPE_SPECS.tiny;
    assert.deepEqual(
      [...f.tensors.keys()],
      synthRecipes(spec, type).map((r) => r.name),
    );

    // the construction, as the weights show it
    const get = (n: string) => dequantize(f.tensor(n).type, f.tensorData(n), f.tensor(n).elements);
    const d = spec.dim;
    const embd = get("token_embd.weight");
    const C = embd[0];
    assert.ok(C > 10, `constant ${C}`);
    for (let t = 0; t < spec.vocab; t++) {
      assert.equal(embd[t * d], C, `token ${t} carries the constant`);
      for (let j = 1; j < 32; j++) assert.ok(embd[t * d + j] === 0);
    }
    for (let l = 0; l < spec.layers; l++) {
      for (const n of ["attn_output", "ffn_down"]) {
        const w = get(`blk.${l}.${n}.weight`);
        const cols = f.tensor(`blk.${l}.${n}.weight`).dims[0];
        for (let i = 0; i < 32 * cols; i++)
          assert.ok(w[i] === 0, `${n} row ${Math.floor(i / cols)} must not write the reserved block`);
      }
      // under ReLU nothing but the gate reads the constant (the residual has no mean to cancel)
      for (const n of ["attn_q", "attn_k", "attn_v", "ffn_up"]) {
        const w = get(`blk.${l}.${n}.weight`);
        for (let r = 0; r < w.length / d; r++) assert.ok(w[r * d] === 0, `${n} row ${r} reads the constant`);
      }
      // the gate biases: one per neuron, following the planted frequency of each
      const gate = get(`blk.${l}.ffn_gate.weight`);
      const bias = Array.from({ length: spec.ffn }, (_, i) => gate[i * d]);
      const planned = plannedFiring(11, l, spec.ffn, 0.8, 1.5);
      const r = correlation(
        planned.map((p) => normQuantile(p)),
        bias,
      );
      assert.ok(r > 0.9, `layer ${l}: gate biases correlate ${r.toFixed(3)} with the planted quantiles`);
    }
  } finally {
    f.close();
  }
});

test("deterministic per seed and options; the plain model is untouched", async () => {
  const a = await make("det-a", { act: "relu", type: "q4_1", sparsity: 0.9 });
  const b = await make("det-b", { act: "relu", type: "q4_1", sparsity: 0.9 });
  const c = await make("det-c", { act: "relu", type: "q4_1", sparsity: 0.5 });
  const e = await make("det-e", { act: "relu", type: "q4_1", sparsity: 0.9, seed: 12 });
  const plain = await make("det-plain", { act: "relu", type: "q4_1" });
  assert.equal(sha256OfFile(a), sha256OfFile(b));
  assert.notEqual(sha256OfFile(a), sha256OfFile(c));
  assert.notEqual(sha256OfFile(a), sha256OfFile(e));
  const f = GGUFFile.open(plain);
  const g = GGUFFile.open(a);
  try {
    assert.equal(f.has("synth.sparsity"), false);
    assert.equal(f.has("synth.alpha"), false);
    // without --sparsity the weights are the plain random ones; the planted model reuses the
    // same random streams, so a neuron's row differs only where the construction writes
    assert.deepEqual(f.tensorData("blk.1.attn_norm.weight"), g.tensorData("blk.1.attn_norm.weight"));
    assert.notDeepEqual(f.tensorData("blk.1.ffn_gate.weight"), g.tensorData("blk.1.ffn_gate.weight"));
  } finally {
    f.close();
    g.close();
  }
  // neuron ranks are dealt afresh per layer and per seed
  const p0 = plannedFiring(11, 0, 768, 0.9),
    p1 = plannedFiring(11, 1, 768, 0.9),
    q0 = plannedFiring(12, 0, 768, 0.9);
  assert.ok(correlation(p0, p1) < 0.3 && correlation(p0, q0) < 0.3);
  assert.deepEqual(p0, plannedFiring(11, 0, 768, 0.9));
});

test("firing frequencies: power law with the planted mean, cap and floor", () => {
  for (const [n, s, alpha] of [
    [768, 0.9, 1],
    [11008, 0.9, 1],
    [5632, 0.5, 1],
    [768, 0.99, 3],
    [1000, 0.7, 0],
  ] as const) {
    const p = powerLawFrequencies(n, s, alpha);
    const mean = p.reduce((a, b) => a + b, 0) / n;
    assert.ok(Math.abs(mean - (1 - s)) < 1e-9, `mean ${mean} for sparsity ${s}`);
    for (let r = 1; r < n; r++) assert.ok(p[r] <= p[r - 1], "descending by rank");
    assert.ok(p[0] <= FIRING_CAP && p[n - 1] >= FIRING_FLOOR);
    if (alpha === 0)
      assert.ok(
        p.every((x) => Math.abs(x - (1 - s)) < 1e-12),
        "alpha 0: all alike",
      );
    else {
      // the law itself, away from the cap and the floor: p(r) (r+1)^alpha is constant
      const mid = Math.floor(n / 2);
      const k = p[mid] * (mid + 1) ** alpha;
      const r = Math.floor(n * 0.8);
      if (p[r] > FIRING_FLOOR && p[mid] < FIRING_CAP) assert.ok(Math.abs((p[r] * (r + 1) ** alpha) / k - 1) < 1e-9);
    }
  }
  // per neuron index: the same values, shuffled
  const law = Array.from(powerLawFrequencies(768, 0.9, 1));
  assert.deepEqual(
    Array.from(plannedFiring(3, 2, 768, 0.9)).sort((a, b) => b - a),
    law,
  );
  assert.throws(() => powerLawFrequencies(10, 0.01, 1), /mean/);
});

test("normal quantiles", () => {
  const known: [number, number][] = [
    [0.5, 0],
    [0.975, 1.959963984540054],
    [0.1, -1.2815515655446004],
    [1e-4, -3.719016485455709],
    [0.95, 1.6448536269514722],
  ];
  for (const [p, z] of known)
    assert.ok(Math.abs(normQuantile(p) - z) < 1e-9, `PhiInverse(${p}) = ${normQuantile(p)}, expected ${z}`);
  for (const p of [1e-6, 0.003, 0.3, 0.77, 0.999])
    assert.ok(Math.abs(normCdf(normQuantile(p)) - p) < 1e-12 * Math.max(1, 1 / p) + 1e-15);
  assert.throws(() => normQuantile(0), /p must be in/);
  assert.throws(() => normQuantile(1.5), /p must be in/);
});

test("the generator predicts the planted sparsity and rejects what it cannot plant", async () => {
  const r = await synthesize({
    shape: "tiny",
    act: "relu",
    type: "q8_0",
    seed: 1,
    out: join(dir, "pred.gguf"),
    fsync: false,
    sparsity: 0.7,
  });
  assert.equal(r.predictedSparsity?.length, SHAPE_SPECS.tiny.layers);
  for (const p of r.predictedSparsity!) assert.ok(Math.abs(p - 0.7) < 0.002, `predicted ${p}`);
  const plain = await synthesize({
    shape: "tiny",
    act: "relu",
    type: "q8_0",
    seed: 1,
    out: join(dir, "pred2.gguf"),
    fsync: false,
  });
  assert.equal(plain.predictedSparsity, undefined);

  const base = { shape: "tiny", act: "relu", type: "q4_0", seed: 1, out: join(dir, "bad.gguf") } as const;
  await assert.rejects(synthesize({ ...base, act: "silu", sparsity: 0.9 }), /needs a ReLU-family activation/);
  await assert.rejects(synthesize({ ...base, sparsity: 0.05 }), /sparsity must be a number in \[0.1, 0.99\]/);
  await assert.rejects(synthesize({ ...base, sparsity: 1 }), /sparsity must be/);
  await assert.rejects(synthesize({ ...base, sparsity: NaN }), /sparsity must be/);
  await assert.rejects(synthesize({ ...base, alpha: 1 }), /give a sparsity too/);
  await assert.rejects(synthesize({ ...base, sparsity: 0.9, alpha: 5 }), /alpha must be a number in \[0, 4\]/);
  await assert.rejects(
    synthesize({ ...base, sparsity: 0.9, overrides: { dim: 32, heads: 2, kvHeads: 2 } }),
    /needs dim > 32/,
  );
});

test("synth CLI: --sparsity and --alpha", async () => {
  const path = join(dir, "cli.gguf");
  assert.equal(
    await synthMain(["--act", "relu", "--type", "q4_1", "--sparsity", "0.85", "--alpha", "1.2", "-o", path, "--quiet"]),
    0,
  );
  const f = GGUFFile.open(path);
  assert.ok(Math.abs(f.getNumber("synth.sparsity") - 0.85) < 1e-6);
  assert.ok(Math.abs(f.getNumber("synth.alpha") - 1.2) < 1e-6);
  f.close();
  await assert.rejects(synthMain(["--sparsity", "0.9", "-o", path]), /--sparsity needs --act relu or drelu/);
  await assert.rejects(
    synthMain(["--act", "relu", "--sparsity", "2", "-o", path]),
    /--sparsity must be between 0.1 and 0.99, got 2/,
  );
  await assert.rejects(synthMain(["--act", "relu", "--sparsity", "x", "-o", path]), /--sparsity/);
  await assert.rejects(synthMain(["--act", "relu", "--alpha", "1", "-o", path]), /give --sparsity too/);
  await assert.rejects(
    synthMain(["--act", "drelu", "--sparsity", "0.9", "--alpha", "-1", "-o", path]),
    /--alpha must be between 0 and 4/,
  );
});
