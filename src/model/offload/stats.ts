/** The offloaded FFN's running counters, shared by its parts (each adds what it does). */
export interface OffloadStats {
  /** (token, layer) FFN evaluations */
  steps: number;
  neuronsTotal: number;
  neuronsComputed: number;
  hotHits: number;
  coldHits: number;
  /** bundles read because they were not in memory (those read ahead included: they are misses served early) */
  misses: number;
  bytesRead: number;
  ioWaitMs: number;
  computeMs: number;
  /** predictor mode: bundles read ahead for the next layer, and how many of those its own predictor then picked */
  readAhead: number;
  readAheadUsed: number;
}

export function newStats(): OffloadStats {
  return {
    steps: 0,
    neuronsTotal: 0,
    neuronsComputed: 0,
    hotHits: 0,
    coldHits: 0,
    misses: 0,
    bytesRead: 0,
    ioWaitMs: 0,
    computeMs: 0,
    readAhead: 0,
    readAheadUsed: 0,
  };
}

/** Await `reading`, counting the wait as I/O wait. */
export async function waitForReads(stats: OffloadStats, reading: Promise<void>): Promise<void> {
  const t = performance.now();
  try {
    await reading;
  } finally {
    stats.ioWaitMs += performance.now() - t;
  }
}
