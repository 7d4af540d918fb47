/**
 * `--trace FILE` on run, serve and bench: a Chrome trace-event JSON of what the engine did
 * (src/runtime/tracer.ts), written when the command ends. Open it at ui.perfetto.dev (Open trace
 * file) or in Chrome's chrome://tracing (Load).
 */
import { closeSync, openSync } from "node:fs";
import { Tracer } from "../runtime/tracer.js";
import { UsageError, type FlagSpec, type ParsedArgs } from "./args.js";

export const TRACE_FLAG: FlagSpec = {
  names: ["--trace"],
  key: "trace",
  type: "string",
  help: "write a Chrome trace (per token and layer: attention, FFN steps, each flash read, cache counters) to this file; open it in ui.perfetto.dev or chrome://tracing",
};

/** A tracer when --trace was given; the file is created now, so that a path that cannot be written fails before any work. */
export function startTrace(
  command: string,
  argv: readonly string[],
  args: ParsedArgs,
): { tracer: Tracer; path: string } | undefined {
  const path = args.trace as string | undefined;
  if (path === undefined) return undefined;
  try {
    closeSync(openSync(path, "w"));
  } catch (e) {
    throw new UsageError(`${command}: --trace ${path}: ${(e as Error).message}`);
  }
  return { tracer: new Tracer(`powerinfer ${command} ${argv.join(" ")}`.trim()), path };
}

/** Writes the trace and says where, on stderr. */
export function finishTrace(trace: { tracer: Tracer; path: string } | undefined): void {
  if (!trace) return;
  trace.tracer.write(trace.path);
  const { events, dropped } = trace.tracer.size;
  process.stderr.write(
    `trace: ${trace.path} (${events} events${dropped ? `, ${dropped} dropped past the limit` : ""}); open it in https://ui.perfetto.dev or chrome://tracing\n`,
  );
}
