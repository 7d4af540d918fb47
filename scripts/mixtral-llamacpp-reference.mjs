#!/usr/bin/env node
/**
 * Makes test/reference/synth-mixtral.llamacpp.json: greedy token ids that llama.cpp computes for a
 * synthetic SiLU Mixtral (`synth --shape mixtral-tiny --act silu --type f32`), so that
 * test/synth-mixtral.test.ts can check the engine's mixture of experts (router, top-k, the 3-D
 * expert tensors' layout) against an independent implementation on a model nobody trained.
 *
 * llama.cpp comes from node-llama-cpp 3.21.1 in bench/.peer (installed by bench/run; never a
 * dependency of the package, and tests never load it). Stock llama.cpp runs SiLU experts whatever
 * feed_forward_activation says, which is why the model is SiLU. Prompts are token id arrays (BOS
 * first), so no tokenizer is involved.
 *
 *   npx tsc -p . && node scripts/mixtral-llamacpp-reference.mjs
 */
import { createHash } from "node:crypto";
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const OUT = join(ROOT, "test", "reference", "synth-mixtral.llamacpp.json");
const { synthesize } = await import(pathToFileURL(join(ROOT, "dist", "src", "offline", "synth.js")).href);

/** The model: what synthesize() gets (besides the output path). */
const SYNTH = { shape: "mixtral-tiny", act: "silu", type: "f32", seed: 7 };
const GENERATED = 20;
/** BOS, then ids spread over the synthetic vocabulary (its byte tokens and merges alike). */
const PROMPTS = [
  [1, 300, 17, 451, 88],
  [1, 42],
  [1, 500, 499, 3, 260, 261, 262, 129],
  [1, 7, 7, 7, 200],
];

const dir = mkdtempSync(join(tmpdir(), "mixtral-ref-"));
try {
  const path = join(dir, "synth-mixtral.gguf");
  await synthesize({ ...SYNTH, out: path, fsync: false });
  const sha256 = createHash("sha256").update(readFileSync(path)).digest("hex");

  const pkg = join(ROOT, "bench", ".peer", "node_modules", "node-llama-cpp");
  const version = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
  const { getLlama } = await import(pathToFileURL(join(pkg, "dist", "index.js")).href);
  const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
  const model = await llama.loadModel({ modelPath: path });
  const prompts = [];
  for (const prompt of PROMPTS) {
    // a fresh context per prompt: nothing cached from the previous one
    const context = await model.createContext({ contextSize: 64, threads: 1, batchSize: 64 });
    const greedy = [];
    for await (const id of context.getSequence().evaluate(prompt, { temperature: 0 })) {
      greedy.push(id);
      if (greedy.length >= GENERATED) break;
    }
    await context.dispose();
    prompts.push({ prompt_ids: prompt, greedy_ids: greedy });
  }
  await model.dispose();
  await llama.dispose();

  const ref = {
    description:
      "Greedy token ids from llama.cpp for a synthetic SiLU Mixtral (random weights; 4 experts, top-2, F32). The test re-synthesizes the model and checks its sha256 first.",
    synth: SYNTH,
    synth_command: `powerinfer synth --shape ${SYNTH.shape} --act ${SYNTH.act} --type ${SYNTH.type} --seed ${SYNTH.seed} -o synth-mixtral.gguf`,
    gguf_sha256: sha256,
    generated_tokens: GENERATED,
    prompts,
    peer: `llama.cpp via node-llama-cpp ${version} (prebuilt CPU build, 1 thread, temperature 0)`,
    node_llama_cpp_version: version,
    made_by: "npx tsc -p . && node scripts/mixtral-llamacpp-reference.mjs",
  };
  writeFileSync(OUT, JSON.stringify(ref, null, 1) + "\n");
  process.stderr.write(`wrote ${OUT}\n`);
} finally {
  rmSync(dir, { recursive: true, force: true });
}
