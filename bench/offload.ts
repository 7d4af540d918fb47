/**
 * `npm run bench:offload`: a model larger than memory, ours against llama.cpp under the same hard
 * memory limit (a cgroup that counts the page cache), plus the paper's ablation and the flash
 * bandwidth the runtime achieves against what the device gives at the same read size.
 *
 *   npm run bench:offload
 *   npm run bench:offload -- --limits 2.25,3.75 --threads 1 --reps 2 -n 16
 *   npm run bench:offload -- --skip compare,io            # only the ablation
 *   npm run bench:offload -- --shape mistral-7b --gate-rank 64 --limits 1.5,3 # predictor mode
 *   ... --order hot      # the comparison on the hot-first store (default: the store in index order)
 *   npm run bench:offload -- --shape mixtral --gate-rank 64   # Mixtral-8x7B shape, 16 layers, 4 GiB
 *   ... --prewarm        # each run's file read whole first (a virtual disk's host cache then serves both engines alike)
 *   ... --peer no-repack # llama.cpp without node-llama-cpp's AMX variant (the default where the CPU has AMX; --peer as-is: never)
 *
 * Model (--shape 7b, the default): a Llama-2-7B-shape ReLU synthetic with planted activation sparsity 0.9, Q4_1
 * (llama.cpp copies Q4_0 weights into anonymous memory at load, so under a limit it is killed,
 * not slowed; Q8_0's resident part is too large for wasm32 here). Made once under bench/.models:
 * the GGUF (which llama.cpp reads), its .pi store in index order (the main comparison) and a
 * second store ordered hot-first by the firing rates the generator planted (an ablation row;
 * a stand-in for a measured activation profile). --shape mistral-7b uses the shape of the paper's
 * TurboSparse-Mistral-7B instead (grouped-query attention: the part that stays in memory is small
 * enough for a 1.5 GiB limit), files named m7b-*. --shape mixtral is the Mixtral-8x7B /
 * TurboSparse-Mixtral-47B shape (8 experts of FFN 14336, top-2) with --layers 16 by default (a
 * 14 GB Q4_1 GGUF: the full 32 layers and their stores do not fit this disk twice), at a 4 GiB
 * limit by default (the paper's 47B at 8 GiB is the same 3.5x), files named mx16-*.
 * --shape smallthinker-4b is SmallThinker-4B-A0.6B's widths (32 experts of 768, top-4, the router
 * before attention, ReGLU experts) at 0.75 GiB by default, files named st4b-*; keep --gate-rank
 * small (15): its 1024 experts' predictors stay in memory.
 *   npm run bench:offload -- --shape smallthinker-4b --gate-rank 15 --threads 2 --order hot --skip ablation,plan,io
 * --shape smallthinker-21b is SmallThinker-21B-A3B's widths (64 experts of 768, top-6, 52 layers;
 * a 13.5 GB Q4_1 GGUF) at 8 GiB by default, files named st21b-*. --shape qwen3-30b-a3b is
 * Qwen3-30B-A3B's (128 SiLU experts of 768, top-8, 48 layers; 19.1 GB at Q4_1), run as the dense
 * shapes below are (dense mode, store in index order), at 8 GiB by default.
 *
 * --shape qwen3-0.6b | qwen3-8b | llama3.2-1b | llama3-8b | phi3-mini | gemma3-4b: today's dense
 * models (synth's public widths, random weights, SiLU; gemma3 GELU; no planted sparsity), files
 * named SHAPE[-LN]-silu-TYPE (gemma3: -gelu-). Q4_1 by default as for the others: on AVX2 too
 * llama.cpp repacks Q4_0 into anonymous memory. Ours runs dense mode, as `run` does where every
 * neuron fires: each bundle computed whole, no gate row kept or read (SiLU thresholds only where a
 * calibration asks: docs/sparsity.md). Without --limits
 * the limit is ours' least budget (as `run` reports it) plus an eighth of the FFN weights for the
 * cache, so most of the FFN is read from flash every token (dense.ts; at 1B the embeddings and the
 * runtime make the least budget about two thirds of the GGUF). The comparison then adds each
 * interleaved pair's decode ratio and whether ours' greedy ids equal llama.cpp's (weak evidence
 * here: the store's Down is requantized along its columns, a slightly different model than the
 * GGUF, and random tied-embedding models tend to repeat the last prompt token, which the table
 * then says); the ablation and planner sections, which need planted firing rates, are skipped.
 *   npm run bench:offload -- --shape llama3.2-1b --reps 3 -n 16
 *   npm run bench:offload -- --shape gemma3-4b --layers 12        # fewer layers: disk and time
 *
 * --temp T samples both engines' tokens at temperature T with seed 1 (default 0: greedy). On
 * random weights greedy decoding tends to repeat one token, whose experts then stay cached: a
 * mixture's figure is then far kinder than real text's, where each token routes elsewhere.
 *
 * --gate-rank R makes the model predictable (`synth --gate-rank`: gate rows from a rank-R basis,
 * files named *-rR-*), puts the predictors synth planted into the stores, and runs ours with
 * --sparsity predictor; a last section compares its text with the exact gate mode's. The ablation
 * then adds the predictors as a step of their own (naive, + cache, + pipeline in gate mode; +
 * predictors; + hot-first), and a section runs `powerinfer plan` at the ablation's limit and puts
 * its prediction beside a run with that plan under the same limit.
 *
 * Ours: `powerinfer run -m store.pi --memory-budget LIMIT` (gate sparsity, exact; dense for the dense shapes). llama.cpp:
 * node-llama-cpp 3.21.1 (installed by `npm run bench` into bench/.peer), mmap of the GGUF. Each
 * run gets its own child memory cgroup with the limit (v1: memory.limit_in_bytes; v2:
 * memory.max), the file it reads is dropped from the page cache first (so its pages are charged
 * to the run, not to whoever read them before), and the group is removed afterwards. Without
 * cgroups (not root, no memory controller) the comparison is skipped with a message.
 *
 * The llama.cpp side is run by this file (`--peer-run`) rather than dist/bench/peer.js, because
 * that one fixes a 1024-token context: its f16 KV cache (512 MiB for 7B) would eat a quarter of
 * the limit that ours, at the 256-token context both get here, does not pay.
 */
import { statSync, writeFileSync } from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { SHAPE_SPECS } from "../src/offline/synth.js";
import { PEER_DIR, peerRun } from "./peer.js";
import { runAblation } from "./offload/ablation.js";
import { compareWithLlamaCpp } from "./offload/compare.js";
import type { BenchContext } from "./offload/context.js";
import { defaultDenseLimits, denseModelLine, skipForDense } from "./offload/dense.js";
import { GreedyTexts } from "./offload/greedy-texts.js";
import { cgroupSupport, prewarmEachRun, prewarming, type CgroupSupport } from "./offload/limited-run.js";
import { ensureModels } from "./offload/models.js";
import { isDenseShape, parseOptions, type Options } from "./offload/options.js";
import { ensurePeer, limitPeer } from "./offload/peer-install.js";
import { checkPlanner } from "./offload/planner-check.js";
import { comparePredictorWithGate } from "./offload/predictor-quality.js";
import { reportReadBandwidth } from "./offload/read-bandwidth.js";
import { CONTEXT, MODELS_DIR, PROMPT, SEED, SPARSITY } from "./offload/settings.js";
import { gib } from "./offload/summary.js";

/** Where runs can be limited, or undefined (and a message why not). */
function findCgroup(): CgroupSupport | undefined {
  const support = cgroupSupport();
  const cg = typeof support === "string" ? undefined : support;
  if (!cg)
    process.stderr.write(
      `bench:offload: no memory cgroup (${support}): the comparison under a memory limit is skipped; the ablation runs under ours' own --memory-budget only\n`,
    );
  return cg;
}

/** node-llama-cpp installed (else llama.cpp's columns are skipped), and which install the runs under a limit use. */
function preparePeer(o: Options): { peerOk: boolean; peer: { dir: string; note: string } } {
  const peerOk = ensurePeer();
  if (!peerOk)
    process.stderr.write("bench:offload: node-llama-cpp could not be installed: llama.cpp's columns are skipped\n");
  const peer = peerOk
    ? limitPeer(o.peer === undefined ? undefined : o.peer === "no-repack")
    : { dir: PEER_DIR, note: "" };
  return { peerOk, peer };
}

/** The report's first lines: the model, the prompt and how the runs are made. */
function logHeader(b: BenchContext, started: Date): void {
  const { o, models, sparsity, log } = b;
  log(`# bench:offload, ${started.toISOString()}`);
  const predictable = o.gateRank
    ? `, gate rank ${o.gateRank} (planted predictors, not trained: docs/benchmarks.md)`
    : "";
  const shape = o.shape;
  if (isDenseShape(shape)) log(denseModelLine({ ...o, shape }, models));
  else
    log(
      `model: ${o.shape} shape (${SHAPE_SPECS[o.shape].like}${o.layers !== undefined && o.layers !== SHAPE_SPECS[o.shape].layers ? `, ${o.layers} of its ${SHAPE_SPECS[o.shape].layers} layers` : ""}), ReLU, planted sparsity ${SPARSITY}${predictable}, ${o.type.toUpperCase()}, seed ${SEED}: GGUF ${gib(statSync(models.gguf).size)}, store ${gib(statSync(models.store).size)}`,
    );
  log(
    `prompt ${PROMPT.length} chars, ${o.n} generated tokens, ${o.temp > 0 ? `sampled at temperature ${o.temp} (seed 1) so that the tokens and the experts they route to vary` : "greedy"}, context ${CONTEXT} for both engines${prewarming() ? "; each run's file read whole, then dropped from the page cache, before the run (--prewarm)" : ""}; ours: --sparsity ${sparsity} (reader defaults), store ${o.order === "hot" ? "hot-first (planted rates as the profile)" : "in index order"}; medians of ${o.reps} interleaved runs`,
  );
}

/** The report's last line, the raw results written beside the models, the report to stdout. */
function finish(b: BenchContext, started: Date, out: string[]): void {
  const { log, raw } = b;
  log("");
  log(
    `finished ${new Date().toISOString()}; 1-minute load average now ${loadavg()[0].toFixed(1)} (2 cores; other work on the machine shares them)`,
  );
  const rawPath = join(MODELS_DIR, `offload-${started.toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(rawPath, JSON.stringify(raw, null, 1));
  console.log(out.join("\n"));
  process.stderr.write(`raw results: ${rawPath}\n`);
}

async function main(): Promise<void> {
  let parsed: ReturnType<typeof parseOptions>;
  try {
    parsed = parseOptions(process.argv.slice(2));
  } catch (e) {
    // a mistyped option is the user's, not a crash: its message alone
    process.stderr.write(`bench:offload: ${(e as Error).message}\n`);
    process.exit(2);
  }
  const { options: o, prewarm } = parsed;
  if (prewarm) prewarmEachRun();
  const started = new Date();
  const models = ensureModels(o.shape, o.type, o.gateRank, o.layers);
  // the mode `run` picks: the planted predictors, else the exact gates (ReLU), else dense (SiLU/GELU: every neuron fires)
  const sparsity = o.gateRank ? "predictor" : isDenseShape(o.shape) ? "dense" : "gate";
  const cg = findCgroup();
  const { peerOk, peer } = preparePeer(o);
  const out: string[] = [];
  const log = (s: string) => {
    out.push(s);
    process.stderr.write(`${s}\n`);
  };
  const raw: Record<string, unknown> = { started: started.toISOString(), options: { ...o, skip: [...o.skip] }, models };
  const b: BenchContext = { o, models, sparsity, cg, peerOk, peer, log, texts: new GreedyTexts(), raw };

  logHeader(b, started);
  const shape = o.shape;
  const dense = isDenseShape(shape);
  if (dense && o.limits.length === 0) o.limits = defaultDenseLimits({ ...o, shape }, models, log);
  const skipped = (section: string) => o.skip.has(section) || (dense && skipForDense(section, shape, log));
  if (!o.skip.has("compare") && cg) compareWithLlamaCpp(b, cg);
  if (!skipped("ablation")) runAblation(b);
  if (!skipped("plan")) checkPlanner(b);
  if (!o.skip.has("io")) reportReadBandwidth(b);
  if (o.gateRank && !o.skip.has("quality")) comparePredictorWithGate(b);
  b.texts.report(log);
  finish(b, started, out);
}

if (process.argv[2] === "--peer-run") {
  const [model, threads, n, ctx, prompt, peerDir, temp] = process.argv.slice(3);
  // batch 64: llama.cpp's compute buffers grow with the batch, and the limit pays for them
  await peerRun(model, Number(threads), Number(n), prompt, Number(ctx), 64, peerDir, Number(temp));
} else {
  await main();
}
