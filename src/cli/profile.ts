/**
 * `powerinfer profile -m MODEL.gguf --corpus FILE -o PROFILE.json`: activation frequencies per
 * layer and neuron over a corpus (src/offline/profile.ts), for `convert --profile` (hot-first
 * order) and the planner; with --target-sparsity, calibrated thresholds for SiLU/GELU models.
 */
import { writeFileSync, existsSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { interruptible } from "./interrupt.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { ProgressBar } from "./progress.js";
import { profileModel, summarizeProfile, type ProfileProgress } from "../offline/profile.js";
import { RANGE } from "./flag-ranges.js";

export const FLAGS: FlagSpec[] = [
  { names: ["-m", "--model"], key: "model", type: "string", help: "model file (GGUF; not a .pi store)" },
  { names: ["--corpus"], key: "corpus", type: "string", help: "UTF-8 text file to run the model over" },
  { names: ["-o", "--output"], key: "out", type: "string", help: "profile to write (JSON), required" },
  {
    names: ["--tokens"],
    key: "tokens",
    type: "int",
    help: "profile at most this many tokens (default: the whole corpus)",
    range: RANGE.positive,
  },
  {
    names: ["-c", "--ctx-size"],
    key: "ctx",
    type: "int",
    help: "context window in tokens (default: the model's, at most 512)",
    range: RANGE.context,
  },
  {
    names: ["-b", "--batch-size"],
    key: "batch",
    type: "int",
    help: "tokens per forward pass",
    default: 256,
    range: RANGE.batch,
  },
  {
    names: ["-t", "--threads"],
    key: "threads",
    type: "int",
    help: "compute threads (default: all cores)",
    range: RANGE.threads,
  },
  {
    names: ["--target-sparsity"],
    key: "target",
    type: "float",
    help: "SiLU/GELU models: calibrate per-layer thresholds on |act(gate)| so that this share of activations is cut (e.g. 0.5)",
    range: RANGE.share,
  },
  { names: ["-q", "--quiet"], key: "quiet", type: "bool", help: "no progress bar or table" },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const SUMMARY =
  "Run a model densely over a text corpus and record, per layer and FFN neuron, how often it fires and how often " +
  "neurons i and i+1 fire together. convert --profile stores neurons hot-first by it. For SiLU/GELU models, " +
  "--target-sparsity S calibrates per-layer thresholds (a neuron fires when |act(gate)| > t) that cut a share S of " +
  "activations; convert writes them into the store, and --thresholds applies them to a GGUF.";

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "profile -m MODEL.gguf --corpus FILE -o PROFILE.json [--tokens N] [-c CTX] [--target-sparsity S]",
        SUMMARY,
        FLAGS,
      ),
    );
    return 0;
  }
  if (args._.length > 0)
    throw new UsageError(
      `profile: unexpected argument "${args._[0]}" (the model goes after -m, the corpus after --corpus)`,
    );
  if (typeof args.model !== "string") throw new UsageError("profile: -m MODEL is required");
  if (typeof args.corpus !== "string") throw new UsageError("profile: --corpus FILE is required");
  if (typeof args.out !== "string" || args.out === "") throw new UsageError("profile: -o PROFILE.json is required");
  const model = resolve(args.model);
  if (!existsSync(model)) throw new UsageError(`profile: model ${model} does not exist`);
  const out = resolve(args.out);
  if (!existsSync(dirname(out)) || !statSync(dirname(out)).isDirectory())
    throw new UsageError(`profile: output directory ${dirname(out)} does not exist`);
  const tokens = args.tokens as number | undefined;
  if (tokens !== undefined && tokens < 2) throw new UsageError(`profile: --tokens must be at least 2, got ${tokens}`);
  const ctx = args.ctx as number | undefined;
  if (ctx !== undefined && ctx < 2) throw new UsageError(`profile: -c must be at least 2, got ${ctx}`);
  if ((args.batch as number) < 1) throw new UsageError("profile: -b must be at least 1");
  if (args.threads !== undefined && (args.threads as number) < 1)
    throw new UsageError("profile: -t must be at least 1");
  const target = args.target as number | undefined;
  if (target !== undefined && !(target > 0 && target < 1))
    throw new UsageError(`profile: --target-sparsity must be between 0 and 1 (exclusive), got ${target}`);
  const quiet = args.quiet === true;

  let bar: ProgressBar | undefined;
  let stage: ProfileProgress["stage"] | undefined;
  const corpus = resolve(args.corpus as string);
  return interruptible(
    "profile: interrupted, nothing written",
    () => bar?.abandon(),
    async (signal) => {
      const r = await profileModel({
        model,
        corpus,
        tokens,
        contextSize: ctx,
        batchSize: args.batch as number,
        threads: args.threads as number | undefined,
        targetSparsity: target,
        signal,
        onProgress: quiet
          ? undefined
          : (p) => {
              if (p.stage !== stage) {
                bar?.finish();
                stage = p.stage;
                bar = new ProgressBar({
                  label: p.stage === "calibrate" ? "calibrate thresholds" : "count activations",
                  total: p.total,
                  unit: "items",
                });
              }
              bar!.update(p.done);
            },
      });
      bar?.finish();
      writeFileSync(out, JSON.stringify(r.profile) + "\n");
      if (!quiet) {
        const p = r.profile;
        const lines = [
          `profile: ${p.tokens} tokens of ${p.corpus.file} in windows of ${p.contextSize}, ${r.seconds.toFixed(1)} s; a neuron fires when ${p.criterion}` +
            (p.targetSparsity !== null ? ` (calibrated to ${(100 * p.targetSparsity).toFixed(1)}% sparsity)` : ""),
          `${p.experts ? "layer.expert  routed" : "layer"}  threshold   sparsity  active/token  hottest 10% share  P(i+1 | i)`,
        ];
        for (const s of summarizeProfile(p)) {
          const L = p.layers[s.layer];
          const name = p.experts
            ? `${`${L.layer}.${L.expert}`.padStart(12)}  ${(100 * (L.routed ?? 0)).toFixed(1).padStart(5)}%`
            : String(s.layer).padStart(5);
          lines.push(
            `${name}  ${(s.threshold === null ? "-" : s.threshold.toPrecision(4)).padStart(9)}  ${(100 * s.sparsity).toFixed(1).padStart(8)}%` +
              `  ${s.activePerToken.toFixed(1).padStart(12)}  ${(100 * s.hot10).toFixed(1).padStart(16)}%  ${(100 * s.adjacent).toFixed(1).padStart(9)}%`,
          );
        }
        const all = summarizeProfile(p);
        const mean = all.reduce((a, s) => a + s.sparsity, 0) / all.length;
        lines.push(`  all             ${(100 * mean).toFixed(1).padStart(8)}%`);
        lines.push(`wrote ${out}`);
        process.stderr.write(lines.join("\n") + "\n");
      }
      for (const n of r.notes) process.stderr.write(`profile: note: ${n}\n`);
      return 0;
    },
  );
}
