/**
 * SmallThinker from a store under a small neuron cache (a sixteenth of the experts' bundles), on
 * synth --shape smallthinker-tiny with planted ReGLU sparsity and planted per-expert predictors:
 * the greedy ids of gate and predictor mode equal the store's in memory, and the router, which
 * reads the block's input, starts the routed experts' reads before attention (by default): the
 * reads are counted (readAheadRouted), the trace records them per layer before the layer's
 * attention, and they leave the outputs as read-ahead off computes them.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { NeuronStore } from "../src/format/store/index.js";
import { LlamaModel, type LoadOptions } from "../src/model/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { synthesize } from "../src/offline/synth.js";
import { Tracer, type TraceEvent } from "../src/runtime/tracer.js";
import { greedyAsync, tempDir } from "./helpers.js";

const dir = tempDir("smallthinker-offload-");
const PROMPTS = [
  [1, 17, 250, 3, 99],
  [1, 400, 12, 7],
  [1, 5, 5, 5, 300, 42],
];
const TOKENS = 10;
const EXPERTS = 8;
const LAYERS = 5;

let made: Promise<{ store: string; allFFN: number }> | null = null;
function store(): Promise<{ store: string; allFFN: number }> {
  made ??= (async () => {
    const gguf = join(dir, "st.gguf");
    const predictors = join(dir, "st.predictors.gguf");
    await synthesize({
      shape: "smallthinker-tiny",
      act: "relu",
      type: "q4_0",
      seed: 3,
      out: gguf,
      sparsity: 0.9,
      gateRank: 16,
      predictorsOut: predictors,
      fsync: false,
    });
    const pi = join(dir, "st.pi");
    await convertToStore({ input: gguf, output: pi, predictors, fsync: false });
    const s = NeuronStore.open(pi);
    const allFFN = s.ffn.layers.length * s.ffn.layers[0].neurons * s.ffn.bundleBytes;
    s.close();
    return { store: pi, allFFN };
  })();
  return made;
}

async function idsOf(opts: LoadOptions): Promise<{ ids: number[][]; model: LlamaModel }> {
  const { store: pi } = await store();
  const model = await LlamaModel.load(pi, { contextSize: 64, ...opts });
  const ids: number[][] = [];
  try {
    for (const p of PROMPTS) ids.push((await greedyAsync(model, p, TOKENS)).ids);
  } catch (e) {
    await model.dispose();
    throw e;
  }
  return { ids, model };
}

let inMemory: number[][] | null = null;
async function reference(): Promise<number[][]> {
  if (inMemory) return inMemory;
  const { ids, model } = await idsOf({ threads: 1 });
  await model.dispose();
  return (inMemory = ids);
}

for (const threads of [1, 2]) {
  test(`smallthinker-tiny, planted ReGLU sparsity: gate mode and predictor mode from a store at a sixteenth of the experts give the in-memory ids (${threads} thread(s))`, async () => {
    const want = await reference();
    const { allFFN } = await store();
    for (const sparsity of ["gate", "predictor"] as const) {
      const { ids, model } = await idsOf({ threads, offload: { sparsity, cacheBytes: Math.floor(allFFN / 16) } });
      try {
        assert.deepEqual(ids, want, `${sparsity} mode`);
        const st = model.offloaded!.snapshot();
        assert.ok(st.misses > 0 && st.bytesRead > 0, `${sparsity}: experts' bundles were read from flash`);
        if (sparsity === "predictor") {
          // the default for a router on the block's input: the routed experts' reads start before attention
          assert.ok(model.offloaded!.readsAheadLayer && model.offloaded!.readsAheadExpert);
          assert.ok(st.readAheadRouted! > 0, `read before attention: ${st.readAheadRouted}`);
          assert.ok(st.readAheadRouted! + st.readAheadExact! <= st.readAhead);
          assert.ok(st.readAheadUsed > 0 && st.readAheadUsed <= st.readAhead);
        } else assert.equal(st.readAhead, 0, "gate mode reads nothing ahead");
      } finally {
        await model.dispose();
      }
    }
  });
}

test("smallthinker-tiny from a store: the routed experts' reads start before each layer's attention (trace), for the experts the token is routed to, and change no output", async () => {
  const { allFFN } = await store();
  const cacheBytes = Math.floor(allFFN / 16);
  const off = await idsOf({ threads: 2, offload: { sparsity: "predictor", cacheBytes, lookahead: false } });
  await off.model.dispose();
  const file = join(dir, "trace.json");
  const tracer = new Tracer(file, "smallthinker");
  const on = await idsOf({ threads: 2, offload: { sparsity: "predictor", cacheBytes, tracer }, tracer });
  const st = on.model.offloaded!.snapshot();
  await on.model.dispose();
  tracer.close();
  assert.deepEqual(on.ids, off.ids, "read-ahead changes no output");
  assert.ok(st.readAheadRouted! > 0);

  const events = (JSON.parse(readFileSync(file, "utf8")) as TraceEvent[]).filter((e) => e.ph === "X" && e.tid === 1);
  const byStart = (a: TraceEvent, b: TraceEvent) => a.ts - b.ts;
  const layers = events.filter((e) => /^layer \d+$/.test(e.name)).sort(byStart);
  const routedReads = events.filter((e) => e.name === "read-ahead routed");
  let withReads = 0;
  let decodeLayers = 0;
  for (const layer of layers) {
    const l = Number(layer.name.slice("layer ".length));
    const inside = (e: TraceEvent) => e.ts >= layer.ts && e.ts + e.dur! <= layer.ts + layer.dur!;
    const ahead = routedReads.filter(inside);
    const attention = events.filter((e) => e.name === "attention" && inside(e));
    assert.equal(attention.length, 1, `layer span ${l} holds one attention`);
    if (ahead.length === 0) continue; // a prompt's batch: its experts' reads are batched, not read ahead
    decodeLayers++;
    assert.equal(ahead.length, 1, `layer ${l}: one routed read-ahead`);
    const a = ahead[0];
    assert.ok(a.ts + a.dur! <= attention[0].ts, `layer ${l}: the reads start before attention`);
    assert.equal(a.args!.experts, 2, "the token's routed experts, expert_used_count of them");
    assert.equal(Math.floor((a.args!.group as number) / EXPERTS), l, `layer ${l}: its own experts`);
    if ((a.args!.bundles as number) > 0) withReads++;
  }
  // every decoded token's every layer (a prompt's last token's logits come from the batch)
  assert.equal(decodeLayers, PROMPTS.length * (TOKENS - 1) * LAYERS);
  assert.ok(withReads > 0, "some layers' routed experts had bundles to read before attention");
});
