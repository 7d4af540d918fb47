/**
 * `run --json`'s one object on stdout, for scripts: the generated text, its token ids, and stats:
 * every GenerationStats field, and for a neuron store the FFN's figures (neurons computed, the
 * neuron cache's hits and misses and hit rate, bytes read and I/O wait; for a mixture of experts
 * the same per expert and per layer x expert) and the peak resident memory; `kernels` names the
 * kernel build that ran (src/runtime/wasm.ts).
 */
import type { GenerationStats } from "../generate/generator.js";
import { offloadFigures, type OffloadStats } from "../model/offload/stats.js";
import { peakResidentBytes } from "../runtime/memory.js";
import { kernelBuild, type KernelBuild } from "../runtime/wasm.js";
import { expertFigures, type ExpertFigures } from "./expert-stats.js";

export interface RunResult {
  text: string;
  tokens: number[];
  stats: GenerationStats & Partial<StoreFigures> & { kernels: KernelBuild };
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
  /** bytes of the bundles read (flash reads also read gapBytes between them) */
  bytesRead: number;
  /** the flash reader since the store opened: physical reads, bundles bridged into another's read, the bytes read between them */
  flashReads: number;
  bridged: number;
  gapBytes: number;
  ioWaitMs: number;
  readAhead: number;
  readAheadUsed: number;
  /** a mixture of experts: of readAhead, the bundles read for each token's routed experts once routed (exact picks), and how many were used */
  readAheadExact?: number;
  readAheadExactUsed?: number;
  /** a mixture whose router reads the block's input: of readAhead, the bundles read before attention for the routed experts */
  readAheadRouted?: number;
  /** a mixture of experts: per expert across layers, and per layer x expert */
  moe?: ExpertFigures;
  peakResidentBytes: number;
}

/** `x` to `digits` decimals: timings past a hundredth of a millisecond are noise, not data. */
function rounded(x: number, digits: number): number {
  const f = 10 ** digits;
  return Math.round(x * f) / f;
}

/** The generation's figures as scripts read them: milliseconds to 0.01, rates to 0.1 tok/s. */
function roundedStats(s: GenerationStats): GenerationStats {
  return {
    ...s,
    prefillMs: rounded(s.prefillMs, 2),
    decodeMs: rounded(s.decodeMs, 2),
    prefillTokensPerSecond: rounded(s.prefillTokensPerSecond, 1),
    decodeTokensPerSecond: rounded(s.decodeTokensPerSecond, 1),
  };
}

export function runResult(
  text: string,
  tokens: number[],
  genStats: GenerationStats,
  off: OffloadStats | undefined,
): RunResult {
  const stats = roundedStats(genStats);
  if (!off) return { text, tokens, stats: { ...stats, kernels: kernelBuild() } };
  const f = offloadFigures(off);
  const store: StoreFigures = {
    neuronsComputed: off.neuronsComputed,
    neuronsTotal: off.neuronsTotal,
    neuronsComputedShare: rounded(f.computedShare, 4),
    hotHits: off.hotHits,
    coldHits: off.coldHits,
    misses: off.misses,
    cacheHitRate: rounded(f.hitRate, 4),
    bytesRead: off.bytesRead,
    flashReads: off.flash?.reads ?? 0,
    bridged: off.flash?.bridged ?? 0,
    gapBytes: off.flash?.gapBytes ?? 0,
    ioWaitMs: rounded(off.ioWaitMs, 2),
    readAhead: off.readAhead,
    readAheadUsed: off.readAheadUsed,
    peakResidentBytes: peakResidentBytes(),
  };
  if (off.groups && off.groups.experts > 0) {
    store.readAheadExact = off.readAheadExact ?? 0;
    store.readAheadExactUsed = off.readAheadExactUsed ?? 0;
    store.readAheadRouted = off.readAheadRouted ?? 0;
    store.moe = expertFigures(off.groups);
  }
  return { text, tokens, stats: { ...stats, ...store, kernels: kernelBuild() } };
}
