/**
 * The fuzz loop: makes cases from (seed, index), runs each in the executor worker with a time
 * limit, watches the process's memory, counts outcomes, and writes every failing case out with
 * a one-line command that replays it.
 */
import { Worker } from "node:worker_threads";
import { mkdirSync, readFileSync, writeFileSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";
import { FAILURES, type CaseResult, type Outcome } from "./outcome.js";
import { Rng, caseSeed } from "./rng.js";
import type { AnyCase, ExecutorInit } from "./executor.js";
import { ggufCase, type Pristine } from "./gguf-cases.js";
import { ggufLayout } from "./gguf-layout.js";
import { storeCase, storeParts, type StoreParts } from "./store-cases.js";
import { tokenizerCase } from "./tokenizer-cases.js";
import { hfCase, hfPristine, type HFPristine } from "./hf-cases.js";
import { serverCase, runServerCase, healthy, type ServerCase } from "./server-cases.js";
import { convertToStore } from "../../src/offline/convert.js";

export type Target = "gguf" | "store" | "tokenizer" | "server" | "hf";
export const TARGETS: Target[] = ["gguf", "store", "tokenizer", "server", "hf"];

export type FuzzCase = AnyCase | ServerCase;

/** A case as written to disk: enough to replay it alone. */
export interface CaseFile {
  target: Target;
  seed: number;
  index: number;
  outcome?: Outcome;
  detail?: string;
  step?: string;
  /** why it is in the corpus (for cases kept as regression tests) */
  note?: string;
  case: FuzzCase;
}

export interface Limits {
  /** per case (a server case also gets the server's own timeouts) */
  caseTimeoutMs: number;
  /** resident set size of the whole process past which a case is a blow-up */
  rssLimitBytes: number;
  /** the worker's JavaScript heap */
  heapMb: number;
}

export const DEFAULT_LIMITS: Limits = { caseTimeoutMs: 20_000, rssLimitBytes: 3 * 2 ** 30, heapMb: 1024 };

export interface Inputs {
  shared: string;
  workDir: string;
  gguf: Pristine[];
  store?: { path: string; parts: StoreParts };
  models: { stories: string };
  hf?: HFPristine;
}

/** Pristine inputs for a target (a store is converted once per run, into workDir). */
export async function prepareInputs(target: Target, shared: string): Promise<Inputs> {
  const workDir = mkdtempSync(join(tmpdir(), `powerinfer-fuzz-${target}-`));
  const stories = join(shared, "models", "stories260K.gguf");
  const inputs: Inputs = { shared, workDir, gguf: [], models: { stories } };
  if (target === "gguf") {
    for (const name of ["stories260K.gguf", "relu-stories.Q8_0.gguf", "moe-stories.Q8_0.gguf"]) {
      const bytes = readFileSync(join(shared, "models", name));
      inputs.gguf.push({ name, bytes, layout: ggufLayout(bytes) });
    }
  }
  if (target === "hf") inputs.hf = hfPristine();
  if (target === "store") {
    const path = join(workDir, "pristine.pi");
    await convertToStore({ input: stories, output: path, fsync: false });
    inputs.store = { path, parts: storeParts(readFileSync(path)) };
  }
  return inputs;
}

/** The worker that runs cases, restarted after a hang, a crash of its own or a blow-up. */
export class Executor {
  private worker: Worker | undefined;
  private nextId = 0;
  info: Record<string, unknown> = {};

  constructor(
    private readonly init: ExecutorInit,
    private readonly limits: Limits,
  ) {}

  async start(): Promise<void> {
    const w = new Worker(new URL("./executor.js", import.meta.url), {
      workerData: this.init,
      resourceLimits: { maxOldGenerationSizeMb: this.limits.heapMb },
      stdout: true,
      stderr: true,
    });
    this.worker = w;
    this.info = await new Promise((resolve, reject) => {
      w.once("message", (m: { type: string; info?: Record<string, unknown>; error?: string }) =>
        m.type === "ready" ? resolve(m.info ?? {}) : reject(new Error(`executor failed to start: ${m.error}`)),
      );
      w.once("error", reject);
    });
  }

  async stop(): Promise<void> {
    const w = this.worker;
    this.worker = undefined;
    if (w) await Promise.race([w.terminate(), new Promise((r) => setTimeout(r, 2000))]);
  }

  /** Run one case; a hang or a dead worker restarts it. */
  async run(c: AnyCase): Promise<CaseResult> {
    if (!this.worker) await this.start();
    const w = this.worker!;
    const id = this.nextId++;
    const t0 = performance.now();
    const result = await new Promise<CaseResult>((resolve) => {
      const timer = setTimeout(() => {
        cleanup();
        resolve({ outcome: "hang", detail: `no result within ${this.limits.caseTimeoutMs} ms` });
      }, this.limits.caseTimeoutMs);
      const onMessage = (m: { type: string; id: number; result: CaseResult }) => {
        if (m.type === "result" && m.id === id) {
          cleanup();
          resolve(m.result);
        }
      };
      const onError = (e: Error & { code?: string }) => {
        cleanup();
        const oom = e.code === "ERR_WORKER_OUT_OF_MEMORY";
        resolve({ outcome: oom ? "blowup" : "crash", detail: `the worker died: ${e.message}` });
      };
      const onExit = (code: number) => {
        cleanup();
        resolve({ outcome: "crash", detail: `the worker exited with code ${code}` });
      };
      const cleanup = () => {
        clearTimeout(timer);
        w.off("message", onMessage);
        w.off("error", onError);
        w.off("exit", onExit);
      };
      w.on("message", onMessage);
      w.on("error", onError);
      w.on("exit", onExit);
      w.postMessage({ type: "case", id, case: c });
    });
    result.ms ??= performance.now() - t0;
    const rss = process.memoryUsage.rss();
    if (result.outcome !== "hang" && rss > this.limits.rssLimitBytes)
      return this.restart({
        outcome: "blowup",
        detail: `resident memory ${(rss / 2 ** 20).toFixed(0)} MiB after the case`,
      });
    if (FAILURES.includes(result.outcome) && result.outcome !== "wrong" && result.outcome !== "crash")
      return this.restart(result);
    if (result.detail.startsWith("the worker")) return this.restart(result);
    return result;
  }

  private async restart(r: CaseResult): Promise<CaseResult> {
    await this.stop();
    return r;
  }
}

export interface RunOptions {
  target: Target;
  seed: number;
  seconds: number;
  maxCases: number;
  outDir: string;
  limits: Limits;
  log: (line: string) => void;
}

export interface RunSummary {
  target: Target;
  seed: number;
  cases: number;
  seconds: number;
  counts: Record<Outcome, number>;
  failures: string[];
}

function emptyCounts(): Record<Outcome, number> {
  return { success: 0, clean: 0, crash: 0, wrong: 0, hang: 0, blowup: 0 };
}

/** The command that replays a written case. */
export function replayCommand(file: string): string {
  return `node dist/test/fuzz/main.js --replay ${relative(process.cwd(), file) || file}`;
}

function writeFailure(dir: string, f: CaseFile): string {
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${f.target}-${f.seed}-${f.index}.json`);
  writeFileSync(path, JSON.stringify(f, null, 1) + "\n");
  return path;
}

/** Server cases run from here against the server in the worker; the rest run in the worker. */
async function runOne(ex: Executor, c: FuzzCase, limits: Limits): Promise<CaseResult> {
  if (c.target !== "server") return ex.run(c);
  const port = ex.info.port as number;
  // the server's own limits (1 s headers/idle, 2 s per request) bound every answer but a generation
  const r = await runServerCase(port, c, Math.min(limits.caseTimeoutMs, 15_000));
  const ok = await healthy(port);
  if (!ok) {
    await ex.stop();
    await ex.start();
    return {
      outcome: "hang",
      detail: `after the case the server did not answer GET /health (case: ${r.outcome} ${r.detail})`,
    };
  }
  const rss = process.memoryUsage.rss();
  if (rss > limits.rssLimitBytes)
    return { outcome: "blowup", detail: `resident memory ${(rss / 2 ** 20).toFixed(0)} MiB` };
  return r;
}

export function executorInit(target: Target, inputs: Inputs): ExecutorInit {
  const files =
    target === "gguf"
      ? inputs.gguf.map((p) => join(inputs.shared, "models", p.name))
      : target === "store"
        ? [inputs.store!.path]
        : [inputs.models.stories];
  return { target, workDir: inputs.workDir, files };
}

export function makeCase(target: Target, rng: Rng, inputs: Inputs, info: Record<string, unknown>): FuzzCase {
  switch (target) {
    case "gguf":
      return ggufCase(rng, inputs.gguf);
    case "store":
      return storeCase(rng, inputs.store!.parts);
    case "tokenizer":
      return tokenizerCase(rng, info.vocabSizes as Record<string, number>);
    case "server":
      return serverCase(rng);
    case "hf":
      return hfCase(rng, inputs.hf!);
  }
}

/** Fuzz one target for `seconds` or `maxCases`, whichever comes first. */
export async function fuzz(o: RunOptions): Promise<RunSummary> {
  const inputs = await prepareInputs(o.target, process.env.POWERINFER_SHARED ?? join(process.cwd(), "..", "shared"));
  const ex = new Executor(executorInit(o.target, inputs), o.limits);
  await ex.start();
  const counts = emptyCounts();
  const failures: string[] = [];
  const t0 = performance.now();
  let i = 0;
  let lastReport = t0;
  try {
    for (; i < o.maxCases && performance.now() - t0 < o.seconds * 1000; i++) {
      const c = makeCase(o.target, new Rng(caseSeed(o.seed, i)), inputs, ex.info);
      const r = await runOne(ex, c, o.limits);
      counts[r.outcome]++;
      if (FAILURES.includes(r.outcome)) {
        const file = writeFailure(o.outDir, {
          target: o.target,
          seed: o.seed,
          index: i,
          outcome: r.outcome,
          detail: r.detail,
          step: r.step,
          case: c,
        });
        failures.push(file);
        if (failures.length <= 20)
          o.log(
            `  ${r.outcome} (case ${i}${r.step ? `, ${r.step}` : ""}): ${r.detail.slice(0, 300)}\n    repro: ${replayCommand(file)}`,
          );
      }
      if (performance.now() - lastReport > 30_000) {
        lastReport = performance.now();
        o.log(`  ... ${i + 1} cases, ${JSON.stringify(counts)}`);
      }
    }
  } finally {
    await ex.stop();
    rmSync(inputs.workDir, { recursive: true, force: true });
  }
  return { target: o.target, seed: o.seed, cases: i, seconds: (performance.now() - t0) / 1000, counts, failures };
}

/** Replay written cases (a failure file or corpus entries) of one target; returns their results. */
export async function replay(files: CaseFile[], limits: Limits): Promise<CaseResult[]> {
  const results: CaseResult[] = new Array(files.length);
  for (const target of new Set(files.map((f) => f.target))) {
    const inputs = await prepareInputs(target, process.env.POWERINFER_SHARED ?? join(process.cwd(), "..", "shared"));
    const ex = new Executor(executorInit(target, inputs), limits);
    try {
      await ex.start();
      for (let i = 0; i < files.length; i++)
        if (files[i].target === target) results[i] = await runOne(ex, files[i].case, limits);
    } finally {
      await ex.stop();
      rmSync(inputs.workDir, { recursive: true, force: true });
    }
  }
  return results;
}
