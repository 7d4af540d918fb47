/**
 * The probe's flash reads: random reads of the store's bundles (and gate pages) in batches as the
 * runtime issues a layer's misses, and whole gate-row chunks as the runtime streams them, through
 * the runtime's own FlashReader on the store's device.
 */
import { loadavg } from "node:os";
import type { NeuronStore } from "../format/store/index.js";
import { FlashReader, visibleThreadPoolSize, type FlashReadRequest } from "../io/flash-reader.js";
import { Arena } from "../runtime/arena.js";
import { ThreadPool } from "../runtime/pool.js";
import { median } from "./median.js";
import type { IoCell, IoTable } from "./probe-results.js";
import { rnd } from "./probe-timing.js";

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
export async function probeReads(
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
 * With `region` "bundles", runs of adjacent bundles from a random layer's bundles instead: what a
 * layer's adjacent misses become once the reader coalesces them.
 */
export async function probeStream(
  store: NeuronStore,
  bytes: number,
  depths: number[],
  scale: number,
  threads: number,
  region: "gate rows" | "bundles" = "gate rows",
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
        const bundles = region === "bundles";
        const span = bundles ? L.neurons * L.bundleBytes : Math.ceil((L.neurons * L.rowBytes) / 4096) * 4096;
        const at = (bundles ? L.offset : L.gateRows!) + Math.floor((rnd() * Math.max(0, span - bytes)) / 4096) * 4096;
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
