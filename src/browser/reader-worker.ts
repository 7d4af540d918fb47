/**
 * A reader worker (see opfs-aio.ts): holds a read-only OPFS sync access handle per file, claims
 * reads from the rings it was told of and reads them straight into the shared wasm memory.
 * Sleeps with Atomics.waitAsync on the doorbell, so messages (new rings, a grown memory,
 * checksums) are handled between reads.
 */
import { crc32Portable } from "../format/store/checksum.js";
import { H, ringViews } from "./opfs-aio.js";
import { opfsRoot, web, type SyncAccessHandle } from "./web-types.js";

const EIO = 5;
const EBADMSG = 74;

interface Checksums {
  gen: number;
  crcs: Uint32Array;
  start: number;
  end: number;
  chunkBytes: number;
  seen: Uint8Array | null;
}

interface ReaderRing {
  id: number;
  name: string;
  capacity: number;
  v: ReturnType<typeof ringViews>;
  buffers: Map<number, ArrayBufferLike>;
  checksums: Map<number, Checksums>;
  waiters: (() => void)[];
}

const handles = new Map<string, Promise<SyncAccessHandle>>();
const rings = new Map<number, ReaderRing>();
let bell: Int32Array;

type AtomicsAsync = {
  waitAsync(a: Int32Array, i: number, v: number, t?: number): { async: boolean; value: Promise<string> | string };
};

function handleFor(name: string): Promise<SyncAccessHandle> {
  let h = handles.get(name);
  if (!h) {
    h = opfsRoot()
      .then((root) => root.getFileHandle(name))
      .then((fh) => fh.createSyncAccessHandle({ mode: "read-only" }));
    handles.set(name, h);
  }
  return h;
}

function wake(r: ReaderRing): void {
  const w = r.waiters.splice(0);
  for (const f of w) f();
  Atomics.add(bell, 0, 1);
  Atomics.notify(bell, 0);
}

/** The memory buffer of generation `gen` (posted before any request that needs it). */
async function bufferOf(r: ReaderRing, gen: number): Promise<ArrayBufferLike> {
  for (;;) {
    const b = r.buffers.get(gen);
    if (b) return b;
    await new Promise<void>((resolve) => r.waiters.push(resolve));
  }
}

async function checksumsOf(r: ReaderRing, gen: number): Promise<Checksums | null> {
  if (gen === 0) return null;
  for (;;) {
    const c = r.checksums.get(gen);
    if (c) return c;
    await new Promise<void>((resolve) => r.waiters.push(resolve));
  }
}

function verify(c: Checksums, at0: number, p: Uint8Array): boolean {
  for (let o = 0; o < p.length; o += c.chunkBytes) {
    const at = at0 + o;
    if (at < c.start || at + c.chunkBytes > c.end) continue;
    const k = Math.floor((at - c.start) / c.chunkBytes);
    if (c.seen && c.seen[k]) continue;
    if (crc32Portable(p.subarray(o, o + c.chunkBytes)) >>> 0 !== c.crcs[k] >>> 0) return false;
    if (c.seen) c.seen[k] = 1;
  }
  return true;
}

/** Claim and do one read of ring r; false when none is waiting. */
async function one(r: ReaderRing): Promise<boolean> {
  const { hdr, sub, done, req, res } = r.v;
  const claimed = Atomics.load(hdr, H.SUB_READ);
  if (claimed >= Atomics.load(hdr, H.SUB_WRITE)) return false;
  if (Atomics.compareExchange(hdr, H.SUB_READ, claimed, claimed + 1) !== claimed) return true;
  const id = Atomics.load(sub, claimed % r.capacity);
  const off = req[3 * id],
    len = req[3 * id + 1],
    dst = req[3 * id + 2];
  let result: number;
  try {
    const buffer = await bufferOf(r, Atomics.load(hdr, H.BUF_GEN));
    const ck = await checksumsOf(r, Atomics.load(hdr, H.CK_GEN));
    const h = await handleFor(r.name);
    const view = new Uint8Array(buffer, dst, len);
    result = h.read(view, { at: off });
    if (ck && result === len && !verify(ck, off, view)) result = -EBADMSG;
  } catch (e) {
    web.postMessage({ type: "error", message: `read of ${len} bytes at ${off} of ${r.name}: ${(e as Error).message}` });
    result = -EIO;
  }
  res[id] = result;
  const pos = Atomics.add(hdr, H.DONE_WRITE, 1);
  Atomics.store(done, pos % r.capacity, id + 1);
  Atomics.notify(hdr, H.DONE_WRITE);
  return true;
}

async function loop(): Promise<void> {
  for (;;) {
    const seen = Atomics.load(bell, 0);
    let did = false;
    for (const r of rings.values()) while (await one(r)) did = true;
    if (!did) {
      const w = (Atomics as unknown as AtomicsAsync).waitAsync(bell, 0, seen);
      if (w.async) await w.value;
    }
  }
}

web.onmessage = (ev) => {
  const d = ev.data as Record<string, unknown> & { type: string };
  switch (d.type) {
    case "init":
      bell = new Int32Array(d.bell as SharedArrayBuffer);
      web.postMessage({ type: "ready" });
      void loop();
      break;
    case "ring": {
      const r: ReaderRing = {
        id: d.ring as number,
        name: d.name as string,
        capacity: d.capacity as number,
        v: ringViews(d.sab as SharedArrayBuffer, d.capacity as number),
        buffers: new Map(),
        checksums: new Map(),
        waiters: [],
      };
      rings.set(r.id, r);
      wake(r);
      break;
    }
    case "buffer": {
      const r = rings.get(d.ring as number);
      if (r) {
        r.buffers.set(d.gen as number, d.buffer as ArrayBufferLike);
        wake(r);
      }
      break;
    }
    case "checksums": {
      const r = rings.get(d.ring as number);
      if (r) {
        r.checksums.set(d.gen as number, d as unknown as Checksums);
        wake(r);
      }
      break;
    }
    case "close":
      rings.delete(d.ring as number);
      break;
    case "release": {
      const name = d.name as string;
      const h = handles.get(name);
      handles.delete(name);
      void (h ? h.then((x) => x.close()).catch(() => undefined) : Promise.resolve()).then(() =>
        web.postMessage({ type: "released", name }),
      );
      break;
    }
  }
};
