/**
 * `npm run bench`: our engine and llama.cpp (node-llama-cpp 3.21.1) on the same synthetic models,
 * runs interleaved (ours, theirs, ours, theirs, ...), median of each, reported as ratios.
 *
 *   npm run bench                       # the set: 1b q4_0/q8_0/q4_1 and 7b q4_0, 1 and 2 threads
 *   npm run bench -- --models 1b-q8_0 --threads 1 --reps 3
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
}

// A mistyped flag or --help must not start an hour of benchmarks.
const KNOWN = new Set(["--models", "--threads", "--reps", "-n"]);
for (let i = 2; i < process.argv.length; i += 2) {
  const a = process.argv[i];
  if (a === "--help" || a === "-h") {
    process.stdout.write(
      "npm run bench [-- --models 1b-q4_0,1b-q8_0,1b-q4_1,7b-q4_0 --threads 1,2 --reps 3 -n 64]: ours and llama.cpp, interleaved (docs/benchmarks.md)\n",
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

function run(cmd: string[], label: string): Stats {
  const r = spawnSync(process.execPath, cmd, { encoding: "utf8", maxBuffer: 64 << 20 });
  const m = /prefill: (\d+) tokens, ([\d.]+) tok\/s; decode: (\d+) tokens, ([\d.]+) tok\/s/.exec(r.stderr ?? "");
  if (r.status !== 0 || !m) throw new Error(`${label} failed (exit ${r.status}):\n${r.stderr}`);
  return { prefillTokens: +m[1], prefill: +m[2], decodeTokens: +m[3], decode: +m[4] };
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

function ensureModel(name: string): string {
  const path = join(MODELS_DIR, `${name}.gguf`);
  if (existsSync(path)) return path;
  mkdirSync(MODELS_DIR, { recursive: true });
  const [shape, type] = name.split("-");
  console.error(`synthesizing ${name} ...`);
  const r = spawnSync(
    process.execPath,
    [CLI, "synth", "--shape", shape, "--type", type, "--act", "silu", "--seed", "1", "-o", path],
    { stdio: "inherit" },
  );
  if (r.status !== 0) throw new Error(`synth of ${name} failed`);
  return path;
}

function main(): void {
  const models = arg("--models", "1b-q4_0,1b-q8_0,1b-q4_1,7b-q4_0").split(",");
  const threadsList = arg("--threads", "1,2").split(",").map(Number);
  const reps = Number(arg("--reps", "3"));
  const n = Number(arg("-n", "64"));
  ensurePeer();
  const rows: string[] = [];
  const header =
    "| model | threads | ours prefill tok/s | llama.cpp prefill tok/s | prefill ratio | ours decode tok/s | llama.cpp decode tok/s | decode ratio |\n" +
    "|---|---|---|---|---|---|---|---|";
  for (const name of models) {
    const path = ensureModel(name);
    for (const threads of threadsList) {
      const ours: Stats[] = [];
      const theirs: Stats[] = [];
      for (let i = 0; i < reps; i++) {
        ours.push(
          run(
            [
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
            ],
            `ours ${name}`,
          ),
        );
        theirs.push(run([PEER, path, String(threads), String(n), PROMPT], `llama.cpp ${name}`));
      }
      const op = median(ours.map((s) => s.prefill));
      const tp = median(theirs.map((s) => s.prefill));
      const od = median(ours.map((s) => s.decode));
      const td = median(theirs.map((s) => s.decode));
      const row = `| ${name} | ${threads} | ${op.toFixed(1)} | ${tp.toFixed(1)} | ${(op / tp).toFixed(2)}x | ${od.toFixed(2)} | ${td.toFixed(2)} | ${(od / td).toFixed(2)}x |`;
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
