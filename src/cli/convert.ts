/**
 * `powerinfer convert MODEL.gguf -o MODEL.pi`: write the `.pi` neuron store a budgeted run reads
 * its FFN from (src/offline/convert.ts; format in docs/store-format.md).
 * `powerinfer convert DIR -o MODEL.gguf|MODEL.pi`: a Hugging Face model directory to a GGUF in
 * llama.cpp's layout (src/format/hf/), or straight to a store with no GGUF written
 * (src/offline/hf-to-store.ts).
 */
import { existsSync, statSync } from "node:fs";
import { availableParallelism } from "node:os";
import { dirname, resolve } from "node:path";
import { interruptible } from "./interrupt.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { ProgressBar } from "./progress.js";
import { typeName } from "../format/ggml-types.js";
import type { StoreConversion } from "../format/store/index.js";
import { CONVERT_TYPES, convertToStore, type ConvertResult, type ConvertType } from "../offline/convert.js";
import { convertHFToGGUF, HF_OUTPUT_TYPES, type HFOutputType } from "../format/hf/hf-to-gguf.js";
import { convertHFToStore } from "../offline/hf-to-store.js";
import { ConvertPool } from "../offline/convert/convert-pool.js";
import { inlineConvertRunner, type ConvertRunner } from "../offline/convert/convert-runner.js";
import { RANGE } from "./flag-ranges.js";

export const FLAGS: FlagSpec[] = [
  {
    names: ["-o", "--output"],
    key: "out",
    type: "string",
    help: "output store (.pi), required; from a Hugging Face directory also a .gguf",
  },
  {
    names: ["--type"],
    key: "type",
    type: "string",
    help:
      `FFN weight type: ${CONVERT_TYPES.join(", ")} (keep: the model's own when a store can hold it, MXFP4 with its down columns in Q8_0; else the nearest: q4_1 for Q4_K, q5_1 for Q5_K, q8_0 for Q6_K). ` +
      `From a Hugging Face directory the GGUF's weight type: ${HF_OUTPUT_TYPES.join(", ")} (keep = auto: bf16 for a bf16 checkpoint, else f16; norms, biases and routers stay f32; MXFP4 experts stay MXFP4 but under f32, f16 and bf16, which write their exact values)`,
    default: "keep",
  },
  {
    names: ["--profile"],
    key: "profile",
    type: "string",
    help: 'activation profile JSON {"layers":[{"frequency":[...]}, ...]}: neurons are stored hot-first',
  },
  {
    names: ["--predictors"],
    key: "predictors",
    type: "string",
    help: "the model's activation predictors: a GGUF (blk.N.fc1/fc2: a predictors-only file from synth --gate-rank, or a PowerInfer GGUF of the same model), or safetensors in PowerInfer's names (a .safetensors file or a directory: model.layers.N.mlp.predictor.fc1/fc2.weight, or fc1/fc2.weight in model_N.safetensors)",
  },
  {
    names: ["-t", "--threads"],
    key: "threads",
    type: "int",
    help: "threads converting the weights (default: all cores; 1: this thread alone); the same bytes whatever the number",
    range: RANGE.threads,
  },
  { names: ["-q", "--quiet"], key: "quiet", type: "bool", help: "no progress bar or summary" },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const SUMMARY =
  "Convert a GGUF (or PowerInfer PWRI GGUF) model into a .pi neuron store: fixed tensors plus, per layer, one " +
  "4 KiB-aligned bundle per FFN neuron (Gate row, Up row, Down column), with a CRC-32 per 4 KiB chunk.";

const MB = 1e6;

function describe(kind: string, c: StoreConversion | null, to: string): string {
  if (!c) return `  ${kind.padEnd(5)} copied bit for bit (${to})`;
  const rel = c.maxAbsValue > 0 ? ` = ${((100 * c.maxAbsError) / c.maxAbsValue).toPrecision(3)}% of max |w|` : "";
  const how = kind === "down" && c.fromName === to ? "requantized per column" : `converted ${c.fromName} -> ${to}`;
  return `  ${kind.padEnd(5)} ${how}: max |error| ${c.maxAbsError.toPrecision(3)}${rel}, rms ${c.rmsError.toPrecision(3)}`;
}

/** What a store conversion did: its size and shape, each FFN part's conversion, the predictors. */
function storeSummary(r: ConvertResult, predictors: string | undefined): string {
  const to = typeName(r.ffnType);
  return (
    [
      `convert: wrote ${(r.bytes / MB).toFixed(1)} MB in ${r.seconds.toFixed(1)} s: ${r.fixedTensors} fixed tensors, ${r.layers} layers${r.experts ? ` x ${r.experts} experts` : ""}, ` +
        `${r.neurons} FFN neurons (${r.ordered ? "hot-first by the profile" : "in index order"}), ${to} bundles of ${r.bundleBytes} bytes ` +
        `(${(100 * r.paddingFraction).toFixed(1)}% padding)`,
      describe("gate", r.conversion.gate, to),
      describe("up", r.conversion.up, to),
      describe("down", r.conversion.down, to),
      ...(r.predictorGroups
        ? [
            `  predictors of ${r.experts ? `${r.predictorGroups} experts (${r.experts} in each of ${r.layers} layers)` : `${r.predictorGroups} layers`} from ${predictors}`,
          ]
        : []),
    ].join("\n") + "\n"
  );
}

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "convert MODEL.gguf -o MODEL.pi [--type q4_0|q4_1|q5_0|q5_1|q8_0|f16|bf16|f32|keep] [--profile FILE] [--predictors FILE]\n" +
          "       powerinfer convert HF_MODEL_DIR -o MODEL.gguf|MODEL.pi [--type auto|f32|f16|bf16|q8_0|q4_0|q4_1|q5_0|q5_1]",
        SUMMARY,
        FLAGS,
      ),
    );
    return 0;
  }
  if (args._.length !== 1)
    throw new UsageError(
      args._.length === 0
        ? "convert: the input model is required (powerinfer convert MODEL.gguf -o MODEL.pi)"
        : `convert: one input model expected, got ${args._.length}`,
    );
  const input = resolve(args._[0]);
  if (!existsSync(input)) throw new UsageError(`convert: ${input} does not exist`);
  if (typeof args.out !== "string" || args.out === "")
    throw new UsageError("convert: the output store is required (-o MODEL.pi)");
  const out = resolve(args.out);
  const dir = dirname(out);
  if (!existsSync(dir) || !statSync(dir).isDirectory())
    throw new UsageError(`convert: output directory ${dir} does not exist`);
  if (existsSync(out) && statSync(out).isDirectory()) throw new UsageError(`convert: ${out} is a directory`);
  if (statSync(input).isDirectory()) return convertHFDirectory(input, out, args);
  const type = String(args.type).toLowerCase() as ConvertType;
  if (!CONVERT_TYPES.includes(type))
    throw new UsageError(`--type must be one of ${CONVERT_TYPES.join(", ")}, got "${args.type}"`);
  const { profile, predictors, quiet } = storeInputs(args);

  const bar = quiet ? undefined : new ProgressBar({ label: "convert", total: 0, unit: "bytes" });
  return interruptible(
    "convert: interrupted, partial file removed",
    () => bar?.abandon(),
    withRunner(args, async (signal, runner) => {
      if (!quiet) process.stderr.write(`convert: ${input} -> ${out}\n`);
      const r = await convertToStore({
        input,
        output: out,
        type,
        profile,
        predictors,
        runner,
        signal: signal,
        onProgress: bar
          ? (p) => {
              bar.setTotal(p.bytesTotal);
              bar.update(p.bytesDone);
            }
          : undefined,
      });
      bar?.abandon(); // the summary below says it all
      if (!quiet) process.stderr.write(storeSummary(r, predictors));
      return 0;
    }),
  );
}

/**
 * `run` with the runner --threads asks for: this thread alone for 1, else that many workers
 * (all cores by default), ended when `run` is done, whatever its end.
 */
function withRunner(
  args: Record<string, unknown>,
  run: (signal: AbortSignal, runner: ConvertRunner) => Promise<number>,
): (signal: AbortSignal) => Promise<number> {
  const threads = typeof args.threads === "number" ? args.threads : availableParallelism();
  return async (signal) => {
    if (threads <= 1) return run(signal, inlineConvertRunner());
    const pool = ConvertPool.start(threads);
    try {
      return await run(signal, pool);
    } finally {
      await pool.close();
    }
  };
}

/** --profile and --predictors (checked to exist) and --quiet. */
function storeInputs(args: Record<string, unknown>): { profile?: string; predictors?: string; quiet: boolean } {
  const profile = typeof args.profile === "string" ? resolve(args.profile) : undefined;
  if (profile && !existsSync(profile)) throw new UsageError(`--profile: ${profile} does not exist`);
  const predictors = typeof args.predictors === "string" ? resolve(args.predictors) : undefined;
  if (predictors && !existsSync(predictors)) throw new UsageError(`--predictors: ${predictors} does not exist`);
  return { profile, predictors, quiet: args.quiet === true };
}

/** `convert DIR`: a Hugging Face model directory to a GGUF, or through one to a store. */
async function convertHFDirectory(input: string, out: string, args: Record<string, unknown>): Promise<number> {
  const asked = String(args.type).toLowerCase();
  const type = (asked === "keep" ? "auto" : asked) as HFOutputType;
  if (!HF_OUTPUT_TYPES.includes(type))
    throw new UsageError(
      `--type must be one of ${HF_OUTPUT_TYPES.join(", ")} for a Hugging Face directory, got "${args.type}"`,
    );
  const toStore = out.endsWith(".pi");
  if (!toStore && !out.endsWith(".gguf"))
    throw new UsageError(`convert: the output of a Hugging Face directory must end in .gguf or .pi, got ${out}`);
  if (!toStore && (args.profile !== undefined || args.predictors !== undefined))
    throw new UsageError("convert: --profile and --predictors apply to a .pi output only");
  const { profile, predictors, quiet } = storeInputs(args);
  const bar = quiet ? undefined : new ProgressBar({ label: "convert", total: 0, unit: "bytes" });
  const progress = (p: { bytesDone: number; bytesTotal: number }) => {
    bar?.setTotal(p.bytesTotal);
    bar?.update(p.bytesDone);
  };
  return interruptible(
    "convert: interrupted, partial file removed",
    () => bar?.abandon(),
    withRunner(args, async (signal, runner) => {
      if (!quiet) process.stderr.write(`convert: ${input} -> ${out}\n`);
      if (toStore) {
        const r = await convertHFToStore({
          input,
          output: out,
          type,
          profile,
          predictors,
          runner,
          signal,
          onProgress: bar ? progress : undefined,
        });
        bar?.abandon(); // the summary below says it all
        if (!quiet)
          process.stderr.write(
            `convert: ${r.arch} ${r.type} read in place, no GGUF written\n` +
              storeSummary(r.store, r.store.predictorGroups ? (predictors ?? input) : undefined),
          );
      } else {
        const r = await convertHFToGGUF({
          input,
          output: out,
          type,
          runner,
          signal,
          onProgress: bar ? progress : undefined,
        });
        bar?.finish(
          `convert: ${r.arch}, ${r.tensors} tensors, ${r.type}${r.mxfp4 ? ` (MXFP4 experts ${r.mxfp4})` : ""}, ${(r.bytes / MB).toFixed(1)} MB in ${r.seconds.toFixed(1)} s`,
        );
        if (r.predictorsLeftOut > 0)
          process.stderr.write(
            `convert: the ${r.predictorsLeftOut} activation predictor tensors of ${input} are not in the GGUF (llama.cpp has no place for them); convert to a .pi store to keep them\n`,
          );
      }
      return 0;
    }),
  );
}
