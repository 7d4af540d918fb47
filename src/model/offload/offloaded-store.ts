/**
 * A model's offloaded FFN as a whole: one OffloadedFFN in a model in one memory, or one per memory
 * of a store split among several (src/model/store-shards.ts), each over its own layers' groups.
 * The layer parts hold their memory's OffloadedFFN; this is what the model and its users see:
 * the mode, the whole layout, the counters summed (and each group's in the store's numbering),
 * and the per-pass and closing calls made on every part.
 */
import type { FlashReaderStats } from "../../io/flash-reader.js";
import type { OffloadLayout, SparsityMode } from "./layout.js";
import type { OffloadedFFN } from "./offloaded-ffn.js";
import { newGroupStats, GROUP_FIELDS, type OffloadStats } from "./stats.js";

export class OffloadedStore {
  readonly mode: SparsityMode;
  /** the flash readers' counters, summed (the most reads in flight: the largest of any) */
  readonly reader: { stats(): FlashReaderStats };

  constructor(
    /** in layer order: each memory's, its groups after the one before's */
    readonly parts: readonly OffloadedFFN[],
    /** the whole layout (its `shards` each part's share, where there are several) */
    readonly layout: OffloadLayout,
  ) {
    this.mode = parts[0].mode;
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

  /** A mixture: whether decode steps read ahead the next routed expert's picks. */
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

  /** Milliseconds waited for reads so far (the running counter, summed over the parts). */
  get ioWaitMs(): number {
    let ms = 0;
    for (const p of this.parts) ms += p.stats.ioWaitMs;
    return ms;
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

  /** Copies of the running counters (OffloadedFFN.snapshot): summed over the parts, groups in the store's numbering. */
  snapshot(): OffloadStats {
    if (this.parts.length === 1) return this.parts[0].snapshot();
    const all = this.parts.map((p) => p.snapshot());
    const out: OffloadStats = { ...all[0] };
    for (const s of all.slice(1))
      for (const k of Object.keys(s) as (keyof OffloadStats)[]) {
        const v = s[k];
        if (typeof v === "number") (out[k] as number) = ((out[k] as number | undefined) ?? 0) + v;
      }
    const groups = all.reduce((n, s) => n + s.groups!.steps.length, 0);
    const g = newGroupStats(groups, all[0].groups!.experts);
    let at = 0;
    for (const s of all) {
      for (const f of GROUP_FIELDS) g[f].set(s.groups![f], at);
      at += s.groups!.steps.length;
    }
    out.groups = g;
    return out;
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
