/**
 * `npm run bench`: our engine and llama.cpp (node-llama-cpp 3.21.1) on the same synthetic models,
 * runs interleaved in pairs (ours then theirs, theirs then ours, ...), median of each, reported as
 * ratios. On a shared host the speed of both can move by half within minutes; the decode ratio of
 * each pair (two runs next to each other in time) is reported too, as their median and range.
 *
 *   npm run bench                       # the set: 1b q4_0/q8_0/q4_1, 1b-relu-pred and 7b q4_0, 1 and 2 threads
 *   npm run bench -- --models 1b-q8_0 --threads 1 --reps 3
 *
 * Each row also says how many of the generated tokens are llama.cpp's (the leading run of equal
 * greedy ids): the check that both computed the same model. `1b-relu-pred` is the TinyLlama shape
 * with ReLU, planted sparsity 0.9 and planted predictors (gate rank 64), Q4_1: ours runs its neuron
 * store held wholly in memory (no budget) in predictor mode, computing only the predicted neurons,
 * llama.cpp runs the GGUF dense; its token check is against our own dense run of the GGUF (what
 * the predictors miss changes the answer slightly). llama.cpp's llama architecture computes SiLU
 * whatever the file's activation says, so its tokens differ from the first on a ReLU model (the
 * work per token is the same); on the SiLU models they agree until the first near-tie of these
 * random-weight models.
 *
 * The peer is installed on first use into bench/.peer (npm registry), the models are synthesized
 * on first use into bench/.models (a few GB): neither is part of the package.
 */
import { spawnSync } from "node:child_process";
import { existsSync, mkdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { loadavg } from "node:os";
import { ROOT_DIR } from "./paths.js";
import { median } from "../src/planner/median.js";
import { FIXED_ACTIVATION, SHAPE_SPECS, type SynthShape } from "../src/offline/synth.js";

const CLI = join(ROOT_DIR, "dist", "src", "cli", "main.js");
const PEER = join(ROOT_DIR, "dist", "bench", "peer.js");
const PEER_DIR = join(ROOT_DIR, "bench", ".peer");
const MODELS_DIR = join(ROOT_DIR, "bench", ".models");
const PEER_VERSION = "3.21.1";

// A prompt of ~100 tokens for prefill; decode speed is measured over the generated tokens.
const PROMPT =
  "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker " +
  "who repaired every clock in the valley. Each morning he opened his shop, lit the stove, and listened " +
  "to the ticking of a hundred clocks. One winter day a girl came in with a broken watch that had belonged " +
  "to her grandmother, and she asked him whether it could ever run again.";

interface Stats {
  prefillTokens: number;
  prefill: number;
  decodeTokens: number;
  decode: number;
  /** the generated token ids */
  tokens: number[];
}

/** What one row runs: our file and the peer's (the same model, or its GGUF for a store). */
interface BenchModel {
  name: string;
  ours: string;
  peer: string;
  /** the file of the dense run whose tokens ours must equal (default: llama.cpp's tokens) */
  denseReference?: string;
}

// A mistyped flag or --help must not start an hour of benchmarks.
const KNOWN = new Set(["--models", "--threads", "--reps", "-n"]);
for (let i = 2; i < process.argv.length; i += 2) {
  const a = process.argv[i];
  if (a === "--help" || a === "-h") {
    process.stdout.write(
      "npm run bench [-- --models 1b-q4_0,1b-q8_0,1b-q4_1,1b-relu-pred,7b-q4_0 --threads 1,2 --reps 3 -n 64]: ours and llama.cpp, interleaved (docs/benchmarks.md)\n",
    );
    process.exit(0);
  }
  if (!KNOWN.has(a)) {
    process.stderr.write(`bench: unknown option ${a} (known: ${[...KNOWN].join(", ")}; --help)\n`);
    process.exit(2);
  }
}

function arg(name: string, fallback: string): string {
  const i = process.argv.indexOf(name);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : fallback;
}

/** Runs a command that prints the stats line on stderr, its tokens as `run --json` or the peer gives them. */
function run(cmd: string[], label: string): Stats {
  const r = spawnSync(process.execPath, cmd, { encoding: "utf8", maxBuffer: 64 << 20 });
  const m = /prefill: (\d+) tokens, ([\d.]+) tok\/s; decode: (\d+) tokens, ([\d.]+) tok\/s/.exec(r.stderr ?? "");
  if (r.status !== 0 || !m) throw new Error(`${label} failed (exit ${r.status}):\n${r.stderr}`);
  const peerTokens = /^tokens: ([\d ]*)$/m.exec(r.stderr);
  const tokens = peerTokens
    ? peerTokens[1].split(" ").filter(Boolean).map(Number)
    : (JSON.parse(r.stdout) as { tokens: number[] }).tokens;
  return { prefillTokens: +m[1], prefill: +m[2], decodeTokens: +m[3], decode: +m[4], tokens };
}

/** `k/n`: how many leading tokens of `a` equal `b`'s. */
function sameTokens(a: number[], b: number[]): string {
  let k = 0;
  while (k < a.length && k < b.length && a[k] === b[k]) k++;
  return `${k}/${Math.max(a.length, b.length)}`;
}

function ours(path: string, threads: number, n: number): string[] {
  return [
    CLI,
    "run",
    "-m",
    path,
    "-p",
    PROMPT,
    "-n",
    String(n),
    "-t",
    String(threads),
    "--temp",
    "0",
    "--ignore-eos",
    "-c",
    "384",
    "--json",
  ];
}

function ensurePeer(): void {
  if (existsSync(join(PEER_DIR, "node_modules", "node-llama-cpp", "package.json"))) return;
  mkdirSync(PEER_DIR, { recursive: true });
  writeFileSync(join(PEER_DIR, "package.json"), JSON.stringify({ name: "powerinfer-bench-peer", private: true }));
  console.error(`installing node-llama-cpp@${PEER_VERSION} into bench/.peer ...`);
  const r = spawnSync("npm", ["install", `node-llama-cpp@${PEER_VERSION}`, "--no-audit", "--no-fund"], {
    cwd: PEER_DIR,
    stdio: "inherit",
  });
  if (r.status !== 0) throw new Error("could not install node-llama-cpp for the benchmark");
}

function cli(args: string[], what: string): void {
  console.error(`${what} ...`);
  const r = spawnSync(process.execPath, [CLI, ...args], { stdio: "inherit" });
  if (r.status !== 0) throw new Error(`${what} failed`);
}

function ensureModel(name: string): BenchModel {
  mkdirSync(MODELS_DIR, { recursive: true });
  if (name === "1b-relu-pred") {
    const base = join(MODELS_DIR, "1b-relu90-r64-q4_1");
    const gguf = `${base}.gguf`;
    if (!existsSync(gguf) || !existsSync(`${base}.predictors.gguf`))
      cli(
        ["synth", "--shape", "1b", "--act", "relu", "--sparsity", "0.9", "--gate-rank", "64"].concat([
          "--type",
          "q4_1",
          "--seed",
          "1",
          "-o",
          gguf,
        ]),
        `synthesizing ${name}`,
      );
    if (!existsSync(`${base}.pi`))
      cli(["convert", gguf, "-o", `${base}.pi`, "--predictors", `${base}.predictors.gguf`], `converting ${name}`);
    return { name, ours: `${base}.pi`, peer: gguf, denseReference: gguf };
  }
  const path = join(MODELS_DIR, `${name}.gguf`);
  // <shape>-<type>, the shape's own dashes kept (qwen3-0.6b-q4_0), in its architecture's activation
  const cut = name.lastIndexOf("-");
  const shape = name.slice(0, cut);
  const type = name.slice(cut + 1);
  const act = FIXED_ACTIVATION[SHAPE_SPECS[shape as SynthShape]?.arch ?? "llama"] ?? "silu";
  if (!existsSync(path))
    cli(["synth", "--shape", shape, "--type", type, "--act", act, "--seed", "1", "-o", path], `synthesizing ${name}`);
  return { name, ours: path, peer: path };
}

function main(): void {
  const models = arg("--models", "1b-q4_0,1b-q8_0,1b-q4_1,1b-relu-pred,7b-q4_0").split(",");
  const threadsList = arg("--threads", "1,2").split(",").map(Number);
  const reps = Number(arg("--reps", "3"));
  const n = Number(arg("-n", "64"));
  ensurePeer();
  const rows: string[] = [];
  const header =
    "| model | threads | ours prefill tok/s | llama.cpp prefill tok/s | prefill ratio | ours decode tok/s | llama.cpp decode tok/s | decode ratio | per pair: median (range) | tokens equal |\n" +
    "|---|---|---|---|---|---|---|---|---|---|";
  for (const name of models) {
    const m = ensureModel(name);
    // the dense run a sparse one is checked against (once: greedy tokens do not depend on threads)
    const dense = m.denseReference ? run(ours(m.denseReference, threadsList[0], n), `ours dense ${name}`) : undefined;
    for (const threads of threadsList) {
      const mine: Stats[] = [];
      const theirs: Stats[] = [];
      for (let i = 0; i < reps; i++) {
        // each engine goes first in every other pair: neither always runs on the other's warm caches
        const runOurs = () => mine.push(run(ours(m.ours, threads, n), `ours ${name}`));
        const runTheirs = () =>
          theirs.push(run([PEER, m.peer, String(threads), String(n), PROMPT], `llama.cpp ${name}`));
        for (const go of i % 2 === 0 ? [runOurs, runTheirs] : [runTheirs, runOurs]) go();
      }
      const pairs = mine.map((s, i) => s.decode / theirs[i].decode);
      const op = median(mine.map((s) => s.prefill));
      const tp = median(theirs.map((s) => s.prefill));
      const od = median(mine.map((s) => s.decode));
      const td = median(theirs.map((s) => s.decode));
      const same = dense
        ? `${sameTokens(mine[0].tokens, dense.tokens)} of our dense run (llama.cpp ${sameTokens(mine[0].tokens, theirs[0].tokens)})`
        : sameTokens(mine[0].tokens, theirs[0].tokens);
      const row = `| ${name} | ${threads} | ${op.toFixed(1)} | ${tp.toFixed(1)} | ${(op / tp).toFixed(2)}x | ${od.toFixed(2)} | ${td.toFixed(2)} | ${(od / td).toFixed(2)}x | ${median(pairs).toFixed(2)}x (${Math.min(...pairs).toFixed(2)}-${Math.max(...pairs).toFixed(2)}) | ${same} |`;
      rows.push(row);
      console.error(row);
    }
  }
  const load = loadavg()
    .map((x) => x.toFixed(2))
    .join(" ");
  console.log(
    `\n${header}\n${rows.join("\n")}\n\n(${reps} interleaved runs each, medians; prompt ${PROMPT.length} chars, ${n} generated tokens, greedy; load average at the end ${load})`,
  );
}

main();
