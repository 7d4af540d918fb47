/**
 * The flash reader's batch interface (AioBinding, src/io/aio.ts) in a browser: reader workers
 * (reader-worker.ts), each with its own read-only OPFS sync access handle on the file, take
 * reads from a shared ring and read straight into the shared wasm memory, so several reads are
 * in flight at once while the engine computes. Same contract as the native addon's rings: a
 * batch in (id, file offset, length, destination), completions out (id, bytes or -errno), and
 * with checksums set, each read that lands whole is checked (CRC-32 per chunk) on the reader,
 * a mismatch reported as -EBADMSG.
 *
 * A ring is one SharedArrayBuffer: a header of counters, the submission ring (ids, claimed by
 * readers with compareExchange), the completion ring (id + 1 per slot, 0 = empty), and per id
 * the request and its result. At most `capacity` reads are in flight, so neither ring overflows.
 * The reader workers learn of a ring, of a grown memory and of checksums by message; every
 * message is posted before the requests that need it, and a reader that claims such a request
 * first awaits it.
 */
import type { AioBinding, AioRing } from "../io/aio.js";
import { pathOfFd } from "./shims/fs.js";
import { opfsName } from "./opfs-paths.js";
import { web, type WebWorker } from "./web-types.js";

/** Header slots (Int32). */
export const H = { SUB_WRITE: 0, SUB_READ: 1, DONE_WRITE: 2, BUF_GEN: 3, CK_GEN: 4, SIZE: 8 } as const;

export interface RingLayout {
  capacity: number;
  sab: SharedArrayBuffer;
}

/** Views over a ring's SharedArrayBuffer (the same on both sides). */
export function ringViews(sab: SharedArrayBuffer, capacity: number) {
  const hdr = new Int32Array(sab, 0, H.SIZE);
  const sub = new Int32Array(sab, H.SIZE * 4, capacity);
  const done = new Int32Array(sab, (H.SIZE + capacity) * 4, capacity);
  const f64At = Math.ceil(((H.SIZE + 2 * capacity) * 4) / 8) * 8;
  const req = new Float64Array(sab, f64At, 3 * capacity);
  const res = new Float64Array(sab, f64At + 24 * capacity, capacity);
  return { hdr, sub, done, req, res };
}

export function ringBytes(capacity: number): number {
  return Math.ceil(((H.SIZE + 2 * capacity) * 4) / 8) * 8 + 32 * capacity;
}

interface Ring {
  id: number;
  capacity: number;
  sab: SharedArrayBuffer;
  v: ReturnType<typeof ringViews>;
  buffer: ArrayBufferLike | null;
  doneRead: number;
  closed: boolean;
}

export class OpfsReaders implements AioBinding {
  private readonly rings = new Map<number, Ring>();
  private nextRing = 1;

  private constructor(
    private readonly workers: WebWorker[],
    private readonly bell: Int32Array,
  ) {}

  /** Start `n` reader workers (their script: reader-worker.js beside this bundle). */
  static async start(n: number, url: URL): Promise<OpfsReaders> {
    const bell = new Int32Array(new SharedArrayBuffer(4));
    const workers: WebWorker[] = [];
    const ready: Promise<void>[] = [];
    for (let i = 0; i < n; i++) {
      const w = new web.Worker(url, { type: "module", name: `powerinfer-reader-${i}` });
      ready.push(
        new Promise<void>((resolve, reject) => {
          w.onmessage = (ev) => {
            const d = ev.data as { type: string; message?: string };
            if (d.type === "ready") resolve();
            else if (d.type === "error") console.error(`reader worker ${i}: ${d.message}`);
          };
          w.onerror = (ev) => reject(new Error(`reader worker ${i} failed to start: ${ev.message ?? "error"}`));
        }),
      );
      w.postMessage({ type: "init", bell: bell.buffer, index: i });
      workers.push(w);
    }
    await Promise.all(ready);
    return new OpfsReaders(workers, bell);
  }

  get count(): number {
    return this.workers.length;
  }

  private post(message: unknown): void {
    for (const w of this.workers) w.postMessage(message);
    this.ring();
  }

  private ring(): void {
    Atomics.add(this.bell, 0, 1);
    Atomics.notify(this.bell, 0);
  }

  open(fd: number, capacity: number, _threaded: boolean): AioRing {
    const path = pathOfFd(fd);
    const sab = new SharedArrayBuffer(ringBytes(capacity));
    const r: Ring = {
      id: this.nextRing++,
      capacity,
      sab,
      v: ringViews(sab, capacity),
      buffer: null,
      doneRead: 0,
      closed: false,
    };
    this.rings.set(r.id, r);
    this.post({ type: "ring", ring: r.id, name: opfsName(path), sab, capacity });
    return r.id as unknown as AioRing;
  }

  private get(ring: AioRing): Ring {
    const r = this.rings.get(ring as unknown as number);
    if (!r || r.closed) throw new Error("OPFS reader: ring is closed");
    return r;
  }

  submit(ring: AioRing, view: Uint8Array, reqs: Float64Array, n: number): number {
    const r = this.get(ring);
    const { hdr, sub, req } = r.v;
    if (view.buffer !== r.buffer) {
      // a grown wasm memory is a new SharedArrayBuffer object: the readers need it first
      r.buffer = view.buffer;
      const gen = hdr[H.BUF_GEN] + 1;
      for (const w of this.workers) w.postMessage({ type: "buffer", ring: r.id, gen, buffer: view.buffer });
      Atomics.store(hdr, H.BUF_GEN, gen);
    }
    let w = Atomics.load(hdr, H.SUB_WRITE);
    for (let i = 0; i < n; i++) {
      const id = reqs[4 * i];
      req[3 * id] = reqs[4 * i + 1];
      req[3 * id + 1] = reqs[4 * i + 2];
      req[3 * id + 2] = reqs[4 * i + 3] + view.byteOffset;
      Atomics.store(sub, w % r.capacity, id);
      w++;
    }
    Atomics.store(hdr, H.SUB_WRITE, w);
    this.ring();
    return n;
  }

  reap(ring: AioRing, out: Float64Array, max: number, waitMs: number): number {
    const r = this.get(ring);
    const { hdr, done, res } = r.v;
    let k = 0;
    for (let pass = 0; pass < 2 && k === 0; pass++) {
      while (k < max) {
        const slot = r.doneRead % r.capacity;
        const v = Atomics.load(done, slot);
        if (v === 0) break;
        Atomics.store(done, slot, 0);
        r.doneRead++;
        out[2 * k] = v - 1;
        out[2 * k + 1] = res[v - 1];
        k++;
      }
      if (k === 0 && pass === 0 && waitMs > 0) {
        const seen = Atomics.load(hdr, H.DONE_WRITE);
        if (seen === r.doneRead) Atomics.wait(hdr, H.DONE_WRITE, seen, waitMs);
      }
    }
    return k;
  }

  setChecksums(
    ring: AioRing,
    crcs: Uint32Array,
    start: number,
    end: number,
    chunkBytes: number,
    seen: Uint8Array | null,
  ): void {
    const r = this.get(ring);
    const c = new Uint32Array(new SharedArrayBuffer(crcs.byteLength));
    c.set(crcs);
    let s: Uint8Array | null = null;
    if (seen) {
      s = new Uint8Array(new SharedArrayBuffer(seen.byteLength));
      s.set(seen);
    }
    const gen = r.v.hdr[H.CK_GEN] + 1;
    for (const w of this.workers)
      w.postMessage({ type: "checksums", ring: r.id, gen, crcs: c, start, end, chunkBytes, seen: s });
    Atomics.store(r.v.hdr, H.CK_GEN, gen);
  }

  close(ring: AioRing): void {
    const r = this.rings.get(ring as unknown as number);
    if (!r || r.closed) return;
    // wait for the reads in flight: none may land in memory after this
    const { hdr } = r.v;
    const t0 = performance.now();
    for (;;) {
      const submitted = Atomics.load(hdr, H.SUB_WRITE);
      const finished = Atomics.load(hdr, H.DONE_WRITE);
      if (finished >= submitted) break;
      if (performance.now() - t0 > 30000) {
        // a reader that never answers (its worker died): do not hang the page's unload on it
        console.error(`OPFS reader: ${submitted - finished} reads still in flight after 30 s; closing anyway`);
        break;
      }
      Atomics.wait(hdr, H.DONE_WRITE, finished, 10);
    }
    r.closed = true;
    this.rings.delete(r.id);
    this.post({ type: "close", ring: r.id });
  }

  /** Close every reader's handle on `name` (before the file is written or removed). */
  async release(name: string): Promise<void> {
    await Promise.all(
      this.workers.map(
        (w) =>
          new Promise<void>((resolve) => {
            const prev = w.onmessage;
            w.onmessage = (ev) => {
              const d = ev.data as { type: string; name?: string };
              if (d.type === "released" && d.name === name) {
                w.onmessage = prev;
                resolve();
              } else prev?.(ev);
            };
            w.postMessage({ type: "release", name });
          }),
      ),
    );
    this.ring();
  }

  terminate(): void {
    for (const w of this.workers) w.terminate();
  }
}
