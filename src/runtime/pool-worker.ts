/** A pool worker under Node's worker_threads (the loop itself is pool-worker-loop.ts). */
import { parentPort, workerData } from "node:worker_threads";
import type { PoolWorkerData } from "./pool.js";
import { runPoolWorker } from "./pool-worker-loop.js";

runPoolWorker(workerData as PoolWorkerData, () => parentPort!.postMessage("ready"));
