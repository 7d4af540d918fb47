/** bench:offload's command line (the comment at the top of bench/offload.ts says what each flag does). */

/** The ReLU shapes with planted sparsity (the paper's models, and SmallThinker's ReGLU mixture). */
export const SPARSE_SHAPES = ["7b", "mistral-7b", "mixtral", "smallthinker-4b", "smallthinker-21b"] as const;
export type SparseShape = (typeof SPARSE_SHAPES)[number];
/**
 * The dense SiLU/GELU models people run today (synth's shapes of their public widths): no planted
 * sparsity, so ours runs dense mode, which computes every neuron, and streams the FFN that the
 * budget leaves on flash.
 */
export const DENSE_SHAPES = [
  "qwen3-0.6b",
  "qwen3-8b",
  "llama3.2-1b",
  "llama3-8b",
  "phi3-mini",
  "gemma3-4b",
  "qwen3-30b-a3b",
] as const;
export type DenseShape = (typeof DENSE_SHAPES)[number];
export type Shape = SparseShape | DenseShape;

export function isDenseShape(s: Shape): s is DenseShape {
  return (DENSE_SHAPES as readonly string[]).includes(s);
}

export interface Options {
  shape: Shape;
  /** layers kept of the shape (synth --layers; the mixtral shape's default is 16) */
  layers?: number;
  type: "q4_1" | "q8_0";
  /** GiB; empty for a dense shape without --limits: chosen once its store exists (dense.ts) */
  limits: number[];
  threads: number[];
  reps: number;
  n: number;
  ablationLimit: number;
  ablationThreads: number[];
  skip: Set<string>;
  timeoutS: number;
  /** predictable model (synth --gate-rank): ours runs --sparsity predictor with the planted predictors */
  gateRank?: number;
  /** which store the comparison with llama.cpp runs: in index order (default) or hot-first by the planted rates */
  order: "index" | "hot";
  /** the peer under a limit: without its AMX variant ("no-repack"), as shipped ("as-is"); undefined: no-repack where the CPU has AMX */
  peer?: "as-is" | "no-repack";
  /**
   * sampling temperature of both engines (0: greedy); above 0 each samples with seed 1, so that a
   * random-weight model's tokens, and the experts they route to, vary as real text's do
   */
  temp: number;
}

/** The command line; prewarm (--prewarm) is not an option of the raw results' "options". */
export function parseOptions(argv: string[]): { options: Options; prewarm: boolean } {
  let prewarm = false;
  const o: Options = {
    shape: "7b",
    type: "q4_1",
    limits: [1.5, 2.25, 3.75],
    threads: [1, 2],
    reps: 3,
    n: 16,
    ablationLimit: 3.75,
    ablationThreads: [1],
    skip: new Set(),
    timeoutS: 900,
    order: "index",
    temp: 0,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const v = () => {
      if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
      return argv[++i];
    };
    const nums = (s: string) =>
      s.split(",").map((x) => {
        const n = Number(x);
        if (!(n > 0)) throw new Error(`${a}: "${x}" is not a positive number`);
        return n;
      });
    if (a === "--type") {
      const t = v();
      if (t !== "q4_1" && t !== "q8_0")
        throw new Error(
          "--type must be q4_1 or q8_0 (llama.cpp repacks Q4_0 into anonymous memory: killed under a limit)",
        );
      o.type = t;
    } else if (a === "--shape") {
      const t = v();
      if (![...SPARSE_SHAPES, ...DENSE_SHAPES].includes(t as Shape))
        throw new Error(
          `--shape must be one of ${SPARSE_SHAPES.join(", ")} or a dense one: ${DENSE_SHAPES.join(", ")}`,
        );
      o.shape = t as Shape;
      if (isDenseShape(o.shape) && !argv.includes("--limits")) o.limits = [];
      // Qwen3-30B-A3B at the 8 GB cap the issue sets (SiLU experts: dense within an expert)
      if (t === "qwen3-30b-a3b" && !argv.includes("--limits")) o.limits = [8];
      if (t === "mixtral" && !argv.includes("--limits")) o.limits = [4];
      if (t === "mixtral" && !argv.includes("--ablation-limit")) o.ablationLimit = 4;
      if (t === "mixtral" && !argv.includes("--layers")) o.layers = 16;
      // SmallThinker-4B-A0.6B at the 1 GB cap of PowerInfer's own figure, less the 256 MiB the
      // planted predictors and this runtime's Node add over llama.cpp's
      if (t === "smallthinker-4b" && !argv.includes("--limits")) o.limits = [0.75];
      if (t === "smallthinker-4b" && !argv.includes("--ablation-limit")) o.ablationLimit = 0.75;
      // SmallThinker-21B-A3B at the 8 GB cap of PowerInfer's own figure (the budget)
      if (t === "smallthinker-21b" && !argv.includes("--limits")) o.limits = [8];
      if (t === "smallthinker-21b" && !argv.includes("--ablation-limit")) o.ablationLimit = 8;
    } else if (a === "--layers") o.layers = nums(v())[0];
    else if (a === "--limits") o.limits = nums(v());
    else if (a === "--threads") o.threads = nums(v());
    else if (a === "--reps") o.reps = nums(v())[0];
    else if (a === "-n") o.n = nums(v())[0];
    else if (a === "--ablation-limit") o.ablationLimit = nums(v())[0];
    else if (a === "--ablation-threads") o.ablationThreads = nums(v());
    else if (a === "--skip") for (const s of v().split(",")) o.skip.add(s);
    else if (a === "--timeout") o.timeoutS = nums(v())[0];
    else if (a === "--gate-rank") o.gateRank = nums(v())[0];
    else if (a === "--prewarm") prewarm = true;
    else if (a === "--temp") {
      o.temp = Number(v());
      if (!(o.temp >= 0 && o.temp <= 10)) throw new Error(`--temp must be a number from 0 to 10`);
    } else if (a === "--peer") {
      const t = v();
      if (t !== "as-is" && t !== "no-repack") throw new Error("--peer must be as-is or no-repack");
      o.peer = t;
    } else if (a === "--order") {
      const t = v();
      if (t !== "index" && t !== "hot") throw new Error("--order must be index or hot");
      o.order = t;
    } else throw new Error(`unknown option ${a} (see the comment at the top of bench/offload.ts)`);
  }
  for (const s of o.skip)
    if (!["compare", "ablation", "plan", "io", "quality"].includes(s))
      throw new Error(`--skip takes compare, ablation, plan, io, quality; got "${s}"`);
  if (isDenseShape(o.shape) && o.gateRank)
    throw new Error(`--gate-rank plants predictors in a ReLU model: not for the dense shape ${o.shape}`);
  if (isDenseShape(o.shape) && o.order === "hot")
    throw new Error(`--order hot needs a profile: the dense shape ${o.shape} has no planted firing rates`);
  return { options: o, prewarm };
}
