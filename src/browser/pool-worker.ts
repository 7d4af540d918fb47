/** A pool worker as a Web Worker: the same loop as Node's (pool-worker-loop.ts), started by a message. */
import type { PoolWorkerData } from "../runtime/pool.js";
import { runPoolWorker } from "../runtime/pool-worker-loop.js";
import { web } from "./web-types.js";

web.onmessage = (ev) => {
  web.onmessage = null;
  try {
    runPoolWorker(ev.data as PoolWorkerData, () => web.postMessage("ready"));
  } catch (e) {
    web.postMessage({ error: (e as Error).message });
    throw e;
  }
  web.postMessage("exit");
};
