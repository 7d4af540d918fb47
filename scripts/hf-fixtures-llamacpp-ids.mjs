#!/usr/bin/env node
/**
 * Adds llama.cpp's greedy ids to test/reference/hf/NAME.llamacpp-convert.json: node-llama-cpp
 * (bench/.peer, the llama.cpp the engine is compared with) loads the F32 GGUF that llama.cpp's own
 * converter made of checkpoint NAME, and decodes greedily from the prompt ids that transformers'
 * reference (test/reference/hf/NAME.transformers.json) holds, so no tokenizer is involved. The KV
 * cache is F32 and flash attention off, so the comparison with transformers' float32 run is not
 * blurred by F16 rounding. Called by scripts/hf-fixtures-llamacpp-convert.py; by hand:
 *
 *   node scripts/hf-fixtures-llamacpp-ids.mjs NAME /tmp/hffix-gguf/NAME-f32.gguf [TYPE]
 *
 * TYPE (default f32) names the converter output the GGUF is; ids from another than f32 go under
 * `llamacpp_TYPE` (a checkpoint with MXFP4 experts: bf16, the output `convert`'s auto equals).
 */
import { existsSync, readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const ROOT = join(dirname(fileURLToPath(import.meta.url)), "..");
const [name, ggufPath, type = "f32"] = process.argv.slice(2);
const key = type === "f32" ? "llamacpp" : `llamacpp_${type}`;
if (!name || !ggufPath) throw new Error("usage: node scripts/hf-fixtures-llamacpp-ids.mjs NAME F32.gguf");

const refDir = join(ROOT, "test", "reference", "hf");
// a checkpoint without a transformers reference (smallthinker) has its prompt ids in NAME.prompts.json
const hasTransformers = existsSync(join(refDir, `${name}.transformers.json`));
const transformersRef = JSON.parse(
  readFileSync(join(refDir, `${name}.${hasTransformers ? "transformers" : "prompts"}.json`), "utf8"),
);
const outPath = join(refDir, `${name}.llamacpp-convert.json`);
const out = JSON.parse(readFileSync(outPath, "utf8"));

const pkg = join(ROOT, "bench", ".peer", "node_modules", "node-llama-cpp");
const version = JSON.parse(readFileSync(join(pkg, "package.json"), "utf8")).version;
const { getLlama } = await import(pathToFileURL(join(pkg, "dist", "index.js")).href);
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });

const generated = transformersRef.generatedTokens;
const greedy = [];
const comparison = [];
try {
  const model = await llama.loadModel({ modelPath: ggufPath });
  for (const [p, promptIds] of transformersRef.promptIds.entries()) {
    // a fresh context per prompt: nothing cached from the previous one
    const context = await model.createContext({
      contextSize: 128,
      batchSize: 128,
      threads: 1,
      flashAttention: false,
      experimentalKvCacheKeyType: "F32",
      experimentalKvCacheValueType: "F32",
    });
    const ids = [];
    for await (const id of context.getSequence().evaluate(promptIds, { temperature: 0 })) {
      ids.push(id);
      if (ids.length >= generated) break;
    }
    await context.dispose();
    greedy.push(ids);
    if (!hasTransformers) continue;
    const want = transformersRef.greedy[p];
    const firstDifference = ids.findIndex((id, i) => id !== want[i]);
    comparison.push({
      prompt: p,
      matches: firstDifference < 0 && ids.length === want.length,
      firstDifferentStep: firstDifference < 0 ? null : firstDifference,
      sameIds: ids.filter((id, i) => id === want[i]).length,
    });
  }
  await model.dispose();
} finally {
  await llama.dispose();
}

out[key] = {
  peer: `llama.cpp via node-llama-cpp ${version} (prebuilt CPU build, 1 thread, F32 KV cache, no flash attention, temperature 0)`,
  gguf: `the ${type} output above`,
  promptIds: hasTransformers
    ? "transformers' promptIds (test/reference/hf/NAME.transformers.json)"
    : "the promptIds of test/reference/hf/NAME.prompts.json",
  greedy,
  ...(hasTransformers ? { comparison, allMatchTransformers: comparison.every((c) => c.matches) } : {}),
  made_by: `python scripts/hf-fixtures-llamacpp-convert.py ${name} (which runs node scripts/hf-fixtures-llamacpp-ids.mjs ${name} GGUF${type === "f32" ? "" : ` ${type}`})`,
};
writeFileSync(outPath, JSON.stringify(out, null, 1) + "\n");
process.stderr.write(
  !hasTransformers
    ? `${name} ${type}: llama.cpp's greedy ids recorded\n`
    : `${name} ${type}: llama.cpp's greedy ids ${out[key].allMatchTransformers ? "match" : "DIFFER FROM"} transformers' ` +
        `(${comparison.map((c) => `${c.sameIds}/${generated}`).join(" ")})\n`,
);
