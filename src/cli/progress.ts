/**
 * Terminal feedback for long commands, on stderr so stdout stays the command's output:
 *
 * - ProgressBar: `loading  [##########··········]  52%  12.5/24.0 MiB  310.2 MiB/s  ETA 1s`,
 *   redrawn in place on a terminal (at most every 100 ms); elsewhere (a pipe, a CI log) it stays
 *   quiet until `finish()` prints one summary line.
 * - StatusLine: a live line pinned to the terminal's bottom row while other output scrolls above
 *   it (the `--stats` line: tok/s, cache hit rate, MB/s read, resident memory). It reserves the
 *   row with a scroll region, so streamed text and the line never overwrite each other.
 *
 * Both are no-ops on a non-terminal unless told otherwise, and both restore the terminal on
 * `finish()`/`stop()`; StatusLine also on process exit, so an interrupted command leaves no
 * stuck scroll region behind.
 */

/** The stream these write to: stderr, or a test double. */
export interface TerminalStream {
  write(text: string): unknown;
  isTTY?: boolean;
  columns?: number;
  rows?: number;
  on?(event: "resize", listener: () => void): unknown;
  off?(event: "resize", listener: () => void): unknown;
}

const UNITS = ["B", "KiB", "MiB", "GiB", "TiB"];

/** 1536 -> "1.5 KiB". */
export function formatBytes(n: number): string {
  let i = 0;
  while (Math.abs(n) >= 1024 && i < UNITS.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i === 0 ? 0 : 1)} ${UNITS[i]}`;
}

/** 75.2 -> "1m15s", 3.4 -> "3s". */
export function formatDuration(seconds: number): string {
  if (!Number.isFinite(seconds) || seconds < 0) return "?";
  const s = Math.round(seconds);
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m${String(s % 60).padStart(2, "0")}s`;
  return `${Math.floor(m / 60)}h${String(m % 60).padStart(2, "0")}m`;
}

export interface ProgressBarOptions {
  /** what is being done, e.g. "loading" or "converting" */
  label: string;
  /** the amount at completion (bytes, items...); 0 or less = unknown */
  total: number;
  /** "bytes" shows sizes and MiB/s; "items" shows counts and items/s (default "items") */
  unit?: "bytes" | "items";
  /** default process.stderr */
  stream?: TerminalStream;
  /** draw in place (default: whether the stream is a terminal) */
  live?: boolean;
  /** least time between redraws (default 100 ms) */
  intervalMs?: number;
  /** a clock for tests (default performance.now) */
  now?: () => number;
}

export class ProgressBar {
  private readonly stream: TerminalStream;
  private readonly live: boolean;
  private readonly intervalMs: number;
  private readonly now: () => number;
  private readonly t0: number;
  private lastDraw = -Infinity;
  private done = 0;
  private finished = false;
  private drawn = false;

  constructor(private options: ProgressBarOptions) {
    this.options = { ...options };
    this.stream = options.stream ?? process.stderr;
    this.live = options.live ?? Boolean(this.stream.isTTY);
    this.intervalMs = options.intervalMs ?? 100;
    this.now = options.now ?? (() => performance.now());
    this.t0 = this.now();
  }

  /** Sets the total once it is known (a loader learns it from its first callback). */
  setTotal(total: number): void {
    this.options.total = total;
  }

  /** Sets the amount done so far (clamped to the total) and redraws if due. */
  update(done: number): void {
    if (this.finished) return;
    this.done = this.options.total > 0 ? Math.min(done, this.options.total) : done;
    const t = this.now();
    if (this.live && t - this.lastDraw >= this.intervalMs) {
      this.lastDraw = t;
      this.stream.write(`\r${this.render(t)}\x1b[K`);
      this.drawn = true;
    }
  }

  /** Ends the bar with a summary line ("loading: 24.0 MiB in 1.2 s (20.0 MiB/s)" by default). */
  finish(message?: string): void {
    if (this.finished) return;
    this.finished = true;
    const seconds = (this.now() - this.t0) / 1000;
    const line =
      message ??
      `${this.options.label}: ${this.amount(this.done)} in ${seconds.toFixed(1)} s${this.rate(this.done, seconds)}`;
    this.stream.write(`${this.drawn ? "\r\x1b[K" : ""}${line}\n`);
  }

  /** Ends the bar after a failure: clears the drawn bar, prints nothing else. */
  abandon(): void {
    if (this.finished) return;
    this.finished = true;
    if (this.drawn) this.stream.write("\r\x1b[K");
  }

  /** The bar's text at time `t` (exposed for tests). */
  render(t = this.now()): string {
    const { label, total } = this.options;
    const seconds = (t - this.t0) / 1000;
    const parts = [label];
    if (total > 0) {
      const frac = this.done / total;
      const width = Math.max(10, Math.min(30, (this.stream.columns ?? 80) - 60));
      const full = Math.round(frac * width);
      parts.push(
        `[${"#".repeat(full)}${"·".repeat(width - full)}]`,
        `${Math.floor(frac * 100)}%`.padStart(4),
        `${this.amount(this.done)}/${this.amount(total)}`,
      );
    } else parts.push(this.amount(this.done));
    const rate = this.rate(this.done, seconds);
    if (rate) parts.push(rate.slice(2, -1));
    if (total > 0 && this.done > 0 && this.done < total && seconds > 0.5)
      parts.push(`ETA ${formatDuration(((total - this.done) * seconds) / this.done)}`);
    return parts.join("  ");
  }

  private amount(n: number): string {
    return this.options.unit === "bytes" ? formatBytes(n) : String(Math.round(n));
  }

  private rate(n: number, seconds: number): string {
    if (seconds <= 0 || n <= 0) return "";
    const perSecond = n / seconds;
    return this.options.unit === "bytes" ? ` (${formatBytes(perSecond)}/s)` : ` (${perSecond.toFixed(1)}/s)`;
  }
}

/** What a `--stats` line can show; absent fields are left out (not every engine path has a cache). */
export interface LiveStats {
  /** decode speed now */
  tokensPerSecond?: number;
  /** neuron cache hits / lookups, 0..1 */
  cacheHitRate?: number;
  /** bytes read from the model file per second */
  readBytesPerSecond?: number;
  /** resident memory in bytes (default in formatStats: none) */
  residentBytes?: number;
  /** anything else, appended as is (e.g. "2 active, 3 queued") */
  extra?: string;
}

/** "12.3 tok/s | cache 87.0% | read 45.6 MB/s | rss 123.4 MiB | 2 active". */
export function formatStats(s: LiveStats): string {
  const parts: string[] = [];
  if (s.tokensPerSecond !== undefined) parts.push(`${s.tokensPerSecond.toFixed(1)} tok/s`);
  if (s.cacheHitRate !== undefined) parts.push(`cache ${(s.cacheHitRate * 100).toFixed(1)}%`);
  if (s.readBytesPerSecond !== undefined) parts.push(`read ${(s.readBytesPerSecond / 1e6).toFixed(1)} MB/s`);
  if (s.residentBytes !== undefined) parts.push(`rss ${formatBytes(s.residentBytes)}`);
  if (s.extra) parts.push(s.extra);
  return parts.join(" | ");
}

/**
 * Decode speed over a sliding window of recent tokens (the whole-run average hides a slowdown,
 * e.g. when the neuron cache starts missing).
 */
export class TokenRate {
  /** (token count, time) of recent marks, oldest first */
  private readonly counts: number[] = [];
  private readonly times: number[] = [];

  constructor(
    /** how many recent marks the rate spans */
    private readonly window = 32,
    private readonly now: () => number = () => performance.now(),
  ) {}

  /** Records that the generation has reached `count` tokens. */
  mark(count: number): void {
    this.counts.push(count);
    this.times.push(this.now());
    if (this.counts.length > this.window + 1) {
      this.counts.shift();
      this.times.shift();
    }
  }

  /** Tokens per second between the oldest and the newest mark in the window (0 until two marks). */
  get perSecond(): number {
    const n = this.counts.length;
    if (n < 2) return 0;
    const dt = this.times[n - 1] - this.times[0];
    return dt > 0 ? ((this.counts[n - 1] - this.counts[0]) / dt) * 1000 : 0;
  }

  reset(): void {
    this.counts.length = 0;
    this.times.length = 0;
  }
}

const ESC = "\x1b";

/**
 * A line pinned to the bottom row of the terminal. On a non-terminal it draws nothing (callers
 * print a summary line themselves).
 */
export class StatusLine {
  private readonly stream: TerminalStream;
  private readonly live: boolean;
  private readonly intervalMs: number;
  private active = false;
  private text = "";
  private lastDraw = -Infinity;
  private rows = 0;
  private readonly onResize = () => this.reserve();
  private readonly onExit = () => this.stop();

  constructor(options: { stream?: TerminalStream; live?: boolean; intervalMs?: number } = {}) {
    this.stream = options.stream ?? process.stderr;
    this.live = options.live ?? Boolean(this.stream.isTTY && this.stream.rows && this.stream.rows > 2);
    this.intervalMs = options.intervalMs ?? 250;
  }

  get isLive(): boolean {
    return this.live;
  }

  /** Reserves the bottom row. */
  start(): void {
    if (!this.live || this.active) return;
    this.active = true;
    // Scroll once so that a cursor on the last row moves up out of the reserved row.
    this.stream.write("\n" + `${ESC}[1A`);
    this.reserve();
    this.stream.on?.("resize", this.onResize);
    process.once("exit", this.onExit);
  }

  /** Sets the line's text; redrawn at most every intervalMs unless `force`. */
  update(text: string, force = false): void {
    this.text = text;
    if (!this.active) return;
    const t = performance.now();
    if (!force && t - this.lastDraw < this.intervalMs) return;
    this.lastDraw = t;
    this.draw();
  }

  /** Frees the bottom row and clears it. */
  stop(): void {
    if (!this.active) return;
    this.active = false;
    this.stream.off?.("resize", this.onResize);
    process.off("exit", this.onExit);
    // Save the cursor, reset the scroll region (which homes the cursor), clear the last row, restore.
    this.stream.write(`${ESC}7${ESC}[r${ESC}[${this.rows};1H${ESC}[2K${ESC}8`);
  }

  private reserve(): void {
    this.rows = this.stream.rows ?? 24;
    this.stream.write(`${ESC}7${ESC}[1;${this.rows - 1}r${ESC}8`);
    this.draw();
  }

  private draw(): void {
    const width = (this.stream.columns ?? 80) - 1;
    const text = this.text.length > width ? this.text.slice(0, width) : this.text;
    // Save, go to the last row, clear it, write dimmed, restore.
    this.stream.write(`${ESC}7${ESC}[${this.rows};1H${ESC}[2K${ESC}[2m${text}${ESC}[0m${ESC}8`);
  }
}
