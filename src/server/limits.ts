/**
 * What the server allows a connection: how long it may take to send its headers and its whole
 * request, how long it may sit idle, and how many may be open at once.
 *
 * Why: with Node's defaults a client that opens sockets, sends part of its headers and stalls
 * keeps each socket (and its memory) for 60-300 s, checked only every 30 s, and nothing bounds
 * how many it opens (35 stalled sockets stayed open 75 s and more). Slow-loris clients could hold
 * the server's file descriptors and memory for free.
 *
 * The idle timeout must not cut off an answer the server itself is slow to produce (a long
 * generation sends nothing until it ends when not streamed, and a request may wait in the queue):
 * a connection holding a request the server is working on is exempt until the answer is done.
 */
import type { Server } from "node:http";
import type { Socket } from "node:net";

export interface ServerLimits {
  /** the complete request headers must arrive within this many ms of the connection or the previous request */
  headersTimeoutMs: number;
  /** the complete request (headers and body) must arrive within this many ms */
  requestTimeoutMs: number;
  /**
   * a connection without traffic for this many ms is closed, unless it holds a request the
   * server is answering (a silent socket, a stalled body, a reader that stopped reading)
   */
  idleTimeoutMs: number;
  /** open connections at most; one more is answered 503 and closed */
  maxConnections: number;
}

export const SERVER_LIMIT_DEFAULTS: Readonly<ServerLimits> = Object.freeze({
  headersTimeoutMs: 10_000,
  requestTimeoutMs: 30_000,
  idleTimeoutMs: 30_000,
  maxConnections: 256,
});

/** The limits with defaults filled in, checked (a RangeError names a bad one). */
export function resolveLimits(given: Partial<ServerLimits> = {}): ServerLimits {
  const out = { ...SERVER_LIMIT_DEFAULTS, ...given };
  for (const [k, v] of Object.entries(out)) {
    if (!Number.isSafeInteger(v) || v < 1)
      throw new RangeError(`server limit ${k} must be a positive integer, got ${v}`);
  }
  // Node refuses a request timeout shorter than the headers timeout
  out.requestTimeoutMs = Math.max(out.requestTimeoutMs, out.headersTimeoutMs);
  return out;
}

/** How often Node checks connections against the headers and request timeouts (its default is 30 s). */
export function connectionsCheckingInterval(limits: ServerLimits): number {
  return Math.max(25, Math.min(1000, Math.floor(limits.headersTimeoutMs / 4)));
}

const REASON: Record<number, string> = {
  400: "Bad Request",
  408: "Request Timeout",
  413: "Payload Too Large",
  431: "Request Header Fields Too Large",
  503: "Service Unavailable",
};

/**
 * A whole response written straight to the socket, as an OpenAI error object: for answers the
 * http layer gives before (or instead of) a request (past the cap, unparsable requests).
 */
function rawError(status: number, type: string, code: string, message: string): string {
  const body = JSON.stringify({ error: { message, type, param: null, code } });
  return (
    `HTTP/1.1 ${status} ${REASON[status]}\r\n` +
    "Content-Type: application/json; charset=utf-8\r\n" +
    `Content-Length: ${Buffer.byteLength(body)}\r\n` +
    (status === 503 ? "Retry-After: 1\r\n" : "") +
    "Connection: close\r\n\r\n" +
    body
  );
}

function overCapResponse(max: number): string {
  const message = `the server is busy: it serves at most ${max} connections at once; retry later`;
  return rawError(503, "unavailable_error", "too_many_connections", message);
}

/**
 * The answer to a request Node's HTTP parser refused (Node's own is an empty 400): why, in the
 * error shape every other answer has.
 */
function clientErrorResponse(err: Error & { code?: string }, limits: ServerLimits): string {
  switch (err.code) {
    case "HPE_HEADER_OVERFLOW":
      return rawError(
        431,
        "invalid_request_error",
        "headers_too_large",
        "the request headers are larger than the server accepts",
      );
    case "ERR_HTTP_REQUEST_TIMEOUT":
      return rawError(
        408,
        "invalid_request_error",
        "request_timeout",
        `the request did not arrive whole within ${limits.requestTimeoutMs} ms (headers within ${limits.headersTimeoutMs} ms)`,
      );
    default:
      return rawError(
        400,
        "invalid_request_error",
        "bad_http",
        `the request is not valid HTTP/1.1 (${err.code ?? "parse error"}: ${err.message.replace(/[\r\n]+/g, " ")})`,
      );
  }
}

/**
 * Applies the limits to a node:http server (created with connectionsCheckingInterval from the
 * limits): Node's own headers, request and keep-alive timeouts, an idle timeout that spares
 * connections the server is answering (see hold), and the connection cap.
 */
export class ConnectionGuard {
  private open = 0;
  /** connections with requests being answered, and how many */
  private readonly busy = new Map<Socket, number>();
  /** connections refused past the cap: the http parser may still see a request on them */
  private readonly refused = new WeakSet<Socket>();

  constructor(
    http: Server,
    readonly limits: ServerLimits,
  ) {
    http.headersTimeout = limits.headersTimeoutMs;
    http.requestTimeout = limits.requestTimeoutMs;
    // between requests on a kept-alive connection: Node's 5 s unless the idle limit is shorter
    http.keepAliveTimeout = Math.min(5000, limits.idleTimeoutMs);
    http.setTimeout(limits.idleTimeoutMs, (socket: Socket) => {
      // a busy one: its timer fires again after the next traffic (Node refreshes it on activity)
      if (this.busy.has(socket)) return;
      // silent, or stalled inside its request: say so (as Node does for a headers timeout), then go
      const message = `nothing arrived on this connection for ${limits.idleTimeoutMs} ms: closing it`;
      if (socket.writable) socket.end(rawError(408, "invalid_request_error", "idle_timeout", message));
      setTimeout(() => socket.destroy(), 1000).unref();
    });
    http.on("clientError", (err: Error & { code?: string }, socket: Socket) => {
      // nothing to answer on a connection that is gone or already carries an answer
      if (err.code === "ECONNRESET" || !socket.writable || this.busy.has(socket)) return void socket.destroy();
      socket.end(clientErrorResponse(err, limits));
      setTimeout(() => socket.destroy(), 1000).unref();
    });
    http.on("connection", (socket: Socket) => {
      this.open++;
      socket.once("close", () => {
        this.open--;
        this.busy.delete(socket);
      });
      if (this.open > limits.maxConnections) {
        this.refused.add(socket);
        socket.end(overCapResponse(limits.maxConnections));
        // a client that never closes its side is not waited for
        setTimeout(() => socket.destroy(), 1000).unref();
      }
    });
  }

  /** Whether a socket was answered 503 at connection (a request parsed on it gets no other answer). */
  isRefused(socket: Socket): boolean {
    return this.refused.has(socket);
  }

  /** The server is answering a request on `socket` until `done` settles: no idle timeout meanwhile. */
  hold(socket: Socket, done: Promise<unknown>): void {
    this.busy.set(socket, (this.busy.get(socket) ?? 0) + 1);
    const release = () => {
      const n = (this.busy.get(socket) ?? 1) - 1;
      if (n > 0) this.busy.set(socket, n);
      else this.busy.delete(socket);
    };
    done.then(release, release);
  }

  /** open connections now */
  get connections(): number {
    return this.open;
  }
}
