/**
 * The offloaded FFN's counters since the model loaded, kept in this one place. The FFN parts a
 * forward pass runs count what they did in the pass's step (ForwardStep.offload); the model's
 * measuring hook (LlamaModel.onPass) hands each finished pass to `add`, and every report reads the
 * totals from here: `run --stats`, the trace's counters, the server's /metrics, the benches.
 *
 * A pass that fails (a read error) is not measured: its step's counts are dropped with it.
 */
import { addStats, GROUP_FIELDS, newGroupStats, zeroStats, type OffloadCounts, type OffloadStats } from "./stats.js";

export class OffloadMeter {
  private readonly sums: OffloadCounts;

  /** `groups`: the store's groups (layers, or layer x expert); `experts`: per layer (0: a dense FFN) */
  constructor(
    private readonly groups: number,
    private readonly experts: number,
  ) {
    this.sums = zeroStats(groups, experts);
  }

  /** The running totals, live (nothing copied): read them now, keep a snapshot() to compare later. */
  get totals(): Readonly<OffloadCounts> {
    return this.sums;
  }

  /** Counts for one pass, all 0, laid out as `add` takes them (the model's step holds one, cleared each pass). */
  newPass(): OffloadCounts {
    return zeroStats(this.groups, this.experts);
  }

  /** A finished pass's counts added to the totals. */
  add(pass: OffloadCounts): void {
    addStats(this.sums, pass);
  }

  /** A copy of the totals (a mixture's own counters only for a mixture), every group's in the store's numbering. */
  snapshot(): OffloadStats {
    const { groups, readAheadExact, readAheadExactUsed, readAheadRouted, ...common } = this.sums;
    const copy = newGroupStats(this.groups, this.experts);
    for (const f of GROUP_FIELDS) copy[f].set(groups[f]);
    return this.experts > 0
      ? { ...common, readAheadExact, readAheadExactUsed, readAheadRouted, groups: copy }
      : { ...common, groups: copy };
  }
}
