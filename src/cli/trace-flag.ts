/**
 * `--trace FILE` on run, serve and bench: a Chrome trace-event JSON of what the engine did
 * (src/runtime/tracer.ts), streamed to the file as the command runs and finished when it ends.
 * Open it at ui.perfetto.dev (Open trace file) or in another viewer of Chrome's trace format.
 */
import { Tracer } from "../runtime/tracer.js";
import { UsageError, type FlagSpec, type ParsedArgs } from "./args.js";

export const TRACE_FLAG: FlagSpec = {
  names: ["--trace"],
  key: "trace",
  type: "string",
  help: "write a Chrome trace (per token and layer: attention, FFN steps, each flash read, cache counters) to this file; open it in ui.perfetto.dev",
};

/** A tracer when --trace was given; the file is created now, so that a path that cannot be written fails before any work. */
export function startTrace(command: string, argv: readonly string[], args: ParsedArgs): Tracer | undefined {
  const path = args.trace as string | undefined;
  if (path === undefined) return undefined;
  try {
    return new Tracer(path, `powerinfer ${command} ${argv.join(" ")}`.trim());
  } catch (e) {
    throw new UsageError(`${command}: --trace ${path}: ${(e as Error).message}`);
  }
}

/** Ends the trace's file and says where it is, on stderr. */
export function finishTrace(tracer: Tracer | undefined): void {
  if (!tracer) return;
  tracer.close();
  const { events, dropped } = tracer.size;
  process.stderr.write(
    `trace: ${tracer.path} (${events} events${dropped ? `, ${dropped} dropped past the limit` : ""}); ` +
      `open it in https://ui.perfetto.dev\n`,
  );
}
