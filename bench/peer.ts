/**
 * The peer for benchmarks: llama.cpp through node-llama-cpp 3.21.1 (installed by bench/run into
 * bench/.peer, never a dependency of the package). Same job and same stats line as
 * `powerinfer run`: prefill the prompt (BOS + tokens), then decode N tokens greedily.
 *
 *   node dist/bench/peer.js MODEL THREADS N PROMPT
 */
import { pathToFileURL } from "node:url";
import { join } from "node:path";
import { ROOT_DIR } from "./paths.js";

const [modelPath, threadsArg, nArg, prompt] = process.argv.slice(2);
const threads = Number(threadsArg);
const n = Number(nArg);
const entry = join(ROOT_DIR, "bench", ".peer", "node_modules", "node-llama-cpp", "dist", "index.js");
// eslint-disable-next-line @typescript-eslint/no-explicit-any
const { getLlama } = (await import(pathToFileURL(entry).href)) as any;
const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
const model = await llama.loadModel({ modelPath });
const context = await model.createContext({ contextSize: 384, threads, batchSize: 512 });
const sequence = context.getSequence();
const input = [model.tokens.bos, ...model.tokenize(prompt, false)];
const t0 = performance.now();
let t1 = 0;
let count = 0;
for await (const _token of sequence.evaluate(input, { temperature: 0 })) {
  if (count === 0) t1 = performance.now();
  if (++count >= n) break;
}
const t2 = performance.now();
process.stderr.write(
  `prefill: ${input.length} tokens, ${((input.length / (t1 - t0)) * 1000).toFixed(1)} tok/s; ` +
    `decode: ${count} tokens, ${(((count - 1) / (t2 - t1)) * 1000).toFixed(1)} tok/s\n`,
);
await context.dispose();
await model.dispose();
await llama.dispose();
