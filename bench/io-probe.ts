/**
 * Read bandwidth of this machine's storage through the flash reader (src/io/flash-reader.ts):
 * random aligned reads of each size at each queue depth, O_DIRECT into a WebAssembly.Memory,
 * printed as a table of MB/s (and IOPS). This is what the planner's read-size / queue-depth
 * choice rests on, and the yardstick the runtime's achieved read bandwidth is compared with.
 *
 *   node dist/bench/io-probe.js [--file PATH] [--size 1GiB] [--sizes 4k,16k,64k,256k,1m]
 *                               [--qd 1,4,16,64] [--seconds 1] [--buffered] [--json]
 *
 * Without --file it writes a scratch file in the OS temp directory (deleted afterwards). Reads go
 * the way the runtime's go (native AIO where built, else libuv; the table's title says which).
 * Through libuv, its thread pool bounds the real queue depth and is sized when node starts, so when
 * UV_THREADPOOL_SIZE is below the largest depth asked for, the probe re-runs itself with it set.
 * With O_DIRECT the page cache plays no part (the probe checks residency with fincore where it
 * exists); a host-side cache under a VM still can, so compare ratios from one run.
 */
import { spawnSync } from "node:child_process";
import { closeSync, existsSync, fsyncSync, openSync, rmSync, statSync, writeSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { fileURLToPath } from "node:url";
import { FlashReader, visibleThreadPoolSize, type FlashReadRequest } from "../src/io/flash-reader.js";

interface ProbeOptions {
  file?: string;
  size: number;
  sizes: number[];
  depths: number[];
  seconds: number;
  direct: boolean;
  json: boolean;
}

export interface ProbeCell {
  readBytes: number;
  queueDepth: number;
  mbPerSec: number;
  iops: number;
  reads: number;
}

function parseSize(s: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([kmg]?)(i?b)?$/i.exec(s.trim());
  if (!m) throw new Error(`"${s}" is not a size (e.g. 4k, 1m, 1GiB)`);
  return Math.round(
    Number(m[1]) * ({ "": 1, k: 1024, m: 1 << 20, g: 1 << 30 } as Record<string, number>)[m[2].toLowerCase()],
  );
}

function parseArgs(argv: string[]): ProbeOptions {
  const o: ProbeOptions = {
    size: 1 << 30,
    sizes: [4096, 16384, 65536, 262144, 1 << 20],
    depths: [1, 4, 16, 64],
    seconds: 1,
    direct: true,
    json: false,
  };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i],
      v = () => {
        if (i + 1 >= argv.length) throw new Error(`${a} needs a value`);
        return argv[++i];
      };
    if (a === "--file") o.file = v();
    else if (a === "--size") o.size = parseSize(v());
    else if (a === "--sizes") o.sizes = v().split(",").map(parseSize);
    else if (a === "--qd") o.depths = v().split(",").map(Number);
    else if (a === "--seconds") o.seconds = Number(v());
    else if (a === "--buffered") o.direct = false;
    else if (a === "--json") o.json = true;
    else throw new Error(`unknown option ${a}`);
  }
  for (const s of o.sizes) if (s <= 0 || s % 4096) throw new Error(`read size ${s} is not a positive multiple of 4096`);
  for (const d of o.depths)
    if (!Number.isInteger(d) || d < 1) throw new Error(`queue depth ${d} is not a positive integer`);
  return o;
}

/** A scratch file of non-repeating-looking bytes (so no layer below can deduplicate or compress it). */
function makeFile(path: string, size: number): void {
  const chunk = Buffer.alloc(16 << 20);
  let s = 12345;
  for (let i = 0; i < chunk.length; i += 4) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    chunk.writeUInt32LE(s, i);
  }
  const fd = openSync(path, "w");
  try {
    for (let o = 0, n = 0; o < size; o += chunk.length, n++) {
      chunk.writeUInt32LE(n, 0); // every chunk differs
      writeSync(fd, chunk, 0, Math.min(chunk.length, size - o), o);
    }
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

function residentBytes(path: string): number | undefined {
  const r = spawnSync("fincore", ["--bytes", "--noheadings", "--output", "RES", path], { encoding: "utf8" });
  return r.status === 0 ? Number(r.stdout.trim()) : undefined;
}

/** Keep `qd` random reads of `readBytes` in flight for `seconds`; bandwidth over the busy time. */
async function measure(
  reader: FlashReader,
  fileBytes: number,
  readBytes: number,
  qd: number,
  seconds: number,
): Promise<ProbeCell> {
  const slots = Math.floor(fileBytes / readBytes);
  let seed = (readBytes * 31 + qd) >>> 0;
  const next = () => {
    seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
    return (seed % slots) * readBytes;
  };
  reader.resetStats();
  const t0 = performance.now();
  const end = t0 + seconds * 1000;
  let reads = 0;
  await new Promise<void>((resolve, reject) => {
    let live = 0;
    const start = (slot: number) => {
      const req: FlashReadRequest[] = [{ fileOffset: next(), length: readBytes, dst: slot * readBytes }];
      live++;
      reader.submit(req, null, (err) => {
        live--;
        if (err) return reject(err);
        reads++;
        if (performance.now() < end) start(slot);
        else if (live === 0) resolve();
      });
    };
    for (let i = 0; i < qd; i++) start(i);
  });
  const secs = (performance.now() - t0) / 1000;
  const bytes = reads * readBytes;
  return { readBytes, queueDepth: qd, mbPerSec: bytes / 1e6 / secs, iops: reads / secs, reads };
}

function fmtSize(b: number): string {
  return b >= 1 << 20 ? `${b >> 20} MiB` : `${b >> 10} KiB`;
}

export async function probe(
  o: ProbeOptions,
): Promise<{ direct: boolean; backend: string; cells: ProbeCell[]; file: string; resident?: number }> {
  const own = !o.file;
  const file = o.file ?? join(tmpdir(), `powerinfer-io-probe-${process.pid}.bin`);
  if (own) {
    process.stderr.write(`io-probe: writing a ${(o.size / 2 ** 30).toFixed(2)} GiB scratch file ${file}\n`);
    makeFile(file, o.size);
  } else if (!existsSync(file)) throw new Error(`${file} does not exist`);
  // drop the file from the page cache so that a buffered run cannot start warm either
  spawnSync("dd", [`if=${file}`, "iflag=nocache", "count=0", "status=none"]);
  const fileBytes = statSync(file).size;
  const maxSize = Math.max(...o.sizes),
    maxQd = Math.max(...o.depths);
  const memBytes = maxSize * maxQd + 65536;
  const memory = new WebAssembly.Memory({ initial: Math.ceil(memBytes / 65536), maximum: 65536, shared: true });
  const cells: ProbeCell[] = [];
  let direct = false;
  let backend = "";
  try {
    for (const qd of o.depths) {
      const reader = FlashReader.open(file, {
        memory,
        queueDepth: qd,
        maxReadBytes: maxSize,
        direct: o.direct ? "auto" : false,
        onWarning: (m) => process.stderr.write(`io-probe: ${m}\n`),
      });
      direct = reader.direct;
      backend =
        reader.backend === "aio"
          ? "native AIO (its I/O thread)"
          : `fs.read on ${visibleThreadPoolSize()} libuv threads`;
      try {
        for (const size of o.sizes) {
          if (size > fileBytes) continue;
          cells.push(await measure(reader, fileBytes, size, qd, o.seconds));
          if (!o.json) process.stderr.write(".");
        }
      } finally {
        await reader.close();
      }
    }
    if (!o.json) process.stderr.write("\n");
    return { direct, backend, cells, file, resident: residentBytes(file) };
  } finally {
    if (own) rmSync(file, { force: true });
  }
}

function table(cells: ProbeCell[], sizes: number[], depths: number[]): string {
  const head = ["read size", ...depths.map((d) => `QD ${d}`)];
  const rows = sizes.map((s) => [
    fmtSize(s),
    ...depths.map((d) => {
      const c = cells.find((x) => x.readBytes === s && x.queueDepth === d);
      return c ? `${c.mbPerSec.toFixed(0)} MB/s (${(c.iops / 1000).toFixed(1)}K IOPS)` : "-";
    }),
  ]);
  const w = head.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i].length)));
  const line = (r: string[]) => `| ${r.map((c, i) => c.padEnd(w[i])).join(" | ")} |`;
  return [line(head), `|${w.map((n) => "-".repeat(n + 2)).join("|")}|`, ...rows.map(line)].join("\n");
}

async function main(): Promise<void> {
  const o = parseArgs(process.argv.slice(2));
  const maxQd = Math.max(...o.depths);
  if (visibleThreadPoolSize() < maxQd && !process.env.POWERINFER_IO_PROBE_CHILD) {
    // the pool is already running with fewer threads than the deepest queue asked for
    const r = spawnSync(process.execPath, [fileURLToPath(import.meta.url), ...process.argv.slice(2)], {
      stdio: "inherit",
      env: { ...process.env, UV_THREADPOOL_SIZE: String(maxQd), POWERINFER_IO_PROBE_CHILD: "1" },
    });
    process.exitCode = r.status ?? 1;
    return;
  }
  const res = await probe(o);
  if (o.json) {
    console.log(
      JSON.stringify({
        direct: res.direct,
        backend: res.backend,
        threadPool: visibleThreadPoolSize(),
        cells: res.cells,
      }),
    );
    return;
  }
  console.log(
    `random reads, ${res.direct ? "O_DIRECT" : "buffered (page cache)"}, ${res.backend}, ${o.seconds} s per cell`,
  );
  console.log(table(res.cells, o.sizes, o.depths));
  if (res.resident !== undefined)
    console.log(
      `page cache holds ${(res.resident / 2 ** 20).toFixed(1)} MiB of the probe file afterwards${res.direct ? " (O_DIRECT: should be ~0)" : ""}`,
    );
}

if (process.argv[1] && fileURLToPath(import.meta.url) === process.argv[1]) {
  main().catch((e) => {
    console.error(`io-probe: ${e instanceof Error ? e.message : e}`);
    process.exitCode = 1;
  });
}
