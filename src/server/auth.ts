/**
 * `--api-key`: with keys set, every request but `/health` (and CORS preflights, which browsers
 * send without credentials) must carry `Authorization: Bearer KEY`; others get 401 with an
 * OpenAI error object, as llama-server and OpenAI answer. Keys are compared in constant time.
 */
import { createHash, timingSafeEqual } from "node:crypto";
import type { IncomingMessage, ServerResponse } from "node:http";
import { ApiError } from "../chat/errors.js";

/** Routes anyone may call (a load balancer's health check has no key). */
const PUBLIC_ROUTES = new Set(["/health"]);

export class ApiKeyCheck {
  private readonly digests: Buffer[];

  constructor(keys: readonly string[] = []) {
    for (const k of keys)
      if (typeof k !== "string" || k === "") throw new TypeError("an API key must be a non-empty string");
    this.digests = keys.map(digest);
  }

  get enabled(): boolean {
    return this.digests.length > 0;
  }

  /** Throws 401 unless the request may use `route` (the path without its /v1 prefix). */
  check(req: IncomingMessage, res: ServerResponse, route: string): void {
    if (!this.enabled || PUBLIC_ROUTES.has(route)) return;
    const header = req.headers.authorization;
    const m = typeof header === "string" ? /^Bearer\s+(.+)$/i.exec(header.trim()) : null;
    if (m) {
      const d = digest(m[1]);
      // every key is compared, so the time taken does not say which one came close
      let ok = false;
      for (const k of this.digests) ok = timingSafeEqual(k, d) || ok;
      if (ok) return;
    }
    res.setHeader("WWW-Authenticate", 'Bearer realm="powerinfer"');
    throw new ApiError(
      401,
      m
        ? "invalid API key: the key in the Authorization header is not one this server accepts"
        : "missing API key: send it as the header Authorization: Bearer KEY",
      "authentication_error",
      null,
      "invalid_api_key",
    );
  }
}

/** Equal-length digests, so that timingSafeEqual applies whatever the keys' lengths. */
function digest(key: string): Buffer {
  return createHash("sha256").update(key, "utf8").digest();
}
