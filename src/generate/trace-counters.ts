/**
 * A trace's counter tracks for a model run from a neuron store, one value per decoded token: the
 * neuron cache's hit rate over that token and over the run, and what was read from flash during
 * that token in MB/s. Made only when a trace is recorded.
 */
import type { OffloadedStore } from "../model/offload/offloaded-store.js";
import { offloadFigures } from "../model/offload/stats.js";
import type { Tracer } from "../runtime/tracer.js";

export class OffloadCounters {
  private hits = 0;
  private lookups = 0;
  private bytes = 0;
  private at: number;

  constructor(
    private readonly tracer: Tracer,
    private readonly ffn: OffloadedStore,
  ) {
    this.at = tracer.now();
    this.take();
  }

  /** Records the counters since the previous call. */
  sample(): void {
    const { hits: h0, lookups: n0, bytes: b0, at: t0 } = this;
    this.take();
    const dh = this.hits - h0,
      dn = this.lookups - n0;
    const seconds = (this.at - t0) / 1e6;
    this.tracer.counter("neuron cache hit rate", {
      token: dn > 0 ? dh / dn : 0,
      run: this.lookups > 0 ? this.hits / this.lookups : 0,
    });
    this.tracer.counter("flash read MB/s", { MBps: seconds > 0 ? (this.bytes - b0) / 1e6 / seconds : 0 });
  }

  private take(): void {
    // the meter's totals as they stand (nothing copied: only read here)
    const s = this.ffn.meter.totals;
    const f = offloadFigures(s);
    this.hits = f.hits;
    this.lookups = f.lookups;
    this.bytes = s.bytesRead;
    this.at = this.tracer.now();
  }
}
