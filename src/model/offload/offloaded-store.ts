/**
 * A model's offloaded FFN as a whole: one OffloadedFFN in a model in one memory, or one per memory
 * of a store split among several (src/model/store-shards.ts), each over its own layers' groups.
 * The layer parts hold their memory's OffloadedFFN; this is what the model and its users see:
 * the mode, the whole layout, the meter of the counters (each group's in the store's numbering),
 * and the per-pass and closing calls made on every part.
 */
import type { FlashReaderStats } from "../../io/flash-reader.js";
import type { OffloadLayout, SparsityMode } from "./layout.js";
import { OffloadMeter } from "./meter.js";
import type { OffloadedFFN } from "./offloaded-ffn.js";
import type { OffloadStats } from "./stats.js";

export class OffloadedStore {
  readonly mode: SparsityMode;
  /** what every part did, pass by pass, since the model loaded (the model's measuring hook feeds it) */
  readonly meter: OffloadMeter;
  /** the flash readers' counters, summed (the most reads in flight: the largest of any) */
  readonly reader: { stats(): FlashReaderStats };

  constructor(
    /** in layer order: each memory's, its groups after the one before's */
    readonly parts: readonly OffloadedFFN[],
    /** the whole layout (its `shards` each part's share, where there are several) */
    readonly layout: OffloadLayout,
  ) {
    this.mode = parts[0].mode;
    // every group of the store: the whole layout pins hot slots per group
    this.meter = new OffloadMeter(layout.hotPerGroup.length, parts[0].experts);
    this.reader = {
      stats: () => {
        const out = parts[0].reader.stats();
        for (let i = 1; i < parts.length; i++) {
          const s = parts[i].reader.stats();
          for (const k of Object.keys(out) as (keyof FlashReaderStats)[])
            out[k] = k === "maxInFlight" ? Math.max(out[k], s[k]) : out[k] + s[k];
        }
        return out;
      },
    };
  }

  /** A mixture: whether a decoded token's routed experts are all read ahead once its layer has routed. */
  get readsAheadExpert(): boolean {
    return this.parts[0].readsAheadExpert;
  }

  /** A mixture: whether the next layer's likely experts' picks are read ahead. */
  get readsAheadLayer(): boolean {
    return this.parts[0].readsAheadLayer;
  }

  /** Whether the gate rows are in memory. */
  get hasResidentGates(): boolean {
    return this.parts[0].hasResidentGates;
  }

  /** Milliseconds waited for reads so far (by the passes that finished). */
  get ioWaitMs(): number {
    return this.meter.totals.ioWaitMs;
  }

  /** Before a forward pass (OffloadedFFN.startPass), on every part. */
  startPass(): void {
    for (const p of this.parts) p.startPass();
  }

  /** The part that runs store group g, and g in its numbering. */
  partOf(g: number): { part: OffloadedFFN; group: number } {
    for (let i = this.parts.length - 1; i > 0; i--)
      if (g >= this.parts[i].firstGroup) return { part: this.parts[i], group: g - this.parts[i].firstGroup };
    return { part: this.parts[0], group: g };
  }

  /** A copy of the counters since the model loaded (OffloadMeter.snapshot). */
  snapshot(): OffloadStats {
    const { reads, bridged, gapBytes } = this.reader.stats();
    return { ...this.meter.snapshot(), flash: { reads, bridged, gapBytes } };
  }

  async close(): Promise<void> {
    let error: unknown = null;
    for (const p of this.parts) {
      try {
        await p.close();
      } catch (e) {
        error ??= e;
      }
    }
    if (error !== null) throw error;
  }
}
