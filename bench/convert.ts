/**
 * Converting a Hugging Face checkpoint at the disk's write rate: `powerinfer convert DIR -o OUT
 * --type T -q` for a GGUF (bf16, f16, q8_0, q4_0) and a neuron store (q8_0, q4_1), each run as a
 * child process and timed (wall, user + sys CPU, peak RSS: /usr/bin/time where it exists, else
 * the child's own resource usage), between two measurements of the disk's write rate (2 GB in
 * 4 MiB writes, then fsync: what `dd bs=4M conv=fsync` measures), in the directory the output is
 * written to; the table gives each output's MB/s against the slower and the faster of the two (a
 * VM host's cache takes a burst of writes at twice the rate it keeps up), and after it the rate of
 * O_DIRECT writes (`dd oflag=direct`: what the converter's own writer does where the file system
 * allows, bypassing the page cache), with the output's MB/s against that. Each output is deleted
 * once measured.
 *
 *   npm run bench:convert -- [--outputs gguf:bf16,pi:q8_0,...] [--builds DIST[,DIST...]]
 *                            [--threads N] [--write-gb 2] [--json]
 *
 * The checkpoint is made once into bench/.models/hf-llama-3g and reused: a llama of 1.5 G BF16
 * parameters in five shards (hidden 2048, 16 layers, FF 8192, 32 heads of 64, 8 KV heads, Llama
 * 3's tokenizer from test/fixtures, an untied output), each weight the sum of three uniform draws
 * scaled by 1/sqrt(fan-in), norms near 1, from a fixed seed: every run converts the same bytes.
 * --builds runs other builds' CLIs (their dist/ directories) on the same outputs, interleaved:
 * compare builds only within one run, since a shared machine's load moves every figure.
 */
import { spawnSync } from "node:child_process";
import {
  closeSync,
  constants,
  copyFileSync,
  existsSync,
  fsyncSync,
  mkdirSync,
  openSync,
  readFileSync,
  readSync,
  renameSync,
  rmSync,
  statSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { loadavg } from "node:os";
import { join, resolve } from "node:path";
import { gunzipSync } from "node:zlib";
import { ROOT_DIR } from "./paths.js";

const MODELS = join(ROOT_DIR, "bench", ".models");
const CHECKPOINT = join(MODELS, "hf-llama-3g");
/** Written into the checkpoint: one made by another version of makeCheckpoint is made again. */
const STAMP = "bench-checkpoint.json";
const GENERATOR = 1;
const TOKENIZER = join(ROOT_DIR, "test", "fixtures", "tokenizers", "llama3");

// The checkpoint's shape.
const HIDDEN = 2048,
  LAYERS = 16,
  FF = 8192,
  HEADS = 32,
  KV_HEADS = 8,
  HEAD_DIM = 64,
  VOCAB = 128256,
  SHARDS = 5;

interface Output {
  ext: "gguf" | "pi";
  type: string;
}

const DEFAULT_OUTPUTS: Output[] = [
  { ext: "gguf", type: "bf16" },
  { ext: "gguf", type: "f16" },
  { ext: "gguf", type: "q8_0" },
  { ext: "gguf", type: "q4_0" },
  { ext: "pi", type: "q8_0" },
  { ext: "pi", type: "q4_1" },
];

interface Options {
  outputs: Output[];
  builds: string[];
  threads?: number;
  writeBytes: number;
  json: boolean;
}

function parseArgs(argv: string[]): Options {
  const o: Options = { outputs: DEFAULT_OUTPUTS, builds: [join(ROOT_DIR, "dist")], writeBytes: 2e9, json: false };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i];
    const value = () => {
      const v = argv[++i];
      if (v === undefined) throw new Error(`${a} needs a value`);
      return v;
    };
    if (a === "--outputs")
      o.outputs = value()
        .split(",")
        .map((s) => {
          const [ext, type] = s.split(":");
          if ((ext !== "gguf" && ext !== "pi") || !type)
            throw new Error(`--outputs: "${s}" is not gguf:TYPE or pi:TYPE`);
          return { ext, type };
        });
    else if (a === "--builds")
      o.builds = value()
        .split(",")
        .map((d) => resolve(d));
    else if (a === "--threads") o.threads = Number(value());
    else if (a === "--write-gb") o.writeBytes = Number(value()) * 1e9;
    else if (a === "--json") o.json = true;
    else throw new Error(`unknown argument ${a} (see the top of bench/convert.ts)`);
  }
  for (const b of o.builds)
    if (!existsSync(join(b, "src", "cli", "main.js"))) throw new Error(`--builds: ${b}/src/cli/main.js does not exist`);
  return o;
}

// ---------------------------------------------------------------------------------------------
// The checkpoint

/** mulberry32: the checkpoint's values, the same on every machine. */
function rng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) | 0;
    let t = Math.imul(a ^ (a >>> 15), 1 | a);
    t = (t + Math.imul(t ^ (t >>> 7), 61 | t)) ^ t;
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Tensor {
  name: string;
  shape: number[];
  /** weights: the sum of three uniforms on [-1/2, 1/2) times this; "norm": 1 + that sum / 5 */
  scale: number | "norm";
}

function tensors(): Tensor[] {
  const w = (name: string, rows: number, cols: number): Tensor => ({
    name,
    shape: [rows, cols],
    scale: 2 / Math.sqrt(cols),
  });
  const norm = (name: string): Tensor => ({ name, shape: [HIDDEN], scale: "norm" });
  const list: Tensor[] = [{ name: "model.embed_tokens.weight", shape: [VOCAB, HIDDEN], scale: 2 }];
  for (let l = 0; l < LAYERS; l++) {
    const p = `model.layers.${l}.`;
    list.push(
      norm(p + "input_layernorm.weight"),
      w(p + "self_attn.q_proj.weight", HEADS * HEAD_DIM, HIDDEN),
      w(p + "self_attn.k_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN),
      w(p + "self_attn.v_proj.weight", KV_HEADS * HEAD_DIM, HIDDEN),
      w(p + "self_attn.o_proj.weight", HIDDEN, HEADS * HEAD_DIM),
      norm(p + "post_attention_layernorm.weight"),
      w(p + "mlp.gate_proj.weight", FF, HIDDEN),
      w(p + "mlp.up_proj.weight", FF, HIDDEN),
      w(p + "mlp.down_proj.weight", HIDDEN, FF),
    );
  }
  list.push(norm("model.norm.weight"), w("lm_head.weight", VOCAB, HIDDEN));
  return list;
}

const bytesOf = (t: Tensor) => t.shape.reduce((a, b) => a * b, 1) * 2;

/** The checkpoint in `dir` (written under a temporary name, then renamed: a cut-short run leaves none). */
function makeCheckpoint(dir: string): void {
  const tmp = dir + ".partial";
  rmSync(tmp, { recursive: true, force: true });
  mkdirSync(tmp, { recursive: true });
  const list = tensors();
  const total = list.reduce((a, t) => a + bytesOf(t), 0);
  // shards of about equal size, whole tensors each
  const shards: Tensor[][] = [[]];
  let acc = 0;
  for (const t of list) {
    if (acc >= (total / SHARDS) * shards.length && shards.length < SHARDS) shards.push([]);
    shards[shards.length - 1].push(t);
    acc += bytesOf(t);
  }
  const r = rng(0x9e3779b9);
  const f32 = new Float32Array(1);
  const u32 = new Uint32Array(f32.buffer);
  const buf = new Uint16Array(4 << 20);
  const weightMap: Record<string, string> = {};
  shards.forEach((group, i) => {
    const file = `model-${String(i + 1).padStart(5, "0")}-of-${String(shards.length).padStart(5, "0")}.safetensors`;
    const header: Record<string, unknown> = { __metadata__: { format: "pt" } };
    let off = 0;
    for (const t of group) {
      header[t.name] = { dtype: "BF16", shape: t.shape, data_offsets: [off, off + bytesOf(t)] };
      off += bytesOf(t);
      weightMap[t.name] = file;
    }
    let json = JSON.stringify(header);
    while ((8 + json.length) % 8) json += " ";
    const fd = openSync(join(tmp, file), "w");
    const len = Buffer.alloc(8);
    len.writeBigUInt64LE(BigInt(json.length));
    writeSync(fd, len);
    writeSync(fd, Buffer.from(json));
    for (const t of group) {
      for (let left = bytesOf(t) / 2; left > 0;) {
        const k = Math.min(left, buf.length);
        for (let j = 0; j < k; j++) {
          const g = r() + r() + r() - 1.5;
          f32[0] = t.scale === "norm" ? 1 + 0.2 * g : t.scale * g;
          // to bf16, nearest even
          const b = u32[0];
          buf[j] = ((b + 0x7fff + ((b >>> 16) & 1)) >>> 16) & 0xffff;
        }
        writeSync(fd, new Uint8Array(buf.buffer, 0, k * 2));
        left -= k;
      }
    }
    closeSync(fd);
    console.error(`  ${file}: ${group.length} tensors, ${(off / 1e9).toFixed(2)} GB`);
  });
  writeFileSync(
    join(tmp, "model.safetensors.index.json"),
    JSON.stringify({ metadata: { total_size: total }, weight_map: weightMap }, null, 2),
  );
  const config = {
    architectures: ["LlamaForCausalLM"],
    attention_bias: false,
    bos_token_id: 128000,
    eos_token_id: 128001,
    head_dim: HEAD_DIM,
    hidden_act: "silu",
    hidden_size: HIDDEN,
    intermediate_size: FF,
    max_position_embeddings: 131072,
    mlp_bias: false,
    model_type: "llama",
    num_attention_heads: HEADS,
    num_hidden_layers: LAYERS,
    num_key_value_heads: KV_HEADS,
    rms_norm_eps: 1e-5,
    rope_scaling: {
      factor: 8.0,
      high_freq_factor: 4.0,
      low_freq_factor: 1.0,
      original_max_position_embeddings: 8192,
      rope_type: "llama3",
    },
    rope_theta: 500000.0,
    tie_word_embeddings: false,
    torch_dtype: "bfloat16",
    vocab_size: VOCAB,
  };
  writeFileSync(join(tmp, "config.json"), JSON.stringify(config, null, 2));
  writeFileSync(join(tmp, "tokenizer.json"), gunzipSync(readFileSync(join(TOKENIZER, "tokenizer.json.gz"))));
  copyFileSync(join(TOKENIZER, "tokenizer_config.json"), join(tmp, "tokenizer_config.json"));
  writeFileSync(join(tmp, STAMP), JSON.stringify({ generator: GENERATOR }));
  rmSync(dir, { recursive: true, force: true });
  renameSync(tmp, dir);
}

/** Reads every file of the checkpoint once, so that each conversion finds it in the page cache. */
function warm(dir: string, files: string[]): void {
  const buf = Buffer.alloc(16 << 20);
  for (const f of files) {
    const fd = openSync(join(dir, f), "r");
    while (readSync(fd, buf, 0, buf.length, null) > 0);
    closeSync(fd);
  }
}

// ---------------------------------------------------------------------------------------------
// Measurements

/** The disk's write rate where `file` lies: `bytes` in 4 MiB writes, then fsync (MB/s, 1e6 bytes). */
function writeRate(file: string, bytes: number): number {
  return timedWrites(openSync(file, "w"), file, Buffer.alloc(4 << 20), bytes);
}

/**
 * The disk's rate for writes that bypass the page cache (what the converter's writer does where it
 * can, io/sequential-writer.ts): `bytes` in 4 MiB O_DIRECT writes from a page-aligned buffer (a
 * WebAssembly.Memory's), then fsync; NaN where the file system refuses O_DIRECT.
 */
function directWriteRate(file: string, bytes: number): number {
  const flag = (constants as { O_DIRECT?: number }).O_DIRECT;
  if (flag === undefined) return NaN;
  let fd: number;
  try {
    fd = openSync(file, constants.O_WRONLY | constants.O_CREAT | constants.O_TRUNC | flag, 0o644);
  } catch {
    return NaN;
  }
  return timedWrites(fd, file, new Uint8Array(new WebAssembly.Memory({ initial: 64 }).buffer), bytes);
}

/** MB/s of `bytes` written through `fd` a `block` at a time, then fsync (from the open); the file deleted after. */
function timedWrites(fd: number, file: string, block: Uint8Array, bytes: number): number {
  const t0 = process.hrtime.bigint();
  try {
    for (let done = 0; done < bytes; done += block.length)
      writeSync(fd, block, 0, Math.min(block.length, bytes - done));
    fsyncSync(fd);
  } finally {
    closeSync(fd);
    rmSync(file, { force: true });
  }
  return bytes / 1e6 / (Number(process.hrtime.bigint() - t0) / 1e9);
}

interface Run {
  build: string;
  output: string;
  bytes: number;
  wall: number;
  cpu: number;
  peakMiB: number;
  loadBefore: number;
  loadAfter: number;
  writeBefore: number;
  writeAfter: number;
  /** O_DIRECT writes, after the conversion */
  writeDirect: number;
}

const HAVE_TIME = existsSync("/usr/bin/time");

/**
 * Without /usr/bin/time the child reports its own usage at exit: CPU from process.resourceUsage
 * (every thread), the peak from VmHWM (getrusage's maxrss still holds the parent's peak from
 * before the exec).
 */
const USAGE_PRELOAD = `
import { readFileSync, writeFileSync } from "node:fs";
process.on("exit", () => {
  const u = process.resourceUsage();
  let peak = u.maxRSS;
  try { peak = Number(/^VmHWM:\\s+(\\d+) kB/m.exec(readFileSync("/proc/self/status", "utf8"))[1]); } catch {}
  writeFileSync(process.env.BENCH_USAGE_OUT, JSON.stringify({ cpu: (u.userCPUTime + u.systemCPUTime) / 1e6, peakKiB: peak }));
});
`;

/** One conversion as a child process: wall, CPU and peak RSS. */
function convert(cli: string, dir: string, out: string, type: string, threads: number | undefined) {
  const args = [cli, "convert", dir, "-o", out, "--type", type, "-q", ...(threads ? ["-t", String(threads)] : [])];
  const usage = join(MODELS, "usage.txt");
  rmSync(usage, { force: true });
  let res;
  const t0 = process.hrtime.bigint();
  if (HAVE_TIME) res = spawnSync("/usr/bin/time", ["-f", "%e %U %S %M", "-o", usage, process.execPath, ...args]);
  else {
    const preload = join(MODELS, "usage-preload.mjs");
    writeFileSync(preload, USAGE_PRELOAD);
    res = spawnSync(process.execPath, ["--import", preload, ...args], {
      env: { ...process.env, BENCH_USAGE_OUT: usage },
    });
  }
  const wall = Number(process.hrtime.bigint() - t0) / 1e9;
  if (res.status !== 0)
    throw new Error(`${args.join(" ")} failed (${res.status ?? res.signal}): ${res.stderr.toString().slice(-2000)}`);
  const text = readFileSync(usage, "utf8").trim();
  rmSync(usage, { force: true });
  if (HAVE_TIME) {
    const [e, u, s, m] = text.split(/\s+/).map(Number);
    return { wall: e, cpu: u + s, peakMiB: m / 1024 };
  }
  const j = JSON.parse(text) as { cpu: number; peakKiB: number };
  return { wall, cpu: j.cpu, peakMiB: j.peakKiB / 1024 };
}

function main(): void {
  const o = parseArgs(process.argv.slice(2));
  mkdirSync(MODELS, { recursive: true });
  const stamp = join(CHECKPOINT, STAMP);
  if (
    !existsSync(stamp) ||
    (JSON.parse(readFileSync(stamp, "utf8")) as { generator: number }).generator !== GENERATOR
  ) {
    console.error(`making ${CHECKPOINT} (once; about 3.1 GB)`);
    makeCheckpoint(CHECKPOINT);
  }
  const files = ["config.json", "model.safetensors.index.json", "tokenizer.json"];
  const index = JSON.parse(readFileSync(join(CHECKPOINT, "model.safetensors.index.json"), "utf8")) as {
    weight_map: Record<string, string>;
  };
  files.push(...new Set(Object.values(index.weight_map)));
  warm(CHECKPOINT, files);
  const probe = join(MODELS, "write-rate.tmp");
  const runs: Run[] = [];
  for (const out of o.outputs)
    for (const build of o.builds) {
      const file = join(MODELS, `bench-out.${out.ext}`);
      rmSync(file, { force: true });
      const writeBefore = writeRate(probe, o.writeBytes);
      const loadBefore = loadavg()[0];
      const r = convert(join(build, "src", "cli", "main.js"), CHECKPOINT, file, out.type, o.threads);
      const bytes = statSync(file).size;
      rmSync(file, { force: true });
      const loadAfter = loadavg()[0];
      const writeAfter = writeRate(probe, o.writeBytes);
      const writeDirect = directWriteRate(probe, o.writeBytes);
      const run: Run = {
        build,
        output: `${out.ext === "gguf" ? "GGUF" : ".pi"} ${out.type}`,
        bytes,
        ...r,
        loadBefore,
        loadAfter,
        writeBefore,
        writeAfter,
        writeDirect,
      };
      runs.push(run);
      if (!o.json) console.error(`  ${run.output} (${build}): ${(bytes / 1e6 / r.wall).toFixed(0)} MB/s`);
    }
  if (o.json) {
    console.log(JSON.stringify({ checkpoint: CHECKPOINT, threads: o.threads ?? "all cores", runs }, null, 2));
    return;
  }
  const many = o.builds.length > 1;
  console.log(
    `| ${many ? "build | " : ""}output --type | written | wall | MB/s written | x write rate | CPU (user + sys) | peak RSS | write rate before, after | O_DIRECT write rate | load |`,
  );
  console.log(`|${many ? "---|" : ""}---|---|---|---|---|---|---|---|---|---|`);
  for (const r of runs) {
    const rate = r.bytes / 1e6 / r.wall;
    // against the slower and the faster of the two write rates around it
    const lo = rate / Math.max(r.writeBefore, r.writeAfter),
      hi = rate / Math.min(r.writeBefore, r.writeAfter);
    console.log(
      `| ${many ? r.build + " | " : ""}${r.output} | ${(r.bytes / 1e9).toFixed(2)} GB | ${r.wall.toFixed(2)} s | ` +
        `**${rate.toFixed(0)}** | ${lo.toFixed(2)}-${hi.toFixed(2)}x | ${r.cpu.toFixed(1)} s | ${r.peakMiB.toFixed(0)} MiB | ` +
        `${r.writeBefore.toFixed(0)}, ${r.writeAfter.toFixed(0)} MB/s | ${Number.isNaN(r.writeDirect) ? "-" : `${r.writeDirect.toFixed(0)} MB/s (${(rate / r.writeDirect).toFixed(2)}x)`} | ` +
        `${r.loadBefore.toFixed(1)}-${r.loadAfter.toFixed(1)} |`,
    );
  }
}

main();
