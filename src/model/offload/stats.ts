/**
 * What an offloaded FFN did: in a forward pass (ForwardStep.offload, filled by the FFN parts the
 * pass runs), or since the model loaded (the meter's totals, meter.ts, and their snapshots).
 */
export interface OffloadStats {
  /** (token, layer) FFN evaluations (a mixture's: (token, routed expert) evaluations) */
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
  /**
   * a mixture in predictor mode: of readAhead, the bundles read for the token's next routed
   * expert of the same layer (its predictor on the same input: exact picks), and how many of
   * those were used; the rest were read for the next layer's likely experts (its router on the
   * current residual)
   */
  readAheadExact?: number;
  readAheadExactUsed?: number;
  /**
   * a mixture whose router reads the block's input (smallthinker), in predictor mode: of
   * readAhead, the bundles read before attention for the experts the token is routed to (their
   * likely picks, from the block's input), reads that overlap attention
   */
  readAheadRouted?: number;
  /** the same counts per store group (a layer, or layer * experts + expert of a mixture) */
  groups?: GroupStats;
  /**
   * The flash reader's physical reads since the store opened (the hot region's load included),
   * after coalescing and bridging; of the bundles they served, those that shared a read through
   * the bridge region, and the bytes read between requests for nothing (FlashReaderStats).
   */
  flash?: { reads: number; bridged: number; gapBytes: number };
}

/**
 * Counters per store group (a layer, or one expert of a mixture's layer), laid out at load: each
 * array has one entry per group. Sums over the groups are the totals of OffloadStats.
 */
export interface GroupStats {
  /** experts per layer (0: a dense model, a group is a layer) */
  experts: number;
  /** FFN evaluations of the group (a mixture: tokens routed to the expert) */
  steps: Float64Array;
  neuronsComputed: Float64Array;
  hotHits: Float64Array;
  coldHits: Float64Array;
  /** bundles read: step misses and read-ahead used */
  misses: Float64Array;
  readAhead: Float64Array;
  readAheadUsed: Float64Array;
}

export const GROUP_FIELDS = [
  "steps",
  "neuronsComputed",
  "hotHits",
  "coldHits",
  "misses",
  "readAhead",
  "readAheadUsed",
] as const;

export function newGroupStats(groups: number, experts: number): GroupStats {
  const a = () => new Float64Array(groups);
  return {
    experts,
    steps: a(),
    neuronsComputed: a(),
    hotHits: a(),
    coldHits: a(),
    misses: a(),
    readAhead: a(),
    readAheadUsed: a(),
  };
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

/** OffloadStats with every counter present (a mixture's too) and the groups' (not the reader's): a pass's counts, and the meter's totals. */
export type OffloadCounts = Required<Omit<OffloadStats, "flash">>;

/** Every counter of OffloadStats but the groups', a mixture's included. */
export const STAT_FIELDS = [
  "steps",
  "neuronsTotal",
  "neuronsComputed",
  "hotHits",
  "coldHits",
  "misses",
  "bytesRead",
  "ioWaitMs",
  "computeMs",
  "readAhead",
  "readAheadUsed",
  "readAheadExact",
  "readAheadExactUsed",
  "readAheadRouted",
] as const;

/** Counters at 0, every one present (a mixture's too), with `groups` groups' of a store with `experts` experts per layer. */
export function zeroStats(groups: number, experts: number): OffloadCounts {
  const s = { ...newStats(), readAheadExact: 0, readAheadExactUsed: 0, readAheadRouted: 0 };
  return { ...s, groups: newGroupStats(groups, experts) };
}

/** Every counter of `s` (from zeroStats) back to 0. */
export function clearStats(s: OffloadCounts): void {
  for (let i = 0; i < STAT_FIELDS.length; i++) s[STAT_FIELDS[i]] = 0;
  for (let i = 0; i < GROUP_FIELDS.length; i++) s.groups[GROUP_FIELDS[i]].fill(0);
}

/** into += from, counter by counter and group by group (both from zeroStats, laid out alike). */
export function addStats(into: OffloadCounts, from: OffloadCounts): void {
  for (let i = 0; i < STAT_FIELDS.length; i++) into[STAT_FIELDS[i]] += from[STAT_FIELDS[i]];
  for (let i = 0; i < GROUP_FIELDS.length; i++) {
    const a = into.groups[GROUP_FIELDS[i]];
    const b = from.groups[GROUP_FIELDS[i]];
    for (let g = 0; g < a.length; g++) a[g] += b[g];
  }
}

/**
 * What a part of an FFN step spends, added where its caller says (the step, or the pass for work
 * outside any step): compute time, time waiting for reads, bytes read.
 */
export interface Spent {
  computeMs: number;
  ioWaitMs: number;
  bytesRead: number;
}

/** One expert across a mixture's layers (or one layer of a dense model): its share of routings and its cache figures. */
export interface ExpertSummary {
  expert: number;
  /** tokens routed to it, summed over layers */
  routed: number;
  /** routed / every (token, layer) routing: the experts' shares add up to 1 */
  routedShare: number;
  neuronsComputed: number;
  hotHits: number;
  coldHits: number;
  misses: number;
  /** (hot + cold hits) / (hits + misses), 0 when it computed nothing */
  hitRate: number;
  readAhead: number;
  readAheadUsed: number;
}

/** Per expert across layers, from a mixture's group counters. */
export function expertSummary(g: GroupStats): ExpertSummary[] {
  const E = Math.max(1, g.experts);
  const out: ExpertSummary[] = [];
  let routedAll = 0;
  for (let i = 0; i < g.steps.length; i++) routedAll += g.steps[i];
  for (let e = 0; e < E; e++) {
    const s = { steps: 0, neuronsComputed: 0, hotHits: 0, coldHits: 0, misses: 0, readAhead: 0, readAheadUsed: 0 };
    for (let i = e; i < g.steps.length; i += E) for (const f of GROUP_FIELDS) s[f] += g[f][i];
    const hits = s.hotHits + s.coldHits;
    out.push({
      expert: e,
      routed: s.steps,
      routedShare: routedAll > 0 ? s.steps / routedAll : 0,
      neuronsComputed: s.neuronsComputed,
      hotHits: s.hotHits,
      coldHits: s.coldHits,
      misses: s.misses,
      hitRate: hits + s.misses > 0 ? hits / (hits + s.misses) : 0,
      readAhead: s.readAhead,
      readAheadUsed: s.readAheadUsed,
    });
  }
  return out;
}

/** Await `reading`, the wait counted as I/O wait in `spent` (null: no pass's, as when closing). */
export async function waitForReads(spent: Spent | null, reading: Promise<void>): Promise<void> {
  if (!spent) return reading;
  const t = performance.now();
  try {
    await reading;
  } finally {
    spent.ioWaitMs += performance.now() - t;
  }
}

/**
 * What happened between two snapshots of one offloaded FFN (OffloadMeter.snapshot): every
 * running total, and every group's, as after minus before. Reports of a part of a run (a decode
 * without its prefill, one request of a server, one benchmark step) take their figures from it.
 */
export function statsSince(before: OffloadStats, after: OffloadStats): OffloadStats {
  const out: OffloadStats = { ...after };
  for (const k of Object.keys(after) as (keyof OffloadStats)[]) {
    const a = after[k];
    const b = before[k];
    if (typeof a === "number" && typeof b === "number") (out[k] as number) = a - b;
  }
  const ga = after.groups;
  const gb = before.groups;
  if (ga && gb) {
    const g = newGroupStats(ga.steps.length, ga.experts);
    for (const f of GROUP_FIELDS) for (let i = 0; i < g[f].length; i++) g[f][i] = ga[f][i] - gb[f][i];
    out.groups = g;
  }
  return out;
}

/** The figures every report derives from the counters, derived in this one place. */
export interface OffloadFigures {
  /** bundles found in the neuron cache (hot and cold regions) */
  hits: number;
  /** hits and misses: every bundle a step asked for */
  lookups: number;
  /** hits / lookups (0 when nothing was asked for) */
  hitRate: number;
  /** neurons computed / neurons in the FFN evaluations (0 when none ran) */
  computedShare: number;
}

export function offloadFigures(
  s: Pick<OffloadStats, "hotHits" | "coldHits" | "misses" | "neuronsComputed" | "neuronsTotal">,
): OffloadFigures {
  const hits = s.hotHits + s.coldHits;
  const lookups = hits + s.misses;
  return {
    hits,
    lookups,
    hitRate: lookups > 0 ? hits / lookups : 0,
    computedShare: s.neuronsTotal > 0 ? s.neuronsComputed / s.neuronsTotal : 0,
  };
}
