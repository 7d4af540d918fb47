/**
 * `powerinfer train-predictors -m MODEL.gguf --corpus TRAIN.txt [-o OUT.gguf] [--store MODEL.pi]`:
 * train PowerInfer's activation predictors (src/offline/train-predictors.ts), print the per-layer
 * table (markdown, on stdout), write them into a PWRI GGUF and/or an existing neuron store.
 */
import { existsSync, statSync, writeFileSync } from "node:fs";
import { dirname, resolve } from "node:path";
import { interruptible } from "./interrupt.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { formatDuration, ProgressBar } from "./progress.js";
import { NeuronStore } from "../format/store/index.js";
import { isNeuronStore } from "../model/model.js";
import { thresholdsForModel } from "../offline/profile.js";
import {
  addPredictorsToStore,
  checkStoreModel,
  writePredictorGGUF,
  type PredictorType,
} from "../offline/predictor-files.js";
import {
  trainPredictors,
  type TrainPredictorsProgress,
  type TrainPredictorsResult,
} from "../offline/train-predictors.js";
import { RANGE } from "./flag-ranges.js";

export const FLAGS: FlagSpec[] = [
  { names: ["-m", "--model"], key: "model", type: "string", help: "dense GGUF model, required" },
  { names: ["--corpus"], key: "corpus", type: "string", help: "UTF-8 text to train on, required" },
  {
    names: ["--heldout"],
    key: "heldout",
    type: "string",
    help: "UTF-8 text to measure recall/precision on (default: corpus text after the training tokens)",
  },
  {
    names: ["--tokens"],
    key: "tokens",
    type: "int",
    help: "training tokens (the last 10% calibrate the threshold)",
    default: 60000,
    range: RANGE.positive,
  },
  {
    names: ["--heldout-tokens"],
    key: "heldoutTokens",
    type: "int",
    help: "held-out tokens to measure on",
    default: 30000,
    range: RANGE.positive,
  },
  {
    names: ["--recall"],
    key: "recall",
    type: "float",
    help: "recall every layer should reach on held-out tokens",
    default: 0.95,
    range: RANGE.share,
  },
  {
    names: ["--calibration-recall"],
    key: "calibrationRecall",
    type: "float",
    help: "recall the threshold is set to on the validation tokens, a margin above --recall (default: a fifth of what --recall misses to 1 above it, two fifths for a mixture of experts)",
    range: RANGE.share,
  },
  {
    names: ["--min-precision"],
    key: "minPrecision",
    type: "float",
    help: "grow the hidden width until the precision reaches this",
    default: 0.9,
    range: RANGE.share,
  },
  {
    names: ["--min-hidden"],
    key: "minHidden",
    type: "int",
    help: "first hidden width tried (then doubled)",
    default: 64,
    range: RANGE.positive,
  },
  {
    names: ["--max-hidden"],
    key: "maxHidden",
    type: "int",
    help: "largest hidden width (default: min(1024, FFN width))",
    range: RANGE.positive,
  },
  {
    names: ["--epochs"],
    key: "epochs",
    type: "int",
    help: "passes over the training tokens per width",
    default: 8,
    range: RANGE.positive,
  },
  {
    names: ["--lr"],
    key: "lr",
    type: "float",
    help: "Adam step size (decays linearly to a tenth)",
    default: 5e-3,
    range: RANGE.learningRate,
  },
  {
    names: ["-o", "--output"],
    key: "out",
    type: "string",
    help: "write a PowerInfer GGUF (PWRI): the model plus blk.N.fc1/fc2 and powerinfer.sparse_threshold",
  },
  {
    names: ["--store"],
    key: "store",
    type: "string",
    help: "add the predictors to this neuron store (.pi, from powerinfer convert of the same model); replaced atomically",
  },
  { names: ["--type"], key: "type", type: "string", help: "predictor weight type: f32 or f16", default: "f32" },
  {
    names: ["--thresholds"],
    key: "thresholds",
    type: "string",
    help: "activation thresholds from a profile (powerinfer profile --target-sparsity): needed for SiLU/GELU models",
  },
  { names: ["--report"], key: "report", type: "string", help: "also write the per-layer results as JSON to this file" },
  {
    names: ["-c", "--ctx-size"],
    key: "ctx",
    type: "int",
    help: "context window in tokens (default: the model's, at most 512)",
    range: RANGE.context,
  },
  {
    names: ["-t", "--threads"],
    key: "threads",
    type: "int",
    help: "compute threads (default: all cores)",
    range: RANGE.threads,
  },
  {
    names: ["-s", "--seed"],
    key: "seed",
    type: "int",
    help: "random seed (initialization, shuffling)",
    default: 1,
    range: RANGE.seed,
  },
  { names: ["-q", "--quiet"], key: "quiet", type: "bool", help: "no progress bars (the table is still printed)" },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const SUMMARY =
  "Train PowerInfer's activation predictors (score = fc2 . relu(fc1 . x), x the residual before the FFN norm) on a " +
  "text corpus: per layer the hidden width grows until the calibrated precision is reached, the threshold is set for the " +
  "recall target on validation tokens, and recall/precision are measured on held-out tokens. Exit status 3 when a layer " +
  "misses the recall target on the held-out tokens (the outputs are still written). See docs/predictors.md.";

const pct = (v: number) => `${(100 * v).toFixed(2)}%`;

/** The per-layer results as a markdown table. */
export function resultTable(r: TrainPredictorsResult): string {
  const experts = r.layers.some((L) => L.expert !== undefined);
  const rows = [
    `| ${experts ? "layer.expert | samples" : "layer"} | hidden | widths tried (val. precision) | val. recall | val. precision | held-out recall | held-out precision | predicted active | truly active | train time |`,
    `|---|---|---|---|---|---|---|---|---|---|${experts ? "---|" : ""}`,
  ];
  for (const L of r.layers) {
    const tried = L.tried.map((t) => `${t.hidden} (${t.precision.toFixed(3)})`).join(", ");
    const name = experts ? `${L.layer}.${L.expert} | ${L.samples}` : `${L.layer}`;
    rows.push(
      `| ${name} | ${L.hidden} | ${tried} | ${pct(L.validation.recall)} | ${pct(L.validation.precision)} | ${pct(L.heldout.recall)} | ${pct(L.heldout.precision)} | ` +
        `${pct(L.heldout.predictedShare)} | ${pct(L.heldout.trueShare)} | ${L.seconds.toFixed(1)} s |`,
    );
  }
  return rows.join("\n");
}

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "train-predictors -m MODEL.gguf --corpus TRAIN.txt [--heldout FILE] [-o OUT.gguf] [--store MODEL.pi]",
        SUMMARY,
        FLAGS,
      ),
    );
    return 0;
  }
  if (args._.length > 0)
    throw new UsageError(`train-predictors: unexpected argument "${args._[0]}" (the model goes after -m)`);
  if (typeof args.model !== "string") throw new UsageError("train-predictors: -m MODEL.gguf is required");
  if (typeof args.corpus !== "string") throw new UsageError("train-predictors: --corpus FILE is required");
  const model = resolve(args.model);
  if (!existsSync(model)) throw new UsageError(`train-predictors: model ${model} does not exist`);
  if (isNeuronStore(model))
    throw new UsageError(
      `train-predictors: ${model} is a neuron store; training observes the dense FFN, so give the GGUF model it was converted from (and the store with --store)`,
    );
  for (const [flag, v] of [
    ["--corpus", args.corpus],
    ["--heldout", args.heldout],
  ] as const) {
    if (typeof v === "string" && !existsSync(resolve(v)))
      throw new UsageError(`train-predictors: ${flag} ${resolve(v)} does not exist`);
  }
  const type = String(args.type).toLowerCase();
  if (type !== "f32" && type !== "f16") throw new UsageError(`--type must be f32 or f16, got "${args.type}"`);
  const positive = (flag: string, v: unknown) => {
    if (v !== undefined && !((v as number) >= 1))
      throw new UsageError(`train-predictors: ${flag} must be at least 1, got ${v}`);
  };
  positive("--tokens", args.tokens);
  positive("--heldout-tokens", args.heldoutTokens);
  positive("--min-hidden", args.minHidden);
  positive("--max-hidden", args.maxHidden);
  positive("--epochs", args.epochs);
  positive("-t", args.threads);
  const recall = args.recall as number;
  if (!(recall > 0 && recall < 1)) throw new UsageError(`--recall must be between 0 and 1 (exclusive), got ${recall}`);
  const calibrationRecall = args.calibrationRecall as number | undefined;
  if (calibrationRecall !== undefined && !(calibrationRecall >= recall && calibrationRecall <= 1))
    throw new UsageError(`--calibration-recall must be between --recall (${recall}) and 1, got ${calibrationRecall}`);
  const minPrecision = args.minPrecision as number;
  if (!(minPrecision >= 0 && minPrecision <= 1))
    throw new UsageError(`--min-precision must be between 0 and 1, got ${minPrecision}`);
  if (!((args.lr as number) > 0)) throw new UsageError(`--lr must be positive, got ${args.lr}`);

  // Outputs are checked before the long part.
  const out = typeof args.out === "string" ? resolve(args.out) : undefined;
  if (out !== undefined) {
    if (out === model) throw new UsageError(`train-predictors: -o ${out} would overwrite the model`);
    if (!existsSync(dirname(out)) || !statSync(dirname(out)).isDirectory())
      throw new UsageError(`train-predictors: output directory ${dirname(out)} does not exist`);
    if (existsSync(out) && statSync(out).isDirectory()) throw new UsageError(`train-predictors: ${out} is a directory`);
  }
  const storePath = typeof args.store === "string" ? resolve(args.store) : undefined;
  if (storePath !== undefined) {
    if (!existsSync(storePath))
      throw new UsageError(
        `train-predictors: --store ${storePath} does not exist (make it with powerinfer convert ${args.model} -o ${args.store})`,
      );
    const store = NeuronStore.open(storePath);
    try {
      checkStoreModel(store, model);
    } finally {
      store.close();
    }
  }
  const thresholds =
    typeof args.thresholds === "string" ? thresholdsForModel(resolve(args.thresholds), model) : undefined;
  const quiet = args.quiet === true;

  let bar: ProgressBar | undefined;
  let barKey = "";
  const onProgress = (p: TrainPredictorsProgress) => {
    if (quiet) return;
    const key = `${p.stage}/${p.layer}/${p.expert}/${p.hidden}`;
    if (key !== barKey) {
      bar?.finish();
      barKey = key;
      const label =
        p.stage === "collect"
          ? "collect tokens"
          : p.stage === "heldout"
            ? "held-out tokens"
            : `layer ${p.layer}${p.expert === undefined ? "" : ` expert ${p.expert}`} hidden ${p.hidden} (steps)`;
      bar = new ProgressBar({ label, total: p.total });
    }
    bar!.update(p.done);
  };
  const corpus = resolve(args.corpus as string);
  return interruptible(
    "train-predictors: interrupted, nothing written",
    () => bar?.abandon(),
    async (signal) => {
      if (!quiet) process.stderr.write(`train-predictors: ${model} on ${corpus}\n`);
      const r = await trainPredictors({
        model,
        corpus,
        heldout: typeof args.heldout === "string" ? resolve(args.heldout) : undefined,
        tokens: args.tokens as number,
        heldoutTokens: args.heldoutTokens as number,
        recall,
        calibrationRecall,
        minPrecision,
        minHidden: args.minHidden as number,
        maxHidden: args.maxHidden as number | undefined,
        epochs: args.epochs as number,
        lr: args.lr as number,
        seed: args.seed as number,
        threads: args.threads as number | undefined,
        contextSize: args.ctx as number | undefined,
        activationThresholds: thresholds,
        weightType: type as PredictorType,
        signal,
        onProgress,
      });
      bar?.finish();
      bar = undefined;
      console.log(
        `predictors for ${args.model}: firing = ${r.criterion}; trained on ${r.tokens.train} tokens, threshold calibrated on ${r.tokens.validation} ` +
          `to recall ${pct(r.calibrationRecall)}, measured on ${r.tokens.heldout} held-out tokens (target ${pct(r.recallTarget)})\n`,
      );
      console.log(resultTable(r));
      console.log(
        `\ntime: collect ${formatDuration(r.seconds.collect)}, train ${formatDuration(r.seconds.train)}, held-out ${formatDuration(r.seconds.heldout)}, ` +
          `total ${formatDuration(r.seconds.total)}; ${r.predictors.reduce((a, p) => a + p.fc1.length + p.fc2.length, 0)} predictor weights (${type})`,
      );
      for (const n of r.notes) console.log(`note: ${n}`);
      if (typeof args.report === "string") {
        const { predictors: _, ...rest } = r;
        writeFileSync(resolve(args.report), JSON.stringify(rest, null, 2) + "\n");
      }
      if (out !== undefined) {
        const bytes = await writePredictorGGUF({
          input: model,
          output: out,
          predictors: r.predictors,
          type: type as PredictorType,
        });
        console.log(`wrote ${out} (PWRI, ${(bytes / 1e6).toFixed(1)} MB)`);
      }
      if (storePath !== undefined) {
        const bytes = await addPredictorsToStore({
          store: storePath,
          model,
          predictors: r.predictors,
          type: type as PredictorType,
        });
        console.log(`added the predictors to ${storePath} (${(bytes / 1e6).toFixed(1)} MB)`);
      }
      if (out === undefined && storePath === undefined)
        console.log("nothing written: give -o OUT.gguf and/or --store MODEL.pi to keep the predictors");
      return r.layers.every((L) => L.heldout.recall >= recall) ? 0 : 3;
    },
  );
}
