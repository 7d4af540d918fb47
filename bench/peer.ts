/**
 * The peer for benchmarks: llama.cpp through node-llama-cpp 3.21.1 (installed by bench/run into
 * bench/.peer, never a dependency of the package). Same job and same stats line as
 * `powerinfer run`: prefill the prompt (BOS + tokens), then decode N tokens greedily; then a line
 * `tokens: ID ID ...` with the generated ids, which bench/run.ts compares with ours.
 *
 *   node dist/bench/peer.js MODEL THREADS N PROMPT [CONTEXT [BATCH]]
 *
 * bench/offload.ts calls peerRun directly, with the short context both engines get under a limit.
 */
import { fileURLToPath, pathToFileURL } from "node:url";
import { join, resolve } from "node:path";
import { ROOT_DIR } from "./paths.js";

/** Where `npm run bench` installs the peer. */
export const PEER_DIR = join(ROOT_DIR, "bench", ".peer");

export async function peerRun(
  modelPath: string,
  threads: number,
  n: number,
  prompt: string,
  contextSize = 384,
  batchSize = 512,
  /** the peer's install (a copy without the AMX variant for runs under a memory limit: bench/offload/peer-install.ts) */
  peerDir = PEER_DIR,
  /** 0: greedy; above 0, sampled with seed 1 */
  temperature = 0,
): Promise<void> {
  const entry = join(peerDir, "node_modules", "node-llama-cpp", "dist", "index.js");
  // eslint-disable-next-line @typescript-eslint/no-explicit-any
  const { getLlama } = (await import(pathToFileURL(entry).href)) as any;
  const llama = await getLlama({ gpu: false, build: "never", logLevel: "error" });
  const model = await llama.loadModel({ modelPath });
  const context = await model.createContext({ contextSize, threads, batchSize });
  const sequence = context.getSequence();
  const input = [model.tokens.bos, ...model.tokenize(prompt, false)];
  const t0 = performance.now();
  let t1 = 0;
  let count = 0;
  const ids: number[] = [];
  for await (const token of sequence.evaluate(input, temperature > 0 ? { temperature, seed: 1 } : { temperature: 0 })) {
    if (count === 0) t1 = performance.now();
    ids.push(Number(token));
    if (++count >= n) break;
  }
  const t2 = performance.now();
  // three significant digits: under a memory limit the peer runs well below 1 tok/s
  const rate = (v: number) => (v >= 10 ? v.toFixed(1) : v.toPrecision(3));
  process.stderr.write(
    `prefill: ${input.length} tokens, ${rate((input.length / (t1 - t0)) * 1000)} tok/s; ` +
      `decode: ${count} tokens, ${rate(((count - 1) / (t2 - t1)) * 1000)} tok/s\n` +
      `tokens: ${ids.join(" ")}\n`,
  );
  await context.dispose();
  await model.dispose();
  await llama.dispose();
}

if (process.argv[1] && resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const [modelPath, threads, n, prompt, context, batch] = process.argv.slice(2);
  await peerRun(
    modelPath,
    Number(threads),
    Number(n),
    prompt,
    context ? Number(context) : undefined,
    batch ? Number(batch) : undefined,
  );
}
