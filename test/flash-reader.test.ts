/**
 * The flash reader: bytes land where asked and equal the file's, adjacent requests are coalesced
 * (and big ones split) and near ones bridged exactly as documented, the queue depth holds, O_DIRECT really bypasses the
 * page cache, refusals fall back with one warning, and every failure (injected I/O error, short
 * read, failed verification, throwing callback) rejects with a clear error and never reports an
 * unread request as complete.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import {
  closeSync,
  existsSync,
  fsyncSync,
  openSync,
  readFileSync,
  truncateSync,
  writeFileSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { aio } from "../src/io/aio.js";
import { FlashReader, FlashReadError, type FlashReaderOptions, type FlashReadRequest } from "../src/io/flash-reader.js";
import { BRIDGE_GAP_BYTES, BRIDGE_SLOT_BYTES } from "../src/io/read-bridge.js";
import { NeuronStore, StoreError } from "../src/format/store/index.js";
import { convertToStore } from "../src/offline/convert.js";
import { SHARED, tempDir } from "./helpers.js";

const K4 = 4096;
const dir = tempDir("powerinfer-flash-");
const FILE = join(dir, "data.bin");
const FILE_BYTES = 8 << 20;

function pseudoRandomBytes(n: number, seed: number): Uint8Array {
  const out = new Uint8Array(n);
  let s = seed >>> 0;
  for (let i = 0; i < n; i += 4) {
    s = (Math.imul(s, 1664525) + 1013904223) >>> 0;
    out[i] = s;
    out[i + 1] = s >>> 8;
    out[i + 2] = s >>> 16;
    out[i + 3] = s >>> 24;
  }
  return out;
}

const content = pseudoRandomBytes(FILE_BYTES, 42);
{
  const fd = openSync(FILE, "w");
  writeSync(fd, content);
  fsyncSync(fd); // clean pages, so the page-cache checks below can evict them
  closeSync(fd);
}

function memory(pages = 256): WebAssembly.Memory {
  return new WebAssembly.Memory({ initial: pages, maximum: 1024, shared: true });
}

function openWith(
  path: string,
  opts: Partial<FlashReaderOptions> & { memory: FlashReaderOptions["memory"] },
  warnings: string[] = [],
): FlashReader {
  return FlashReader.open(path, { onWarning: (m) => warnings.push(m), ...opts });
}

function bytesAt(mem: WebAssembly.Memory | ArrayBuffer, dst: number, length: number): Uint8Array {
  const b = mem instanceof ArrayBuffer ? mem : mem.buffer;
  return new Uint8Array(b, dst, length);
}

function assertLanded(mem: WebAssembly.Memory | ArrayBuffer, reqs: readonly FlashReadRequest[]): void {
  for (const r of reqs) {
    assert.ok(
      Buffer.from(bytesAt(mem, r.dst, r.length)).equals(content.subarray(r.fileOffset, r.fileOffset + r.length)),
      `request ${String(r.tag)} at ${r.fileOffset}: bytes differ from the file`,
    );
  }
}

/** Random aligned requests with disjoint destinations (random lengths 4-32 KiB). */
function randomRequests(n: number, seed: number): FlashReadRequest[] {
  const rnd = pseudoRandomBytes(n * 8, seed);
  const reqs: FlashReadRequest[] = [];
  let dst = 0;
  for (let i = 0; i < n; i++) {
    const length = K4 * (1 + (rnd[i * 8] % 8));
    const pages = FILE_BYTES / K4 - length / K4;
    const fileOffset = K4 * (((rnd[i * 8 + 1] << 16) | (rnd[i * 8 + 2] << 8) | rnd[i * 8 + 3]) % (pages + 1));
    reqs.push({ fileOffset, length, dst, tag: i });
    dst += length + (rnd[i * 8 + 4] & 1) * K4;
  }
  return reqs;
}

/** Every behaviour below holds for both ways of issuing reads (native AIO only where it was built). */
const BACKENDS: ("threads" | "aio" | "aio-inline")[] = aio().binding ? ["threads", "aio", "aio-inline"] : ["threads"];
const backendOpts = (b: (typeof BACKENDS)[number]): Partial<FlashReaderOptions> =>
  b === "aio-inline" ? { backend: "aio", ioThread: false } : { backend: b };

for (const backend of BACKENDS) {
  const open = (
    path: string,
    opts: Partial<FlashReaderOptions> & { memory: FlashReaderOptions["memory"] },
    warnings: string[] = [],
  ) => openWith(path, { ...backendOpts(backend), ...opts }, warnings);

  test(`[${backend}] random aligned requests land where asked, equal to the file's bytes, each reported once`, async () => {
    const mem = memory();
    const warnings: string[] = [];
    const r = open(FILE, { memory: mem, queueDepth: 8, maxReadBytes: 64 << 10 }, warnings);
    assert.equal(r.direct, true, `O_DIRECT should work on ${dir}: ${r.bufferedReason}`);
    assert.equal(r.backend, backend === "threads" ? "threads" : "aio");
    const reqs = randomRequests(400, 7);
    const seen = new Map<unknown, number>();
    await r.read(reqs, (q) => {
      // its bytes are there when it is reported, not only at the end
      assert.ok(
        Buffer.from(bytesAt(mem, q.dst, q.length)).equals(content.subarray(q.fileOffset, q.fileOffset + q.length)),
      );
      seen.set(q.tag, (seen.get(q.tag) ?? 0) + 1);
    });
    assert.equal(seen.size, reqs.length);
    assert.ok([...seen.values()].every((c) => c === 1));
    assertLanded(mem, reqs);
    const s = r.stats();
    assert.equal(s.requests, 400);
    assert.equal(
      s.bytes,
      reqs.reduce((a, q) => a + q.length, 0),
    );
    assert.ok(s.busySeconds > 0);
    assert.equal(r.pending, 0);
    await r.close();
  });

  test(`[${backend}] coalescing: adjacent in file and memory -> one read, up to maxReadBytes; larger requests split`, async () => {
    const mem = memory();
    const r = open(FILE, { memory: mem, maxReadBytes: 4 * K4 });
    const reqs: FlashReadRequest[] = [
      { fileOffset: 0, length: K4, dst: 0, tag: "a" },
      { fileOffset: K4, length: 2 * K4, dst: K4, tag: "b" }, // adjacent to a in both: same read
      { fileOffset: 3 * K4, length: K4, dst: 10 * K4, tag: "c" }, // adjacent in the file only: new read
      { fileOffset: 50 * K4, length: K4, dst: 11 * K4, tag: "d" }, // adjacent in memory only: new read
      { fileOffset: 40 * K4, length: K4, dst: 12 * K4, tag: "e" }, // adjacent in neither
    ];
    await r.read(reqs);
    assertLanded(mem, reqs);
    let s = r.stats();
    assert.equal(s.reads, 4);
    assert.equal(s.coalesced, 1);

    // ten adjacent 4 KiB requests with a 16 KiB cap: 16 + 16 + 8 KiB
    r.resetStats();
    const ten = Array.from({ length: 10 }, (_, i) => ({
      fileOffset: (100 + i) * K4,
      length: K4,
      dst: (20 + i) * K4,
      tag: i,
    }));
    await r.read(ten);
    assertLanded(mem, ten);
    s = r.stats();
    assert.equal(s.reads, 3);
    assert.equal(s.coalesced, 7);

    // one 40 KiB request with a 16 KiB cap: three reads, one completion after the last
    const small = open(FILE, { memory: mem, maxReadBytes: 4 * K4 });
    const big = [{ fileOffset: 200 * K4, length: 10 * K4, dst: 40 * K4, tag: "big" }];
    let done = 0;
    await small.read(big, () => done++);
    assert.equal(done, 1);
    assertLanded(mem, big);
    assert.equal(small.stats().reads, 3);
    assert.equal(small.stats().splits, 2);
    await Promise.all([r.close(), small.close()]);
  });

  test(`[${backend}] bridging: requests near each other in the file, scattered in memory, share one read through the bridge region`, async () => {
    const mem = memory();
    const bridge = { dst: 128 * K4, bytes: 2 * BRIDGE_SLOT_BYTES };
    const r = open(FILE, { memory: mem, bridge });
    assert.equal(BRIDGE_GAP_BYTES, 3 * K4, "the tests below assume the default gap");
    const reqs: FlashReadRequest[] = [
      { fileOffset: 10 * K4, length: K4, dst: 0, tag: "a" },
      { fileOffset: 12 * K4, length: K4, dst: 5 * K4, tag: "b" }, // one page after a: bridged
      { fileOffset: 13 * K4, length: 2 * K4, dst: 9 * K4, tag: "c" }, // adjacent in the file only: bridged
      { fileOffset: 19 * K4, length: K4, dst: 20 * K4, tag: "d" }, // 4 pages after c, past the gap: new read
      { fileOffset: 20 * K4, length: K4, dst: 21 * K4, tag: "e" }, // adjacent to d in both: coalesced
      { fileOffset: 18 * K4, length: K4, dst: 30 * K4, tag: "f" }, // behind e in the file: new read
    ];
    const seen: unknown[] = [];
    await r.read(reqs, (q) => {
      assert.ok(
        Buffer.from(bytesAt(mem, q.dst, q.length)).equals(content.subarray(q.fileOffset, q.fileOffset + q.length)),
        `${String(q.tag)} reported before its bytes were in place`,
      );
      seen.push(q.tag);
    });
    assert.deepEqual([...seen].sort(), ["a", "b", "c", "d", "e", "f"]);
    assertLanded(mem, reqs);
    let s = r.stats();
    assert.deepEqual(
      { reads: s.reads, bridged: s.bridged, coalesced: s.coalesced, gapBytes: s.gapBytes, bytes: s.bytes },
      { reads: 3, bridged: 2, coalesced: 1, gapBytes: K4, bytes: 8 * K4 },
    );

    // a run stops at a bridge slot's bytes; with the slots taken, runs are read as before
    r.resetStats();
    const long = Array.from({ length: 12 }, (_, i) => ({
      fileOffset: (300 + 2 * i) * K4,
      length: K4,
      dst: (40 + 3 * i) * K4,
      tag: i,
    }));
    await r.read(long);
    assertLanded(mem, long);
    s = r.stats();
    // 12 requests 2 pages apart: 4 per 32 KiB slot (a 28 KiB span each), two slots, then 4 reads
    assert.deepEqual(
      { reads: s.reads, bridged: s.bridged, gapBytes: s.gapBytes },
      { reads: 6, bridged: 6, gapBytes: 6 * K4 },
    );

    // maxReadBytes caps a bridged read too, and maxGapBytes 0 bridges only what is adjacent in the file
    const capped = open(FILE, { memory: mem, bridge, maxReadBytes: 3 * K4, maxGapBytes: 0 });
    await capped.read(reqs);
    assertLanded(mem, reqs);
    s = capped.stats();
    // a | b+c (12 KiB, bridged) | d+e | f
    assert.deepEqual(
      { reads: s.reads, bridged: s.bridged, coalesced: s.coalesced },
      { reads: 4, bridged: 1, coalesced: 1 },
    );
    await Promise.all([r.close(), capped.close()]);
  });

  test(`[${backend}] bridging: a failed bridged read reports none of its requests and gives its slot back`, async () => {
    const mem = memory();
    let fail = true;
    const r = open(FILE, {
      memory: mem,
      bridge: { dst: 128 * K4, bytes: BRIDGE_SLOT_BYTES },
      fault: ({ fileOffset }) =>
        fail && fileOffset === 64 * K4 ? Object.assign(new Error("EIO: i/o error, read"), { code: "EIO" }) : null,
    });
    const reqs = [
      { fileOffset: 64 * K4, length: K4, dst: 0, tag: "a" },
      { fileOffset: 66 * K4, length: K4, dst: 8 * K4, tag: "b" },
      { fileOffset: 200 * K4, length: K4, dst: 16 * K4, tag: "c" },
    ];
    const completed = new Set<unknown>();
    await assert.rejects(
      r.read(reqs, (q) => completed.add(q.tag)),
      (e: unknown) => {
        assert.ok(e instanceof FlashReadError);
        assert.equal(e.fileOffset, 64 * K4);
        assert.equal(e.length, 3 * K4, "the error names the whole bridged read");
        return true;
      },
    );
    assert.ok(!completed.has("a") && !completed.has("b"));
    fail = false;
    r.resetStats();
    await r.read(reqs);
    assertLanded(mem, reqs);
    assert.equal(r.stats().bridged, 1, "the one slot was given back");
    await r.close();
  });

  test(`[${backend}] bridging: random runs land whole, each reported once`, async () => {
    const mem = memory(512);
    // destinations below 4 MiB, the region above; slots are taken as the batch is planned, so 64
    const r = open(FILE, { memory: mem, queueDepth: 8, bridge: { dst: 1024 * K4, bytes: 64 * BRIDGE_SLOT_BYTES } });
    const rnd = pseudoRandomBytes(4096, 11);
    const reqs: FlashReadRequest[] = [];
    let page = 0;
    for (let i = 0; reqs.length < 300 && page < FILE_BYTES / K4 - 4; i++) {
      const length = K4 * (1 + (rnd[i] % 3));
      reqs.push({ fileOffset: page * K4, length, dst: 0, tag: reqs.length });
      page += length / K4 + (rnd[i + 1000] % 6);
    }
    // destinations shuffled over slots of 3 pages
    const slots = reqs.map((_, i) => i).sort((a, b) => rnd[2000 + a] - rnd[2000 + b] || a - b);
    const placed = reqs.map((q, i) => ({ ...q, dst: slots[i] * 3 * K4 }));
    const counts = new Map<unknown, number>();
    await r.read(placed, (q) => counts.set(q.tag, (counts.get(q.tag) ?? 0) + 1));
    assert.equal(counts.size, placed.length);
    assert.ok([...counts.values()].every((c) => c === 1));
    assertLanded(mem, placed);
    const s = r.stats();
    assert.ok(s.bridged > 50, `${s.bridged} bridged`);
    assert.equal(s.bytes, placed.reduce((a, q) => a + q.length, 0) + s.gapBytes);
    await r.close();
  });

  test(`[${backend}] bridging: a bridge region outside the memory, or a bad gap, is refused`, () => {
    const mem = memory(16);
    const refusal = (a: number, b: number) =>
      new RegExp(
        `^RangeError: FlashReader: bridge \\[${a}, ${b}\\) must be 4096-byte aligned, hold at least 32768 bytes and lie within the memory \\(1048576 bytes\\)$`,
      );
    const at = (dst: number, bytes: number) => () => open(FILE, { memory: mem, bridge: { dst, bytes } });
    assert.throws(at(8 * K4, 4 * K4), refusal(8 * K4, 12 * K4)); // smaller than a slot
    assert.throws(at(250 * K4, BRIDGE_SLOT_BYTES), refusal(250 * K4, 258 * K4)); // past the end
    assert.throws(at(100, BRIDGE_SLOT_BYTES), refusal(100, 100 + BRIDGE_SLOT_BYTES)); // not aligned
    assert.throws(
      () => open(FILE, { memory: mem, maxGapBytes: 100 }),
      /maxGapBytes must be a multiple of 4096 below 32768, got 100/,
    );
  });

  test(`[${backend}] queue depth: never more reads in flight than asked, and that many when there is work`, async () => {
    for (const qd of [1, 3, 7]) {
      const mem = memory();
      const r = open(FILE, { memory: mem, queueDepth: qd });
      let peak = 0;
      // the fault hook sees every read as it is issued: count what is in flight at that moment
      const live = { n: 0 };
      const reqs = Array.from({ length: 40 }, (_, i) => ({ fileOffset: i * 2 * K4, length: K4, dst: i * K4, tag: i }));
      const r2 = open(FILE, {
        memory: mem,
        queueDepth: qd,
        fault: () => {
          live.n++;
          peak = Math.max(peak, live.n);
          return null;
        },
      });
      await r2.read(reqs, () => live.n--);
      assert.equal(r2.stats().maxInFlight, qd);
      assert.ok(peak <= qd, `qd ${qd}: ${peak} reads were issued while ${qd} were allowed`);
      await r.read(reqs);
      assert.equal(r.stats().maxInFlight, qd);
      assertLanded(mem, reqs);
      await Promise.all([r.close(), r2.close()]);
    }
  });

  test(`[${backend}] an injected I/O error rejects with file and offset; requests not read are never reported`, async () => {
    const mem = memory();
    let failedAt = -1;
    const r = open(FILE, {
      memory: mem,
      queueDepth: 4,
      fault: ({ fileOffset, index }) => {
        if (index !== 7) return null;
        failedAt = fileOffset;
        return Object.assign(new Error("EIO: i/o error, read"), { code: "EIO" });
      },
    });
    const reqs = Array.from({ length: 30 }, (_, i) => ({ fileOffset: i * 3 * K4, length: K4, dst: i * K4, tag: i }));
    const completed = new Set<unknown>();
    await assert.rejects(
      r.read(reqs, (q) => completed.add(q.tag)),
      (e: unknown) => {
        assert.ok(e instanceof FlashReadError, `expected a FlashReadError, got ${e}`);
        assert.equal(e.code, "EIO");
        assert.equal(e.fileOffset, failedAt);
        assert.match(
          e.message,
          new RegExp(
            `data\\.bin: read failed: EIO: i/o error, read \\(read of 4096 bytes at byte offset ${failedAt}\\)`,
          ),
        );
        return true;
      },
    );
    const failedTag = reqs.find((q) => q.fileOffset === failedAt)!.tag;
    assert.ok(!completed.has(failedTag), "the request whose read failed was reported complete");
    assert.ok(completed.size < reqs.length);
    for (const q of reqs) if (completed.has(q.tag)) assertLanded(mem, [q]);
    const after = completed.size;
    await new Promise((res) => setTimeout(res, 50));
    assert.equal(completed.size, after, "requests were reported after the batch failed");
    assert.equal(r.pending, 0, "the failed batch left reads queued or in flight");
    assert.equal(r.stats().errors, 1);
    // the reader stays usable
    await r.read(reqs.slice(0, 3));
    assertLanded(mem, reqs.slice(0, 3));
    await r.close();
  });

  test(`[${backend}] verify and onComplete failures reject the batch; a short read at end of file is an error`, async () => {
    const mem = memory();
    const bad = 5 * K4;
    const r = open(FILE, {
      memory: mem,
      verify: (fileOffset, view, viewOffset, length) => {
        assert.equal(view.byteLength, mem.buffer.byteLength);
        if (bad >= fileOffset && bad < fileOffset + length) throw new Error(`checksum says no at ${bad}`);
      },
    });
    const reqs = Array.from({ length: 10 }, (_, i) => ({ fileOffset: i * K4, length: K4, dst: i * 2 * K4, tag: i }));
    const completed: unknown[] = [];
    await assert.rejects(
      r.read(reqs, (q) => completed.push(q.tag)),
      /checksum says no at 20480/,
    );
    assert.ok(!completed.includes(5));
    await assert.rejects(
      r.read(reqs.slice(0, 2), () => {
        throw new Error("consumer broke");
      }),
      /consumer broke/,
    );
    await r.close();

    // the file shrinks after open: the read comes back short
    const copy = join(dir, "shrinking.bin");
    writeFileSync(copy, content.subarray(0, 1 << 20));
    const s = open(copy, { memory: mem });
    truncateSync(copy, 64 * K4);
    await assert.rejects(s.read([{ fileOffset: 100 * K4, length: K4, dst: 0 }]), (e: unknown) => {
      assert.ok(e instanceof FlashReadError);
      assert.match(e.message, /shrinking\.bin: unexpected end of file .*byte offset 409600/);
      return true;
    });
    await s.close();
  });

  test(`[${backend}] bad requests are refused before anything is read`, async () => {
    const mem = memory(4);
    const r = open(FILE, { memory: mem });
    await assert.rejects(r.read([{ fileOffset: 100, length: K4, dst: 0 }]), /request 0 .* is not 4096-byte aligned/);
    await assert.rejects(r.read([{ fileOffset: 0, length: 1000, dst: 0 }]), /not 4096-byte aligned/);
    await assert.rejects(r.read([{ fileOffset: 0, length: K4, dst: 12 }]), /not 4096-byte aligned/);
    await assert.rejects(
      r.read([{ fileOffset: FILE_BYTES, length: K4, dst: 0 }]),
      /past the end of the file \(8388608 bytes\)/,
    );
    await assert.rejects(r.read([{ fileOffset: 0, length: K4, dst: 4 * 65536 }]), /past the end of the memory/);
    assert.equal(r.stats().reads, 0);
    await r.read([]); // an empty batch resolves
    await r.close();
    assert.throws(() => r.submit([{ fileOffset: 0, length: K4, dst: 0 }], null, () => undefined), /closed/);
  });

  test(`[${backend}] close fails what is still queued and waits for reads in flight`, async () => {
    const mem = memory();
    const r = open(FILE, { memory: mem, queueDepth: 2 });
    const reqs = Array.from({ length: 50 }, (_, i) => ({ fileOffset: i * 2 * K4, length: K4, dst: i * K4, tag: i }));
    let reported = 0;
    const p = r.read(reqs, () => reported++);
    const closed = r.close();
    await assert.rejects(p, /closed with reads pending/);
    await closed;
    assert.ok(reported <= 2, `${reported} requests reported although only 2 reads had started`);
  });

  /** Bytes this process has caused to be fetched from storage (Linux task I/O accounting). */
  function storageReadBytes(): number | undefined {
    if (!existsSync("/proc/self/io")) return undefined;
    const m = /read_bytes:\s*(\d+)/.exec(readFileSync("/proc/self/io", "utf8"));
    return m ? Number(m[1]) : undefined;
  }

  function residentBytes(path: string): number | undefined {
    const r = spawnSync("fincore", ["--bytes", "--noheadings", "--output", "RES", path], { encoding: "utf8" });
    return r.status === 0 ? Number(r.stdout.trim()) : undefined;
  }

  test(`[${backend}] O_DIRECT bypasses the page cache: every read reaches storage and nothing stays cached`, async (t) => {
    const mem = memory();
    const direct = open(FILE, { memory: mem, queueDepth: 4 });
    const buffered = open(FILE, { memory: mem, queueDepth: 4, direct: false, backend: "threads" });
    const range = [{ fileOffset: 0, length: 1 << 20, dst: 0 }];
    const before = storageReadBytes();
    if (before === undefined) {
      t.skip("no /proc/self/io on this system");
      return;
    }
    // (1) task I/O accounting: a cached range read twice through the page cache costs no storage
    // reads; read twice with O_DIRECT it costs two full reads
    await buffered.read(range);
    const b0 = storageReadBytes()!;
    await buffered.read(range);
    await buffered.read(range);
    const cachedDelta = storageReadBytes()! - b0;
    const d0 = storageReadBytes()!;
    await direct.read(range);
    await direct.read(range);
    const directDelta = storageReadBytes()! - d0;
    t.diagnostic(
      `storage bytes read: buffered re-reads ${cachedDelta}, direct reads ${directDelta} (2 x ${1 << 20} asked)`,
    );
    assert.ok(
      cachedDelta < 1 << 20,
      "the accounting should show cached reads as free; it cannot tell the two apart here",
    );
    assert.ok(
      directDelta >= 2 << 20,
      `direct reads fetched only ${directDelta} bytes from storage: served from the page cache?`,
    );

    // (2) residency: evict the file, read all of it with O_DIRECT, and nothing is cached afterwards
    const evict = spawnSync("dd", [`if=${FILE}`, "iflag=nocache", "count=0", "status=none"]);
    const resident = residentBytes(FILE);
    if (evict.status !== 0 || resident === undefined || resident !== 0) {
      t.diagnostic(`residency check skipped (dd status ${evict.status}, resident after eviction ${resident})`);
    } else {
      const all = Array.from({ length: FILE_BYTES / (1 << 20) }, (_, i) => ({
        fileOffset: i << 20,
        length: 1 << 20,
        dst: 0,
      }));
      for (const q of all) await direct.read([q]);
      assert.equal(residentBytes(FILE), 0, "pages of the file entered the page cache during direct reads");
      await buffered.read(all.slice(0, 1));
      assert.ok(
        residentBytes(FILE)! >= 1 << 20,
        "a buffered read should populate the cache (sanity check of the method)",
      );
    }
    await Promise.all([direct.close(), buffered.close()]);
  });
}

test("where O_DIRECT is impossible: one clear warning, buffered reads that still work", async () => {
  // a plain ArrayBuffer is not page aligned in V8
  const ab = new ArrayBuffer(1 << 20);
  const warnings: string[] = [];
  const r = openWith(FILE, { memory: ab, queueDepth: 2 }, warnings);
  assert.equal(r.direct, false);
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /data\.bin: direct I\/O \(O_DIRECT\) is not in use: .*not page aligned.*page cache/);
  const reqs = randomRequests(20, 3).map((q, i) => ({ ...q, dst: i * 32 * 1024 }));
  await r.read(reqs);
  assertLanded(ab, reqs);
  await r.close();

  // a file system that refuses O_DIRECT at open (procfs does)
  const proc = "/proc/self/status";
  if (existsSync(proc)) {
    const w2: string[] = [];
    const p = openWith(proc, { memory: memory(1), queueDepth: 1 }, w2);
    assert.equal(p.direct, false);
    assert.match(p.bufferedReason ?? "", /refuses O_DIRECT \(EINVAL/);
    assert.equal(w2.length, 1);
    await p.close();
    assert.throws(
      () => FlashReader.open(proc, { memory: memory(1), direct: true }),
      /status: direct I\/O was required but is not possible/,
    );
  }
  // the thread pool warning
  const w3: string[] = [];
  const saved = process.env.UV_THREADPOOL_SIZE;
  process.env.UV_THREADPOOL_SIZE = "4";
  try {
    const q = openWith(FILE, { memory: memory(1), queueDepth: 32, backend: "threads" }, w3);
    assert.equal(w3.length, 1);
    assert.match(w3[0], /queue depth 32 exceeds libuv's thread pool \(UV_THREADPOOL_SIZE=4\).*UV_THREADPOOL_SIZE=32/);
    await q.close();
  } finally {
    if (saved === undefined) delete process.env.UV_THREADPOOL_SIZE;
    else process.env.UV_THREADPOOL_SIZE = saved;
  }
  assert.throws(() => FlashReader.open(join(dir, "nope.bin"), { memory: memory(1) }), /nope\.bin: cannot open/);
});

for (const backend of BACKENDS) {
  const open = (
    path: string,
    opts: Partial<FlashReaderOptions> & { memory: FlashReaderOptions["memory"] },
    warnings: string[] = [],
  ) => openWith(path, { ...backendOpts(backend), ...opts }, warnings);

  test(`[${backend}] store bundles through the flash reader, checked by the store's checksums`, async () => {
    const storePath = join(dir, "relu.pi");
    await convertToStore({ input: `${SHARED}/models/relu-stories.Q8_0.gguf`, output: storePath, fsync: false });
    const store = NeuronStore.open(storePath);
    const mem = memory(512);
    const L = store.layer(1);
    // read every other bundle of layer 1 into consecutive slots (pairs coalesce: 0-1, 4-5, ...)
    const reqs: FlashReadRequest[] = [];
    for (let p = 0; p < L.neurons; p += 4) {
      for (const q of [p, p + 1])
        reqs.push({
          fileOffset: store.bundleOffset(1, q),
          length: L.bundleBytes,
          dst: reqs.length * L.bundleBytes,
          tag: q,
        });
    }
    // checksums as a table too: with the AIO thread it checks them, off this thread
    const check = store.verifier("always");
    let jsChecks = 0;
    const verify = (fo: number, v: Uint8Array, vo: number, len: number) => (jsChecks++, check(fo, v, vo, len));
    const r = FlashReader.open(storePath, {
      memory: mem,
      ...backendOpts(backend),
      verify,
      checksums: store.checksumTable("always"),
      queueDepth: 4,
      onWarning: () => undefined,
    });
    await r.read(reqs);
    assert.equal(jsChecks === 0, backend === "aio", `${jsChecks} reads checked in JavaScript`);
    assert.equal(r.stats().reads, reqs.length / 2);
    const want = new Uint8Array(L.bundleBytes);
    for (const q of reqs) {
      store.readBundles(1, q.tag as number, 1, want);
      assert.deepEqual(bytesAt(mem, q.dst, L.bundleBytes), want);
    }
    await r.close();

    // the same bundles into scattered slots, bridged: the checksums cover the gaps read too
    const scattered = reqs.map((q, i) => ({ ...q, dst: (reqs.length - 1 - i) * 2 * L.bundleBytes }));
    const rs = FlashReader.open(storePath, {
      memory: mem,
      ...backendOpts(backend),
      verify,
      checksums: store.checksumTable("always"),
      bridge: { dst: 2 * reqs.length * L.bundleBytes, bytes: 64 * BRIDGE_SLOT_BYTES },
      onWarning: () => undefined,
    });
    await rs.read(scattered);
    // four bundles a slot (two pairs two bundles apart) until the 64 slots are taken
    assert.equal(rs.stats().bridged, 64 * 3);
    for (const q of scattered) {
      store.readBundles(1, q.tag as number, 1, want);
      assert.deepEqual(bytesAt(mem, q.dst, L.bundleBytes), want);
    }
    await rs.close();

    // flip a byte of one bundle in a copy: that read is rejected with the store's error
    const bad = join(dir, "relu-bad.pi");
    const b = Buffer.from(readFileSync(storePath));
    const hit = store.bundleOffset(1, 8) + 100;
    b[hit] ^= 0x40;
    writeFileSync(bad, b);
    const badStore = NeuronStore.open(bad); // its manifest is intact: the damage shows only when the bundle is read
    const rb = FlashReader.open(bad, {
      memory: mem,
      ...backendOpts(backend),
      verify: badStore.verifier("once"),
      checksums: badStore.checksumTable("once"),
      onWarning: () => undefined,
    });
    const completed = new Set<unknown>();
    await assert.rejects(
      rb.read(reqs, (q) => completed.add(q.tag)),
      (e: unknown) => {
        assert.ok(e instanceof StoreError);
        assert.match(
          e.message,
          /relu-bad\.pi: checksum mismatch .*\(layer 1 FFN, bundle at stored position 8 \(neuron 8\)\)/,
        );
        return true;
      },
    );
    assert.ok(!completed.has(8) && !completed.has(9), "the corrupt bundle (and its read-mate) were reported complete");
    await rb.close();
    badStore.close();
    store.close();
    execFileSync("rm", ["-f", bad]);
  });
}
