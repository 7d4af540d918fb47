/** One run of ours (`powerinfer run`) or of llama.cpp (this bench's --peer-run), and what its output says. */
import type { SparsityMode } from "../../src/model/offload/layout.js";
import { loadavg } from "node:os";
import { fileURLToPath } from "node:url";
import { runLimited, unlimited, type CgroupSupport, type CgroupUsage } from "./limited-run.js";
import { BIN, CONTEXT, MiB, PROMPT, SPARSITY } from "./settings.js";

/** The bench's entry, which runs llama.cpp when its first argument is --peer-run. */
const PEER_RUN_ENTRY = fileURLToPath(new URL("../offload.js", import.meta.url));

export interface RunResult {
  ok: boolean;
  /** why not ok: "does not fit (needs X)", "OOM-killed", "timeout" ... */
  failure?: string;
  prefill?: number;
  decode?: number;
  promptTokens?: number;
  decodeTokens?: number;
  /** ours only */
  computedPct?: number;
  hitRatePct?: number;
  hot?: number;
  cold?: number;
  misses?: number;
  readMB?: number;
  ioWaitS?: number;
  /** I/O wait as a share of prefill + decode time, as the engine measured it */
  ioWaitPct?: number;
  peakRssMiB?: number;
  /** the text ours generated (greedy: must be the same in every run) */
  text?: string;
  /** the generated token ids (ours: run --json; llama.cpp: its "tokens:" line) */
  tokens?: number[];
  usage?: CgroupUsage;
  load: number;
}

function parseSpeed(
  stderr: string,
): { prefill: number; decode: number; promptTokens: number; decodeTokens: number } | undefined {
  const m = /prefill: (\d+) tokens, ([\d.]+) tok\/s; decode: (\d+) tokens, ([\d.]+) tok\/s/.exec(stderr);
  return m ? { promptTokens: +m[1], prefill: +m[2], decodeTokens: +m[3], decode: +m[4] } : undefined;
}

function failureOf(r: {
  status: number | null;
  signal: string | null;
  stderr: string;
  usage: CgroupUsage;
  timedOut: boolean;
}): string {
  if (r.timedOut) return "timed out";
  const fit = /at least ([\d.]+ MiB) would run/.exec(r.stderr);
  if (fit) return `does not fit (needs >= ${fit[1]})`;
  if (r.signal === "SIGKILL" || (r.usage.oomKills ?? 0) > 0)
    return `killed${(r.usage.oomKills ?? 0) > 0 ? " (OOM)" : ""}`;
  const last = r.stderr.trim().split("\n").pop() ?? "";
  return `failed (exit ${r.status}): ${last.slice(0, 160)}`;
}

export interface OursConfig {
  store: string;
  limit: number;
  threads: number;
  n: number;
  sparsity: SparsityMode;
  /** sampling temperature (0: greedy); above 0 with seed 1 */
  temp: number;
  /**
   * The share of FFN neurons a correct run computes at least, in percent: below it some FFN steps
   * did not really run (default: most of the planted ~10% firing; a dense model computes all).
   */
  minComputedPct?: number;
  extra?: string[];
}

export function runOurs(cg: CgroupSupport | undefined, c: OursConfig, timeoutS: number): RunResult {
  const cmd = [
    process.execPath,
    BIN,
    "run",
    "-m",
    c.store,
    "--memory-budget",
    `${Math.round(c.limit / MiB)}MiB`,
    "--sparsity",
    c.sparsity,
    "-p",
    PROMPT,
    "-n",
    String(c.n),
    "--temp",
    String(c.temp),
    "--seed",
    "1",
    "--ignore-eos",
    "--json",
    "-t",
    String(c.threads),
    "-c",
    String(CONTEXT),
    ...(c.extra ?? []),
  ];
  const load = loadavg()[0];
  const r = cg ? runLimited(cg, c.limit, c.store, cmd, timeoutS) : unlimited(c.store, cmd, timeoutS);
  const speed = parseSpeed(r.stderr);
  if (r.status !== 0 || !speed) return { ok: false, failure: failureOf(r), usage: r.usage, load };
  const f =
    /ffn: ([\d.]+)% of neurons computed; cache hit rate ([\d.]+)% \(hot (\d+), cold (\d+), misses (\d+)\); read ([\d.]+) MB, I\/O wait ([\d.]+) s(?: \((\d+)% of the run\))?.*?peak RSS ([\d.]+) MiB/.exec(
      r.stderr,
    );
  if (!f) throw new Error(`ours: no "ffn:" statistics line in:\n${r.stderr}`);
  const computedPct = Number(f[1]);
  // Planted sparsity 0.9: 10.1% fire (measured). Fewer means some FFN steps did not really run
  // (seen: pointers past 2 GiB of wasm memory read as negative indices, so decode skipped the FFN).
  const minComputed = c.minComputedPct ?? 80 * (1 - SPARSITY);
  if (computedPct < minComputed)
    return {
      ok: false,
      failure: `WRONG: ${computedPct}% of FFN neurons computed (expected at least ${minComputed}%): an engine bug, not a speed; tokens are wrong`,
      usage: r.usage,
      load,
    };
  const out = JSON.parse(r.stdout) as { text: string; tokens: number[] };
  return {
    ok: true,
    ...speed,
    computedPct,
    hitRatePct: Number(f[2]),
    hot: Number(f[3]),
    cold: Number(f[4]),
    misses: Number(f[5]),
    readMB: Number(f[6]),
    ioWaitS: Number(f[7]),
    ioWaitPct: f[8] !== undefined ? Number(f[8]) : undefined,
    peakRssMiB: Number(f[9]),
    text: out.text,
    tokens: out.tokens,
    usage: r.usage,
    load,
  };
}

export function runPeer(
  cg: CgroupSupport | undefined,
  peerDir: string,
  gguf: string,
  limit: number,
  threads: number,
  n: number,
  temp: number,
  timeoutS: number,
): RunResult {
  const cmd = [
    process.execPath,
    PEER_RUN_ENTRY,
    "--peer-run",
    gguf,
    String(threads),
    String(n),
    String(CONTEXT),
    PROMPT,
    peerDir,
    String(temp),
  ];
  const load = loadavg()[0];
  const r = cg ? runLimited(cg, limit, gguf, cmd, timeoutS) : unlimited(gguf, cmd, timeoutS);
  const speed = parseSpeed(r.stderr);
  if (r.status !== 0 || !speed) return { ok: false, failure: failureOf(r), usage: r.usage, load };
  const ids = /^tokens: ([\d ]*)$/m.exec(r.stderr);
  return { ok: true, ...speed, tokens: ids ? ids[1].split(" ").map(Number) : undefined, usage: r.usage, load };
}
