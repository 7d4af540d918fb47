/**
 * The engine in a browser: a dedicated module worker (OPFS sync access handles and Atomics.wait
 * exist only in workers) that runs the same library as Node: loadModel, the forward pass, the
 * thread pool (Web Workers over the shared memory), the flash reader (OPFS reader workers). The
 * page talks to it through index.ts: requests {id, op, args}, answers {id, ok, result | error},
 * events {event, ...} (copy and conversion progress, generated text with live stats).
 */
import { offloadFigures } from "../model/offload/stats.js";
import { loadModel, type Model } from "../api/model.js";
import { convertToStore } from "../offline/convert.js";
import { browserPlatform } from "./platform.js";
import { registerFile, unregisterFile } from "./shims/fs.js";
import { opfsPath } from "./opfs-paths.js";
import { checkName, importFile, importUrl, listOpfs, removeOpfs, type PickedFile } from "./opfs-import.js";
import { opfsRoot, web, type SyncAccessHandle } from "./web-types.js";

export interface LoadArgs {
  name: string;
  /** bytes; a neuron store runs under it (wasm memory + the buffers it owns) */
  budget?: number;
  threads?: number;
  contextSize?: number;
  /** reader workers for OPFS (default 4; they start with the engine's first load or conversion, which fixes the count) */
  readers?: number;
  /** the most bytes one wasm memory may hold (default 4 GiB); a model larger is split among several (tests, small per-tab limits) */
  shardBytes?: number;
}

export interface GenerateArgs {
  prompt: string;
  maxTokens?: number;
  temperature?: number;
  seed?: number;
  topK?: number;
  topP?: number;
  minP?: number;
}

/** Per layer (or expert group) of a store: neurons that hit the hot region, the cold LRU, and misses. */
export interface LayerCache {
  hot: number;
  cold: number;
  misses: number;
}

export interface EngineStats {
  model: string;
  kind: "gguf" | "store";
  kernels: string;
  threads: number;
  readers: number;
  budget: number | null;
  /** the shared wasm memories' sizes summed: they only grow, so this is their peak */
  wasmMemoryBytes: number;
  /** how many wasm memories the model is split into (one unless it needs more than LoadArgs.shardBytes, default 4 GiB) */
  memories: number;
  /** what the model put in wasm memory at load */
  residentBytes: number;
  promptTokens: number;
  generatedTokens: number;
  prefillTokensPerSecond: number;
  decodeTokensPerSecond: number;
  /** generated tokens per second so far, wall clock from the first generated token */
  tokensPerSecond: number;
  stopReason: string | null;
  tokens: number[];
  offload: null | {
    mode: string;
    hitRate: number;
    hotHits: number;
    coldHits: number;
    misses: number;
    bytesRead: number;
    /** MB/s read from OPFS over the generation (bytes read / wall time) */
    readMBps: number;
    ioWaitMs: number;
    neuronsComputed: number;
    neuronsTotal: number;
    cacheBytes: number;
    cacheSlots: number;
    /** neuron bundles in the store (layers x neurons, x experts for a mixture) */
    bundles: number;
    /** experts per layer (0: a dense FFN); `layers` then has one entry per (layer, expert) */
    experts: number;
    layers: LayerCache[];
    /** the flash reader since load: reads issued, and the most in flight at once (across the reader workers) */
    reads: number;
    maxReadsInFlight: number;
  };
}

interface Loaded {
  name: string;
  model: Model;
  handle: SyncAccessHandle;
  budget: number | null;
  build: string;
  readers: number;
}

let loaded: Loaded | null = null;
const aborts = new Map<number, AbortController>();

function emit(event: string, data: object): void {
  web.postMessage({ event, ...data });
}

async function unload(): Promise<void> {
  const l = loaded;
  if (!l) return;
  loaded = null;
  await l.model.dispose();
  const { readers } = await browserPlatform();
  await readers.release(l.name);
  unregisterFile(opfsPath(l.name));
  l.handle.close();
}

/** Open `name` read-only for this thread's synchronous reads (the store and GGUF readers). */
async function openForEngine(name: string): Promise<SyncAccessHandle> {
  const root = await opfsRoot();
  let fh;
  try {
    fh = await root.getFileHandle(name);
  } catch {
    throw new Error(`${name}: no such model in this browser's private file system (copy it in first)`);
  }
  const file = await fh.getFile();
  const h = await fh.createSyncAccessHandle({ mode: "read-only" });
  registerFile(opfsPath(name), h, file.lastModified);
  return h;
}

async function load(a: LoadArgs): Promise<object> {
  checkName(a.name);
  await unload();
  const { build, readers } = await browserPlatform(a.readers ?? 4);
  const handle = await openForEngine(a.name);
  try {
    const model = await loadModel({
      modelPath: opfsPath(a.name),
      threads: a.threads ?? Math.max(1, Math.min(web.navigator.hardwareConcurrency ?? 1, 8)),
      memoryBudget: a.budget,
      budgetCounts: "wasm",
      contextSize: a.contextSize,
      shardBytes: a.shardBytes,
    });
    loaded = { name: a.name, model, handle, budget: a.budget ?? null, build, readers: readers.count };
  } catch (e) {
    unregisterFile(opfsPath(a.name));
    handle.close();
    throw e;
  }
  const m = loaded.model;
  const layout = m.offloadLayout;
  return {
    name: a.name,
    kind: layout ? "store" : "gguf",
    kernels: build,
    threads: m.threads,
    contextSize: m.contextSize,
    wasmMemoryBytes: m.wasmMemoryBytes,
    memories: m.wasmMemories,
    residentBytes: m.residentBytes,
    layout: layout
      ? { budget: layout.budget, fixed: layout.fixed, cacheBytes: layout.cacheBytes, slots: layout.slots }
      : null,
  };
}

/** The offloaded FFN's flash reader's counters (the Model keeps its LlamaModel private). */
function readerCounts(m: Model): { reads: number; maxReadsInFlight: number } {
  const llama = (
    m as unknown as { llama: { offloaded?: { reader: { stats(): { reads: number; maxInFlight: number } } } } }
  ).llama;
  const r = llama.offloaded?.reader.stats();
  return { reads: r?.reads ?? 0, maxReadsInFlight: r?.maxInFlight ?? 0 };
}

function stats(
  l: Loaded,
  gen: { stats?: { [k: string]: unknown }; tokens: number[] } | null,
  t0: number,
  tFirst: number,
): EngineStats {
  const m = l.model;
  const s = m.offloadStats();
  const g = (gen?.stats ?? {}) as Record<string, number | string | undefined>;
  const now = performance.now();
  const generated = gen?.tokens.length ?? 0;
  let offload: EngineStats["offload"] = null;
  if (s) {
    const layers: LayerCache[] = [];
    const groups = s.groups;
    if (groups) {
      for (let i = 0; i < groups.steps.length; i++)
        layers.push({ hot: groups.hotHits[i], cold: groups.coldHits[i], misses: groups.misses[i] });
    }
    const layout = m.offloadLayout!;
    const perStep = s.steps > 0 ? s.neuronsTotal / s.steps : 0;
    offload = {
      mode: m.offloadMode ?? "",
      hitRate: offloadFigures(s).hitRate,
      hotHits: s.hotHits,
      coldHits: s.coldHits,
      misses: s.misses,
      bytesRead: s.bytesRead,
      readMBps: now > t0 ? s.bytesRead / 1e6 / ((now - t0) / 1000) : 0,
      ioWaitMs: s.ioWaitMs,
      neuronsComputed: s.neuronsComputed,
      neuronsTotal: s.neuronsTotal,
      cacheBytes: layout.cacheBytes,
      cacheSlots: layout.slots,
      bundles: Math.round(perStep * (groups ? groups.steps.length : 0)),
      experts: groups?.experts ?? 0,
      ...readerCounts(m),
      layers,
    };
  }
  return {
    model: l.name,
    kind: s ? "store" : "gguf",
    kernels: l.build,
    threads: m.threads,
    readers: l.readers,
    budget: l.budget,
    wasmMemoryBytes: m.wasmMemoryBytes,
    memories: m.wasmMemories,
    residentBytes: m.residentBytes,
    promptTokens: Number(g.promptTokens ?? 0),
    generatedTokens: generated,
    prefillTokensPerSecond: Number(g.prefillTokensPerSecond ?? 0),
    decodeTokensPerSecond: Number(g.decodeTokensPerSecond ?? 0),
    tokensPerSecond: generated > 1 && tFirst > 0 ? ((generated - 1) / (now - tFirst)) * 1000 : 0,
    stopReason: (g.stopReason as string | undefined) ?? null,
    tokens: gen ? [...gen.tokens] : [],
    offload,
  };
}

async function generate(id: number, a: GenerateArgs): Promise<object> {
  const l = loaded;
  if (!l) throw new Error("no model is loaded");
  if (typeof a.prompt !== "string") throw new TypeError("generate: prompt must be a string");
  const controller = new AbortController();
  aborts.set(id, controller);
  // counters are cumulative per model: report this generation's, from a snapshot taken now
  const before = l.model.offloadStats();
  const t0 = performance.now();
  let tFirst = 0;
  let lastEmit = 0;
  const gen = l.model.generate(a.prompt, {
    maxTokens: a.maxTokens ?? 64,
    temperature: a.temperature ?? 0.8,
    seed: a.seed,
    topK: a.topK,
    topP: a.topP,
    minP: a.minP,
    signal: controller.signal,
  } as Parameters<Model["generate"]>[1]);
  let text = "";
  const diff = (s: EngineStats): EngineStats => {
    if (!before || !s.offload) return s;
    const o = s.offload;
    o.hotHits -= before.hotHits;
    o.coldHits -= before.coldHits;
    o.misses -= before.misses;
    o.bytesRead -= before.bytesRead;
    o.ioWaitMs -= before.ioWaitMs;
    o.neuronsComputed -= before.neuronsComputed;
    o.neuronsTotal -= before.neuronsTotal;
    o.hitRate = offloadFigures(o).hitRate;
    o.readMBps = o.bytesRead / 1e6 / ((performance.now() - t0) / 1000);
    const g = before.groups;
    if (g)
      o.layers.forEach((x, i) => {
        x.hot -= g.hotHits[i];
        x.cold -= g.coldHits[i];
        x.misses -= g.misses[i];
      });
    return s;
  };
  try {
    for await (const piece of gen) {
      if (tFirst === 0) tFirst = performance.now();
      text += piece;
      const now = performance.now();
      if (now - lastEmit > 100) {
        lastEmit = now;
        emit("token", { id, text, stats: diff(stats(l, gen as never, t0, tFirst)) });
        // a turn of the event loop, so that an abort (the Stop button) is seen between tokens
        // even when nothing in the forward pass waits (a model in memory)
        await new Promise<void>((r) => setImmediate(r));
      }
    }
  } finally {
    aborts.delete(id);
  }
  const final = diff(stats(l, gen as never, t0, tFirst));
  emit("token", { id, text, stats: final });
  return { text, stats: final };
}

async function convert(id: number, a: { input: string; output: string; type?: string }): Promise<object> {
  checkName(a.input);
  checkName(a.output);
  if (loaded && (loaded.name === a.output || loaded.name === a.input)) await unload();
  await browserPlatform();
  const handle = await openForEngine(a.input);
  try {
    let last = 0;
    const r = await convertToStore({
      input: opfsPath(a.input),
      output: opfsPath(a.output),
      type: a.type as never,
      fsync: true,
      onProgress: (p) => {
        const now = performance.now();
        if (now - last > 100 || p.bytesDone === p.bytesTotal) {
          last = now;
          emit("progress", { id, stage: `convert ${p.stage}`, loaded: p.bytesDone, total: p.bytesTotal });
        }
      },
    });
    return { output: a.output, bytes: r.bytes, seconds: r.seconds };
  } finally {
    unregisterFile(opfsPath(a.input));
    handle.close();
  }
}

type Op = (id: number, args: never) => Promise<unknown>;
const ops: Record<string, Op> = {
  list: async () => listOpfs(),
  remove: async (_id, a: { name: string }) => {
    checkName(a.name);
    if (loaded?.name === a.name) await unload();
    await removeOpfs(a.name);
    return true;
  },
  importUrl: async (id, a: { url: string; name: string }) => {
    if (loaded?.name === a.name) await unload();
    const c = new AbortController();
    aborts.set(id, c);
    try {
      return await importUrl(a.url, a.name, (p) => emit("progress", { id, stage: "copy", ...p }), c.signal);
    } finally {
      aborts.delete(id);
    }
  },
  importFile: async (id, a: { file: PickedFile; name: string }) => {
    if (loaded?.name === a.name) await unload();
    const c = new AbortController();
    aborts.set(id, c);
    try {
      return await importFile(a.file, a.name, (p) => emit("progress", { id, stage: "copy", ...p }), c.signal);
    } finally {
      aborts.delete(id);
    }
  },
  convert: (id, a: { input: string; output: string; type?: string }) => convert(id, a),
  load: async (_id, a: LoadArgs) => load(a),
  unload: async () => unload(),
  generate: (id, a: GenerateArgs) => generate(id, a),
  stats: async () => (loaded ? stats(loaded, null, performance.now(), 0) : null),
  abort: async (_id, a: { target: number }) => {
    aborts.get(a.target)?.abort();
    return true;
  },
};

web.onmessage = (ev) => {
  const { id, op, args } = ev.data as { id: number; op: string; args: unknown };
  const f = ops[op];
  if (!f) {
    web.postMessage({ id, ok: false, error: `unknown operation ${op}` });
    return;
  }
  f(id, args as never).then(
    (result) => web.postMessage({ id, ok: true, result }),
    (e: unknown) =>
      web.postMessage({
        id,
        ok: false,
        error: e instanceof Error ? `${e.message}` : String(e),
        name: e instanceof Error ? e.name : "Error",
      }),
  );
};
web.postMessage({ event: "started" });
