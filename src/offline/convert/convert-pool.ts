/**
 * Worker threads for a conversion's element loops (convert-runner.ts): each job is posted to the
 * worker with the fewest outstanding and run by the same code the calling thread runs in the
 * single-threaded converter, so the bytes come out the same. The jobs' buffers are shared memory
 * (allocate()), each sent to a worker once and named by a number afterwards: a job posted carries
 * only numbers, so nothing is copied or moved per chunk (moving ArrayBuffers to and fro had V8
 * collect garbage for a tenth of a conversion). A job that throws in a worker rejects with the
 * worker's error (its class and message: what names the tensor and file), and the conversion
 * fails as it would on one thread. close() ends the workers; a conversion must call it, finished
 * or failed.
 */
import { Worker } from "node:worker_threads";
import { HFConvertError } from "../../format/hf/hf-config.js";
import { SafetensorsError } from "../../format/hf/safetensors.js";
import { QuantError } from "../../format/quant.js";
import type { EncodeJob } from "../../format/hf/chunk-encoding.js";
import { ConvertError } from "./convert-error.js";
import type { ConvertRunner } from "./convert-runner.js";
import type { MeasureJob } from "./row-conversion.js";

/** A job's buffer as posted: which shared buffer, and the view's place in it. */
export interface BufferRef {
  buffer: number;
  offset: number;
  length: number;
}

/** A job as posted: its fields that are not buffers, as they are. */
export type PostedJob = Record<string, unknown>;

export interface PoolRequest {
  id: number;
  kind: "encode" | "measure";
  job: PostedJob;
  /** the job's buffers, by field */
  views: Record<string, BufferRef>;
  /** shared buffers this worker has not seen yet, with their numbers */
  adopt: [number, SharedArrayBuffer][];
}

/** A finished job's fields that are not buffers (what the worker filled: measure's maxima), or its error. */
export type PoolReply =
  { id: number; fields: Record<string, unknown> } | { id: number; error: { name: string; message: string } };

/** A job as a worker runs it: its fields, and its BufferRefs as views of the buffers it was sent. */
export function jobViews(
  m: Pick<PoolRequest, "job" | "views">,
  buffers: Map<number, SharedArrayBuffer>,
): Record<string, unknown> {
  const out: Record<string, unknown> = { ...m.job };
  for (const [k, r] of Object.entries(m.views)) out[k] = new Uint8Array(buffers.get(r.buffer)!, r.offset, r.length);
  return out;
}

/** A job's fields that are not buffers. */
export function jobFields(job: Record<string, unknown>): Record<string, unknown> {
  return Object.fromEntries(Object.entries(job).filter(([, v]) => !(v instanceof Uint8Array)));
}

/** The errors a job may throw, rebuilt as their own class on this side. */
const ERRORS: Record<string, new (message: string) => Error> = {
  ConvertError,
  HFConvertError,
  SafetensorsError,
  QuantError,
};

function rebuild(e: { name: string; message: string }): Error {
  const Ctor = ERRORS[e.name];
  if (Ctor) return new Ctor(e.message);
  const err = new Error(e.message);
  err.name = e.name;
  return err;
}

interface Pending {
  resolve: (fields: Record<string, unknown>) => void;
  reject: (e: Error) => void;
  worker: number;
}

export class ConvertPool implements ConvertRunner {
  /** two chunks per worker: one it converts, one waiting for it */
  readonly depth: number;
  private workers: Worker[] = [];
  private outstanding: number[] = [];
  /** per worker, the shared buffers it has been sent */
  private sent: Set<number>[] = [];
  private ids = new WeakMap<ArrayBufferLike, number>();
  private nextBuffer = 0;
  private pending = new Map<number, Pending>();
  /** the jobs posted and not yet settled */
  private running = new Set<Promise<unknown>>();
  private nextId = 0;
  private failure: Error | undefined;

  private constructor(threads: number) {
    this.depth = 2 * threads;
    for (let i = 0; i < threads; i++) {
      const w = new Worker(new URL("./convert-worker.js", import.meta.url));
      w.on("message", (r: PoolReply) => this.settle(r));
      // a worker that dies outside a job (it could not start) fails whatever it held, and what comes later
      w.on("error", (e) => this.fail(i, e));
      w.on("exit", (code) => this.fail(i, new Error(`conversion worker ${i} exited (code ${code})`)));
      this.workers.push(w);
      this.outstanding.push(0);
      this.sent.push(new Set());
    }
  }

  /** `threads` workers (at least 1). */
  static start(threads: number): ConvertPool {
    return new ConvertPool(Math.max(1, Math.floor(threads)));
  }

  allocate(bytes: number): SharedArrayBuffer {
    const b = new SharedArrayBuffer(bytes);
    this.ids.set(b, this.nextBuffer++);
    return b;
  }

  encode(job: EncodeJob): Promise<EncodeJob> {
    return this.run("encode", job);
  }

  measure(job: MeasureJob): Promise<MeasureJob> {
    return this.run("measure", job);
  }

  /** Resolves once every job posted so far has settled. */
  async idle(): Promise<void> {
    await Promise.allSettled([...this.running]);
  }

  /** Ends the workers (a job still running is dropped). */
  async close(): Promise<void> {
    const workers = this.workers;
    this.workers = [];
    this.failure ??= new Error("the conversion pool is closed");
    await Promise.all(workers.map((w) => (w.removeAllListeners("exit"), w.terminate())));
  }

  private run<J extends EncodeJob | MeasureJob>(kind: PoolRequest["kind"], job: J): Promise<J> {
    if (this.failure) return Promise.reject(this.failure);
    let w = 0;
    for (let i = 1; i < this.workers.length; i++) if (this.outstanding[i] < this.outstanding[w]) w = i;
    const adopt: [number, SharedArrayBuffer][] = [];
    const posted: PostedJob = {};
    const views: Record<string, BufferRef> = {};
    for (const [k, v] of Object.entries(job)) {
      if (!(v instanceof Uint8Array)) {
        posted[k] = v;
        continue;
      }
      const buffer = this.ids.get(v.buffer);
      if (buffer === undefined) return Promise.reject(new Error(`${kind} job: its ${k} is not a buffer of this pool`));
      if (!this.sent[w].has(buffer)) {
        this.sent[w].add(buffer);
        adopt.push([buffer, v.buffer as SharedArrayBuffer]);
      }
      views[k] = { buffer, offset: v.byteOffset, length: v.length };
    }
    const id = this.nextId++;
    this.outstanding[w]++;
    const running = new Promise<J>((resolve, reject) => {
      this.pending.set(id, { resolve: (fields) => resolve(Object.assign(job, fields)), reject, worker: w });
      this.workers[w].postMessage({ id, kind, job: posted, views, adopt } satisfies PoolRequest);
    });
    this.running.add(running);
    const drop = () => this.running.delete(running);
    running.then(drop, drop);
    return running;
  }

  private settle(r: PoolReply): void {
    const p = this.pending.get(r.id);
    if (!p) return;
    this.pending.delete(r.id);
    this.outstanding[p.worker]--;
    if ("fields" in r) p.resolve(r.fields);
    else p.reject(rebuild(r.error));
  }

  private fail(worker: number, e: Error): void {
    this.failure ??= e;
    for (const [id, p] of this.pending)
      if (p.worker === worker) {
        this.pending.delete(id);
        p.reject(e);
      }
  }
}
