// Takes the README's picture of a trace: a Chrome trace from `powerinfer run --trace` opened in a
// trace viewer (speedscope, an offline web app from npm) in headless Chromium, zoomed to a few
// decode tokens (the trace cropped to them), as a PNG.
//
//   node --experimental-websocket scripts/trace-screenshot.mjs TRACE.json OUT.png [FIRST_TOKEN] [TOKENS]
//
// Needs Chromium (Debian: apt-get install chromium; or $CHROME) and installs speedscope once under
// ~/.cache/powerinfer-ts/speedscope (or uses $SPEEDSCOPE_DIR, its dist/release folder). Not part of
// the tests: the trace's structure is checked without a browser (test/trace.test.ts).
import { spawn, execFileSync } from "node:child_process";
import { createServer } from "node:http";
import { existsSync, mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { homedir } from "node:os";
import { extname, join } from "node:path";

const [tracePath, out, firstArg = "3", countArg = "3"] = process.argv.slice(2);
if (!tracePath || !out) {
  console.error(
    "usage: node --experimental-websocket scripts/trace-screenshot.mjs TRACE.json OUT.png [FIRST_TOKEN] [TOKENS]",
  );
  process.exit(2);
}
const WIDTH = 1400;
const HEIGHT = 560;

function speedscopeDir() {
  if (process.env.SPEEDSCOPE_DIR) return process.env.SPEEDSCOPE_DIR;
  const prefix = join(homedir(), ".cache", "powerinfer-ts", "speedscope");
  const dir = join(prefix, "node_modules", "speedscope", "dist", "release");
  if (!existsSync(join(dir, "index.html"))) {
    mkdirSync(prefix, { recursive: true });
    execFileSync("npm", ["install", "--no-save", "--prefix", prefix, "speedscope@1.25.0"], { stdio: "inherit" });
  }
  return dir;
}

// The region to show: from the start of token FIRST to the end of token FIRST + TOKENS - 1.
// Chrome's JSON array format; a trace whose process was killed lacks the closing bracket
const text = readFileSync(tracePath, "utf8").trimEnd();
const events = JSON.parse(text.endsWith("]") ? text : text.replace(/,$/, "") + "]");
const spans = events.filter((e) => e.ph === "X" && e.tid === 1);
const first = Number(firstArg);
const last = first + Number(countArg) - 1;
const from = spans.find((e) => e.name === `token ${first}`);
const to = spans.find((e) => e.name === `token ${last}`);
if (!from || !to) throw new Error(`the trace has no spans "token ${first}" and "token ${last}"`);

// The viewer shows a whole profile: give it the window alone, each span that overlaps it clipped to it.
const w0 = from.ts;
const w1 = to.ts + to.dur;
// in time order, a span before those it contains (speedscope reads the events in order)
const window = spans
  .filter((e) => e.ts < w1 && e.ts + e.dur > w0)
  .map((e) => ({ ...e, ts: Math.max(e.ts, w0), dur: Math.min(e.ts + e.dur, w1) - Math.max(e.ts, w0), whole: e.dur }))
  .sort((a, b) => a.ts - b.ts || b.dur - a.dur || b.whole - a.whole)
  .map(({ whole, ...e }) => e);
const cropped = JSON.stringify({ traceEvents: window });
const dir = speedscopeDir();
const TYPES = { ".html": "text/html", ".js": "text/javascript", ".css": "text/css", ".wasm": "application/wasm" };
const server = createServer((req, res) => {
  const p = decodeURIComponent(new URL(req.url, "http://x").pathname);
  if (p === "/trace.json") return void res.writeHead(200, { "Content-Type": "application/json" }).end(cropped);
  const f = join(dir, p === "/" ? "index.html" : p);
  if (!existsSync(f)) return void res.writeHead(404).end();
  res.writeHead(200, { "Content-Type": TYPES[extname(f)] ?? "application/octet-stream" }).end(readFileSync(f));
}).listen(0, "127.0.0.1");
await new Promise((r) => server.once("listening", r));
const port = server.address().port;

const chrome = spawn(
  process.env.CHROME ?? "chromium",
  [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--remote-debugging-port=0",
    `--window-size=${WIDTH},${HEIGHT}`,
    "about:blank",
  ],
  { stdio: ["ignore", "ignore", "pipe"] },
);
const wsUrl = await new Promise((resolve, reject) => {
  let text = "";
  chrome.stderr.on("data", (d) => {
    text += d;
    const m = /DevTools listening on (ws:\/\/\S+)/.exec(text);
    if (m) resolve(m[1]);
  });
  chrome.on("exit", (code) => reject(new Error(`chromium exited (${code}): ${text}`)));
});
const http = wsUrl.replace(/^ws:\/\/([^/]+)\/.*$/, "http://$1");
const page = (await (await fetch(`${http}/json/list`)).json()).find((p) => p.type === "page");
const ws = new WebSocket(page.webSocketDebuggerUrl);
await new Promise((r) => (ws.onopen = r));
let id = 0;
const waiting = new Map();
ws.onmessage = (m) => {
  const d = JSON.parse(m.data);
  if (d.id && waiting.has(d.id)) (waiting.get(d.id)(d), waiting.delete(d.id));
};
const send = (method, params = {}) =>
  new Promise((r) => {
    const i = ++id;
    waiting.set(i, r);
    ws.send(JSON.stringify({ id: i, method, params }));
  });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

try {
  await send("Emulation.setDeviceMetricsOverride", {
    width: WIDTH,
    height: HEIGHT,
    deviceScaleFactor: 1,
    mobile: false,
  });
  const profile = `http://127.0.0.1:${port}/trace.json`;
  await send("Page.navigate", {
    url: `http://127.0.0.1:${port}/index.html#profileURL=${encodeURIComponent(profile)}&title=${encodeURIComponent(`powerinfer trace: tokens ${first}-${last}`)}`,
  });
  await sleep(4000);
  const shot = await send("Page.captureScreenshot", { format: "png" });
  writeFileSync(out, Buffer.from(shot.result.data, "base64"));
  console.log(`${out}: tokens ${first}-${last} of ${tracePath}`);
} finally {
  ws.close();
  chrome.kill();
  server.close();
}
