#!/usr/bin/env node
/**
 * Makes test/reference/synth-*.llamacpp.json: greedy token ids that llama.cpp computes for
 * synthetic models of each architecture the engine runs beyond the paper's (random weights that
 * nobody trained), so that the tests can check the engine against an independent implementation:
 * a SiLU Mixtral (router, top-k, the 3-D expert tensors' layout), a Qwen3 (QK-norm, a head size
 * from key_length, NEOX RoPE), a Llama 3.2 (RoPE frequency factors from rope_freqs.weight), a
 * Phi-3 (fused tensors, LongRoPE), a Gemma 3 (sliding windows, post-norms, GELU, soft-cap) and a
 * Qwen3-MoE (qwen3's attention over Mixtral-style experts of expert_feed_forward_length), a
 * SmallThinker (routing before attention, sigmoid gating, ReGLU experts, layers without RoPE) and
 * a gpt-oss (biases, attention sinks, YaRN, top-k-then-softmax routing, the clamped SwiGLU, MXFP4).
 *
 * llama.cpp comes from node-llama-cpp 3.21.1 in bench/.peer (installed by bench/run; never a
 * dependency of the package, and tests never load it). llama.cpp runs each architecture's own
 * activation whatever feed_forward_activation says (SiLU, Gemma's GELU). Prompts are token id arrays
 * (BOS first), so no tokenizer is involved.
 *
 *   npx tsc -p . && node scripts/llamacpp-reference.mjs [NAME...]   (default: every model below)
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const { synthesize } = await import(pathToFileURL(join(ROOT, "dist", "src", "offline", "synth.js")).href);

/** BOS, then ids spread over the synthetic vocabulary (its byte tokens and merges alike). */
const PROMPTS_4 = [
  [1, 300, 17, 451, 88],
  [1, 42],
  [1, 500, 499, 3, 260, 261, 262, 129],
  [1, 7, 7, 7, 200],
];
const PROMPTS_6 = [...PROMPTS_4, [1, 64, 128, 256, 384, 448, 480, 496, 504, 508, 510, 33], [1, 77, 78, 79]];

/** Each reference file: the model (what synthesize() gets besides the output path), prompts, tokens. */
const MODELS = {
  "synth-mixtral": {
    synth: { shape: "mixtral-tiny", act: "silu", type: "f32", seed: 7 },
    what: "a synthetic SiLU Mixtral (random weights; 4 experts, top-2, F32)",
    prompts: PROMPTS_4,
    generated: 20,
  },
  "synth-qwen3-f32": {
    synth: { shape: "qwen3-tiny", act: "silu", type: "f32", seed: 7 },
    what: "a synthetic Qwen3 (random weights; QK-norm, head size 64 from key_length over a width of 128, F32)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-qwen3-q4_0": {
    synth: { shape: "qwen3-tiny", act: "silu", type: "q4_0", seed: 7 },
    what: "a synthetic Qwen3 (random weights; QK-norm, head size 64 from key_length over a width of 128, Q4_0)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-llama3-f32": {
    synth: { shape: "llama3-tiny", act: "silu", type: "f32", seed: 7 },
    what: "a synthetic Llama 3.2 (random weights; rope_freqs.weight from Llama 3's RoPE scaling, F32)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-llama3-q4_0": {
    synth: { shape: "llama3-tiny", act: "silu", type: "q4_0", seed: 7 },
    what: "a synthetic Llama 3.2 (random weights; rope_freqs.weight from Llama 3's RoPE scaling, Q4_0)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-phi3-f32": {
    synth: { shape: "phi3-tiny", act: "silu", type: "f32", seed: 7 },
    what: "a synthetic Phi-3 (random weights; fused QKV, gate and up fused, LongRoPE factors and attention factor past an original context of 32, F32)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-phi3-q4_0": {
    synth: { shape: "phi3-tiny", act: "silu", type: "q4_0", seed: 7 },
    what: "a synthetic Phi-3 (random weights; fused QKV, gate and up fused, LongRoPE factors and attention factor past an original context of 32, Q4_0)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-gemma3-f32": {
    synth: { shape: "gemma3-tiny", act: "gelu", type: "f32", seed: 7 },
    what: "a synthetic Gemma 3 (random weights; windowed layers of 8 positions with their own RoPE base, a global layer with linear RoPE scaling, post-norms, QK-norm, GELU, scaled embeddings, a logit soft-cap, F32)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-gemma3-q4_0": {
    synth: { shape: "gemma3-tiny", act: "gelu", type: "q4_0", seed: 7 },
    what: "a synthetic Gemma 3 (random weights; windowed layers of 8 positions with their own RoPE base, a global layer with linear RoPE scaling, post-norms, QK-norm, GELU, scaled embeddings, a logit soft-cap, Q4_0)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-qwen3moe-f32": {
    synth: { shape: "qwen3moe-tiny", act: "silu", type: "f32", seed: 7 },
    what: "a synthetic Qwen3-MoE (random weights; qwen3's attention, 8 experts of 128 neurons from expert_feed_forward_length, top-2, F32)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-qwen3moe-q4_0": {
    synth: { shape: "qwen3moe-tiny", act: "silu", type: "q4_0", seed: 7 },
    what: "a synthetic Qwen3-MoE (random weights; qwen3's attention, 8 experts of 128 neurons from expert_feed_forward_length, top-2, Q4_0)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-smallthinker-f32": {
    synth: { shape: "smallthinker-tiny", act: "relu", type: "f32", seed: 7 },
    what: "a synthetic SmallThinker (random weights; the router on the block's input, sigmoid gating, ReGLU experts of expert_feed_forward_length, layers 0 and 4 without RoPE, F32)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-smallthinker-q4_0": {
    synth: { shape: "smallthinker-tiny", act: "relu", type: "q4_0", seed: 7 },
    what: "a synthetic SmallThinker (random weights; the router on the block's input, sigmoid gating, ReGLU experts of expert_feed_forward_length, layers 0 and 4 without RoPE, Q4_0)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-gpt-oss-f32": {
    synth: { shape: "gpt-oss-tiny", act: "swiglu_oai", type: "f32", seed: 7 },
    what: "a synthetic gpt-oss (random weights; q/k/v/o biases, attention sinks, layers 0 and 2 windowed at 8 positions, YaRN RoPE 32x over 4096, 8 experts with biases, top-2 logits then their softmax, the clamped SwiGLU, F32)",
    prompts: PROMPTS_6,
    generated: 24,
  },
  "synth-gpt-oss-mxfp4": {
    synth: { shape: "gpt-oss-tiny", act: "swiglu_oai", type: "mxfp4", seed: 7 },
    what: "a synthetic gpt-oss (random weights; q/k/v/o biases, attention sinks, layers 0 and 2 windowed at 8 positions, YaRN RoPE 32x over 4096, 8 experts with biases, top-2 logits then their softmax, the clamped SwiGLU; experts MXFP4, the rest F32)",
    prompts: PROMPTS_6,
    generated: 24,
  },
};

const names = process.argv.slice(2);
for (const n of names)
  if (!(n in MODELS)) throw new Error(`unknown model ${n} (known: ${Object.keys(MODELS).join(", ")})`);

const pkg = join(ROOT, "bench", ".peer", "node_modules", "node-llama-cpp");
const version = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
const { getLlama } = await import(pathToFileURL(join(pkg, "dist", "index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });

const dir = mkdtempSync(join(tmpdir(), "llamacpp-ref-"));
try {
  for (const name of names.length ? names : Object.keys(MODELS)) {
    const { synth, what, prompts: promptIds, generated } = MODELS[name];
    const path = join(dir, `${name}.gguf`);
    await synthesize({ ...synth, out: path, fsync: false });
    const sha256 = createHash("sha256").update(readFileSync(path)).digest("hex");
    const model = await llama.loadModel({ modelPath: path });
    const prompts = [];
    for (const prompt of promptIds) {
      // a fresh context per prompt: nothing cached from the previous one
      const context = await model.createContext({ contextSize: 64, threads: 1, batchSize: 64 });
      const greedy = [];
      for await (const id of context.getSequence().evaluate(prompt, { temperature: 0 })) {
        greedy.push(id);
        if (greedy.length >= generated) break;
      }
      await context.dispose();
      prompts.push({ prompt_ids: prompt, greedy_ids: greedy });
    }
    await model.dispose();

    const out = join(ROOT, "test", "reference", `${name}.llamacpp.json`);
    const ref = {
      description: `Greedy token ids from llama.cpp for ${what}. The test re-synthesizes the model and checks its sha256 first.`,
      synth,
      synth_command: `powerinfer synth --shape ${synth.shape} --act ${synth.act} --type ${synth.type} --seed ${synth.seed} -o ${name}.gguf`,
      gguf_sha256: sha256,
      generated_tokens: generated,
      prompts,
      peer: `llama.cpp via node-llama-cpp ${version} (prebuilt CPU build, 1 thread, temperature 0)`,
      node_llama_cpp_version: version,
      made_by: `npx tsc -p . && node scripts/llamacpp-reference.mjs ${name}`,
    };
    writeFileSync(out, JSON.stringify(ref, null, 1) + "\n");
    process.stderr.write(`wrote ${out}\n`);
  }
} finally {
  await llama.dispose();
  rmSync(dir, { recursive: true, force: true });
}
