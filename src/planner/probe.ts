/**
 * Hardware probe for the offline planner: what this machine does with *this* model's kernels and
 * *this* store's device, measured in a few seconds and cached per machine.
 *
 * What is measured (each with the engine's own code, so the numbers are what `run` will see):
 * - dense matvec speed (multiply-adds per second) per weight type of the model's matrices, on a
 *   real matrix of the store packed for its kernel, rotated over copies larger than the last-level
 *   cache (decode streams weights from DRAM), at each candidate thread count;
 * - the sparse FFN kernels on the store's own bundles at shuffled addresses (what a warm neuron
 *   cache looks like): up/down per firing neuron, the fixed cost of a layer (prepare + reduce),
 *   gate per neuron from staged gate pages (the non-resident-gate mode's first phase);
 * - the cost of handing a job to the worker threads (one pool.run), and memory bandwidth (the
 *   add kernel over buffers far larger than the cache: attention over the KV cache is bound by it);
 * - the JS scan that files a layer's firing neurons as hits or misses (NeuronCache.lookup);
 * - random reads of the store's own bundles (and of single 4 KiB gate pages) through the
 *   runtime's FlashReader with O_DIRECT and the store's checksum verifier, in batches as the
 *   runtime issues a layer's misses, per queue depth and per compute thread count (the pool's
 *   threads take CPU from the read threads on a small machine): what the runtime gets, on the
 *   device the store lives on;
 * - the resident memory a thread pool of N threads adds (the budget counts it).
 *
 * Results are kept in ~/.cache/powerinfer-ts/probe-<machine id>.json (POWERINFER_CACHE_DIR
 * overrides the folder), keyed by a fingerprint of the machine (hostname, CPU model, cores,
 * total memory) and, for reads, of the store's device. A later plan for another model on the same
 * machine measures only what is missing (another weight type, another bundle size); `reprobe`
 * starts over. The machine is often shared: each measurement is the median of several rounds, and
 * the load average at probe time is recorded next to the numbers.
 */
import { createHash } from "node:crypto";
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from "node:fs";
import { availableParallelism, cpus, homedir, hostname, loadavg, totalmem } from "node:os";
import { join } from "node:path";
import { GGMLType, typeName } from "../format/ggml-types.js";
import type { NeuronStore } from "../format/store/index.js";
import { FlashReader, readerDepthLimit, visibleThreadPoolSize, type FlashReadRequest } from "../io/flash-reader.js";
import { NeuronCache } from "../io/neuron-cache.js";
import { Arena } from "../runtime/arena.js";
import { ThreadPool } from "../runtime/pool.js";
import { SparseFFN, hasSparseKernel } from "../runtime/sparse-kernels.js";
import { gateReadBytesOf, gateStreamGeometry } from "../model/offload/layout.js";
import {
  ACTIVATION_FORMATS,
  activationBytes,
  hasWeightKernel,
  prepareKernel,
  weightKernel,
  type ActivationFormat,
} from "../runtime/weight-kernels.js";
import { readConfig } from "../model/config.js";
import { median } from "./median.js";
import { MatrixRunner } from "../model/matrix-runner.js";
import { hasPredictors, Predictor, predictorShapes, type PredictorShape } from "../model/offload/predictor.js";
import { WeightLoader } from "../model/weight-loader.js";
import { kernelBuild, type KernelBuild } from "../runtime/wasm.js";

export const PROBE_VERSION = 6;

/** What identifies a machine for the planner: a plan or probe made elsewhere does not apply here. */
export interface MachineFingerprint {
  hostname: string;
  cpuModel: string;
  cores: number;
  /** bytes of RAM */
  totalMemory: number;
  /** the block device the store lives on ("254:0 /dev/vda"), "" when not known */
  device: string;
  /**
   * the kernel build this Node runs (src/runtime/wasm.ts): the same CPU computes at other speeds
   * under another build; absent in probes and plans made before there were two (SIMD128 then)
   */
  kernels?: KernelBuild;
}

/** The fingerprint of this machine, with the device of `path` (the store). */
export function machineFingerprint(path: string): MachineFingerprint {
  return {
    hostname: hostname(),
    cpuModel: (cpus()[0]?.model ?? "unknown").trim(),
    cores: availableParallelism(),
    totalMemory: totalmem(),
    device: deviceOf(path),
    kernels: kernelBuild(),
  };
}

/** "major:minor source" of the file system holding `path` (Linux), or "dev N" elsewhere. */
export function deviceOf(path: string): string {
  const dev = statSync(path).dev;
  // Linux's st_dev: major in bits 8..19 (and 32..), minor in bits 0..7 and 20..31.
  const major = ((dev >>> 8) & 0xfff) | (Math.floor(dev / 2 ** 32) & ~0xfff);
  const minor = (dev & 0xff) | ((dev >>> 12) & ~0xff);
  try {
    for (const line of readFileSync("/proc/self/mountinfo", "utf8").split("\n")) {
      // id parent major:minor root mountpoint options ... - fstype source superoptions
      const f = line.split(" ");
      if (f[2] !== `${major}:${minor}`) continue;
      const dash = f.indexOf("-");
      return `${major}:${minor} ${dash > 0 ? f[dash + 2] : ""}`.trim();
    }
  } catch {
    // not Linux
  }
  return `dev ${dev}`;
}

/** A short stable id of a machine (its fingerprint without the device). */
export function machineId(fp: MachineFingerprint): string {
  const id = [fp.hostname, fp.cpuModel, fp.cores, fp.totalMemory];
  // a probe cache of its own per build, the SIMD128 one keeping the name it had before
  if ((fp.kernels ?? "simd128") !== "simd128") id.push(fp.kernels!);
  return createHash("sha256").update(JSON.stringify(id)).digest("hex").slice(0, 16);
}

/** null when a and b are the same machine (and device), else what differs, in words. */
export function machineDifference(planned: MachineFingerprint, here: MachineFingerprint): string | null {
  const diffs: string[] = [];
  if (planned.hostname !== here.hostname) diffs.push(`host "${planned.hostname}" vs "${here.hostname}"`);
  if (planned.cpuModel !== here.cpuModel) diffs.push(`CPU "${planned.cpuModel}" vs "${here.cpuModel}"`);
  if (planned.cores !== here.cores) diffs.push(`${planned.cores} vs ${here.cores} cores`);
  if (planned.totalMemory !== here.totalMemory)
    diffs.push(`${gib(planned.totalMemory)} vs ${gib(here.totalMemory)} of RAM`);
  if (planned.device !== here.device) diffs.push(`store device "${planned.device}" vs "${here.device}"`);
  const [pk, hk] = [planned.kernels ?? "simd128", here.kernels ?? "simd128"];
  if (pk !== hk) diffs.push(`kernel build ${pk} vs ${hk}`);
  return diffs.length ? diffs.join(", ") : null;
}

const gib = (b: number) => `${(b / 2 ** 30).toFixed(1)} GiB`;

// ---------------------------------------------------------------------------------------------
// Results

/**
 * Batches of random reads of one size at one queue depth, issued as the runtime issues a layer's
 * misses: one submit of n requests, then wait for the last.
 */
export interface IoCell {
  bytes: number;
  queueDepth: number;
  /** reads per second of a batch of the largest size (the rate while the queue stays full) */
  iops: number;
  /** per batch size n: n / the batch's median wall time (ramp-up, the slowest last reads and submit included) */
  batches: { n: number; perSecond: number }[];
  /** seconds of main-thread JS per read to submit it (checks, coalescing, queueing, first issues) */
  submit: number;
}

export interface IoTable {
  /** whether the reads bypassed the page cache (O_DIRECT) */
  direct: boolean;
  /** libuv thread pool size at probe time: deeper queues do not run more reads at once */
  threadPool: number;
  cells: IoCell[];
  loadAverage: number;
}

export interface ScanSpeed {
  perNeuron: number;
  perLookup: number;
  perMiss: number;
}

export interface SparseSpeed {
  /** seconds per firing neuron of up/down (two rows of nEmbd) */
  upDownPerNeuron: number;
  /** seconds per layer besides the neurons: prepare (quantize x) + one up/down call + reduce */
  layerFixed: number;
  /** seconds per neuron of the gate kernel over staged gate pages */
  gatePerNeuron: number;
  /** seconds of one gate call besides the neurons */
  gateFixed: number;
  /** seconds per listed neuron of gate, up and down in one pass (predictor mode's picked neurons) */
  ffnPerNeuron: number;
  /** seconds per neuron of the same over a contiguous run of bundles (predictor mode's hot clusters computed whole) */
  ffnRunPerNeuron: number;
}

export interface ProbeResult {
  version: number;
  fingerprint: MachineFingerprint;
  /** when each part was last measured, and the 1-minute load average then */
  notes: Record<string, { at: string; loadAverage: number }>;
  /** seconds spent probing, summed over every part (cached parts cost nothing next time) */
  seconds: number;
  /** "threads" -> seconds per pool.run of a trivial job split over the threads */
  dispatch: Record<string, number>;
  /** "threads" -> bytes per second streamed (read x, read + write y) */
  memoryBandwidth: Record<string, number>;
  /** "threads" -> resident bytes a pool of that many threads adds (wasm instances, stacks) */
  poolBytes: Record<string, number>;
  /** "type:cols:threads" -> multiply-adds per second of a matvec streamed from DRAM */
  matvec: Record<string, number>;
  /** "type:nEmbd:threads" -> sparse FFN kernel costs */
  sparse: Record<string, SparseSpeed>;
  /** JS of the FFN step: seconds per neuron scanned, per firing neuron looked up, per miss (slot, request, list) */
  scan: ScanSpeed | null;
  /** predictorKey -> seconds of one layer's predictor scores (fc1, relu, fc2) */
  predictor: Record<string, number>;
  /** "device|readBytes" -> read rates per queue depth */
  io: Record<string, IoTable>;
}

export interface ProbeOptions {
  /** thread counts to measure (default 1..cores, at most 4 of them) */
  threads?: number[];
  /** queue depths to measure (default 1, 2, 4, 8, 16 and deeper ones up to libuv's pool) */
  queueDepths?: number[];
  /** forget the cached results and measure everything again */
  reprobe?: boolean;
  /** multiplies every measurement's duration (default 1; tests use ~0.02) */
  scale?: number;
  /** folder of the cache (default $POWERINFER_CACHE_DIR or ~/.cache/powerinfer-ts); null: no cache */
  cacheDir?: string | null;
  onProgress?: (message: string) => void;
}

export function defaultCacheDir(): string {
  return process.env.POWERINFER_CACHE_DIR || join(homedir(), ".cache", "powerinfer-ts");
}

export function probeCachePath(dir: string, fp: MachineFingerprint): string {
  return join(dir, `probe-${machineId(fp)}.json`);
}

/** Thread counts worth measuring on a machine with `cores` cores. */
export function defaultThreadCounts(cores: number): number[] {
  if (cores <= 4) return Array.from({ length: cores }, (_, i) => i + 1);
  return [...new Set([1, 2, Math.floor(cores / 2), cores])].sort((a, b) => a - b);
}

/** Queue depths worth measuring when `pool` reads can run at once (others are interpolated). */
export function defaultQueueDepths(pool: number): number[] {
  const out = [1, 4, 16, 64, 256].filter((q) => q <= pool);
  if (!out.includes(pool) && pool <= 256) out.push(pool);
  return out;
}

/** Queue depths worth trying in a plan. */
export function candidateQueueDepths(pool: number): number[] {
  const out = [1, 2, 4, 8, 16, 32, 64, 128, 256].filter((q) => q <= pool);
  if (!out.includes(pool) && pool <= 256) out.push(pool);
  return out;
}

export const matvecKey = (type: GGMLType, cols: number, threads: number) => `${typeName(type)}:${cols}:${threads}`;
export const sparseKey = (type: GGMLType, nEmbd: number, threads: number) => `${typeName(type)}:${nEmbd}:${threads}`;
/** A store's predictor as it sits in memory (layer 0's shape), at a thread count. */
export const predictorKey = (p: PredictorShape, nEmbd: number, nFF: number, threads: number) =>
  `${typeName(p.type)}:${nEmbd}x${p.hidden}x${nFF}:${threads}`;
export const ioKey = (device: string, bytes: number, threads: number) => `${device}|${bytes}|${threads}`;
/** Read table of whole gate-row chunks (one chunk per batch) of `bytes`. */
export const streamKey = (device: string, bytes: number, threads: number) => `${device}|stream ${bytes}|${threads}`;

/**
 * How OffloadedFFN streams gate rows when they are not resident and the store has a contiguous
 * copy of them: rows per chunk and the bytes one chunk's page span reads; null without a copy.
 */
export function gateStreamOf(store: NeuronStore): { rows: number; bytes: number; rowBytes: number } | null {
  if (!store.ffn.layers.every((l) => l.gateRows !== null)) return null;
  const rowBytes = store.ffn.rowBytes;
  const { rows } = gateStreamGeometry(store.layer(0).neurons, gatePageBytes(store), rowBytes);
  if (rows === 0) return null;
  return { rows, bytes: (Math.ceil((rows * rowBytes) / 4096) + 1) * 4096, rowBytes };
}

function emptyResult(fp: MachineFingerprint): ProbeResult {
  return {
    version: PROBE_VERSION,
    fingerprint: fp,
    notes: {},
    seconds: 0,
    dispatch: {},
    memoryBandwidth: {},
    poolBytes: {},
    matvec: {},
    sparse: {},
    scan: null,
    predictor: {},
    io: {},
  };
}

function loadCache(path: string, fp: MachineFingerprint): ProbeResult | null {
  if (!existsSync(path)) return null;
  try {
    const r = JSON.parse(readFileSync(path, "utf8")) as ProbeResult;
    // Same machine id but another device: keep the compute numbers, the read table is keyed by device anyway.
    if (r.version !== PROBE_VERSION || machineDifference({ ...r.fingerprint, device: fp.device }, fp) !== null)
      return null;
    return { ...emptyResult(fp), ...r, fingerprint: fp };
  } catch {
    return null; // a damaged cache is measured again, not an error
  }
}

function saveCache(path: string, r: ProbeResult): void {
  mkdirSync(join(path, ".."), { recursive: true });
  const tmp = `${path}.tmp-${process.pid}`;
  writeFileSync(tmp, JSON.stringify(r, null, 1) + "\n");
  renameSync(tmp, path);
}

// ---------------------------------------------------------------------------------------------
// The probe

/**
 * The weight types of the store's dense matrices (those kept in memory) that read nEmbd inputs,
 * with the smallest such tensor of each (the probe measures the rate on it; a type without one,
 * e.g. only in a differently shaped wo, borrows the FFN type's rate).
 */
export function denseMatrixTypes(store: NeuronStore): Map<GGMLType, string> {
  const out = new Map<GGMLType, string>();
  const nEmbd = store.ffn.nEmbd;
  const consider = (name: string) => {
    const t = store.tensor(name);
    if (t.dims.length !== 2 || t.dims[0] !== nEmbd || !hasWeightKernel(t.type)) return;
    if (!out.has(t.type) || t.elements < store.tensor(out.get(t.type)!).elements) out.set(t.type, name);
  };
  for (const t of store.tensors.values()) if (t.name !== "token_embd.weight") consider(t.name);
  // Tied embeddings: the output matrix is token_embd itself.
  if (!store.tensors.has("output.weight")) consider("token_embd.weight");
  return out;
}

/**
 * Measure what the planner needs for `store` on this machine, reusing cached results. Returns
 * the (possibly cached) results; measures at most a few seconds at scale 1.
 */
export async function probeMachine(store: NeuronStore, opts: ProbeOptions = {}): Promise<ProbeResult> {
  const fp = machineFingerprint(store.path);
  const dir = opts.cacheDir === undefined ? defaultCacheDir() : opts.cacheDir;
  const path = dir === null ? null : probeCachePath(dir, fp);
  const r = (!opts.reprobe && path ? loadCache(path, fp) : null) ?? emptyResult(fp);
  const scale = opts.scale ?? 1;
  const threads = (opts.threads ?? defaultThreadCounts(fp.cores)).filter((t) => Number.isInteger(t) && t >= 1);
  const pool = readerDepthLimit();
  const depths = (opts.queueDepths ?? defaultQueueDepths(pool)).filter((q) => Number.isInteger(q) && q >= 1);
  const say = opts.onProgress ?? (() => {});
  const t0 = performance.now();
  const note = (part: string) => (r.notes[part] = { at: new Date().toISOString(), loadAverage: loadavg()[0] });

  const ffn = store.ffn;
  const nEmbd = ffn.nEmbd;
  const nFF = store.layer(0).neurons;
  const types = denseMatrixTypes(store);
  const predictor = storePredictor(store);
  const needCompute =
    threads.some(
      (t) => r.dispatch[t] === undefined || r.memoryBandwidth[t] === undefined || r.poolBytes[t] === undefined,
    ) ||
    threads.some((t) =>
      [...types.keys(), ffn.type].some((ty) => hasWeightKernel(ty) && r.matvec[matvecKey(ty, nEmbd, t)] === undefined),
    ) ||
    threads.some((t) => hasSparseKernel(ffn.type) && r.sparse[sparseKey(ffn.type, nEmbd, t)] === undefined) ||
    threads.some((t) => predictor !== null && r.predictor[predictorKey(predictor, nEmbd, nFF, t)] === undefined) ||
    r.scan === null;
  if (needCompute) {
    say(
      `probing compute: ${[...new Set([...types.keys(), ffn.type])].map(typeName).join(", ")} kernels at ${threads.join(", ")} thread(s)`,
    );
    await probeCompute(store, r, threads, scale, types);
    note("compute");
  }
  const sizes = [...new Set([ffn.bundleBytes, gatePageBytes(store)])];
  for (const bytes of sizes) {
    for (const T of threads) {
      const key = ioKey(fp.device, bytes, T);
      const have = r.io[key];
      if (have && depths.every((q) => have.cells.some((c) => c.queueDepth === q))) continue;
      say(
        `probing reads of ${bytes >> 10} KiB from ${store.path} (${fp.device}) at queue depths ${depths.join(", ")}, ${T} compute thread(s)`,
      );
      r.io[key] = await probeReads(store, bytes, depths, scale, T);
      note(`io ${bytes} ${T}`);
    }
  }
  const stream = gateStreamOf(store);
  for (const T of stream ? threads : []) {
    const key = streamKey(fp.device, stream!.bytes, T);
    const have = r.io[key];
    if (have && depths.every((q) => have.cells.some((c) => c.queueDepth === q))) continue;
    say(
      `probing gate-row chunk reads of ${(stream!.bytes / 2 ** 20).toFixed(1)} MiB at queue depths ${depths.join(", ")}, ${T} compute thread(s)`,
    );
    r.io[key] = await probeStream(store, stream!.bytes, depths, scale, T);
    note(`stream ${stream!.bytes} ${T}`);
  }
  r.seconds += (performance.now() - t0) / 1000;
  if (path) saveCache(path, r);
  return r;
}

/** Layer 0's predictor as the runtime holds it (predictorShapes), or null when the store has none. */
export function storePredictor(store: NeuronStore): PredictorShape | null {
  const cfg = readConfig(store);
  return hasPredictors(store, cfg) ? predictorShapes(store, cfg)[0] : null;
}

/** Bytes a first-phase gate read takes (the pages holding a bundle's gate row), as OffloadedFFN reads them. */
export function gatePageBytes(store: NeuronStore): number {
  return gateReadBytesOf(store.ffn);
}

/** Median seconds per call of fn, over `rounds` rounds of about `seconds / rounds` each. */
function timeCalls(fn: (i: number) => void, seconds: number, rounds = 5): number {
  const per: number[] = [];
  let i = 0;
  fn(i++); // warm up (JIT, first touch)
  const slice = (seconds * 1000) / rounds;
  for (let r = 0; r < rounds; r++) {
    let n = 0;
    const start = performance.now();
    let el = 0;
    do {
      fn(i++);
      n++;
      el = performance.now() - start;
    } while (el < slice);
    per.push(el / 1000 / n);
  }
  per.sort((a, b) => a - b);
  return per[Math.floor(per.length / 2)];
}

let seed = 0x9e3779b9;
const rnd = () => (seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0) / 2 ** 32;

/** Bytes past which a buffer no longer fits in the last-level caches of common machines. */
const STREAM_BYTES = 96 << 20;

async function probeCompute(
  store: NeuronStore,
  r: ProbeResult,
  threads: number[],
  scale: number,
  types: Map<GGMLType, string>,
): Promise<void> {
  const ffn = store.ffn;
  const nEmbd = ffn.nEmbd;
  const nFF = store.layer(0).neurons;
  const arena = new Arena(64 << 20);

  // Dense matrices: one real matrix per type (capped to ~16 MiB of rows), packed, in copies that
  // together exceed the caches; plus the FFN's gate rows (the resident gate matrix's kernel).
  interface Dense {
    type: GGMLType;
    ptr: number;
    stride: number;
    copies: number;
    rows: number;
    cols: number;
    act: number;
  }
  const dense: Dense[] = [];
  const loadDense = (type: GGMLType, rows: number, cols: number, fill: (dst: Uint8Array, rows: number) => void) => {
    const k = weightKernel(type);
    const size = k.packedBytes(rows, cols);
    const stride = Math.ceil(size / 4096) * 4096;
    const copies = Math.max(2, Math.min(16, Math.ceil(STREAM_BYTES / stride)));
    const ptr = arena.alloc(stride * copies, 4096);
    const raw = new Uint8Array(rows * (typeRowBytes(store, type, cols) ?? 0));
    fill(raw, rows);
    const first = arena.u8(ptr, size);
    k.pack(raw, first, 0, rows, rows, cols);
    for (let c = 1; c < copies; c++) arena.u8(ptr + c * stride, size).set(arena.u8(ptr, size));
    const act = arena.alloc(activationBytes(k.act, cols) + 64, 64);
    dense.push({ type, ptr, stride, copies, rows, cols, act });
  };
  for (const [type, name] of types) {
    const t = store.tensor(name);
    const cols = t.dims[0];
    const rowBytes = t.bytes / t.dims[1];
    const rows = Math.max(1, Math.min(t.dims[1], Math.floor((16 << 20) / rowBytes)));
    loadDense(type, rows, cols, (dst, n) => store.readTensor(t, dst, 0, n * rowBytes));
  }
  if (hasWeightKernel(ffn.type) && !dense.some((d) => d.type === ffn.type)) {
    const rows = Math.max(1, Math.min(nFF, Math.floor((16 << 20) / ffn.rowBytes)));
    const per = Math.max(1, Math.floor((2 << 20) / ffn.bundleBytes));
    const buf = new Uint8Array(per * ffn.bundleBytes);
    loadDense(ffn.type, rows, nEmbd, (dst, n) => {
      for (let p = 0; p < n; p += per) {
        const c = Math.min(per, n - p);
        store.readBundles(0, p, c, buf.subarray(0, c * ffn.bundleBytes));
        for (let i = 0; i < c; i++)
          dst.set(
            buf.subarray(i * ffn.bundleBytes + ffn.parts.gate, i * ffn.bundleBytes + ffn.parts.gate + ffn.rowBytes),
            (p + i) * ffn.rowBytes,
          );
      }
    });
  }

  // Neuron bundles of layer 0 at shuffled addresses, as a warm cache holds them.
  const nb = Math.max(64, Math.min(nFF, Math.ceil(STREAM_BYTES / ffn.bundleBytes)));
  const region = arena.alloc(nb * ffn.bundleBytes, 4096);
  {
    const per = Math.max(1, Math.floor((4 << 20) / ffn.bundleBytes));
    for (let p = 0; p < nb; p += per) {
      const c = Math.min(per, nb - p);
      store.readBundles(0, p, c, arena.u8(region + p * ffn.bundleBytes, c * ffn.bundleBytes));
    }
  }
  const nStage = Math.min(2048, nb);
  const firing = Math.max(8, Math.min(nb, Math.round(nFF * 0.1)));
  const small = Math.max(1, Math.min(32, firing >> 2));
  const LISTS = 8;
  const lists = arena.alloc(LISTS * nb * 4, 64);
  const stageList = arena.alloc(nStage * 4, 64);
  const gates = arena.alloc(nb * 4, 64);
  const gateOut = arena.alloc(nb * 4, 64);
  const x = arena.alloc(nEmbd * 4, 64);
  const y = arena.alloc(nEmbd * 4, 64);
  {
    const xf = arena.f32(x, nEmbd);
    for (let i = 0; i < nEmbd; i++) xf[i] = Math.sin(i * 0.37);
    const g = arena.f32(gates, nb);
    for (let i = 0; i < nb; i++) g[i] = 0.1 + rnd(); // every listed neuron fires (ReLU: gate > 0)
    for (let s = 0; s < LISTS; s++) {
      const l = arena.i32(lists + s * nb * 4, nb);
      const perm = Array.from({ length: nb }, (_, i) => i);
      for (let i = nb - 1; i > 0; i--) {
        const j = Math.floor(rnd() * (i + 1));
        [perm[i], perm[j]] = [perm[j], perm[i]];
      }
      for (let i = 0; i < nb; i++) l[i] = region + perm[i] * ffn.bundleBytes;
    }
    // staged gate pages: the gate kernel reads each listed address's gate part, as from the staging area
    const sl = arena.i32(stageList, nStage);
    for (let i = 0; i < nStage; i++) sl[i] = region + i * ffn.bundleBytes;
  }
  // Memory bandwidth: y += x over two buffers far past the caches.
  const bwCount = STREAM_BYTES / 8;
  const bwX = arena.alloc(bwCount * 4, 64);
  const bwY = arena.alloc(bwCount * 4, 64);
  arena.u8(bwX, bwCount * 4).fill(0);
  arena.u8(bwY, bwCount * 4).fill(0);

  const d = scale * 0.12; // seconds per measurement
  for (const T of threads) {
    const rss0 = process.memoryUsage.rss();
    const pool = await ThreadPool.create(arena.memory, T);
    try {
      // The added workers' memory: each instantiates the kernel module over the shared memory.
      r.poolBytes[T] = Math.max(0, process.memoryUsage.rss() - rss0);
      const args = new Int32Array(16);
      const add = pool.fn("add_inplace");
      const tiny = 64 * T * 4;
      r.dispatch[T] = timeCalls(() => {
        args[0] = bwY;
        args[1] = bwX;
        pool.run(add, args, 2, tiny, 64);
      }, d);
      r.memoryBandwidth[T] =
        (3 * bwCount * 4) /
        timeCalls(
          () => {
            args[0] = bwY;
            args[1] = bwX;
            pool.run(add, args, 2, bwCount, 64);
          },
          d * 2,
          3,
        );
      for (const m of dense) {
        const k = weightKernel(m.type);
        const prep = prepareKernel(k.act);
        if (prep) pool.kernels[prep](x, m.act, m.cols, 1);
        const mv = pool.fn(k.matvec);
        const sec = timeCalls((i) => {
          args[0] = m.ptr + (i % m.copies) * m.stride;
          args[1] = prep ? m.act : x;
          args[2] = gateOut;
          args[3] = m.rows;
          args[4] = m.cols;
          pool.run(mv, args, 5, m.rows, 16);
        }, d);
        // the dispatch is counted separately: the rate is of the kernel itself
        r.matvec[matvecKey(m.type, m.cols, T)] = (m.rows * m.cols) / Math.max(1e-9, sec - r.dispatch[T]);
      }
      if (hasSparseKernel(ffn.type)) {
        const f = new SparseFFN(pool, arena, ffn.type, nEmbd);
        const layer = (count: number) => (i: number) => {
          f.prepare(x);
          f.upDown(lists + (i % LISTS) * nb * 4, count, gates, "relu");
          f.finish(y);
        };
        const tSmall = timeCalls(layer(small), d);
        const tBig = timeCalls(layer(firing), d);
        const upDownPerNeuron = Math.max(1e-12, (tBig - tSmall) / (firing - small));
        const gSmall = timeCalls(() => f.gate(stageList, Math.min(small, nStage), gateOut), d * 0.5);
        const gBig = timeCalls(() => f.gate(stageList, nStage, gateOut), d);
        const gatePerNeuron = Math.max(1e-12, (gBig - gSmall) / Math.max(1, nStage - Math.min(small, nStage)));
        // predictor mode: whole bundles, listed (the picks) or as a contiguous run (a hot cluster)
        const whole = (count: number) => (i: number) => {
          f.prepare(x);
          f.ffn(lists + (i % LISTS) * nb * 4, count, "relu");
          f.finish(y);
        };
        const run = (count: number) => (i: number) => {
          f.prepare(x);
          f.ffnRun(region + ((i * 32) % Math.max(1, nb - count)) * ffn.bundleBytes, ffn.bundleBytes, count, "relu");
          f.finish(y);
        };
        const ffnPerNeuron = Math.max(
          1e-12,
          (timeCalls(whole(firing), d) - timeCalls(whole(small), d)) / (firing - small),
        );
        const ffnRunPerNeuron = Math.max(
          1e-12,
          (timeCalls(run(firing), d) - timeCalls(run(small), d)) / (firing - small),
        );
        r.sparse[sparseKey(ffn.type, nEmbd, T)] = {
          upDownPerNeuron,
          layerFixed: Math.max(0, tSmall - small * upDownPerNeuron),
          gatePerNeuron,
          gateFixed: Math.max(0, gSmall - Math.min(small, nStage) * gatePerNeuron),
          ffnPerNeuron,
          ffnRunPerNeuron,
        };
      }
      const pred = storePredictor(store);
      if (pred) {
        // layer 0's predictor as the runtime loads it, its scores over the same input
        const cfg = readConfig(store);
        const shapes = predictorShapes(store, cfg);
        const p = Predictor.load(new WeightLoader(store, arena, pool), arena, pool, store, cfg, shapes, 1);
        // a buffer for every quantized format: the predictor's matrices take their build's (the
        // relaxed build's Q8_0 takes q8_i8s); a format left out would be prepared at address 0
        const act = { f32: 0 } as Record<ActivationFormat, number>;
        for (const fmt of ACTIVATION_FORMATS)
          if (fmt !== "f32") act[fmt] = arena.alloc(activationBytes(fmt, Math.max(nEmbd, pred.hidden)) + 64, 64);
        const scores = arena.alloc(nFF * 4, 64);
        const mm = new MatrixRunner(pool, act);
        r.predictor[predictorKey(pred, nEmbd, nFF, T)] = timeCalls(() => p.scores(mm, 0, x, nEmbd, scores), d);
      }
    } finally {
      await pool.dispose();
    }
  }
  r.scan = probeScan(nFF, store.ffn.layers.length, d);
}

/** Row bytes of a `type` row of `cols` values, from the store's own tensors (null when none has that type). */
function typeRowBytes(store: NeuronStore, type: GGMLType, cols: number): number | null {
  if (type === store.ffn.type && cols === store.ffn.nEmbd) return store.ffn.rowBytes;
  for (const t of store.tensors.values())
    if (t.type === type && t.dims.length === 2 && t.dims[0] === cols) return t.bytes / t.dims[1];
  return null;
}

/**
 * The JS work OffloadedFFN does per layer besides the kernels: scan every gate value, file each
 * firing neuron in the neuron cache (hot range check, cold map, LRU touch), and for each miss take
 * a cold slot, make its read request and list its address for the kernel.
 */
function probeScan(nFF: number, layers: number, seconds: number): ScanSpeed {
  // the whole model's cache bookkeeping (per-layer maps, LRU lists): its size is part of the cost
  const slots = Math.max(4, Math.floor((layers * nFF) / 4));
  const hot = Math.floor(slots / 2 / layers);
  const cache = new NeuronCache(0, 4096, slots, Array(layers).fill(nFF), Array(layers).fill(hot));
  for (let l = 0; l < layers; l++) for (let k = hot; k < nFF; k += 5) if (cache.acquire(l, k) < 0) break;
  let layer = 0;
  const g = new Float32Array(nFF);
  const none = new Float32Array(nFF).fill(-1);
  for (let i = 0; i < nFF; i++) g[i] = rnd() < 0.1 ? 1 : -1;
  const listA = new Int32Array(nFF);
  const listG = new Float32Array(nFF);
  const missPos = new Int32Array(nFF);
  let sink = 0;
  let misses = 0;
  const scan = (v: Float32Array) => () => {
    cache.beginStep();
    layer = (layer + 1) % layers;
    let hits = 0;
    misses = 0;
    for (let k = 0; k < nFF; k++) {
      const x = v[k];
      if (!(x > 0)) continue;
      const slot = cache.lookup(layer, k);
      if (slot >= 0) {
        listA[hits] = cache.address(slot);
        listG[hits++] = x;
      } else missPos[misses++] = k;
    }
    sink += hits + misses;
  };
  const tNone = timeCalls(scan(none), seconds * 0.4);
  const tSome = timeCalls(scan(g), seconds * 0.4);
  const fired = g.reduce((a, v) => a + (v > 0 ? 1 : 0), 0);
  // per miss: a cold slot, a request object, then (once read) its address in the kernel's list
  const requests: { fileOffset: number; length: number; dst: number; tag: number }[] = [];
  const perMiss =
    timeCalls(() => {
      cache.beginStep();
      requests.length = 0;
      const n = Math.min(misses, 256);
      for (let i = 0; i < n; i++) {
        const k = missPos[i];
        const slot = cache.acquire(layer, k);
        if (slot < 0) break;
        requests.push({ fileOffset: k * 4096, length: 4096, dst: cache.address(slot), tag: slot });
      }
      for (let i = 0; i < requests.length; i++) listA[i] = cache.address(cache.peek(layer, missPos[i]));
      sink += requests.length;
      // the next round finds them cached: forget them so that they miss again
      for (const r of requests) cache.release(r.tag);
    }, seconds * 0.2) / Math.max(1, Math.min(misses, 256));
  void sink;
  return { perNeuron: tNone / nFF, perLookup: Math.max(0, (tSome - tNone) / Math.max(1, fired)), perMiss };
}

/** Main-thread work between two read batches in the read probe, as between two layers' reads. */
const GAP_MS = 2;

/**
 * Random reads of `bytes` at bundle offsets of the store (O_DIRECT, verified as the runtime
 * verifies them), in batches as the runtime issues a layer's misses: one submit of n requests, a
 * short job on a pool of `threads` compute threads (the runtime computes the hits right after
 * the submit; afterwards its workers spin a while before sleeping, which on a small machine takes
 * CPU from the read threads), then wait for the last read. Per queue depth, batches of n = QD,
 * 4 QD and 16 QD; every depth and size takes its turn in each round, round after round, so that
 * a change in the machine's load meanwhile falls on all of them alike; the median wall time of
 * each is kept. The submit call's own time is the main thread's share.
 */
async function probeReads(
  store: NeuronStore,
  bytes: number,
  depths: number[],
  scale: number,
  threads: number,
): Promise<IoTable> {
  const sizes = (qd: number) => [qd, 4 * qd, 16 * qd];
  const most = Math.max(...depths.map((q) => 16 * q));
  const arena = new Arena(most * bytes + (2 << 20));
  const base = arena.alloc(most * bytes, 4096);
  const scratch = arena.alloc(64 * 1024 * 4, 64);
  const pool = await ThreadPool.create(arena.memory, threads);
  const add = pool.fn("add_inplace");
  const args = new Int32Array(4);
  const layers = store.ffn.layers.length;
  const verify = store.verifier("always");
  const seconds = 0.4 * depths.length * scale;
  const next = () => {
    const L = store.layer(Math.floor(rnd() * layers));
    return L.offset + Math.floor(rnd() * L.neurons) * L.bundleBytes;
  };
  const gap = new Float64Array(1 << 18);
  const readers = depths.map((qd) =>
    FlashReader.open(store.path, { memory: arena.memory, queueDepth: qd, direct: "auto", verify, onWarning: () => {} }),
  );
  try {
    const times = depths.map((q) => sizes(q).map(() => [] as number[]));
    const sync = depths.map(() => [] as number[]);
    const batch = async (d: number, k: number) => {
      const n = sizes(depths[d])[k];
      // the runtime computes for a while between two layers' batches (attention, gate): the
      // device sits idle meanwhile, and a batch after a pause measured slower than back to back
      const until = performance.now() + GAP_MS;
      while (performance.now() < until) for (let i = 0; i < 4096; i++) gap[(i * 4099) & (gap.length - 1)] += 1;
      const req: FlashReadRequest[] = [];
      for (let i = 0; i < n; i++) req.push({ fileOffset: next(), length: bytes, dst: base + i * bytes });
      const t0 = performance.now();
      const done = new Promise<void>((resolve, reject) =>
        readers[d].submit(req, null, (e) => (e ? reject(e) : resolve())),
      );
      const t1 = performance.now();
      // a job split over every thread, as the hits' up/down right after the submit
      args[0] = scratch;
      args[1] = scratch;
      pool.run(add, args, 2, 64 * 1024, 64);
      await done;
      times[d][k].push((performance.now() - t0) / 1000);
      sync[d].push((t1 - t0) / 1000 / n);
    };
    for (let d = 0; d < depths.length; d++) await batch(d, 0); // warm up (first issue, JIT)
    for (const t of times) t[0].length = 0;
    for (const s of sync) s.length = 0;
    const end = performance.now() + seconds * 1000;
    do {
      for (let d = 0; d < depths.length; d++) for (let k = 0; k < 3; k++) await batch(d, k);
    } while (performance.now() < end || times[0][0].length < 3);
    const cells: IoCell[] = depths.map((qd, d) => {
      const batches = sizes(qd).map((n, k) => ({ n, perSecond: n / median(times[d][k]) }));
      return { bytes, queueDepth: qd, iops: batches[batches.length - 1].perSecond, batches, submit: median(sync[d]) };
    });
    return { direct: readers[0].direct, threadPool: visibleThreadPoolSize(), cells, loadAverage: loadavg()[0] };
  } finally {
    for (const r of readers) await r.close();
    await pool.dispose();
  }
}

/**
 * Reads of whole gate-row chunks (`bytes`, page aligned, from a random layer's gate-row copy at a
 * random row) as OffloadedFFN streams them (split by the reader into reads of at most 1 MiB, up to
 * QD at once), with a pool of `threads` around, per queue depth: one chunk per batch, median time.
 */
async function probeStream(
  store: NeuronStore,
  bytes: number,
  depths: number[],
  scale: number,
  threads: number,
): Promise<IoTable> {
  const arena = new Arena(bytes + (2 << 20));
  const base = arena.alloc(bytes, 4096);
  const pool = await ThreadPool.create(arena.memory, threads);
  const layers = store.ffn.layers.length;
  const verify = store.verifier("always");
  const readers = depths.map((qd) =>
    FlashReader.open(store.path, { memory: arena.memory, queueDepth: qd, direct: "auto", verify, onWarning: () => {} }),
  );
  try {
    const times = depths.map(() => [] as number[]);
    const seconds = 0.25 * depths.length * scale;
    const end = performance.now() + seconds * 1000;
    do {
      for (let d = 0; d < depths.length; d++) {
        const L = store.layer(Math.floor(rnd() * layers));
        const span = Math.ceil((L.neurons * L.rowBytes) / 4096) * 4096;
        const at = L.gateRows! + Math.floor((rnd() * Math.max(0, span - bytes)) / 4096) * 4096;
        const t0 = performance.now();
        await readers[d].read([{ fileOffset: at, length: Math.min(bytes, span), dst: base }]);
        times[d].push((performance.now() - t0) / 1000);
      }
    } while (performance.now() < end || times[0].length < 3);
    const cells: IoCell[] = depths.map((qd, d) => {
      const perSecond = 1 / median(times[d]);
      return { bytes, queueDepth: qd, iops: perSecond, batches: [{ n: 1, perSecond }], submit: 0 };
    });
    return { direct: readers[0].direct, threadPool: visibleThreadPoolSize(), cells, loadAverage: loadavg()[0] };
  } finally {
    for (const r of readers) await r.close();
    await pool.dispose();
  }
}

/** Main-thread seconds per read to submit it, at queue depth `qd` (interpolated in log qd). */
export function submitAt(table: IoTable, qd: number): number {
  return lerpDepth(table, qd, (c) => c.submit);
}

/** Reads per second of a batch of n in a cell: interpolated in log n between its measured sizes. */
function cellRate(c: IoCell, n: number): number {
  const b = c.batches;
  if (n <= b[0].n) return b[0].perSecond;
  for (let i = 1; i < b.length; i++) {
    if (n <= b[i].n) {
      const t = Math.log(n / b[i - 1].n) / Math.log(b[i].n / b[i - 1].n);
      return b[i - 1].perSecond + t * (b[i].perSecond - b[i - 1].perSecond);
    }
  }
  return b[b.length - 1].perSecond;
}

/**
 * Seconds a batch of n reads takes at queue depth qd (submit included): n / the rate measured
 * for batches of that size, interpolated in log n between the measured sizes (below the smallest,
 * its rate; past the largest, the rate while the queue stays full) and in log qd between depths.
 * As for iopsAt, a deeper queue is taken to be at least as fast for the same batch.
 */
export function batchSecondsAt(table: IoTable, qd: number, n: number): number {
  if (n <= 0) return 0;
  const cells = [...table.cells].sort((a, b) => a.queueDepth - b.queueDepth);
  let best = 0;
  const rates = cells.map((c) => (best = Math.max(best, cellRate(c, n))));
  return n / lerpDepth({ ...table, cells }, qd, (c) => rates[cells.indexOf(c)]);
}

/** f of the cells, interpolated in log qd between measured depths (clamped at the ends and at libuv's pool size). */
function lerpDepth(table: IoTable, qd: number, f: (c: IoCell) => number): number {
  const cells = [...table.cells].sort((a, b) => a.queueDepth - b.queueDepth);
  if (cells.length === 0) throw new Error("empty read table");
  const q = Math.min(qd, table.threadPool);
  if (q <= cells[0].queueDepth) return f(cells[0]);
  for (let i = 1; i < cells.length; i++) {
    const a = cells[i - 1],
      b = cells[i];
    if (q <= b.queueDepth) {
      const t = Math.log(q / a.queueDepth) / Math.log(b.queueDepth / a.queueDepth);
      return f(a) + t * (f(b) - f(a));
    }
  }
  return f(cells[cells.length - 1]);
}

/**
 * Reads per second at queue depth `qd` from a table, interpolated in log(qd) between measured
 * depths (clamped at the ends: past the deepest measured depth nothing gets faster). A deeper
 * queue is taken to be at least as fast as a shallower one (a running maximum over depth): on a
 * shared machine a cell measured during a burst of other work reads low, and the search should
 * not prefer a shallower queue for that.
 */
export function iopsAt(table: IoTable, qd: number): number {
  const sorted = [...table.cells].sort((a, b) => a.queueDepth - b.queueDepth);
  if (sorted.length === 0) throw new Error("empty read table");
  let best = 0;
  const cells = sorted.map((c) => ({ queueDepth: c.queueDepth, iops: (best = Math.max(best, c.iops)) }));
  const q = Math.min(qd, table.threadPool);
  if (q <= cells[0].queueDepth) return cells[0].iops * (q / cells[0].queueDepth);
  for (let i = 1; i < cells.length; i++) {
    const a = cells[i - 1],
      b = cells[i];
    if (q <= b.queueDepth) {
      const t = Math.log(q / a.queueDepth) / Math.log(b.queueDepth / a.queueDepth);
      return a.iops + t * (b.iops - a.iops);
    }
  }
  return cells[cells.length - 1].iops;
}
