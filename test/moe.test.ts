/**
 * Mixture of experts in memory: moe-stories (Mixtral layout, 8 dReLU experts, top-2) against its
 * PyTorch reference (greedy ids, logits, the experts each token is routed to), both expert tensor
 * layouts, prompt batches against token-by-token decoding, and files whose experts and metadata
 * disagree.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel } from "../src/model/model.js";
import { BUDGET_ROOM } from "../src/model/offload/layout.js";
import { convertToStore } from "../src/offline/convert.js";
import { profileModel } from "../src/offline/profile.js";
import { firingOf } from "../src/planner/firing-rates.js";
import { shapeOfStore } from "../src/planner/store-shape.js";
import { greedy, greedyAsync, SHARED, tempDir } from "./helpers.js";
import { rewrite } from "./rewrite.js";

const MOE = `${SHARED}/models/moe-stories.gguf`;
const ref = JSON.parse(readFileSync(`${SHARED}/reference/moe-stories.json`, "utf8"));

interface Ref {
  prompt: string;
  prompt_ids: number[];
  greedy_ids: number[];
  logits_first3: number[][];
  expert_ids_per_position: number[][][];
}

function checkLogits(got: Float32Array[], want: number[][], what: string): void {
  for (let k = 0; k < want.length; k++) {
    const scale = Math.max(...want[k].map(Math.abs));
    let worst = 0;
    for (let i = 0; i < want[k].length; i++) worst = Math.max(worst, Math.abs(got[k][i] - want[k][i]));
    assert.ok(worst <= 1e-3 * scale, `${what} position ${k}: max |diff| ${worst} > ${1e-3 * scale}`);
  }
}

for (const threads of [1, 2]) {
  test(`moe-stories in memory: greedy ids equal the reference, logits within 1e-3 of the max logit (${threads} thread(s))`, async () => {
    const model = await LlamaModel.load(MOE, { threads });
    try {
      assert.equal(model.config.nExpert, 8);
      assert.equal(model.config.nExpertUsed, 2);
      assert.equal(model.config.activation, "drelu");
      for (const r of ref.prompts as Ref[]) {
        const { ids, logits } = greedy(model, r.prompt_ids, r.greedy_ids.length);
        assert.deepEqual(ids, r.greedy_ids, `prompt ${JSON.stringify(r.prompt)}`);
        checkLogits(logits, r.logits_first3, `prompt ${JSON.stringify(r.prompt)}`);
      }
    } finally {
      await model.dispose();
    }
  });
}

test("moe-stories: every token is routed to the reference's experts, in every layer", async () => {
  const model = await LlamaModel.load(MOE, { threads: 2 });
  try {
    for (const r of ref.prompts as Ref[]) {
      const fed = [...r.prompt_ids, ...r.greedy_ids.slice(0, -1)];
      // per position and layer, the experts an observer sees the position routed to
      const seen: Set<number>[][] = fed.map(() => Array.from({ length: 6 }, () => new Set<number>()));
      let base = 0;
      model.setFFNObserver((o) => {
        for (const t of o.tokens!) seen[base + t][o.layer].add(o.expert!);
      });
      model.forward(r.prompt_ids, r.prompt_ids.length, 0);
      base = r.prompt_ids.length;
      for (let i = 0; i + 1 < r.greedy_ids.length; i++) {
        model.forward([r.greedy_ids[i]], 1, base);
        base++;
      }
      model.setFFNObserver(null);
      for (let p = 0; p < fed.length; p++) {
        for (let l = 0; l < 6; l++) {
          assert.deepEqual(
            [...seen[p][l]].sort(),
            [...r.expert_ids_per_position[p][l]].sort(),
            `prompt ${JSON.stringify(r.prompt)} position ${p} layer ${l}`,
          );
        }
      }
    }
  } finally {
    await model.dispose();
  }
});

test("moe-stories: a prompt as one batch (tokens grouped per expert) gives token-by-token decoding's logits", async () => {
  const model = await LlamaModel.load(MOE, { threads: 2 });
  try {
    const r = (ref.prompts as Ref[])[1];
    const a = greedy(model, r.prompt_ids, 4, true);
    const b = greedy(model, r.prompt_ids, 4, false);
    assert.deepEqual(a.ids, b.ids);
    checkLogits(
      a.logits,
      b.logits.map((l) => Array.from(l)),
      "batch against one by one",
    );
  } finally {
    await model.dispose();
  }
});

test("older files with one 2-D tensor per expert (blk.N.ffn_gate.E.weight) run the same", async () => {
  const split = await rewrite(MOE, "moe-split", {
    tensors: (src) => {
      const m = new Map<string, [number[], Float32Array] | undefined>();
      for (let l = 0; l < 6; l++) {
        for (const kind of ["gate", "up", "down"]) {
          const name = `blk.${l}.ffn_${kind}_exps.weight`;
          const t = src.tensor(name);
          const all = new Float32Array(src.tensorData(name).slice().buffer);
          const per = all.length / 8;
          m.set(name, undefined);
          for (let e = 0; e < 8; e++)
            m.set(`blk.${l}.ffn_${kind}.${e}.weight`, [t.dims.slice(0, 2), all.slice(e * per, (e + 1) * per)]);
        }
      }
      return m;
    },
  });
  const model = await LlamaModel.load(split, { threads: 2 });
  try {
    const r = (ref.prompts as Ref[])[0];
    const { ids, logits } = greedy(model, r.prompt_ids, r.greedy_ids.length);
    assert.deepEqual(ids, r.greedy_ids);
    checkLogits(logits, r.logits_first3, "per-expert tensors");
  } finally {
    await model.dispose();
  }
});

test("experts and metadata that disagree are refused, naming the file, the tensor and the field", async () => {
  const bad = async (name: string, r: Parameters<typeof rewrite>[2], pattern: RegExp) => {
    const path = await rewrite(MOE, name, r);
    await assert.rejects(LlamaModel.load(path, { threads: 1 }), (e: Error) => {
      assert.match(e.message, new RegExp(`${name}\\.gguf`), "names the file");
      assert.match(e.message, pattern);
      return true;
    });
  };
  await bad(
    "moe-count",
    { metadata: { "llama.expert_count": 6 } },
    /"blk\.0\.ffn_gate_inp\.weight" has shape \[256, 8\], expected \[256, 6\] \(embedding_length, expert_count\)/,
  );
  await bad(
    "moe-used",
    { metadata: { "llama.expert_used_count": 9 } },
    /"llama\.expert_used_count" = 9 does not fit "llama\.expert_count" = 8/,
  );
  await bad(
    "moe-router",
    { tensors: () => new Map([["blk.2.ffn_gate_inp.weight", [[256, 7], new Float32Array(256 * 7)]]]) },
    /"blk\.2\.ffn_gate_inp\.weight" has shape \[256, 7\], expected \[256, 8\]/,
  );
  await bad(
    "moe-seven",
    { tensors: () => new Map([["blk.1.ffn_up_exps.weight", [[256, 384, 7], new Float32Array(256 * 384 * 7)]]]) },
    /"blk\.1\.ffn_up_exps\.weight" has shape \[256, 384, 7\], expected \[256, 384, 8\] \(it holds 7 experts, metadata expert_count says 8\)/,
  );
  await bad(
    "moe-missing",
    { tensors: () => new Map([["blk.3.ffn_down_exps.weight", undefined]]) },
    /layer 3 is a mixture of experts .* has neither "blk\.3\.ffn_down_exps\.weight" nor "blk\.3\.ffn_down\.0\.weight"/,
  );
});

const dir = tempDir("powerinfer-moe-");
let storePath = "";
async function store(): Promise<string> {
  if (!storePath) {
    storePath = join(dir, "moe.pi");
    await convertToStore({ input: MOE, output: storePath, fsync: false });
  }
  return storePath;
}

for (const threads of [1, 2]) {
  test(`moe-stories from a store under a budget that leaves most experts on flash (gate mode): the reference's ids and logits (${threads} thread(s))`, async () => {
    const pi = await store();
    const s = NeuronStore.open(pi);
    const allFFN = s.ffn.layers.length * s.ffn.layers[0].neurons * s.ffn.bundleBytes;
    assert.equal(s.ffn.experts, 8);
    assert.equal(s.ffn.layers.length, 48);
    s.close();
    // The fixed part as this process would lay it out, and a quarter of the experts' bundles. The
    // fixed part counts this process's resident memory at load, which drifts by tens of megabytes
    // between two loads (garbage collection): the cache is capped at that quarter, and the budget
    // leaves room for the drift.
    const offload = { sparsity: "gate" as const, cacheBytes: allFFN / 4 };
    const fixed = (await LlamaModel.layoutOf(pi, { threads, offload })).fixed;
    const budget = Math.ceil((fixed + allFFN / 4 + 64 * 2 ** 20) / BUDGET_ROOM);
    const model = await LlamaModel.load(pi, { threads, memoryBudget: budget, offload });
    try {
      const layout = model.offloaded!.layout;
      assert.ok(layout.cacheBytes < allFFN / 2, `cache ${layout.cacheBytes} of ${allFFN} bytes of experts`);
      for (const r of ref.prompts as Ref[]) {
        const { ids, logits } = await greedyAsync(model, r.prompt_ids, r.greedy_ids.length);
        assert.deepEqual(ids, r.greedy_ids, `prompt ${JSON.stringify(r.prompt)}`);
        checkLogits(logits, r.logits_first3, `prompt ${JSON.stringify(r.prompt)}`);
      }
      const st = model.offloaded!.snapshot();
      assert.ok(st.misses > 0 && st.bytesRead > 0, "experts' bundles were read from flash");
      // a step is one routed expert of one token: 2 per token and layer
      assert.ok(st.neuronsComputed < 0.5 * st.neuronsTotal, `${st.neuronsComputed} of ${st.neuronsTotal} computed`);
    } finally {
      await model.dispose();
    }
  });
}

test("profile per expert (routing and firing), a hot-first store, hot slots shared out by rate: the reference's ids under a budget", async () => {
  const { profile } = await profileModel({
    model: MOE,
    corpus: `${SHARED}/data/stories-train.txt`,
    tokens: 4000,
    threads: 2,
  });
  assert.equal(profile.experts, 8);
  assert.equal(profile.layers.length, 48);
  for (let l = 0; l < 6; l++) {
    // each token goes to 2 experts: the routed shares of a layer add up to 2
    const routed = profile.layers.slice(l * 8, l * 8 + 8).reduce((a, L) => a + (L.routed ?? 0), 0);
    assert.ok(Math.abs(routed - 2) < 1e-3, `layer ${l}: routed shares sum to ${routed}`);
  }
  const pi = join(dir, "moe.hot.pi");
  await convertToStore({ input: MOE, output: pi, profile, fsync: false });
  const fixed = (await LlamaModel.layoutOf(pi, { threads: 2, offload: { sparsity: "gate" } })).fixed;
  const model = await LlamaModel.load(pi, {
    threads: 2,
    memoryBudget: Math.ceil((fixed + 12 * 2 ** 20) / BUDGET_ROOM),
    offload: { sparsity: "gate", hotFraction: 0.8 },
  });
  try {
    const hot = model.offloaded!.layout.hotPerGroup;
    assert.ok(Math.max(...hot) > 2 * Math.min(...hot), `hot slots by rate: ${hot.join(", ")}`);
    // the planner's view of the store: one group of per-token rates per (layer, expert), the
    // routing shares the profile measured (kept in the manifest), a layer's rates summing to the
    // firing of its two routed experts
    const store = NeuronStore.open(pi);
    const shape = shapeOfStore(store, model.config, "gate");
    const firing = firingOf(store, model.config);
    store.close();
    assert.equal(firing.layers.length, 48);
    assert.equal(shape.experts, 8);
    assert.equal(shape.expertsUsed, 2);
    for (let g = 0; g < 48; g++) assert.ok(Math.abs(shape.routed![g] - (profile.layers[g].routed ?? -1)) < 1e-6);
    for (let l = 0; l < 6; l++) {
      let want = 0,
        got = 0;
      for (let e = 0; e < 8; e++) {
        const L = profile.layers[l * 8 + e];
        want += L.routed! * Array.from(L.frequency).reduce((a, v) => a + v, 0);
        got += firing.layers[l * 8 + e].reduce((a, v) => a + v, 0);
      }
      assert.ok(Math.abs(got - want) < 1e-3 * want, `layer ${l}: ${got} firing per token, the profile says ${want}`);
    }
    for (const r of (ref.prompts as Ref[]).slice(0, 2)) {
      const { ids, logits } = await greedyAsync(model, r.prompt_ids, r.greedy_ids.length);
      assert.deepEqual(ids, r.greedy_ids, `prompt ${JSON.stringify(r.prompt)}`);
      checkLogits(logits, r.logits_first3, `prompt ${JSON.stringify(r.prompt)}`);
    }
  } finally {
    await model.dispose();
  }
});
