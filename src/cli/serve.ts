/**
 * `powerinfer serve -m MODEL [--host 127.0.0.1] [--port 8080]`: the OpenAI-compatible HTTP
 * server. It listens at once and answers 503 while the model loads (with a progress bar on
 * stderr), then serves; SIGINT or SIGTERM shut it down gracefully (answers in progress finish, up
 * to --shutdown-timeout), a second signal exits at once. Logs go to stderr:
 *   powerinfer: listening on http://127.0.0.1:8080 (loading stories260K.gguf)
 *   powerinfer: ready: model "stories260K", context 2048, 2 thread(s)
 */
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { loadModel, type Model } from "../index.js";
import { ChatTemplate } from "../chat/index.js";
import { OpenAIServer } from "../server/index.js";
import type { GenerateOptions } from "../generate/generator.js";
import { CONTEXT_FLAGS, MODEL_FLAG, STORE_FLAGS, SAMPLING_FLAGS, loadOptions, samplingOptions } from "./model-flags.js";
import { parseArgs, parseSize, usage, UsageError, type FlagSpec } from "./args.js";
import { formatBytes, formatStats, ProgressBar, StatusLine } from "./progress.js";
import { acceptLlamaCppFlags } from "./llama-compat-flags.js";
import { finishTrace, startTrace, TRACE_FLAG } from "./trace-flag.js";
import { RANGE } from "./flag-ranges.js";

export const FLAGS: FlagSpec[] = [
  MODEL_FLAG,
  ...CONTEXT_FLAGS,
  { names: ["--host"], key: "host", type: "string", help: "address to listen on", default: "127.0.0.1" },
  {
    names: ["--port"],
    key: "port",
    type: "int",
    help: "port to listen on (0 = any free port)",
    default: 8080,
    range: RANGE.port,
  },
  {
    names: ["-a", "--alias"],
    key: "alias",
    type: "string",
    help: "model name clients use (default: the file name without .gguf)",
  },
  {
    names: ["-n", "--n-predict"],
    key: "n",
    type: "int",
    help: "default max_tokens when a request gives none (-1 = until end or full context)",
    default: -1,
    range: RANGE.predict,
  },
  {
    names: ["--chat-template-file"],
    key: "templateFile",
    type: "string",
    help: "a Jinja chat template to use instead of the model's",
  },
  {
    names: ["--max-queue"],
    key: "maxQueue",
    type: "int",
    help: "requests that may wait behind the running one before 429",
    default: 64,
    range: RANGE.count,
  },
  {
    names: ["--max-body"],
    key: "maxBody",
    type: "size",
    help: "largest request body before 413",
    default: "4MiB",
    range: RANGE.bytes,
  },
  {
    names: ["--shutdown-timeout"],
    key: "shutdownTimeout",
    type: "float",
    help: "seconds answers in progress get to finish on shutdown",
    default: 10,
    range: RANGE.seconds,
  },
  {
    names: ["--api-key"],
    key: "apiKey",
    type: "string",
    help: "require Authorization: Bearer KEY on every route but /health (several: comma-separated; default: $POWERINFER_API_KEY, else $LLAMA_API_KEY, else none)",
  },
  {
    names: ["--cors-origin"],
    key: "corsOrigin",
    type: "string",
    help: "origins whose web pages may call the server, comma-separated (default: * = any)",
    default: "*",
  },
  { names: ["--stats"], key: "stats", type: "bool", help: "a live status line: requests, tok/s, resident memory" },
  { names: ["-q", "--quiet"], key: "quiet", type: "bool", help: "do not log each request" },
  { ...TRACE_FLAG, help: TRACE_FLAG.help + " (written at shutdown)" },
  ...SAMPLING_FLAGS,
  ...STORE_FLAGS,
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

export async function main(argv: string[]): Promise<number> {
  argv = acceptLlamaCppFlags("serve", argv);
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "serve -m MODEL [--host 127.0.0.1] [--port 8080] [options]",
        "Serve a model over an OpenAI-compatible HTTP API: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,\n" +
          "and llama-server's POST /tokenize, POST /detokenize, GET /props, GET /metrics.\n" +
          "One generation runs at a time; other requests wait in a first-in-first-out queue.",
        FLAGS,
      ),
    );
    return 0;
  }
  if (args._.length) throw new UsageError(`serve: unexpected argument "${args._[0]}"`);
  const load = loadOptions("serve", args);
  const port = args.port as number;
  // The default is written as a size for --help; given values arrive parsed.
  const maxBody = typeof args.maxBody === "string" ? parseSize(args.maxBody) : (args.maxBody as number);
  if (!(maxBody > 0)) throw new UsageError("serve: --max-body must be a positive size");
  const shutdownMs = (args.shutdownTimeout as number) * 1000;
  const modelPath = load.modelPath;
  const name = (args.alias as string | undefined) ?? basename(modelPath).replace(/\.(gguf|pi)$/i, "");
  let template: ChatTemplate | undefined;
  if (typeof args.templateFile === "string") {
    try {
      template = ChatTemplate.jinja(readFileSync(args.templateFile, "utf8"));
    } catch (e) {
      throw new UsageError(
        `serve: --chat-template-file ${args.templateFile}: ${e instanceof Error ? e.message : String(e)}`,
      );
    }
  }
  const defaults: GenerateOptions = { ...samplingOptions(args), maxTokens: args.n as number };
  const trace = startTrace("serve", argv, args);

  const status = args.stats ? new StatusLine() : undefined;
  const say = (line: string) => process.stderr.write(`powerinfer: ${line}\n`);
  const server = new OpenAIServer({
    host: args.host as string,
    port,
    modelName: name,
    modelPath,
    apiKeys: apiKeys(args.apiKey as string | undefined),
    corsOrigins: corsOrigins(args.corsOrigin as string),
    maxQueue: args.maxQueue as number,
    maxBodyBytes: maxBody,
    defaults,
    log: args.quiet ? undefined : (line) => say(line),
  });
  try {
    await server.listen();
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === "EADDRINUSE")
      throw new Error(`serve: ${args.host}:${port} is already in use; choose another port with --port`);
    if (code === "EADDRNOTAVAIL") throw new Error(`serve: cannot listen on ${args.host}: no such local address`);
    throw e;
  }
  say(
    `listening on ${server.url} (loading ${basename(modelPath)}${server.requiresApiKey ? "; API key required" : ""})`,
  );

  // Signals: the first shuts down gracefully, a second exits at once.
  let stopping: Promise<void> | undefined;
  let model: Model | undefined;
  let resolveStopped!: () => void;
  const stopped = new Promise<void>((r) => (resolveStopped = r));
  const onSignal = (signal: NodeJS.Signals) => {
    if (stopping) {
      say(`${signal} again: exiting now`);
      process.exit(130);
    }
    say(`${signal}: shutting down (answers in progress get ${shutdownMs / 1000} s; ${signal} again to exit now)`);
    stopping = server.close({ timeoutMs: shutdownMs }).then(resolveStopped);
  };
  process.on("SIGINT", onSignal);
  process.on("SIGTERM", onSignal);

  let ticker: NodeJS.Timeout | undefined;
  try {
    const bar = new ProgressBar({ label: "loading", total: 0, unit: "bytes" });
    let loadTotal = 0;
    try {
      model = await loadModel({
        ...load,
        tracer: trace,
        onLoadProgress: (done, total) => {
          loadTotal = total;
          bar.setTotal(total);
          bar.update(done);
        },
      });
      bar.finish(`powerinfer: loaded ${formatBytes(loadTotal)} of weights`);
    } catch (e) {
      bar.abandon();
      server.setLoadError(e instanceof Error ? e.message : String(e));
      throw e;
    }
    if (stopping) {
      await stopping;
      return 0;
    }
    const chatTemplate = template ?? ChatTemplate.fromMetadata(model.metadata, model.tokenizer);
    server.setModel(model, chatTemplate);
    const tpl = template
      ? "the template of --chat-template-file"
      : chatTemplate.kind === "jinja"
        ? "the model's chat template"
        : "the plain chat format (the model has no template)";
    say(`ready: model "${name}", context ${model.contextSize}, ${model.threads} thread(s), ${tpl}`);
    if (model.contextNote) say(`note: ${model.contextNote}`);
    if (status?.isLive) {
      status.start();
      const m = server.metrics;
      const draw = () =>
        status.update(
          formatStats({
            tokensPerSecond: m.lastDecodeTokensPerSecond,
            residentBytes: process.memoryUsage.rss(),
            extra: `${Math.min(m.active, 1)} generating, ${Math.max(0, m.active - 1)} queued, ${m.completed} done, ${m.generatedTokens} tokens out`,
          }),
          true,
        );
      draw();
      ticker = setInterval(draw, 500);
    }
    await stopped;
    return 0;
  } finally {
    if (ticker) clearInterval(ticker);
    status?.stop();
    process.off("SIGINT", onSignal);
    process.off("SIGTERM", onSignal);
    if (!stopping) await server.close({ timeoutMs: 0 });
    else await stopping;
    await model?.dispose();
    finishTrace(trace);
    if (stopping) say("stopped");
  }
}

/** The keys of --api-key, else of the environment (a key on the command line shows in `ps`). */
function apiKeys(flag: string | undefined): string[] {
  const text = flag ?? process.env.POWERINFER_API_KEY ?? process.env.LLAMA_API_KEY ?? "";
  const keys = text
    .split(",")
    .map((k) => k.trim())
    .filter((k) => k !== "");
  if (flag !== undefined && keys.length === 0) throw new UsageError("serve: --api-key needs a key");
  return keys;
}

function corsOrigins(flag: string): "*" | string[] {
  const list = flag
    .split(",")
    .map((o) => o.trim())
    .filter((o) => o !== "");
  if (list.length === 0) throw new UsageError('serve: --cors-origin needs an origin (e.g. https://example.com) or "*"');
  for (const o of list)
    if (o !== "*" && !/^https?:\/\/[^/\s]+$/.test(o.replace(/\/+$/, "")))
      throw new UsageError(
        `serve: --cors-origin "${o}" is not an origin like https://example.com:8443 (scheme, host and port only)`,
      );
  return list.includes("*") ? "*" : list;
}
