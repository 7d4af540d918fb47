/**
 * Who runs a conversion's element loops: the calling thread (inlineConvertRunner, the plain
 * single-threaded converter), or a pool of workers (convert-pool.ts), which give the same bytes.
 * Both kinds of job: a GGUF's rows encoded from a checkpoint's (format/hf/chunk-encoding.ts),
 * and rows converted into a store's type with their error measured (row-conversion.ts).
 */
import { inlineRunner, settle, type ChunkPipeline, type ChunkRunner } from "../../format/hf/chunk-pipeline.js";
import { MeasureScratch, type MeasureJob } from "./row-conversion.js";

export interface ConvertRunner extends ChunkRunner {
  /** job with its dst and errors filled, its buffers back where a worker had them */
  measure(job: MeasureJob): Promise<MeasureJob>;
}

export function inlineConvertRunner(): ConvertRunner {
  const scratch = new MeasureScratch();
  return { ...inlineRunner(), measure: (job) => settle(() => (scratch.run(job), job)) };
}

/** The runner and the pipeline its results go through, in order. */
export interface ConvertWork {
  runner: ConvertRunner;
  pipeline: ChunkPipeline;
}
