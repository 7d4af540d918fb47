/** A conversion worker (convert-pool.ts) under Node's worker_threads: runs each job it is posted, in shared buffers. */
import { parentPort } from "node:worker_threads";
import { ChunkScratch, encodeChunk, type EncodeJob } from "../../format/hf/chunk-encoding.js";
import { MeasureScratch, type MeasureJob } from "./row-conversion.js";
import { jobFields, jobViews, type PoolReply, type PoolRequest } from "./convert-pool.js";

const chunks = new ChunkScratch();
const measures = new MeasureScratch();
const buffers = new Map<number, SharedArrayBuffer>();
const port = parentPort!;

port.on("message", (m: PoolRequest) => {
  for (const [id, b] of m.adopt) buffers.set(id, b);
  let reply: PoolReply;
  try {
    const job = jobViews(m.job, buffers);
    if (m.kind === "encode") encodeChunk(job as unknown as EncodeJob, chunks);
    else measures.run(job as unknown as MeasureJob);
    reply = { id: m.id, fields: jobFields(job) };
  } catch (e) {
    const err = e instanceof Error ? e : new Error(String(e));
    reply = { id: m.id, error: { name: err.name, message: err.message } };
  }
  port.postMessage(reply);
});
