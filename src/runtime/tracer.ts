/**
 * A Chrome trace-event recorder (the JSON that Perfetto and chrome://tracing open): what the
 * engine did and when, per token and layer, with each flash read in flight and counter tracks.
 *
 * Every event site holds a `Tracer | null` and checks it once (`tracer?.span(...)`, or
 * `const t = tracer ? tracer.now() : 0`), so a run without a trace pays one null check per site
 * and allocates nothing; with one, each event is a small object kept until `write`.
 *
 * Tracks (thread ids within one process): the main thread's work as nested spans ("X" events,
 * which must nest properly on a track), flash reads as async spans that overlap freely ("b"/"e"
 * with an id, one row per read in flight in the viewer), counters ("C") as their own tracks.
 */
import { closeSync, openSync, writeSync } from "node:fs";

export interface TraceEvent {
  name: string;
  cat: string;
  ph: "X" | "b" | "e" | "C" | "i" | "M";
  /** microseconds since the trace began */
  ts: number;
  dur?: number;
  pid: number;
  tid: number;
  id?: number;
  s?: "t" | "p" | "g";
  args?: Record<string, unknown>;
}

const PID = 1;
/** the JavaScript thread: the forward pass, sampling, the server */
export const MAIN_TRACK = 1;
/** flash reads (async spans, one per read in flight) */
export const IO_TRACK = 2;

/** Events kept at most (a server traced for days must not grow without bound); later ones are counted and dropped. */
const DEFAULT_MAX_EVENTS = 4_000_000;

export class Tracer {
  private readonly events: TraceEvent[] = [];
  private readonly origin = performance.now();
  private dropped = 0;
  private asyncIds = 0;

  constructor(
    /** what the trace is of, e.g. "powerinfer run -m model.pi ..." (in the file's metadata) */
    readonly title = "powerinfer",
    private readonly maxEvents = DEFAULT_MAX_EVENTS,
  ) {}

  /** Microseconds since the trace began: the start of a span. */
  now(): number {
    return (performance.now() - this.origin) * 1000;
  }

  /** A performance.now() reading (milliseconds) as a trace time, for spans timed by code that already reads the clock. */
  fromClock(ms: number): number {
    return (ms - this.origin) * 1000;
  }

  /**
   * A span on the main track from `start` (a now()) to `end` (default now). Spans must nest: a
   * child ends before its parent, and a span that follows another starts no earlier than its end
   * (pass the next span's start as this one's `end`).
   */
  span(name: string, cat: string, start: number, args?: Record<string, unknown>, end = this.now()): void {
    this.push({ name, cat, ph: "X", ts: start, dur: Math.max(0, end - start), pid: PID, tid: MAIN_TRACK, args });
  }

  /** A fresh id for an async span (a read in flight). */
  nextId(): number {
    return ++this.asyncIds;
  }

  /** The start of an async span `id` (overlapping others: a read in flight). */
  asyncBegin(name: string, cat: string, id: number, args?: Record<string, unknown>): void {
    this.push({ name, cat, ph: "b", ts: this.now(), pid: PID, tid: IO_TRACK, id, args });
  }

  /** Its end, with what is known then. */
  asyncEnd(name: string, cat: string, id: number, args?: Record<string, unknown>): void {
    this.push({ name, cat, ph: "e", ts: this.now(), pid: PID, tid: IO_TRACK, id, args });
  }

  /** A value of a counter track (each key of `values` a series of the track `name`). */
  counter(name: string, values: Record<string, number>): void {
    this.push({ name, cat: "counter", ph: "C", ts: this.now(), pid: PID, tid: MAIN_TRACK, args: values });
  }

  /** A moment on the main track. */
  instant(name: string, cat: string, args?: Record<string, unknown>): void {
    this.push({ name, cat, ph: "i", s: "t", ts: this.now(), pid: PID, tid: MAIN_TRACK, args });
  }

  /** Events recorded (metadata not counted) and events dropped past the limit. */
  get size(): { events: number; dropped: number } {
    return { events: this.events.length, dropped: this.dropped };
  }

  private push(e: TraceEvent): void {
    if (this.events.length >= this.maxEvents) {
      this.dropped++;
      return;
    }
    if (e.args === undefined) delete e.args;
    this.events.push(e);
  }

  /**
   * Writes the trace as Chrome's JSON object format, ending with an instant "trace end" at the
   * moment of writing (the trace's wall time is from 0 to it). Streamed in pieces, so a long
   * trace never becomes one string.
   */
  write(path: string): void {
    // the end is recorded even past the limit: it gives the trace's wall time
    const end: TraceEvent = {
      name: "trace end",
      cat: "trace",
      ph: "i",
      s: "t",
      ts: this.now(),
      pid: PID,
      tid: MAIN_TRACK,
    };
    if (this.dropped > 0) end.args = { dropped_events: this.dropped };
    const meta: TraceEvent[] = [
      { name: "process_name", cat: "", ph: "M", ts: 0, pid: PID, tid: MAIN_TRACK, args: { name: this.title } },
      { name: "thread_name", cat: "", ph: "M", ts: 0, pid: PID, tid: MAIN_TRACK, args: { name: "main thread" } },
      { name: "thread_name", cat: "", ph: "M", ts: 0, pid: PID, tid: IO_TRACK, args: { name: "flash reads" } },
    ];
    const fd = openSync(path, "w");
    try {
      writeSync(
        fd,
        '{"displayTimeUnit":"ms","otherData":' + JSON.stringify({ title: this.title }) + ',"traceEvents":[\n',
      );
      // Time order, and a span before the spans it contains when they start together (a span is
      // recorded when it ends, so children come first): viewers that read the events in order
      // nest them right.
      const events = this.events.slice().sort((x, y) => x.ts - y.ts || (y.dur ?? 0) - (x.dur ?? 0));
      const all = [...meta, ...events, end];
      const CHUNK = 4096;
      for (let i = 0; i < all.length; i += CHUNK) {
        const part = all.slice(i, i + CHUNK).map((e) => JSON.stringify(e));
        writeSync(fd, part.join(",\n") + (i + CHUNK < all.length ? ",\n" : "\n"));
      }
      writeSync(fd, "]}\n");
    } finally {
      closeSync(fd);
    }
  }
}
