/**
 * `powerinfer synth`: write a synthetic llama model of random weights (see src/offline/synth.ts).
 */
import { existsSync, statSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { interruptible } from "./interrupt.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { ProgressBar } from "./progress.js";
import {
  ALPHA_MAX,
  ALPHA_MIN,
  GATE_RANK_MAX,
  SPARSITY_ALPHA_DEFAULT,
  SPARSITY_MAX,
  SPARSITY_MIN,
  synthesize,
  synthFileSize,
  SHAPE_SPECS,
  SYNTH_ACTIVATIONS,
  SYNTH_SHAPES,
  SYNTH_TYPES,
  type SynthActivation,
  type SynthProgress,
  type SynthShape,
  type SynthShapeSpec,
  type SynthType,
} from "../offline/synth.js";
import { RESERVED } from "../offline/synth/planted-sparsity.js";
import { RANGE } from "./flag-ranges.js";

export const FLAGS: FlagSpec[] = [
  {
    names: ["--shape"],
    key: "shape",
    type: "string",
    help: `model shape: ${SYNTH_SHAPES.map((s) => `${s} (${SHAPE_SPECS[s].like})`).join(", ")}`,
    default: "tiny",
  },
  {
    names: ["--act"],
    key: "act",
    type: "string",
    help: `FFN activation: ${SYNTH_ACTIVATIONS.join(", ")}`,
    default: "silu",
  },
  {
    names: ["--layers"],
    key: "layers",
    type: "int",
    help: "keep the shape's widths with this many layers (default: the shape's own)",
    range: [1, 1024],
  },
  {
    names: ["--experts-used"],
    key: "expertsUsed",
    type: "int",
    help: "mixture shapes only: experts each token is routed to (default: the shape's, 2)",
    range: [1, 1024],
  },
  { names: ["--type"], key: "type", type: "string", help: `weight type: ${SYNTH_TYPES.join(", ")}`, default: "q4_0" },
  {
    names: ["--sparsity"],
    key: "sparsity",
    type: "float",
    help: `plant activation sparsity (relu/drelu): share of FFN outputs that are exactly zero, ${SPARSITY_MIN}..${SPARSITY_MAX} (default: none, plain random weights)`,
    range: [SPARSITY_MIN, SPARSITY_MAX],
  },
  {
    names: ["--alpha"],
    key: "alpha",
    type: "float",
    help: `power-law exponent of the per-neuron firing frequencies, ${ALPHA_MIN}..${ALPHA_MAX} (default ${SPARSITY_ALPHA_DEFAULT}; 0 = all neurons alike)`,
    range: [ALPHA_MIN, ALPHA_MAX],
  },
  {
    names: ["--gate-rank"],
    key: "gateRank",
    type: "int",
    help: `with --act relu --sparsity: draw each layer's gate rows from a subspace of this many dimensions, so that small predictors can tell which neurons fire (as on trained ReLU models), and write the predictor that implies (1..${GATE_RANK_MAX})`,
    range: [1, GATE_RANK_MAX],
  },
  {
    names: ["--predictors"],
    key: "predictors",
    type: "string",
    help: "with --gate-rank: where the planted predictors go (default: OUTPUT with .predictors.gguf for .gguf); powerinfer convert --predictors takes them into a store",
  },
  {
    names: ["--seed", "-s"],
    key: "seed",
    type: "int",
    help: "random seed (same seed, same bytes)",
    default: 0,
    range: RANGE.seed,
  },
  { names: ["-o", "--output"], key: "out", type: "string", help: "output file (required)" },
  { names: ["-q", "--quiet"], key: "quiet", type: "bool", help: "no progress bar" },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const SUMMARY =
  "Write a llama-architecture GGUF of random weights, deterministic per seed (for benchmarks and tests; it generates noise, not text). " +
  "The mixtral shapes are mixtures of experts in llama.cpp's Mixtral layout (a router and 3-D expert tensors per layer); " +
  "planted sparsity and predictors are then per expert.";

function oneOf<T extends string>(flag: string, value: unknown, allowed: readonly T[]): T {
  const v = String(value).toLowerCase();
  if (!allowed.includes(v as T)) throw new UsageError(`${flag} must be one of ${allowed.join(", ")}, got "${value}"`);
  return v as T;
}

const MB = 1e6;

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        `synth --shape ${SYNTH_SHAPES.join("|")} [--layers N] --act silu|relu|drelu [--sparsity S [--alpha A] [--gate-rank R]] --type ${SYNTH_TYPES.join("|")} --seed N -o FILE`,
        SUMMARY,
        FLAGS,
      ),
    );
    return 0;
  }
  if (args._.length > 0)
    throw new UsageError(`synth: unexpected argument "${args._[0]}" (the output file goes after -o)`);
  const shape = oneOf<SynthShape>("--shape", args.shape, SYNTH_SHAPES);
  const act = oneOf<SynthActivation>("--act", args.act, SYNTH_ACTIVATIONS);
  const type = oneOf<SynthType>("--type", args.type, SYNTH_TYPES);
  const seed = args.seed as number;
  if (!Number.isSafeInteger(seed) || seed < 0)
    throw new UsageError(`--seed must be a non-negative integer, got ${seed}`);
  if (typeof args.out !== "string" || args.out === "")
    throw new UsageError("synth: the output file is required (-o FILE)");
  const sparsity = args.sparsity as number | undefined;
  const alpha = args.alpha as number | undefined;
  if (sparsity !== undefined) {
    if (act === "silu") throw new UsageError("--sparsity needs --act relu or drelu (silu never outputs exact zeros)");
  }
  if (alpha !== undefined) {
    if (sparsity === undefined) throw new UsageError("--alpha shapes planted sparsity: give --sparsity too");
  }
  const gateRank = args.gateRank as number | undefined;
  if (gateRank !== undefined) {
    if (act !== "relu" || sparsity === undefined)
      throw new UsageError("--gate-rank makes planted ReLU sparsity predictable: give --act relu and --sparsity too");
  }
  if (args.predictors !== undefined && gateRank === undefined)
    throw new UsageError("--predictors names where --gate-rank's planted predictors go: give --gate-rank too");
  const out = resolve(args.out);
  const predictorsOut =
    gateRank === undefined
      ? undefined
      : resolve(
          typeof args.predictors === "string" && args.predictors !== ""
            ? args.predictors
            : out.replace(/(\.gguf)?$/i, ".predictors.gguf"),
        );
  if (predictorsOut === out) throw new UsageError(`--predictors ${predictorsOut} would overwrite the model`);
  const spec = SHAPE_SPECS[shape];
  const overrides: { -readonly [K in keyof SynthShapeSpec]?: SynthShapeSpec[K] } = {};
  if (args.layers !== undefined) overrides.layers = args.layers as number;
  if (args.expertsUsed !== undefined) {
    if (spec.experts === 0)
      throw new UsageError(
        `--experts-used routes tokens among a mixture's experts, and --shape ${shape} is dense (mixtures: ${SYNTH_SHAPES.filter((s) => SHAPE_SPECS[s].experts > 0).join(", ")})`,
      );
    const k = args.expertsUsed as number;
    if (k > spec.experts)
      throw new UsageError(`--experts-used ${k}: --shape ${shape} has ${spec.experts} experts per layer`);
    overrides.expertsUsed = k;
  }
  if (gateRank !== undefined && gateRank >= spec.dim - RESERVED)
    throw new UsageError(
      `--gate-rank ${gateRank} must be below the residual width of --shape ${shape} (${spec.dim - RESERVED})`,
    );
  const dir = dirname(out);
  if (!existsSync(dir) || !statSync(dir).isDirectory())
    throw new UsageError(`synth: output directory ${dir} does not exist`);
  if (existsSync(out) && statSync(out).isDirectory()) throw new UsageError(`synth: ${out} is a directory`);

  const total = synthFileSize({ shape, act, type, seed, sparsity, alpha, overrides });
  const quiet = args.quiet === true;
  const planted = sparsity === undefined ? "" : `, sparsity ${sparsity} (alpha ${alpha ?? SPARSITY_ALPHA_DEFAULT})`;
  if (!quiet)
    process.stderr.write(
      `synth: ${shape} (${spec.like}${args.layers !== undefined ? `, ${args.layers} layers` : ""}${spec.experts > 0 ? `, ${spec.experts} experts, ${overrides.expertsUsed ?? spec.expertsUsed} used` : ""}), ${act}${planted}, ${type}, seed ${seed} -> ${out} (${(total / MB).toFixed(0)} MB)\n`,
    );

  // Ctrl-C deletes the partial file instead of leaving it behind.
  const bar = quiet ? undefined : new ProgressBar({ label: "synth", total, unit: "bytes" });
  return interruptible(
    "synth: interrupted, partial file removed",
    () => bar?.abandon(),
    async (signal) => {
      const r = await synthesize({
        shape,
        act,
        type,
        seed,
        out,
        sparsity,
        alpha,
        gateRank,
        predictorsOut,
        overrides,
        signal: signal,
        onProgress: bar
          ? (p: SynthProgress) => {
              bar.setTotal(p.totalBytes);
              bar.update(p.bytesWritten);
            }
          : undefined,
      });
      // The bar's last line becomes the summary.
      bar?.finish(`synth: wrote ${r.tensors} tensors, ${(r.bytes / MB).toFixed(1)} MB in ${r.seconds.toFixed(1)} s`);
      if (!quiet && r.predictedSparsity) {
        const p = r.predictedSparsity;
        process.stderr.write(
          `synth: planted sparsity ${Math.min(...p).toFixed(3)}..${Math.max(...p).toFixed(3)} per layer (by the generator's model; measure it by running the model)\n`,
        );
      }
      if (!quiet && r.predictors) {
        const share = r.predictors.reduce((a, p) => a + p.noiseShare, 0) / r.predictors.length;
        process.stderr.write(
          `synth: gate rank ${gateRank}: planted predictors (hidden ${r.predictors[0].hidden}, quantization noise ${(100 * share).toFixed(1)}% of a gate's deviation) -> ${predictorsOut}\n`,
        );
      }
      return 0;
    },
  );
}
