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
 *
 * --gate-rank R makes the model predictable (`synth --gate-rank`: gate rows from a rank-R basis,
 * files named *-rR-*), puts the predictors synth planted into the stores, and runs ours with
 * --sparsity predictor; a last section compares its text with the exact gate mode's. The ablation
 * then adds the predictors as a step of their own (naive, + cache, + pipeline in gate mode; +
 * predictors; + hot-first), and a section runs `powerinfer plan` at the ablation's limit and puts
 * its prediction beside a run with that plan under the same limit.
 *
 * Ours: `powerinfer run -m store.pi --memory-budget LIMIT` (gate sparsity, exact). llama.cpp:
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
import { spawnSync } from "node:child_process";
import {
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmdirSync,
  statSync,
  unlinkSync,
  writeFileSync,
} from "node:fs";
import { loadavg } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { ROOT_DIR } from "./paths.js";
import { PEER_DIR, peerRun } from "./peer.js";
import { plannedFiring } from "../src/model/firing.js";
import { evenRoutingShare } from "../src/io/hit-model.js";
import { SHAPE_SPECS } from "../src/offline/synth.js";
import { median } from "../src/planner/median.js";

const BIN = join(ROOT_DIR, "bin", "powerinfer.cjs");
const SELF = fileURLToPath(import.meta.url);
const MODELS_DIR = join(ROOT_DIR, "bench", ".models");
/** The peer as users get it, and the copy that runs under a limit on a CPU with AMX (noRepackPeer). */
const NO_REPACK_PEER_DIR = join(ROOT_DIR, "bench", ".peer-norepack");
/** node-llama-cpp's CPU variant for AMX: it copies Q4_0, Q4_1 and Q8_0 weights into anonymous memory */
const AMX_VARIANT = "libggml-cpu-sapphirerapids.so";
const PEER_VERSION = "3.21.1";
const GiB = 2 ** 30;
const MiB = 2 ** 20;
/** Both engines get this context (the KV cache is part of the limit). */
const CONTEXT = 256;
/** Reads in flight: bin/powerinfer.cjs starts libuv with 64 threads (the runtime's default depth). */
const QUEUE_DEPTH = 64;
const SPARSITY = 0.9;
const SEED = 1;

// ~40 tokens: long enough for a batched prefill, short enough that a run under a tight limit ends.
const PROMPT =
  "Once upon a time, in a small village at the edge of a great forest, there lived an old clockmaker " +
  "who repaired every clock";

// ---------------------------------------------------------------------------------------------
// Options

type Shape = "7b" | "mistral-7b" | "mixtral";

interface Options {
  shape: Shape;
  /** layers kept of the shape (synth --layers; the mixtral shape's default is 16) */
  layers?: number;
  type: "q4_1" | "q8_0";
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
}

function parseOptions(argv: string[]): Options {
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
      if (t !== "7b" && t !== "mistral-7b" && t !== "mixtral")
        throw new Error("--shape must be 7b, mistral-7b or mixtral");
      o.shape = t;
      if (t === "mixtral" && !argv.includes("--limits")) o.limits = [4];
      if (t === "mixtral" && !argv.includes("--ablation-limit")) o.ablationLimit = 4;
      if (t === "mixtral" && !argv.includes("--layers")) o.layers = 16;
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
    else if (a === "--peer") {
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
  return o;
}

// ---------------------------------------------------------------------------------------------
// Models

function sh(cmd: string[], what: string): void {
  process.stderr.write(`$ ${cmd.join(" ")}\n`);
  const r = spawnSync(cmd[0], cmd.slice(1), { stdio: "inherit" });
  if (r.status !== 0) throw new Error(`${what} failed (exit ${r.status})`);
}

interface Models {
  gguf: string;
  store: string;
  hotStore: string;
}

/** The GGUF, its store in index order and its store ordered hot-first: made once. */
function ensureModels(shape: Shape, type: string, gateRank: number | undefined, layers?: number): Models {
  mkdirSync(MODELS_DIR, { recursive: true });
  const spec = SHAPE_SPECS[shape];
  const nLayer = layers ?? spec.layers;
  const prefix =
    (shape === "7b" ? "7b" : shape === "mistral-7b" ? "m7b" : "mx") +
    (nLayer !== spec.layers || shape === "mixtral" ? String(nLayer) : "");
  const base = join(MODELS_DIR, `${prefix}-relu90-${gateRank ? `r${gateRank}-` : ""}${type}`);
  const m: Models = { gguf: `${base}.gguf`, store: `${base}.pi`, hotStore: `${base}.hot.pi` };
  // a predictable model's planted predictors go into both stores (llama.cpp reads the GGUF, which has none)
  const predictors = gateRank ? ["--predictors", `${base}.predictors.gguf`] : [];
  if (!existsSync(m.gguf) || (gateRank && !existsSync(predictors[1]))) {
    sh(
      [
        process.execPath,
        BIN,
        "synth",
        "--shape",
        shape,
        "--act",
        "relu",
        "--sparsity",
        String(SPARSITY),
        ...(gateRank ? ["--gate-rank", String(gateRank)] : []),
        ...(nLayer !== spec.layers ? ["--layers", String(nLayer)] : []),
        "--type",
        type,
        "--seed",
        String(SEED),
        "-o",
        m.gguf,
      ],
      "synth",
    );
  }
  if (!existsSync(m.store)) sh([process.execPath, BIN, "convert", m.gguf, "-o", m.store, ...predictors], "convert");
  if (!existsSync(m.hotStore)) {
    // The planted per-neuron firing rates as an activation profile: what profiling the model on
    // varied input would find, up to sampling noise. Only the order on flash depends on it.
    const profile = join(MODELS_DIR, `${prefix}-relu90-planted-profile.json`);
    writeFileSync(profile, JSON.stringify({ layers: plantedProfile(shape, nLayer) }));
    sh(
      [process.execPath, BIN, "convert", m.gguf, "-o", m.hotStore, "--profile", profile, ...predictors],
      "convert (hot-first)",
    );
  }
  return m;
}

/**
 * The planted per-neuron firing rates as profile entries, one per layer (a mixture: per layer and
 * expert, each expert's rates when routed, every expert taken as routed alike: the generator plants
 * firing, not routing).
 */
function plantedProfile(shape: Shape, nLayer: number): { frequency: number[]; routed?: number }[] {
  const spec = SHAPE_SPECS[shape];
  const round = (xs: ArrayLike<number>) => Array.from(xs, (x) => Number(x.toPrecision(6)));
  const experts = spec.experts ?? 0;
  if (experts === 0)
    return Array.from({ length: nLayer }, (_, l) => ({ frequency: round(plannedFiring(SEED, l, spec.ffn, SPARSITY)) }));
  const out: { frequency: number[]; routed?: number }[] = [];
  for (let l = 0; l < nLayer; l++)
    for (let e = 0; e < experts; e++)
      out.push({
        frequency: round(plannedFiring(SEED, l, spec.ffn, SPARSITY, undefined, e)),
        routed: evenRoutingShare(experts, spec.expertsUsed!),
      });
  return out;
}

/** Whether this CPU has AMX (node-llama-cpp's prebuilt then loads its AMX variant). */
function cpuHasAmx(): boolean {
  try {
    return /^flags\s*:.*\bamx_tile\b/m.test(readFileSync("/proc/cpuinfo", "utf8"));
  } catch {
    return false;
  }
}

/**
 * The peer for runs under a memory limit. On a CPU with AMX, node-llama-cpp's prebuilt loads its
 * AMX variant, which copies the Q4_0/Q4_1/Q8_0 weights into anonymous memory: under a limit below
 * the model's size llama.cpp is then killed, not slowed. So these runs use a copy of the peer
 * install (hard links, made once) without that variant: llama.cpp loads the next-best one and
 * reads the mapped file, as llama-cli's --no-repack does. Elsewhere (or with --peer as-is) the
 * install as users get it. Returns the directory and a line for the report.
 */
function limitPeer(force: boolean | undefined): { dir: string; note: string } {
  const amx = cpuHasAmx();
  if (!(force ?? amx))
    return {
      dir: PEER_DIR,
      note: `llama.cpp as node-llama-cpp ${PEER_VERSION} ships it (${amx ? `--peer as-is: its AMX variant copies the weights into memory, so a limit below the model's size kills it` : "this CPU has no AMX"})`,
    };
  const bins = join("node_modules", "@node-llama-cpp", "linux-x64", "bins", "linux-x64");
  if (!existsSync(join(NO_REPACK_PEER_DIR, "package.json"))) {
    // hard links: the copy costs no disk, and removing one name leaves the original alone
    const r = spawnSync("cp", ["-al", PEER_DIR, NO_REPACK_PEER_DIR], { stdio: "inherit" });
    if (r.status !== 0) throw new Error(`could not copy ${PEER_DIR} to ${NO_REPACK_PEER_DIR}`);
  }
  const variant = join(NO_REPACK_PEER_DIR, bins, AMX_VARIANT);
  if (existsSync(variant)) unlinkSync(variant);
  return {
    dir: NO_REPACK_PEER_DIR,
    note: `llama.cpp without node-llama-cpp's AMX variant (${AMX_VARIANT} removed from bench/.peer-norepack${amx ? "" : "; --peer no-repack on a CPU without AMX"}): it maps the file instead of copying the weights into memory, as llama-cli --no-repack`,
  };
}

function ensurePeer(): boolean {
  if (existsSync(join(PEER_DIR, "node_modules", "node-llama-cpp", "package.json"))) return true;
  mkdirSync(PEER_DIR, { recursive: true });
  writeFileSync(join(PEER_DIR, "package.json"), JSON.stringify({ name: "powerinfer-bench-peer", private: true }));
  process.stderr.write(`installing node-llama-cpp@${PEER_VERSION} into bench/.peer ...\n`);
  const r = spawnSync("npm", ["install", `node-llama-cpp@${PEER_VERSION}`, "--no-audit", "--no-fund"], {
    cwd: PEER_DIR,
    stdio: "inherit",
  });
  return r.status === 0;
}

// ---------------------------------------------------------------------------------------------
// Memory cgroups

interface CgroupSupport {
  version: 1 | 2;
  /** the directory child groups are made in */
  parent: string;
}

interface CgroupUsage {
  /** the group's peak charge (RSS + page cache + kernel), bytes; undefined where not reported */
  peak?: number;
  majorFaults?: number;
  oomKills?: number;
}

/** Where child memory groups can be made, or why not. */
function cgroupSupport(): CgroupSupport | string {
  if (process.platform !== "linux") return "not Linux";
  let lines: string[];
  try {
    lines = readFileSync("/proc/self/cgroup", "utf8").trim().split("\n");
  } catch (e) {
    return `cannot read /proc/self/cgroup (${(e as Error).message})`;
  }
  const v1 = lines.map((l) => l.split(":")).find((p) => p[1].split(",").includes("memory"));
  let s: CgroupSupport | undefined;
  if (v1 && existsSync("/sys/fs/cgroup/memory")) s = { version: 1, parent: join("/sys/fs/cgroup/memory", v1[2]) };
  else {
    const v2 = lines.map((l) => l.split(":")).find((p) => p[0] === "0");
    if (v2 && existsSync("/sys/fs/cgroup/cgroup.controllers"))
      s = { version: 2, parent: join("/sys/fs/cgroup", v2[2]) };
  }
  if (!s) return "no memory cgroup controller mounted";
  // Probe: make and remove a group, set a limit.
  const probe = join(s.parent, `powerinfer_bench_probe_${process.pid}`);
  try {
    mkdirSync(probe);
    writeFileSync(join(probe, s.version === 1 ? "memory.limit_in_bytes" : "memory.max"), String(GiB));
  } catch (e) {
    return `cannot make a memory cgroup under ${s.parent} (${(e as NodeJS.ErrnoException).code ?? (e as Error).message}; run as root)`;
  } finally {
    try {
      rmdirSync(probe);
    } catch {
      // never made
    }
  }
  // Groups left behind by a bench that was killed mid-run (empty once their process died).
  for (const name of readdirSync(s.parent)) {
    if (!name.startsWith("powerinfer_bench_")) continue;
    try {
      if (readFileSync(join(s.parent, name, "cgroup.procs"), "utf8").trim() === "") rmdirSync(join(s.parent, name));
    } catch {
      // in use by another bench, or already gone
    }
  }
  return s;
}

let groupSeq = 0;

/**
 * Run `cmd` in a fresh memory group limited to `limit` bytes (page cache included), after
 * dropping `evict` from the page cache; the group is removed afterwards.
 */
function runLimited(
  cg: CgroupSupport,
  limit: number,
  evict: string,
  cmd: string[],
  timeoutS: number,
): {
  status: number | null;
  signal: string | null;
  stdout: string;
  stderr: string;
  usage: CgroupUsage;
  timedOut: boolean;
} {
  dropFromPageCache(evict);
  const dir = join(cg.parent, `powerinfer_bench_${process.pid}_${groupSeq++}`);
  mkdirSync(dir);
  try {
    if (cg.version === 1) {
      writeFileSync(join(dir, "memory.limit_in_bytes"), String(limit));
      // with swap accounting, swap counts too (this machine has no swap; harmless where it does)
      if (existsSync(join(dir, "memory.memsw.limit_in_bytes"))) {
        try {
          writeFileSync(join(dir, "memory.memsw.limit_in_bytes"), String(limit));
        } catch {
          // not allowed below the memory limit's current value: keep memory.limit alone
        }
      }
    } else {
      writeFileSync(join(dir, "memory.max"), String(limit));
      if (existsSync(join(dir, "memory.swap.max"))) writeFileSync(join(dir, "memory.swap.max"), "0");
    }
    // The shell moves itself into the group, then becomes the command.
    const r = spawnSync("/bin/sh", ["-c", `echo $$ > "${dir}/cgroup.procs" && exec "$@"`, "sh", ...cmd], {
      encoding: "utf8",
      maxBuffer: 64 << 20,
      timeout: timeoutS * 1000,
      killSignal: "SIGKILL",
    });
    const usage: CgroupUsage = {};
    const read = (f: string) => {
      try {
        return readFileSync(join(dir, f), "utf8");
      } catch {
        return undefined;
      }
    };
    if (cg.version === 1) {
      usage.peak = Number(read("memory.max_usage_in_bytes"));
      const stat = read("memory.stat") ?? "";
      const mf = /^total_pgmajfault (\d+)/m.exec(stat) ?? /^pgmajfault (\d+)/m.exec(stat);
      if (mf) usage.majorFaults = Number(mf[1]);
      const oom = /oom_kill (\d+)/.exec(read("memory.oom_control") ?? "");
      if (oom) usage.oomKills = Number(oom[1]);
    } else {
      const peak = read("memory.peak");
      if (peak) usage.peak = Number(peak);
      const mf = /^pgmajfault (\d+)/m.exec(read("memory.stat") ?? "");
      if (mf) usage.majorFaults = Number(mf[1]);
      const oom = /^oom_kill (\d+)/m.exec(read("memory.events") ?? "");
      if (oom) usage.oomKills = Number(oom[1]);
    }
    const timedOut = (r.error as NodeJS.ErrnoException | undefined)?.code === "ETIMEDOUT";
    return { status: r.status, signal: r.signal, stdout: r.stdout ?? "", stderr: r.stderr ?? "", usage, timedOut };
  } finally {
    for (let i = 0; i < 20; i++) {
      try {
        rmdirSync(dir);
        break;
      } catch {
        // the last process may still be leaving the group
        spawnSync("sleep", ["0.2"]);
      }
    }
  }
}

/** Drop a file from the page cache (POSIX_FADV_DONTNEED through dd, as memlimit.sh does). */
function dropFromPageCache(path: string): void {
  if (prewarm) spawnSync("dd", [`if=${path}`, "of=/dev/null", "bs=16M", "status=none"]);
  spawnSync("dd", [`if=${path}`, "iflag=nocache", "count=0", "status=none"]);
}

/**
 * --prewarm: read each run's file whole just before dropping it from this machine's page cache.
 * On a virtual disk the host's own cache then holds it for either engine alike (without it, a
 * file read recently by an earlier run is served from the host's memory and one that was not
 * from the device: measured 3.79 against 1.29-1.44 tok/s for the same run of ours).
 */
let prewarm = false;

// ---------------------------------------------------------------------------------------------
// Runs

interface RunResult {
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

interface OursConfig {
  store: string;
  limit: number;
  threads: number;
  n: number;
  sparsity: "gate" | "predictor";
  extra?: string[];
}

function runOurs(cg: CgroupSupport | undefined, c: OursConfig, timeoutS: number): RunResult {
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
    "0",
    "--ignore-eos",
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
  if (computedPct < 80 * (1 - SPARSITY))
    return {
      ok: false,
      failure: `WRONG: ${computedPct}% of FFN neurons computed (planted ~10%): an engine bug, not a speed; tokens are wrong`,
      usage: r.usage,
      load,
    };
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
    text: r.stdout,
    usage: r.usage,
    load,
  };
}

function runPeer(
  cg: CgroupSupport | undefined,
  peerDir: string,
  gguf: string,
  limit: number,
  threads: number,
  n: number,
  timeoutS: number,
): RunResult {
  const cmd = [
    process.execPath,
    SELF,
    "--peer-run",
    gguf,
    String(threads),
    String(n),
    String(CONTEXT),
    PROMPT,
    peerDir,
  ];
  const load = loadavg()[0];
  const r = cg ? runLimited(cg, limit, gguf, cmd, timeoutS) : unlimited(gguf, cmd, timeoutS);
  const speed = parseSpeed(r.stderr);
  if (r.status !== 0 || !speed) return { ok: false, failure: failureOf(r), usage: r.usage, load };
  return { ok: true, ...speed, usage: r.usage, load };
}

function unlimited(evict: string, cmd: string[], timeoutS: number) {
  dropFromPageCache(evict);
  const r = spawnSync(cmd[0], cmd.slice(1), {
    encoding: "utf8",
    maxBuffer: 64 << 20,
    timeout: timeoutS * 1000,
    killSignal: "SIGKILL",
  });
  return {
    status: r.status,
    signal: r.signal,
    stdout: r.stdout ?? "",
    stderr: r.stderr ?? "",
    usage: {} as CgroupUsage,
    timedOut: (r.error as NodeJS.ErrnoException | undefined)?.code === "ETIMEDOUT",
  };
}

// ---------------------------------------------------------------------------------------------
// Reporting

function commonPrefix(xs: string[]): number {
  let n = 0;
  while (xs.every((x) => n < x.length && x[n] === xs[0][n])) n++;
  return n;
}

const gib = (b: number) => `${+(b / GiB).toFixed(2)} GiB`;

/** "1.23" from the ok runs, or the failure of the first failed run. */
function med(rs: RunResult[], key: keyof RunResult, digits = 2): string {
  const ok = rs.filter((r) => r.ok);
  if (ok.length === 0) return rs[0]?.failure ?? "-";
  const v = median(ok.map((r) => r[key] as number)).toFixed(digits);
  return ok.length < rs.length
    ? `${v} (${rs.length - ok.length} of ${rs.length} failed: ${rs.find((r) => !r.ok)!.failure})`
    : v;
}

function medNum(rs: RunResult[], key: keyof RunResult): number | undefined {
  const ok = rs.filter((r) => r.ok);
  return ok.length ? median(ok.map((r) => r[key] as number)) : undefined;
}

function ratio(a?: number, b?: number): string {
  return a !== undefined && b !== undefined && b > 0 ? `${(a / b).toFixed(1)}x` : "-";
}

function loadRange(rs: RunResult[]): string {
  const l = rs.map((r) => r.load);
  return l.length ? `${Math.min(...l).toFixed(1)}-${Math.max(...l).toFixed(1)}` : "-";
}

/**
 * Seconds of a run's generation (prefill + decode). The engine prints rates with one decimal, too
 * coarse below 1 tok/s; its I/O wait (two decimals) over its share of the run (whole percent) is
 * finer when the share is large enough.
 */
function runSeconds(r: RunResult): number {
  if (r.ioWaitPct !== undefined && r.ioWaitPct >= 10) return (100 * r.ioWaitS!) / r.ioWaitPct;
  return r.promptTokens! / r.prefill! + r.decodeTokens! / r.decode!;
}

function oursDetail(rs: RunResult[]): { hit: string; wait: string; mbs: string; rss: string; computed: string } {
  const ok = rs.filter((r) => r.ok);
  if (!ok.length) return { hit: "-", wait: "-", mbs: "-", rss: "-", computed: "-" };
  return {
    hit: `${median(ok.map((r) => r.hitRatePct!)).toFixed(1)}%`,
    wait: `${median(ok.map((r) => r.ioWaitPct ?? (100 * r.ioWaitS!) / runSeconds(r))).toFixed(0)}%`,
    mbs: median(ok.map((r) => r.readMB! / runSeconds(r))).toFixed(0),
    rss: `${Math.max(...ok.map((r) => r.peakRssMiB!)).toFixed(0)} MiB`,
    computed: `${median(ok.map((r) => r.computedPct!)).toFixed(1)}%`,
  };
}

// ---------------------------------------------------------------------------------------------
// Main

async function main(): Promise<void> {
  const o = parseOptions(process.argv.slice(2));
  const started = new Date();
  const models = ensureModels(o.shape, o.type, o.gateRank, o.layers);
  const sparsity = o.gateRank ? "predictor" : "gate";
  const support = cgroupSupport();
  const cg = typeof support === "string" ? undefined : support;
  if (!cg)
    process.stderr.write(
      `bench:offload: no memory cgroup (${support}): the comparison under a memory limit is skipped; the ablation runs under ours' own --memory-budget only\n`,
    );
  const peerOk = ensurePeer();
  if (!peerOk)
    process.stderr.write("bench:offload: node-llama-cpp could not be installed: llama.cpp's columns are skipped\n");
  const peer = peerOk
    ? limitPeer(o.peer === undefined ? undefined : o.peer === "no-repack")
    : { dir: PEER_DIR, note: "" };
  const out: string[] = [];
  const log = (s: string) => {
    out.push(s);
    process.stderr.write(`${s}\n`);
  };
  // greedy text per sparsity mode: the exact gate mode's may differ from the predictors'
  const texts = new Map<string, Map<string, string[]>>();
  const noteText = (mode: string, label: string, r: RunResult) => {
    if (!r.ok || r.text === undefined) return;
    const byText = texts.get(mode) ?? texts.set(mode, new Map()).get(mode)!;
    const list = byText.get(r.text) ?? [];
    list.push(label);
    byText.set(r.text, list);
  };
  const raw: Record<string, unknown> = { started: started.toISOString(), options: { ...o, skip: [...o.skip] }, models };

  log(`# bench:offload, ${started.toISOString()}`);
  const predictable = o.gateRank
    ? `, gate rank ${o.gateRank} (planted predictors, not trained: docs/benchmarks.md)`
    : "";
  log(
    `model: ${o.shape} shape (${SHAPE_SPECS[o.shape].like}${o.layers !== undefined && o.layers !== SHAPE_SPECS[o.shape].layers ? `, ${o.layers} of its ${SHAPE_SPECS[o.shape].layers} layers` : ""}), ReLU, planted sparsity ${SPARSITY}${predictable}, ${o.type.toUpperCase()}, seed ${SEED}: GGUF ${gib(statSync(models.gguf).size)}, store ${gib(statSync(models.store).size)}`,
  );
  log(
    `prompt ${PROMPT.length} chars, ${o.n} generated tokens, greedy, context ${CONTEXT} for both engines${prewarm ? "; each run's file read whole, then dropped from the page cache, before the run (--prewarm)" : ""}; ours: --sparsity ${sparsity} (reader defaults), store ${o.order === "hot" ? "hot-first (planted rates as the profile)" : "in index order"}; medians of ${o.reps} interleaved runs`,
  );

  // 1. Ours vs llama.cpp under the same limits.
  if (!o.skip.has("compare") && cg) {
    const cells = new Map<string, { ours: RunResult[]; peer: RunResult[] }>();
    for (let rep = 0; rep < o.reps; rep++) {
      for (const limitG of o.limits) {
        for (const threads of o.threads) {
          const key = `${limitG}/${threads}`;
          const cell = cells.get(key) ?? { ours: [], peer: [] };
          cells.set(key, cell);
          const limit = limitG * GiB;
          // a limit ours refused once is refused every time: no need to ask again
          if (!(cell.ours.length && cell.ours.every((r) => r.failure?.startsWith("does not fit")))) {
            const r = runOurs(
              cg,
              { store: o.order === "hot" ? models.hotStore : models.store, limit, threads, n: o.n, sparsity },
              o.timeoutS,
            );
            cell.ours.push(r);
            noteText(sparsity, `compare ${key}`, r);
            process.stderr.write(
              `  ours  ${gib(limit)} t${threads}: ${r.ok ? `${r.prefill} / ${r.decode} tok/s, hit ${r.hitRatePct}%, read ${r.readMB} MB, wait ${r.ioWaitS} s, peak RSS ${r.peakRssMiB} MiB` : r.failure} (load ${r.load.toFixed(1)})\n`,
            );
          }
          if (peerOk) {
            const r = runPeer(cg, peer.dir, models.gguf, limit, threads, o.n, o.timeoutS);
            cell.peer.push(r);
            process.stderr.write(
              `  llama ${gib(limit)} t${threads}: ${r.ok ? `${r.prefill} / ${r.decode} tok/s, major faults ${r.usage?.majorFaults}` : r.failure} (load ${r.load.toFixed(1)})\n`,
            );
          }
        }
      }
    }
    raw.compare = Object.fromEntries(cells);
    log("");
    log(`## Ours vs llama.cpp under a cgroup memory limit (cgroup v${cg.version}, page cache counted)`);
    log("");
    log(`The peer: ${peer.note}.`);
    log("");
    log(
      "| limit | threads | ours prefill tok/s | llama.cpp prefill tok/s | prefill ratio | ours decode tok/s | llama.cpp decode tok/s | decode ratio | load avg |",
    );
    log("|---|---|---|---|---|---|---|---|---|");
    for (const limitG of o.limits) {
      for (const threads of o.threads) {
        const c = cells.get(`${limitG}/${threads}`)!;
        log(
          `| ${limitG} GiB | ${threads} | ${med(c.ours, "prefill")} | ${med(c.peer, "prefill")} | ${ratio(medNum(c.ours, "prefill"), medNum(c.peer, "prefill"))} | ` +
            `${med(c.ours, "decode")} | ${med(c.peer, "decode")} | ${ratio(medNum(c.ours, "decode"), medNum(c.peer, "decode"))} | ${loadRange([...c.ours, ...c.peer])} |`,
        );
      }
    }
    log("");
    log(
      "What limited each side (medians; peak RSS: the largest of the runs, VmHWM; cgroup peak counts the page cache too):",
    );
    log("");
    log(
      "| limit | threads | ours: neurons computed | hit rate | I/O wait share | read MB/s | peak RSS (<= limit + 5%?) | cgroup peak ours | cgroup peak llama.cpp | llama.cpp major faults per run |",
    );
    log("|---|---|---|---|---|---|---|---|---|---|");
    for (const limitG of o.limits) {
      for (const threads of o.threads) {
        const c = cells.get(`${limitG}/${threads}`)!;
        const d = oursDetail(c.ours);
        const okOurs = c.ours.filter((r) => r.ok);
        const within = okOurs.length
          ? okOurs.every((r) => r.peakRssMiB! * MiB <= limitG * GiB * 1.05)
            ? "yes"
            : "NO"
          : "";
        const cgPeak = (rs: RunResult[]) => {
          const p = rs.map((r) => r.usage?.peak).filter((x): x is number => x !== undefined && x > 0);
          return p.length ? `${(Math.max(...p) / MiB).toFixed(0)} MiB` : "-";
        };
        const faults = c.peer.map((r) => r.usage?.majorFaults).filter((x): x is number => x !== undefined);
        log(
          `| ${limitG} GiB | ${threads} | ${d.computed} | ${d.hit} | ${d.wait} | ${d.mbs} | ${d.rss}${within ? ` (${within})` : ""} | ${cgPeak(c.ours)} | ${cgPeak(c.peer)} | ${faults.length ? median(faults).toFixed(0) : "-"} |`,
        );
      }
    }
  }

  // 2. Ablation: naive, + cache, + pipeline (index order), (+ predictors,) + hot-first order.
  if (!o.skip.has("ablation")) {
    const limit = o.ablationLimit * GiB;
    // with predictors, the steps before them run the exact gate mode, and the predictors are a step
    const early: "gate" | "predictor" = "gate";
    const configs: { name: string; store: string; extra: string[]; sparsity: "gate" | "predictor" }[] = [
      {
        name: "naive: bundles read every token (16 MiB cache, no hot region), no pipeline",
        store: models.store,
        extra: ["--cache-size", "16MiB", "--hot-fraction", "0", "--no-pipeline"],
        sparsity: early,
      },
      {
        name: "+ cache (what the budget leaves, half pinned hot)",
        store: models.store,
        extra: ["--no-pipeline"],
        sparsity: early,
      },
      {
        name: `+ pipeline (reads overlap compute: the hits'${o.gateRank ? "" : ", and in predictor mode the next layer's reads ahead"})`,
        store: models.store,
        extra: [],
        sparsity: early,
      },
      ...(o.gateRank
        ? [
            {
              name: `+ predictors (the planted ones pick the neurons: no gate rows read; ${SHAPE_SPECS[o.shape].experts ? "the second routed expert's picks read during the first's step" : "the next layer's reads ahead"})`,
              store: models.store,
              extra: [],
              sparsity: "predictor" as const,
            },
          ]
        : []),
      {
        name: "+ hot-first order on flash and the hot share its profile sets (planted rates as the profile)",
        store: models.hotStore,
        extra: [],
        sparsity,
      },
    ];
    const res = new Map<string, RunResult[]>();
    for (let rep = 0; rep < o.reps; rep++) {
      for (const threads of o.ablationThreads) {
        for (const c of configs) {
          const key = `${c.name}/${threads}`;
          const r = runOurs(
            cg,
            { store: c.store, limit, threads, n: o.n, sparsity: c.sparsity, extra: c.extra },
            o.timeoutS,
          );
          (res.get(key) ?? res.set(key, []).get(key)!).push(r);
          noteText(c.sparsity, `ablation ${key}`, r);
          process.stderr.write(
            `  ${c.name.slice(0, 30)} t${threads}: ${r.ok ? `${r.prefill} / ${r.decode} tok/s, hit ${r.hitRatePct}%, read ${r.readMB} MB, wait ${r.ioWaitS} s` : r.failure}\n`,
          );
        }
      }
    }
    raw.ablation = Object.fromEntries(res);
    log("");
    log(`## Ablation at ${gib(limit)} (${cg ? "cgroup limit and " : ""}--memory-budget ${gib(limit)})`);
    log("");
    log(
      "| configuration | threads | prefill tok/s | decode tok/s | decode vs naive | hit rate | read MB per token | I/O wait share | load avg |",
    );
    log("|---|---|---|---|---|---|---|---|---|");
    for (const threads of o.ablationThreads) {
      const naive = medNum(res.get(`${configs[0].name}/${threads}`)!, "decode");
      for (const c of configs) {
        const rs = res.get(`${c.name}/${threads}`)!;
        const ok = rs.filter((r) => r.ok);
        const perTok = ok.length
          ? median(ok.map((r) => r.readMB! / (r.promptTokens! + r.decodeTokens!))).toFixed(1)
          : "-";
        const d = oursDetail(rs);
        log(
          `| ${c.name} | ${threads} | ${med(rs, "prefill")} | ${med(rs, "decode")} | ${ratio(medNum(rs, "decode"), naive)} | ${d.hit} | ${perTok} | ${d.wait} | ${loadRange(rs)} |`,
        );
      }
    }
  }

  // 3. The planner: its prediction for the ablation's last configuration's store and limit, beside
  // a run with the plan it wrote, under the same limit.
  if (!o.skip.has("plan")) {
    const limit = o.ablationLimit * GiB;
    const threads = o.ablationThreads[0];
    const store = models.hotStore;
    const planFile = `${store}.bench-plan.json`;
    const cmd = [
      process.execPath,
      BIN,
      "plan",
      "-m",
      store,
      "--memory-budget",
      `${Math.round(limit / MiB)}MiB`,
      "-t",
      String(threads),
      "-c",
      String(CONTEXT),
      "--decode-tokens",
      String(o.n),
      "-o",
      planFile,
      "--json",
      "-q",
    ];
    process.stderr.write(`$ ${cmd.slice(1).join(" ")}\n`);
    const p = spawnSync(cmd[0], cmd.slice(1), { encoding: "utf8", maxBuffer: 64 << 20, timeout: o.timeoutS * 1000 });
    log("");
    log(
      `## The planner at ${gib(limit)}, ${threads} thread(s) (\`powerinfer plan\`, then \`run --plan\` under the limit)`,
    );
    log("");
    if (p.status !== 0) log(`- plan failed (exit ${p.status}): ${(p.stderr ?? "").trim().split("\n").pop()}`);
    else {
      const plan = JSON.parse(p.stdout) as {
        knobs: { sparsity: "gate" | "predictor"; queueDepth: number; hotFraction: number };
        prediction: { tokensPerSecond: number; hitRate: number };
      };
      const runs: RunResult[] = [];
      for (let rep = 0; rep < o.reps; rep++)
        runs.push(
          runOurs(
            cg,
            { store, limit, threads, n: o.n, sparsity: plan.knobs.sparsity, extra: ["--plan", planFile] },
            o.timeoutS,
          ),
        );
      raw.plan = { plan, runs };
      const measured = medNum(runs, "decode");
      const predicted = plan.prediction.tokensPerSecond;
      log(
        `- plan: ${plan.knobs.sparsity} sparsity, queue depth ${plan.knobs.queueDepth}, hot share ${plan.knobs.hotFraction}; predicted ${predicted.toFixed(2)} tok/s decode, hit rate ${(100 * plan.prediction.hitRate).toFixed(1)}%`,
      );
      log(
        `- measured with it: ${med(runs, "decode")} tok/s decode, hit rate ${oursDetail(runs).hit}${measured !== undefined ? ` (prediction ${((100 * (predicted - measured)) / measured).toFixed(0)}% off)` : ""}`,
      );
    }
  }

  // 4. Read bandwidth: the device at our read size against what the runs achieved.
  if (!o.skip.has("io")) {
    const fio = spawnSync("fio", ["--version"], { encoding: "utf8" });
    log("");
    log("## Flash read bandwidth");
    log("");
    const sizes = ["4k", "8k", "64k", "256k"];
    if (fio.status === 0) {
      for (const s of sizes) {
        const r = spawnSync(
          "fio",
          [
            "--name=probe",
            `--filename=${models.store}`,
            "--rw=randread",
            `--bs=${s}`,
            "--iodepth=16",
            "--ioengine=libaio",
            "--direct=1",
            "--runtime=3",
            "--time_based",
            "--readonly",
            "--output-format=json",
          ],
          { encoding: "utf8" },
        );
        const bw = r.status === 0 ? JSON.parse(r.stdout).jobs[0].read.bw_bytes / 1e6 : NaN;
        log(`- fio, random ${s} O_DIRECT reads at QD 16 on the store: ${bw.toFixed(0)} MB/s`);
      }
    } else {
      const r = spawnSync(
        process.execPath,
        [
          join(ROOT_DIR, "dist", "bench", "io-probe.js"),
          "--file",
          models.store,
          "--sizes",
          sizes.join(","),
          "--qd",
          `1,${QUEUE_DEPTH}`,
          "--seconds",
          "2",
          "--json",
        ],
        { encoding: "utf8" },
      );
      if (r.status !== 0) log(`- io-probe failed: ${r.stderr.trim().split("\n").pop()}`);
      else {
        const probe = JSON.parse(r.stdout.trim().split("\n").pop()!) as {
          direct: boolean;
          cells: { readBytes: number; queueDepth: number; mbPerSec: number; iops: number }[];
        };
        raw.io = probe;
        log(
          `fio is not installed; bench/io-probe.ts (the runtime's own flash reader, ${probe.direct ? "O_DIRECT" : "buffered"}, random reads over the store file, 2 s per cell):`,
        );
        log("");
        log("| read size | QD 1 | QD 16 |");
        log("|---|---|---|");
        for (const c of probe.cells.filter((c) => c.queueDepth === 1)) {
          const deep = probe.cells.find((d) => d.readBytes === c.readBytes && d.queueDepth === QUEUE_DEPTH);
          log(
            `| ${c.readBytes / 1024} KiB | ${c.mbPerSec.toFixed(0)} MB/s (${(c.iops / 1000).toFixed(1)}K IOPS) | ${deep ? `${deep.mbPerSec.toFixed(0)} MB/s (${(deep.iops / 1000).toFixed(1)}K IOPS)` : "-"} |`,
          );
        }
      }
    }
    log("");
    log(
      `Ours reads whole bundles (${o.type === "q4_1" ? "8 KiB" : "16 KiB"} for this model; adjacent misses coalesce) (native AIO where built: queue depth 1024 on its I/O thread, 256 inline; else libuv, 64); the achieved rates are in the tables above (read MB/s over the whole run, and bytes over I/O wait below).`,
    );
    const all = [
      ...((raw.compare
        ? Object.values(raw.compare as Record<string, { ours: RunResult[] }>).flatMap((c) => c.ours)
        : []) as RunResult[]),
      ...((raw.ablation ? Object.values(raw.ablation as Record<string, RunResult[]>).flat() : []) as RunResult[]),
    ].filter((r) => r.ok && r.ioWaitS! > 0.5);
    if (all.length) {
      const whileWaiting = median(all.map((r) => r.readMB! / r.ioWaitS!));
      log(
        `Median over ours' runs with reads: ${whileWaiting.toFixed(0)} MB/s while waiting for reads (bytes read / I/O wait time; an upper bound, since reads also land while the hits compute).`,
      );
    }
  }

  // Predictor mode skips the neurons the predictor rejects: its text against the exact gate mode's,
  // same store, limit and threads.
  if (o.gateRank && !o.skip.has("quality")) {
    const limit = o.ablationLimit * GiB;
    const threads = o.ablationThreads[0];
    const exact = runOurs(cg, { store: models.store, limit, threads, n: o.n, sparsity: "gate" }, o.timeoutS);
    const pred = runOurs(cg, { store: models.store, limit, threads, n: o.n, sparsity: "predictor" }, o.timeoutS);
    raw.quality = { exact, pred };
    log("");
    log(
      `## Predictor mode against the exact gate mode (${gib(limit)}, ${threads} thread${threads > 1 ? "s" : ""}, ${o.n} tokens)`,
    );
    log("");
    if (!exact.ok || !pred.ok)
      log(`- not compared: gate ${exact.ok ? "ok" : exact.failure}, predictor ${pred.ok ? "ok" : pred.failure}`);
    else {
      const same = exact.text === pred.text;
      log(
        `- gate (exact): ${exact.decode} tok/s decode, ${exact.computedPct}% of neurons computed, ${(exact.readMB! / (exact.promptTokens! + exact.decodeTokens!)).toFixed(1)} MB read per token`,
      );
      log(
        `- predictor: ${pred.decode} tok/s decode, ${pred.computedPct}% of neurons computed, ${(pred.readMB! / (pred.promptTokens! + pred.decodeTokens!)).toFixed(1)} MB read per token`,
      );
      log(
        `- greedy text ${same ? "identical" : `differs after ${commonPrefix([exact.text!, pred.text!])} characters`}: ${JSON.stringify(pred.text!.trim().slice(0, 120))}`,
      );
    }
  }

  // Exactness across every run of ours: greedy tokens do not depend on the budget or the cache.
  for (const [mode, byText] of texts) {
    log("");
    log(
      byText.size === 1
        ? `Ours (${mode} sparsity) generated the same text in all ${[...byText.values()][0].length} successful runs (every limit, thread count and ablation setting).`
        : `WARNING: ours (${mode} sparsity) generated ${byText.size} different texts across runs (greedy; they agree on the first ${commonPrefix([...byText.keys()])} characters): ` +
            [...byText.entries()].map(([t, l]) => `${JSON.stringify(t.trim())} in ${l.join(", ")}`).join(" | "),
    );
  }
  log("");
  log(
    `finished ${new Date().toISOString()}; 1-minute load average now ${loadavg()[0].toFixed(1)} (2 cores; other work on the machine shares them)`,
  );
  const rawPath = join(MODELS_DIR, `offload-${started.toISOString().replace(/[:.]/g, "-")}.json`);
  writeFileSync(rawPath, JSON.stringify(raw, null, 1));
  console.log(out.join("\n"));
  process.stderr.write(`raw results: ${rawPath}\n`);
}

if (process.argv[2] === "--peer-run") {
  const [model, threads, n, ctx, prompt, peerDir] = process.argv.slice(3);
  // batch 64: llama.cpp's compute buffers grow with the batch, and the limit pays for them
  await peerRun(model, Number(threads), Number(n), prompt, Number(ctx), 64, peerDir);
} else {
  await main();
}
