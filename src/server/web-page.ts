/**
 * The HTTP server of `powerinfer web`: the browser build (dist/browser: the page, its workers and
 * kernels) with the headers that make the page cross-origin isolated (COOP same-origin, COEP
 * require-corp: the engine's workers share a WebAssembly.Memory), and model files under
 * /models/NAME with Range requests (so the page's copy into OPFS can resume). Static files only:
 * the model runs in the browser.
 */
import { createServer, type IncomingMessage, type Server, type ServerResponse } from "node:http";
import { createReadStream, existsSync, statSync } from "node:fs";
import { basename, extname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

export interface WebPageOptions {
  port?: number;
  host?: string;
  /** model files offered under /models/BASENAME */
  models?: string[];
  /** the browser build (default: dist/browser of this package) */
  root?: string;
  /** send the cross-origin-isolation headers (default true; false shows the page's error without them) */
  isolation?: boolean;
}

const TYPES: Record<string, string> = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".map": "application/json",
  ".wasm": "application/wasm",
  ".png": "image/png",
  ".json": "application/json",
};

/** dist/browser of this package (this file is dist/src/server/web-page.js). */
export function browserBuildDir(): string {
  return fileURLToPath(new URL("../../browser/", import.meta.url));
}

function isolationHeaders(res: ServerResponse): void {
  res.setHeader("Cross-Origin-Opener-Policy", "same-origin");
  res.setHeader("Cross-Origin-Embedder-Policy", "require-corp");
  res.setHeader("Cross-Origin-Resource-Policy", "same-origin");
  res.setHeader("Cache-Control", "no-store");
}

function sendFile(req: IncomingMessage, res: ServerResponse, path: string, type: string): void {
  const size = statSync(path).size;
  res.setHeader("Content-Type", type);
  res.setHeader("Accept-Ranges", "bytes");
  const range = /^bytes=(\d+)-(\d*)$/.exec(req.headers.range ?? "");
  let start = 0,
    end = size - 1;
  if (range) {
    start = Number(range[1]);
    end = range[2] ? Math.min(Number(range[2]), size - 1) : size - 1;
    if (start >= size || start > end) {
      res.writeHead(416, { "Content-Range": `bytes */${size}` });
      res.end();
      return;
    }
    res.writeHead(206, { "Content-Range": `bytes ${start}-${end}/${size}`, "Content-Length": end - start + 1 });
  } else res.writeHead(200, { "Content-Length": size });
  if (req.method === "HEAD" || size === 0) {
    res.end();
    return;
  }
  createReadStream(path, { start, end }).pipe(res);
}

export interface WebPage {
  server: Server;
  url: string;
  /** /models/NAME of each model */
  modelUrls: string[];
  close(): Promise<void>;
}

export async function startWebPage(opts: WebPageOptions = {}): Promise<WebPage> {
  const root = resolve(opts.root ?? browserBuildDir());
  if (!existsSync(join(root, "index.html")) || !existsSync(join(root, "engine-worker.js")))
    throw new Error(`${root} does not hold the browser build: run "npm run build" (scripts/build-browser.mjs)`);
  const models = new Map<string, string>();
  for (const m of opts.models ?? []) {
    const p = resolve(m);
    if (!existsSync(p) || !statSync(p).isFile()) throw new Error(`${m}: no such model file`);
    models.set(basename(p), p);
  }
  const server = createServer((req, res) => {
    if (opts.isolation !== false) isolationHeaders(res);
    else res.setHeader("Cache-Control", "no-store");
    try {
      if (req.method !== "GET" && req.method !== "HEAD") {
        res.writeHead(405, { Allow: "GET, HEAD" });
        res.end();
        return;
      }
      const path = decodeURIComponent(new URL(req.url ?? "/", "http://x").pathname);
      if (path.startsWith("/models/")) {
        const file = models.get(path.slice("/models/".length));
        if (!file) {
          res.writeHead(404, { "Content-Type": "text/plain" });
          res.end(`no model ${path} (served: ${[...models.keys()].join(", ") || "none"})\n`);
          return;
        }
        sendFile(req, res, file, "application/octet-stream");
        return;
      }
      if (path === "/models") {
        res.writeHead(200, { "Content-Type": "application/json" });
        res.end(JSON.stringify([...models.keys()].map((n) => `/models/${n}`)));
        return;
      }
      const rel = path === "/" ? "index.html" : path.slice(1);
      const file = join(root, rel);
      if (rel.includes("..") || rel.includes("/") || !existsSync(file) || !statSync(file).isFile()) {
        res.writeHead(404, { "Content-Type": "text/plain" });
        res.end(`not found: ${path}\n`);
        return;
      }
      sendFile(req, res, file, TYPES[extname(file)] ?? "application/octet-stream");
    } catch (e) {
      if (!res.headersSent) res.writeHead(500, { "Content-Type": "text/plain" });
      res.end(`${(e as Error).message}\n`);
    }
  });
  const host = opts.host ?? "127.0.0.1";
  await new Promise<void>((ok, fail) => {
    server.once("error", fail);
    server.listen(opts.port ?? 8080, host, () => ok());
  });
  const addr = server.address();
  const port = typeof addr === "object" && addr ? addr.port : (opts.port ?? 8080);
  const url = `http://${host.includes(":") ? `[${host}]` : host}:${port}/`;
  return {
    server,
    url,
    modelUrls: [...models.keys()].map((n) => `/models/${n}`),
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}
