/**
 * An OpenAI-compatible HTTP server over node:http, a thin layer over the chat facade:
 *
 *   POST /v1/chat/completions, POST /v1/completions   (Server-Sent Events when stream: true)
 *   GET  /v1/models, GET /v1/models/{id}, GET /health
 *   POST /tokenize, POST /detokenize, GET /props, GET /metrics   (llama-server's; routes/)
 *
 * (The same routes answer without the /v1 prefix, as llama-server's do.) Errors are OpenAI error
 * objects `{ error: { message, type, param, code } }` with the status that says what went wrong:
 * 400 bad request, 404 unknown route or model, 405 wrong method, 413 body too large, 429 queue
 * full, 503 model loading or server shutting down, 500 a bug.
 *
 * One generation runs at a time per model; the others wait in a FIFO queue of bounded length.
 * A client that disconnects aborts its request, whether it is waiting or generating. A request
 * may name any model: one model is served, and responses name it. With API keys set, requests
 * need one (auth.ts); CORS headers go on every response and preflights are answered (cors.ts).
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import type { GenerateOptions } from "../generate/generator.js";
import { ApiError } from "../chat/errors.js";
import {
  prepareChatCompletion,
  prepareCompletion,
  type ChatModel,
  type PreparedCompletion,
} from "../chat/completions.js";
import type { ChatTemplate } from "../chat/template.js";
import type { ModelObject } from "../chat/openai-types.js";
import { queueFor } from "../chat/queue.js";
import { errorText, oneLine } from "../format/printable.js";
import { ApiKeyCheck } from "./auth.js";
import { CorsPolicy } from "./cors.js";
import { EXTRA_ROUTES, type RouteAnswer } from "./routes/index.js";
import { ConnectionGuard, connectionsCheckingInterval, resolveLimits, type ServerLimits } from "./limits.js";

export interface ServerOptions {
  /** the model to serve; omit it to start in the "loading" state and call setModel() later */
  model?: ChatModel;
  /** the chat template (default: the model's, else the plain format) */
  template?: ChatTemplate;
  /** the id /v1/models reports and responses name, whatever model a request names (default "local") */
  modelName?: string;
  /** the model file, reported by /props */
  modelPath?: string;
  /** keys a request must send as `Authorization: Bearer KEY` (every route but /health); default none */
  apiKeys?: string[];
  /** origins whose web pages may call the server: "*" (default) or a list */
  corsOrigins?: "*" | string[];
  /** default "127.0.0.1"; the server listens on this address only */
  host?: string;
  /** default 8080; 0 picks a free port (see `port` after listen()) */
  port?: number;
  /** requests that may wait behind the running one before new ones get 429 (default 64) */
  maxQueue?: number;
  /** largest request body in bytes before 413 (default 4 MiB) */
  maxBodyBytes?: number;
  /** generation defaults under each request's fields (e.g. { maxTokens: 512 }) */
  defaults?: GenerateOptions;
  /** one line per finished request (default: none) */
  log?: (line: string) => void;
  /** timeouts and the connection cap (default SERVER_LIMIT_DEFAULTS, src/server/limits.ts) */
  limits?: Partial<ServerLimits>;
}

export type ServerState = "loading" | "ready" | "failed" | "closing" | "closed";

/** Counters since start; `active` is the number of completion requests accepted and not yet finished. */
export interface ServerMetrics {
  requests: number;
  active: number;
  completed: number;
  aborted: number;
  rejected: number;
  failed: number;
  promptTokens: number;
  generatedTokens: number;
  /** time spent on prompts (prefill) and on generating, in seconds */
  promptSeconds: number;
  decodeSeconds: number;
  /** decode speed of the last finished generation */
  lastDecodeTokensPerSecond: number;
}

interface Active {
  controller: AbortController;
  done: Promise<void>;
}

/** SSE bytes a client may leave unread before it is taken for gone. */
const MAX_UNREAD_BYTES = 16 * 2 ** 20;

/** The parts of a response the metrics read. */
interface Counted {
  usage: { prompt_tokens: number; completion_tokens: number };
  timings?: { predicted_per_second: number; prompt_ms: number; predicted_ms: number };
}

const JSON_HEADERS = { "Content-Type": "application/json; charset=utf-8" };

export class OpenAIServer {
  readonly host: string;
  private requestedPort: number;
  private readonly http: Server;
  private readonly guard: ConnectionGuard;
  private model: ChatModel | undefined;
  private template: ChatTemplate | undefined;
  private modelName: string;
  private readonly modelPath: string | undefined;
  private readonly auth: ApiKeyCheck;
  private readonly cors: CorsPolicy;
  private readonly maxQueue: number;
  private readonly maxBodyBytes: number;
  private readonly defaults: GenerateOptions | undefined;
  private readonly log: ((line: string) => void) | undefined;
  private _state: ServerState;
  private failure: string | undefined;
  private readonly active = new Set<Active>();
  private readonly created = Math.floor(Date.now() / 1000);
  readonly metrics: ServerMetrics = {
    requests: 0,
    active: 0,
    completed: 0,
    aborted: 0,
    rejected: 0,
    failed: 0,
    promptTokens: 0,
    generatedTokens: 0,
    promptSeconds: 0,
    decodeSeconds: 0,
    lastDecodeTokensPerSecond: 0,
  };

  constructor(options: ServerOptions = {}) {
    this.host = options.host ?? "127.0.0.1";
    this.requestedPort = options.port ?? 8080;
    if (!Number.isInteger(this.requestedPort) || this.requestedPort < 0 || this.requestedPort > 65535) {
      throw new RangeError(`port must be an integer 0..65535, got ${options.port}`);
    }
    this.maxQueue = options.maxQueue ?? 64;
    if (!Number.isInteger(this.maxQueue) || this.maxQueue < 0)
      throw new RangeError(`maxQueue must be a non-negative integer, got ${options.maxQueue}`);
    this.maxBodyBytes = options.maxBodyBytes ?? 4 * 2 ** 20;
    if (!(this.maxBodyBytes > 0)) throw new RangeError(`maxBodyBytes must be positive, got ${options.maxBodyBytes}`);
    this.defaults = options.defaults;
    this.log = options.log;
    this.modelName = options.modelName ?? "local";
    this.modelPath = options.modelPath;
    this.auth = new ApiKeyCheck(options.apiKeys);
    this.cors = new CorsPolicy(options.corsOrigins);
    this.template = options.template;
    this.model = options.model;
    this._state = this.model ? "ready" : "loading";
    const limits = resolveLimits(options.limits);
    this.http = createServer({ connectionsCheckingInterval: connectionsCheckingInterval(limits) }, (req, res) => {
      this.handle(req, res).catch((err) => this.internalError(res, err));
    });
    this.guard = new ConnectionGuard(this.http, limits);
  }

  /** the timeouts and connection cap in force */
  get limits(): ServerLimits {
    return this.guard.limits;
  }

  /** whether requests need an API key (apiKeys were given) */
  get requiresApiKey(): boolean {
    return this.auth.enabled;
  }

  get state(): ServerState {
    return this._state;
  }

  /** The bound port (the real one when started with port 0). */
  get port(): number {
    const a = this.http.address();
    return a && typeof a === "object" ? a.port : this.requestedPort;
  }

  get url(): string {
    const h = this.host.includes(":") ? `[${this.host}]` : this.host;
    return `http://${h}:${this.port}`;
  }

  /** Starts listening; resolves once the port is bound. */
  listen(): Promise<this> {
    return new Promise((resolve, reject) => {
      const onError = (err: Error) => reject(err);
      this.http.once("error", onError);
      this.http.listen(this.requestedPort, this.host, () => {
        this.http.off("error", onError);
        resolve(this);
      });
    });
  }

  /** Ends the "loading" state: from now on requests are served by `model`. */
  setModel(model: ChatModel, template?: ChatTemplate): void {
    if (this._state !== "loading") throw new Error(`setModel: the server is ${this._state}, not loading`);
    this.model = model;
    if (template) this.template = template;
    this._state = "ready";
  }

  /** Loading failed: requests get 503 with this message until the server is closed. */
  setLoadError(message: string): void {
    if (this._state === "loading") {
      this._state = "failed";
      this.failure = message;
    }
  }

  /**
   * Graceful shutdown: stop accepting connections, answer new requests on open connections with
   * 503, let accepted requests finish for up to `timeoutMs` (default 10 s), then abort the rest.
   */
  async close(options: { timeoutMs?: number } = {}): Promise<void> {
    if (this._state === "closed") return;
    if (this._state !== "closing") {
      this._state = "closing";
      const closed = new Promise<void>((resolve) => this.http.close(() => resolve()));
      this.http.closeIdleConnections();
      const all = () => Promise.all([...this.active].map((a) => a.done));
      let timer: NodeJS.Timeout | undefined;
      const timedOut = new Promise<boolean>((resolve) => {
        timer = setTimeout(() => resolve(true), options.timeoutMs ?? 10_000);
      });
      const expired = await Promise.race([all().then(() => false), timedOut]);
      clearTimeout(timer);
      if (expired) {
        for (const a of this.active) a.controller.abort(new Error("the server is shutting down"));
        await all();
      }
      this.http.closeAllConnections();
      await closed;
      this._state = "closed";
    }
  }

  // ---- request handling ----

  private async handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    // answered 503 when it connected, past the connection cap
    if (this.guard.isRefused(req.socket)) return void res.destroy();
    const t0 = performance.now();
    const method = req.method ?? "GET";
    let path: string;
    try {
      path = new URL(req.url ?? "/", "http://localhost").pathname;
    } catch {
      return this.fail(
        req,
        res,
        new ApiError(400, `bad request target ${JSON.stringify(req.url)}`, "invalid_request_error", null, "bad_url"),
        t0,
      );
    }
    if (path.length > 1 && path.endsWith("/")) path = path.slice(0, -1);
    const route = path.startsWith("/v1/") ? path.slice(3) : path;
    this.cors.apply(req, res);
    if (method === "OPTIONS") return this.cors.preflight(req, res);

    const allow = (m: string) => {
      if (method === m || (m === "GET" && method === "HEAD")) return true;
      res.setHeader("Allow", m === "GET" ? "GET, HEAD" : m);
      throw new ApiError(
        405,
        `${method} is not allowed on ${path}; use ${m}`,
        "invalid_request_error",
        null,
        "method_not_allowed",
      );
    };
    try {
      this.auth.check(req, res, route);
      if (route === "/health") {
        allow("GET");
        this.checkReady();
        return this.sendJSON(req, res, 200, { status: "ok" }, t0);
      }
      if (route === "/models") {
        allow("GET");
        this.checkReady();
        return this.sendJSON(req, res, 200, { object: "list", data: [this.modelObject()] }, t0);
      }
      if (route.startsWith("/models/")) {
        allow("GET");
        this.checkReady();
        // any id names the one model served (as a request's `model` does); a malformed one is a 400
        decodePathPart(route.slice("/models/".length), path);
        return this.sendJSON(req, res, 200, this.modelObject(), t0);
      }
      if (route === "/chat/completions" || route === "/completions") {
        allow("POST");
        this.checkReady();
        return await this.completion(req, res, route === "/chat/completions", t0);
      }
      const extra = EXTRA_ROUTES.get(route);
      if (extra) {
        allow(extra.method);
        this.checkReady();
        return this.answer(req, res, await extra.handle(this.routeContext(req)), t0);
      }
      throw new ApiError(404, `no route for ${method} ${path}`, "not_found_error", null, "not_found");
    } catch (err) {
      if (err instanceof ApiError) return this.fail(req, res, err, t0);
      throw err;
    }
  }

  private checkReady(): void {
    if (this._state === "loading")
      throw new ApiError(503, "the model is still loading; retry shortly", "unavailable_error", null, "model_loading");
    if (this._state === "failed")
      throw new ApiError(
        503,
        `the model failed to load: ${this.failure}`,
        "unavailable_error",
        null,
        "model_load_failed",
      );
    if (this._state === "closing" || this._state === "closed")
      throw new ApiError(503, "the server is shutting down", "unavailable_error", null, "shutting_down");
  }

  private modelObject(): ModelObject {
    return { id: this.modelName, object: "model", created: this.created, owned_by: "powerinfer" };
  }

  private routeContext(req: IncomingMessage) {
    return {
      model: this.model!,
      modelName: this.modelName,
      modelPath: this.modelPath,
      template: this.template,
      defaults: this.defaults,
      metrics: this.metrics,
      waiting: queueFor(this.model!).waiting,
      readBody: () => this.readJSON(req),
    };
  }

  private answer(req: IncomingMessage, res: ServerResponse, a: RouteAnswer, t0: number): void {
    if ("json" in a) return this.sendJSON(req, res, 200, a.json, t0);
    res.writeHead(200, { "Content-Type": a.contentType, "Content-Length": Buffer.byteLength(a.text) });
    res.end(req.method === "HEAD" ? undefined : a.text);
    this.logLine(req, "200", t0);
  }

  private async completion(req: IncomingMessage, res: ServerResponse, chat: boolean, t0: number): Promise<void> {
    const body = await this.readJSON(req);
    const model = this.model!;
    const opts = { template: this.template, servedModel: this.modelName, defaults: this.defaults };
    const job: PreparedCompletion<unknown, unknown> = chat
      ? prepareChatCompletion(model, body, opts)
      : prepareCompletion(model, body, opts);
    // One running plus maxQueue waiting; counted here, at acceptance, so the bound is exact.
    if (this.metrics.active >= this.maxQueue + 1) {
      this.metrics.rejected++;
      res.setHeader("Retry-After", "1");
      throw new ApiError(
        429,
        `the server is busy: ${this.metrics.active - 1} requests are already waiting (the queue holds ${this.maxQueue}); retry later`,
        "rate_limit_error",
        null,
        "queue_full",
      );
    }

    const controller = new AbortController();
    // A closed connection before the response is complete means the client went away.
    res.on("close", () => {
      if (!res.writableFinished) controller.abort(new Error("the client disconnected"));
    });
    let finish!: () => void;
    const entry: Active = { controller, done: new Promise<void>((r) => (finish = r)) };
    this.active.add(entry);
    this.guard.hold(req.socket, entry.done);
    this.metrics.active++;
    this.metrics.requests++;
    let outcome = "ok";
    try {
      if (job.stream) await this.stream(req, res, job, controller, t0);
      else {
        const full = (await job.complete(controller.signal)) as Counted;
        this.sendJSON(req, res, 200, full, t0, this.count(full));
      }
      this.metrics.completed++;
    } catch (err) {
      if (controller.signal.aborted) {
        // Nobody to answer (or the server is going down): just stop.
        this.metrics.aborted++;
        outcome = "aborted";
        if (!res.headersSent)
          res
            .writeHead(503, { ...JSON_HEADERS, Connection: "close" })
            .end(
              JSON.stringify(
                new ApiError(503, "the server is shutting down", "unavailable_error", null, "shutting_down"),
              ),
            );
        else res.end();
      } else {
        this.metrics.failed++;
        outcome = "failed";
        throw err;
      }
    } finally {
      this.metrics.active--;
      this.active.delete(entry);
      finish();
      if (outcome !== "ok") this.logLine(req, outcome, t0);
    }
  }

  /** Server-Sent Events: one `data: {chunk}` event per chunk, then `data: [DONE]`. */
  private async stream(
    req: IncomingMessage,
    res: ServerResponse,
    job: PreparedCompletion<unknown, unknown>,
    controller: AbortController,
    t0: number,
  ): Promise<void> {
    const signal = controller.signal;
    let summary = "";
    res.writeHead(200, {
      "Content-Type": "text/event-stream; charset=utf-8",
      "Cache-Control": "no-cache",
      "X-Accel-Buffering": "no",
      ...(this._state === "closing" ? { Connection: "close" } : {}),
    });
    res.flushHeaders();
    try {
      for await (const chunk of job.chunks(signal)) {
        const c = chunk as Partial<Counted>;
        if (c.usage) summary = this.count(c as Counted);
        // No waiting for 'drain': the generation holds the model, and a client that stops
        // reading (but keeps its socket open) must not stall everyone queued behind it. An answer
        // is bounded by the context, so the buffer is too; one that still piles up this far
        // means a dead reader, and the request is dropped.
        res.write(`data: ${JSON.stringify(chunk)}\n\n`);
        if (res.writableLength > MAX_UNREAD_BYTES) controller.abort(new Error("the client stopped reading"));
      }
    } catch (err) {
      if (signal.aborted) throw err;
      // Headers are out: report the failure as an error event the openai client raises.
      const e =
        err instanceof ApiError
          ? err
          : new ApiError(
              500,
              `generation failed: ${err instanceof Error ? err.message : String(err)}`,
              "server_error",
              null,
              null,
            );
      res.write(`data: ${JSON.stringify(e)}\n\n`);
      this.metrics.failed++;
    }
    res.end("data: [DONE]\n\n");
    this.logLine(req, `200 stream${summary}`, t0);
  }

  /** Adds a finished answer to the metrics; returns its part of the log line. */
  private count(r: Counted): string {
    this.metrics.promptTokens += r.usage.prompt_tokens;
    this.metrics.generatedTokens += r.usage.completion_tokens;
    if (r.timings) {
      this.metrics.lastDecodeTokensPerSecond = r.timings.predicted_per_second;
      this.metrics.promptSeconds += r.timings.prompt_ms / 1000;
      this.metrics.decodeSeconds += r.timings.predicted_ms / 1000;
    }
    const speed = r.timings ? `, ${r.timings.predicted_per_second.toFixed(1)} tok/s` : "";
    return ` ${r.usage.prompt_tokens}+${r.usage.completion_tokens} tokens${speed},`;
  }

  /** The body as JSON, within maxBodyBytes (413 beyond), 400 when it does not parse. */
  private async readJSON(req: IncomingMessage): Promise<unknown> {
    const declared = Number(req.headers["content-length"]);
    const tooLarge = () =>
      new ApiError(
        413,
        `the request body is larger than the server's limit of ${this.maxBodyBytes} bytes`,
        "invalid_request_error",
        null,
        "request_too_large",
      );
    if (Number.isFinite(declared) && declared > this.maxBodyBytes) throw tooLarge();
    const chunks: Buffer[] = [];
    let size = 0;
    // Past the limit the rest is read and dropped rather than the socket destroyed, so the client
    // (still sending) gets to read the 413. Leaving the loop early would destroy the socket.
    try {
      for await (const chunk of req as AsyncIterable<Buffer>) {
        size += chunk.length;
        if (size <= this.maxBodyBytes) chunks.push(chunk);
        else chunks.length = 0;
      }
    } catch {
      // The client went away mid-body: nobody is left to read an answer, but say what happened.
      throw new ApiError(
        400,
        "the request body was cut off before its end",
        "invalid_request_error",
        null,
        "incomplete_body",
      );
    }
    if (size > this.maxBodyBytes) throw tooLarge();
    const text = Buffer.concat(chunks).toString("utf8");
    if (text.trim() === "")
      throw new ApiError(
        400,
        "the request body is empty; send a JSON object",
        "invalid_request_error",
        null,
        "invalid_json",
      );
    try {
      return JSON.parse(text);
    } catch (e) {
      throw new ApiError(
        400,
        `the request body is not valid JSON: ${errorText(e)}`,
        "invalid_request_error",
        null,
        "invalid_json",
      );
    }
  }

  private sendJSON(
    req: IncomingMessage,
    res: ServerResponse,
    status: number,
    body: unknown,
    t0: number,
    note = "",
  ): void {
    const text = JSON.stringify(body);
    const headers: Record<string, string | number> = { ...JSON_HEADERS, "Content-Length": Buffer.byteLength(text) };
    if (this._state === "closing" || status === 413) headers.Connection = "close";
    res.writeHead(status, headers);
    res.end(req.method === "HEAD" ? undefined : text);
    this.logLine(req, `${status}${note}`, t0);
  }

  private fail(req: IncomingMessage, res: ServerResponse, err: ApiError, t0: number): void {
    if (res.headersSent) {
      res.end();
      return;
    }
    this.sendJSON(req, res, err.status, err, t0);
  }

  private internalError(res: ServerResponse, err: unknown): void {
    const message = err instanceof Error ? err.message : String(err);
    this.log?.(`internal error: ${err instanceof Error && err.stack ? err.stack : message}`);
    if (res.headersSent) {
      res.end();
      return;
    }
    const body = JSON.stringify(new ApiError(500, `internal server error: ${message}`, "server_error"));
    res.writeHead(500, { ...JSON_HEADERS, "Content-Length": Buffer.byteLength(body) }).end(body);
  }

  private logLine(req: IncomingMessage, outcome: string, t0: number): void {
    this.log?.(`${req.method} ${req.url} ${outcome} ${(performance.now() - t0).toFixed(1)} ms`);
  }
}

/** A percent-encoded part of the path, decoded; 400 when it is not valid UTF-8 percent-encoding. */
function decodePathPart(part: string, path: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    throw new ApiError(
      400,
      `the path ${JSON.stringify(path)} is not valid percent-encoded UTF-8`,
      "invalid_request_error",
      null,
      "bad_url",
    );
  }
}

/** Creates a server and starts listening (see OpenAIServer). */
export async function startServer(options: ServerOptions = {}): Promise<OpenAIServer> {
  return new OpenAIServer(options).listen();
}
