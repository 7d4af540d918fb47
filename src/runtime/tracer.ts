/**
 * A Chrome trace-event recorder (the JSON that Perfetto and other trace viewers open): what the
 * engine did and when, per token and layer, with each flash read in flight and counter tracks.
 *
 * Every event site holds a `Tracer | null` and checks it once (`tracer?.span(...)`, or
 * `const t = tracer ? tracer.now() : 0`), so a run without a trace pays one null check per site
 * and allocates nothing.
 *
 * Events are streamed to the file as they come (in pieces of a few hundred KB), not kept: a run
 * under a memory budget stays within it while traced (a 7B run makes millions of read events).
 * The file is Chrome's JSON array format, whose closing bracket viewers do not need, so the trace
 * of a process that was killed still opens. Events are in the order they were recorded (a span
 * when it ends, so children before their parents); viewers sort them by time.
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

/**
 * A time in whole microseconds. Whole numbers add exactly, so a span's end (ts + dur) equals the
 * next span's start when they touch: with fractions, rounding can leave an end a hair past the
 * next start, and a viewer then nests the next span inside it.
 */
function us(t: number): number {
  return Math.round(t);
}

const quotedNames = new Map<string, string>();
/** A name as a JSON string; names repeat, so each is quoted once. */
function quoted(name: string): string {
  let q = quotedNames.get(name);
  if (q === undefined) {
    q = JSON.stringify(name);
    if (quotedNames.size < 10_000) quotedNames.set(name, q);
  }
  return q;
}

function argsText(args: Record<string, unknown> | undefined): string {
  return args === undefined ? "" : `,"args":${JSON.stringify(args)}`;
}
/** the JavaScript thread: the forward pass, sampling, the server */
export const MAIN_TRACK = 1;
/** flash reads (async spans, one per read in flight) */
export const IO_TRACK = 2;

/** Events written at most (about 150 bytes each in the file: 300 MB); later ones are counted and dropped. */
export const DEFAULT_MAX_EVENTS = 2_000_000;
/** Bytes gathered before a write to the file. */
const BUFFER_BYTES = 1 << 20;

export class Tracer {
  private readonly origin = performance.now();
  private fd: number;
  /** events' JSON not yet written, each after ",\n" */
  private readonly buffer = Buffer.allocUnsafe(BUFFER_BYTES);
  private used = 0;
  private events = 0;
  private dropped = 0;
  private asyncIds = 0;

  /**
   * Starts a trace in `path` (created now, so that a path that cannot be written fails before
   * any work). `title` names the process in the viewer.
   */
  constructor(
    readonly path: string,
    readonly title = "powerinfer",
    private readonly maxEvents = DEFAULT_MAX_EVENTS,
  ) {
    this.fd = openSync(path, "w");
    const meta: TraceEvent[] = [
      { name: "process_name", cat: "", ph: "M", ts: 0, pid: PID, tid: MAIN_TRACK, args: { name: title } },
      { name: "thread_name", cat: "", ph: "M", ts: 0, pid: PID, tid: MAIN_TRACK, args: { name: "main thread" } },
      { name: "thread_name", cat: "", ph: "M", ts: 0, pid: PID, tid: IO_TRACK, args: { name: "flash reads" } },
    ];
    writeSync(this.fd, "[\n" + meta.map((e) => JSON.stringify(e)).join(",\n"));
  }

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
    if (this.full()) return;
    const ts = us(start);
    const dur = Math.max(0, us(end) - ts);
    this.emit(
      `{"name":${quoted(name)},"cat":${quoted(cat)},"ph":"X","ts":${ts},"dur":${dur},"pid":${PID},"tid":${MAIN_TRACK}${argsText(args)}}`,
    );
  }

  /** A fresh id for an async span (a read in flight). */
  nextId(): number {
    return ++this.asyncIds;
  }

  /** A flash read issued: an async span on the reads track, with where, how much and how many in flight. */
  readBegin(id: number, offset: number, bytes: number, inFlight: number): void {
    if (this.full()) return;
    this.emit(
      `{"name":"read","cat":"flash","ph":"b","ts":${us(this.now())},"pid":${PID},"tid":${IO_TRACK},"id":${id},"args":{"offset":${offset},"bytes":${bytes},"in_flight":${inFlight}}}`,
    );
  }

  /** Its completion: the bytes read (0 on an error, given as text), the reads still in flight. */
  readEnd(id: number, bytes: number, inFlight: number, error: string | null): void {
    if (this.full()) return;
    const err = error === null ? "" : `,"error":${JSON.stringify(error)}`;
    this.emit(
      `{"name":"read","cat":"flash","ph":"e","ts":${us(this.now())},"pid":${PID},"tid":${IO_TRACK},"id":${id},"args":{"bytes":${bytes},"in_flight":${inFlight}${err}}}`,
    );
  }

  /** The start of an async span `id` (overlapping others: a read in flight). */
  asyncBegin(name: string, cat: string, id: number, args?: Record<string, unknown>): void {
    this.async("b", name, cat, id, args);
  }

  /** Its end, with what is known then. */
  asyncEnd(name: string, cat: string, id: number, args?: Record<string, unknown>): void {
    this.async("e", name, cat, id, args);
  }

  private async(ph: "b" | "e", name: string, cat: string, id: number, args?: Record<string, unknown>): void {
    if (this.full()) return;
    this.emit(
      `{"name":${quoted(name)},"cat":${quoted(cat)},"ph":"${ph}","ts":${us(this.now())},"pid":${PID},"tid":${IO_TRACK},"id":${id}${argsText(args)}}`,
    );
  }

  /** A value of a counter track (each key of `values` a series of the track `name`). */
  counter(name: string, values: Record<string, number>): void {
    if (this.full()) return;
    this.emit(
      `{"name":${quoted(name)},"cat":"counter","ph":"C","ts":${us(this.now())},"pid":${PID},"tid":${MAIN_TRACK}${argsText(values)}}`,
    );
  }

  /** A moment on the main track. */
  instant(name: string, cat: string, args?: Record<string, unknown>): void {
    if (this.full()) return;
    this.emit(
      `{"name":${quoted(name)},"cat":${quoted(cat)},"ph":"i","s":"t","ts":${us(this.now())},"pid":${PID},"tid":${MAIN_TRACK}${argsText(args)}}`,
    );
  }

  /** Events recorded (metadata not counted) and events dropped past the limit. */
  get size(): { events: number; dropped: number } {
    return { events: this.events, dropped: this.dropped };
  }

  get closed(): boolean {
    return this.fd < 0;
  }

  /** Whether the event about to be recorded must be left out (closed, or past the limit: counted). */
  private full(): boolean {
    if (this.fd < 0) return true;
    if (this.events < this.maxEvents) return false;
    this.dropped++;
    return true;
  }

  /** One event's JSON, built as text: no event object, no JSON.stringify of it (a read makes two). */
  private emit(text: string): void {
    // a UTF-16 unit is at most 3 bytes of UTF-8
    if (this.used + 2 + 3 * text.length > BUFFER_BYTES) {
      this.flush();
      if (2 + 3 * text.length > BUFFER_BYTES) {
        writeSync(this.fd, ",\n" + text);
        this.events++;
        return;
      }
    }
    this.buffer[this.used++] = 0x2c; // ,
    this.buffer[this.used++] = 0x0a; // \n
    this.used += this.buffer.write(text, this.used);
    this.events++;
  }

  private flush(): void {
    for (let at = 0; at < this.used;) at += writeSync(this.fd, this.buffer, at, this.used - at);
    this.used = 0;
  }

  /**
   * Ends the trace: an instant "trace end" now (the trace's wall time runs from 0 to it; it is
   * written even past the event limit, with the count dropped), the rest written, the file closed.
   */
  close(): void {
    if (this.fd < 0) return;
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
    this.flush();
    writeSync(this.fd, ",\n" + JSON.stringify(end) + "\n]\n");
    closeSync(this.fd);
    this.fd = -1;
  }
}
