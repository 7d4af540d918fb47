#!/usr/bin/env node
/**
 * For a checkpoint with no transformers reference (smallthinker): the engine's greedy ids and
 * top-8 logits on the F32 GGUF that llama.cpp's own converter made, from the prompt ids of
 * test/reference/hf/NAME.prompts.json, added there as `engineOnLlamaCppGGUF`. The test then runs
 * the engine on our conversion and must get the same: our GGUF runs as llama.cpp's does. F32 KV
 * cache, one thread. Run by scripts/hf-fixtures-llamacpp-convert.py after `npm run build:ts`:
 *
 *   node scripts/hf-fixtures-engine-ids.mjs NAME /tmp/hffix-gguf/NAME-f32.gguf
 */
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const [name, ggufPath] = process.argv.slice(2);
if (!name || !ggufPath) throw new Error("usage: node scripts/hf-fixtures-engine-ids.mjs NAME F32.gguf");
const { LlamaModel } = await import(pathToFileURL(join(ROOT, "dist", "src", "model", "model.js")).href);

const path = join(ROOT, "test", "reference", "hf", `${name}.prompts.json`);
const ref = JSON.parse(readFileSync(path, "utf8"));
const TOP = 8;
const model = await LlamaModel.load(ggufPath, { threads: 1, contextSize: 64, kvCache: { k: "f32", v: "f32" } });
const greedy = [];
const steps = [];
try {
  for (const prompt of ref.promptIds) {
    await model.forwardAsync(prompt, prompt.length, 0);
    let pos = prompt.length;
    const ids = [];
    const rows = [];
    for (let s = 0; s < ref.generatedTokens; s++) {
      const logits = model.logits;
      const top = [...logits.keys()].sort((a, b) => logits[b] - logits[a] || a - b).slice(0, TOP);
      rows.push({ top: top.map((id) => [id, logits[id]]), max: logits[top[0]] });
      ids.push(top[0]);
      await model.forwardAsync([top[0]], 1, pos++);
    }
    greedy.push(ids);
    steps.push(rows);
  }
} finally {
  await model.dispose();
}
ref.engineOnLlamaCppGGUF = {
  gguf: "llama.cpp's converter's f32 output (NAME.llamacpp-convert.json)",
  run: "the engine (dist/), 1 thread, F32 KV cache, greedy over promptIds",
  greedy,
  stepsNote: "steps[p][s]: the top 8 [id, logit] pairs that chose greedy[p][s], best first, and the max logit",
  steps,
};
writeFileSync(path, JSON.stringify(ref, null, 1) + "\n");
process.stderr.write(`${name}: the engine's ids on llama.cpp's GGUF recorded in ${path}\n`);
