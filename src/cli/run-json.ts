/**
 * `run --json`'s one object on stdout, for scripts: the generated text, its token ids, and stats:
 * every GenerationStats field, and for a neuron store the FFN's figures (neurons computed, the
 * neuron cache's hits and misses and hit rate, bytes read and I/O wait) and the peak resident
 * memory.
 */
import type { GenerationStats } from "../generate/generator.js";
import type { OffloadStats } from "../model/offload/stats.js";
import { peakResidentBytes } from "../runtime/memory.js";

export interface RunResult {
  text: string;
  tokens: number[];
  stats: GenerationStats & Partial<StoreFigures>;
}

export interface StoreFigures {
  neuronsComputed: number;
  neuronsTotal: number;
  /** neuronsComputed / neuronsTotal */
  neuronsComputedShare: number;
  hotHits: number;
  coldHits: number;
  misses: number;
  /** (hot + cold hits) / (hits + misses) */
  cacheHitRate: number;
  bytesRead: number;
  ioWaitMs: number;
  readAhead: number;
  readAheadUsed: number;
  peakResidentBytes: number;
}

export function runResult(
  text: string,
  tokens: number[],
  stats: GenerationStats,
  off: OffloadStats | undefined,
): RunResult {
  if (!off) return { text, tokens, stats: { ...stats } };
  const hits = off.hotHits + off.coldHits;
  const store: StoreFigures = {
    neuronsComputed: off.neuronsComputed,
    neuronsTotal: off.neuronsTotal,
    neuronsComputedShare: off.neuronsTotal > 0 ? off.neuronsComputed / off.neuronsTotal : 0,
    hotHits: off.hotHits,
    coldHits: off.coldHits,
    misses: off.misses,
    cacheHitRate: hits + off.misses > 0 ? hits / (hits + off.misses) : 0,
    bytesRead: off.bytesRead,
    ioWaitMs: off.ioWaitMs,
    readAhead: off.readAhead,
    readAheadUsed: off.readAheadUsed,
    peakResidentBytes: peakResidentBytes(),
  };
  return { text, tokens, stats: { ...stats, ...store } };
}
