/** A conversion worker (convert-pool.ts) under Node's worker_threads: runs each job it is posted, in shared buffers. */
import { readlinkSync } from "node:fs";
import { setPriority } from "node:os";
import { parentPort } from "node:worker_threads";
import { ChunkScratch, encodeChunk, type EncodeJob } from "../../format/hf/chunk-encoding.js";
import { MeasureScratch, type MeasureJob } from "./row-conversion.js";
import { jobFields, jobViews, type PoolReply, type PoolRequest } from "./convert-pool.js";

/** A worker's niceness: below the converting thread's (0). */
const WORKER_NICE = 10;

/**
 * The converting thread reads, checks, assembles and writes: it is a conversion's critical path,
 * and the workers' kernels are a small share of the work. A worker woken by a job took the core
 * from it: on 2 cores a 3 GB store's converting thread waited 1.2-1.5 s of 5.5 s for a core,
 * with its workers niced 0.5 s (and finished 0.3-0.7 s sooner). Linux gives each thread its own
 * niceness (the thread's task id, from /proc/thread-self); elsewhere the worker keeps its priority.
 */
function yieldToConvertingThread(): void {
  try {
    const tid = Number(readlinkSync("/proc/thread-self").split("/").pop());
    if (Number.isInteger(tid) && tid > 0) setPriority(tid, WORKER_NICE);
  } catch {
    // no /proc/thread-self (not Linux), or not allowed: the default priority
  }
}

yieldToConvertingThread();

const chunks = new ChunkScratch();
const measures = new MeasureScratch();
const buffers = new Map<number, SharedArrayBuffer>();
const port = parentPort!;

port.on("message", (m: PoolRequest) => {
  for (const [id, b] of m.adopt) buffers.set(id, b);
  let reply: PoolReply;
  try {
    const job = jobViews(m, buffers);
    if (m.kind === "encode") encodeChunk(job as unknown as EncodeJob, chunks);
    else measures.run(job as unknown as MeasureJob);
    reply = { id: m.id, fields: jobFields(job) };
  } catch (e) {
    const err = e instanceof Error ? e : new Error(String(e));
    reply = { id: m.id, error: { name: err.name, message: err.message } };
  }
  port.postMessage(reply);
});
