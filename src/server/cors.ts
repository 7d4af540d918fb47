/**
 * Cross-origin requests, so that a web page on another origin can call the server: the
 * `Access-Control-Allow-Origin` header on every response, and preflights (OPTIONS with
 * `Access-Control-Request-Method`) answered 204 with the methods and headers allowed,
 * Authorization and Content-Type among them. `origins` restricts which pages may: "*" (the
 * default) allows any; a list allows those origins exactly (a preflight from another gets 403
 * and no Allow-Origin, so the browser blocks the request).
 */
import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError } from "../chat/errors.js";

const ALLOWED_METHODS = "GET, HEAD, POST, OPTIONS";
/** what a client of this API sends; a preflight asking for more gets those echoed */
const ALLOWED_HEADERS = ["Authorization", "Content-Type", "Accept", "OpenAI-Organization", "OpenAI-Project"];
/** seconds a browser may cache a preflight's answer */
const PREFLIGHT_MAX_AGE = 86400;

export class CorsPolicy {
  private readonly any: boolean;
  private readonly origins: Set<string>;

  constructor(origins: "*" | readonly string[] = "*") {
    this.any = origins === "*" || origins.includes("*");
    this.origins = new Set(origins === "*" ? [] : origins.map((o) => o.replace(/\/+$/, "")));
  }

  /** Sets the response's Allow-Origin (before anything is written); false when the origin is not allowed. */
  apply(req: IncomingMessage, res: ServerResponse): boolean {
    if (this.any) {
      res.setHeader("Access-Control-Allow-Origin", "*");
      return true;
    }
    // the answer depends on the Origin header: caches must keep one per origin
    res.setHeader("Vary", "Origin");
    const origin = req.headers.origin;
    if (typeof origin === "string" && this.origins.has(origin)) {
      res.setHeader("Access-Control-Allow-Origin", origin);
      return true;
    }
    return false;
  }

  /** Answers an OPTIONS request (a preflight): 204 with what is allowed, or 403 for an origin not allowed. */
  preflight(req: IncomingMessage, res: ServerResponse): void {
    if (!this.apply(req, res)) {
      const body = JSON.stringify(
        new ApiError(
          403,
          `the origin ${JSON.stringify(req.headers.origin ?? null)} may not call this server (see --cors-origin)`,
          "invalid_request_error",
          null,
          "origin_not_allowed",
        ),
      );
      res.writeHead(403, {
        "Content-Type": "application/json; charset=utf-8",
        "Content-Length": Buffer.byteLength(body),
      });
      res.end(body);
      return;
    }
    const asked = req.headers["access-control-request-headers"];
    const headers = new Set(ALLOWED_HEADERS);
    if (typeof asked === "string") for (const h of asked.split(",")) if (h.trim()) headers.add(h.trim());
    res.writeHead(204, {
      "Access-Control-Allow-Methods": ALLOWED_METHODS,
      "Access-Control-Allow-Headers": [...headers].join(", "),
      "Access-Control-Max-Age": String(PREFLIGHT_MAX_AGE),
      Allow: ALLOWED_METHODS,
      "Content-Length": "0",
    });
    res.end();
  }
}
