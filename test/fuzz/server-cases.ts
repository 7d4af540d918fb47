/**
 * HTTP requests for the server fuzzer, and the client that sends them over a raw socket.
 *
 * Requests start from valid ones (chat and text completions, streamed or not, models, health)
 * and are then damaged the way clients damage them: every JSON field given a value of another
 * type or out of range, nested content mangled, bodies truncated, empty, huge, deeply nested,
 * in invalid UTF-8 or with lone surrogate escapes; framing with a wrong, missing, duplicated or
 * absurd Content-Length, broken chunked encoding, odd methods and paths, percent-escapes, header
 * lines that are too long or malformed; and clients that send in slow pieces, stop sending, or
 * close the connection before the answer is complete.
 *
 * Judged from the outside: a 5xx, an error response that is not an OpenAI error object, a
 * success that does not parse, or no answer to a complete request is a failure; so is a server
 * that afterwards does not answer GET /health.
 */
import { connect } from "node:net";
import type { CaseResult } from "./outcome.js";
import type { Rng } from "./rng.js";

export interface ServerCase {
  target: "server";
  /** the request as pieces of bytes (hex), each sent after its delay */
  pieces: { hex: string; delayMs: number }[];
  /** the request is complete and well framed: it must get an answer */
  complete: boolean;
  /** the client closes the connection this long after sending (mid-answer), if set */
  closeAfterMs?: number;
  what: string;
}

const FIELDS: Record<string, unknown[]> = {
  model: ["local", "", "gpt-4", 5, null, ["local"], "x".repeat(10_000)],
  max_tokens: [0, 1, 8, -1, -2, 1e300, 2 ** 31, 1.5, "8", null, true, []],
  max_completion_tokens: [4, -5, 1e9],
  temperature: [0, 0.7, 2, -1, 101, 1e300, "hot", null, NaN],
  top_p: [0, 0.5, 1, 1.01, -0.1, "x"],
  top_k: [0, 1, 40, -1, 2 ** 40, 0.5],
  min_p: [0, 0.05, 1, 2, -1],
  repeat_penalty: [1, 1.3, 0, -1, 1e300, 100.5],
  repeat_last_n: [0, 64, 1e9, 1e300, -1, 2 ** 53],
  frequency_penalty: [0, 1, -2, 2, 3, -3],
  presence_penalty: [0, 1.5, 5],
  seed: [0, 42, -1, 2 ** 60, 1e300, 0.5, "1"],
  stop: ["\n", "", ["a", "b"], [1], "x".repeat(1000), Array(40).fill("z"), null, {}],
  stream: [true, false, "yes", 1, null],
  stream_options: [{ include_usage: true }, { include_usage: "x" }, [], null, 5],
  n: [1, 2, 0, 1e300, -1],
  best_of: [1, 3],
  logit_bias: [{}, { "5": 1 }, null, []],
  logprobs: [true, false, 0, 5, null],
  echo: [true, false],
  suffix: ["", "x", null],
  tools: [[], [{ type: "function" }], null],
  response_format: [{ type: "text" }, { type: "json_object" }, "text", null],
  ignore_eos: [true, false, "x"],
};

const MESSAGES: unknown[] = [
  [{ role: "user", content: "Hello" }],
  [
    { role: "system", content: "Be brief." },
    { role: "user", content: "Tell me a story" },
  ],
  [
    {
      role: "user",
      content: [
        { type: "text", text: "Once" },
        { type: "text", text: " upon" },
      ],
    },
  ],
  [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }],
  [{ role: "assistant", content: null }],
  [{ role: "wizard", content: "x" }],
  [{ role: "user", content: 42 }],
  [{ role: "user" }],
  [],
  "Hello",
  null,
  [null],
  [{ role: "user", content: "\ud800\udfff\u0000<s></s><unk>" }],
  [{ role: "user", content: "Once upon a time ".repeat(2000) }],
];

const PROMPTS: unknown[] = [
  "Once upon a time",
  "",
  [1, 2, 3],
  [1, 99999],
  [-1],
  [1.5],
  ["a", "b"],
  [[1, 2]],
  [[]],
  ["x"],
  5,
  null,
  { text: "x" },
  "<s>Lily</s>",
  "Once upon a time ".repeat(20_000),
];

function jsonBody(rng: Rng, chat: boolean): Record<string, unknown> {
  const body: Record<string, unknown> = { max_tokens: rng.pick([1, 4, 8]), temperature: 0 };
  if (chat) body.messages = rng.chance(0.7) ? MESSAGES[0] : rng.pick(MESSAGES);
  else body.prompt = rng.chance(0.7) ? PROMPTS[0] : rng.pick(PROMPTS);
  for (let i = 0, n = rng.range(0, 4); i < n; i++) {
    const key = rng.pick(Object.keys(FIELDS));
    body[key] = rng.pick(FIELDS[key]);
  }
  if (rng.chance(0.05)) delete body[chat ? "messages" : "prompt"];
  return body;
}

function bodyText(rng: Rng, chat: boolean): string {
  const kind = rng.weighted<string>([
    [14, "json"],
    [1, "truncated"],
    [1, "empty"],
    [1, "array"],
    [1, "deep"],
    [1, "escapes"],
    [1, "numbers"],
    [1, "garbage"],
    [1, "duplicate"],
  ]);
  const json = JSON.stringify(jsonBody(rng, chat));
  switch (kind) {
    case "truncated":
      return json.slice(0, rng.int(json.length));
    case "empty":
      return rng.pick(["", " ", "\n", "null", "{}", "[]", '""', "0"]);
    case "array":
      return `[${json}]`;
    case "deep":
      return "[".repeat(rng.pick([100, 10_000, 100_000])) + "]".repeat(rng.pick([0, 100]));
    case "escapes":
      return chat
        ? '{"messages":[{"role":"user","content":"\\ud800 \\udc00 \\u0000 \\uffff"}],"max_tokens":2}'
        : '{"prompt":"\\ud83d\\ude00\\ud800x\\u0000","max_tokens":2}';
    case "numbers":
      return `{"prompt":"x","max_tokens":${rng.pick(["1e309", "-0", "1E2", "0x10", "01", "9".repeat(400)])}}`;
    case "garbage":
      return Buffer.from(Array.from({ length: rng.range(1, 200) }, () => rng.int(256))).toString("latin1");
    default:
      return json.replace("{", `{"max_tokens":5,"max_tokens":"x",`);
  }
}

/** Bodies for /tokenize and /detokenize: good ones mostly, then wrong types and ranges. */
function tokenizeBody(rng: Rng, route: string): string {
  if (rng.chance(0.1)) return rng.pick(["", "{", "[]", "null", '{"content":'.repeat(50)]);
  if (route === "/tokenize")
    return JSON.stringify({
      content: rng.chance(0.7) ? "Once upon a time" : rng.pick(["", 5, null, ["a"], "\ud800<s>", "x".repeat(5000)]),
      ...(rng.chance(0.3) ? { add_special: rng.pick([true, false, "yes", 1]) } : {}),
    });
  return JSON.stringify({
    tokens: rng.chance(0.7) ? [1, 2, 3] : rng.pick([[], [99999], [-1], [1.5], "x", null, [[1]], [2 ** 53]]),
  });
}

/** A request and how it is sent. */
export function serverCase(rng: Rng): ServerCase {
  const route = rng.weighted<string>([
    [8, "/v1/chat/completions"],
    [8, "/v1/completions"],
    [2, "/v1/models"],
    [2, "/v1/models/local"],
    [2, "/health"],
    [2, "/tokenize"],
    [2, "/detokenize"],
    [1, "/props"],
    [1, "/metrics"],
    [1, "/v1/models/%ff"],
    [1, "/v1/models/%E0%A4%A"],
    [1, "/v1/models/%"],
    [1, "/chat/completions?x=%zz"],
    [1, "/nowhere"],
    [1, "*"],
    [1, "http://localhost/v1/completions"],
    [1, "/v1/completions/"],
    [1, "/" + "a".repeat(20_000)],
    [1, "/v1/%00"],
    [1, "/v1/models/\u00e9"],
  ]);
  const chat = route.includes("chat");
  const tokenizing = route.endsWith("tokenize");
  const post = route.includes("completions") || tokenizing;
  const method = rng.chance(0.9)
    ? post
      ? "POST"
      : "GET"
    : rng.pick(["GET", "POST", "PUT", "DELETE", "HEAD", "OPTIONS", "PATCH", "BREW", "get"]);
  let body = tokenizing ? tokenizeBody(rng, route) : post || rng.chance(0.05) ? bodyText(rng, chat) : "";
  if (rng.chance(0.03)) body = "\xff\xfe" + body; // invalid UTF-8 in front
  const bodyBytes = Buffer.from(body, body.startsWith("\xff") ? "latin1" : "utf8");
  const headers: string[] = ["Host: localhost"];
  if (rng.chance(0.9))
    headers.push(
      `Content-Type: ${rng.pick(["application/json", "application/json; charset=utf-8", "text/plain", "application/x-www-form-urlencoded", "application/json; charset=latin1"])}`,
    );
  let complete = true;
  let framing = "content-length";
  const lengthKind = rng.weighted<string>([
    [12, "exact"],
    [1, "short"],
    [1, "long"],
    [1, "missing"],
    [1, "negative"],
    [1, "huge"],
    [1, "twice"],
    [2, "chunked"],
    [1, "badchunked"],
  ]);
  let payload: Buffer = bodyBytes;
  switch (lengthKind) {
    case "exact":
      if (bodyBytes.length > 0 || method === "POST") headers.push(`Content-Length: ${bodyBytes.length}`);
      break;
    case "short":
      headers.push(`Content-Length: ${Math.max(0, bodyBytes.length - rng.range(1, 10))}`);
      framing = "short";
      break;
    case "long":
      headers.push(`Content-Length: ${bodyBytes.length + rng.range(1, 100)}`);
      complete = false; // the server waits for bytes that never come
      break;
    case "missing":
      framing = "none";
      break;
    case "negative":
      headers.push("Content-Length: -5");
      break;
    case "huge":
      headers.push(`Content-Length: ${rng.pick(["99999999999", "18446744073709551616", "1e3", "abc"])}`);
      break;
    case "twice":
      headers.push(`Content-Length: ${bodyBytes.length}`, `Content-Length: ${bodyBytes.length + 1}`);
      break;
    case "chunked": {
      headers.push("Transfer-Encoding: chunked");
      const parts: Buffer[] = [];
      for (let i = 0; i < bodyBytes.length; i += 7) {
        const c = bodyBytes.subarray(i, i + 7);
        parts.push(Buffer.from(`${c.length.toString(16)}\r\n`), c, Buffer.from("\r\n"));
      }
      parts.push(Buffer.from("0\r\n\r\n"));
      payload = Buffer.concat(parts);
      break;
    }
    default:
      complete = false; // a chunk size of 2^64-1 never completes
      headers.push("Transfer-Encoding: chunked");
      payload = Buffer.concat([
        Buffer.from(rng.pick(["zz\r\n", "ffffffffffffffff\r\n", "5\r\nab\r\n", "-1\r\n"])),
        bodyBytes,
      ]);
  }
  if (rng.chance(0.05))
    headers.push(
      rng.pick([
        "X-Big: " + "b".repeat(20_000),
        "Bad Header: x",
        "X-Nul: a\u0000b",
        ": empty",
        "Expect: 100-continue",
        "Connection: close",
        "Transfer-Encoding: gzip",
      ]),
    );
  if (rng.chance(0.02)) for (let i = 0; i < 3000; i++) headers.push(`X-H${i}: ${i}`);
  const head = Buffer.from(`${method} ${route} HTTP/1.1\r\n${headers.join("\r\n")}\r\n\r\n`, "latin1");
  let whole = Buffer.concat([head, payload]);
  if (rng.chance(0.03))
    whole = Buffer.from(
      rng.pick([
        "GET\r\n\r\n",
        "\r\n\r\n",
        "HELLO WORLD\r\n\r\n",
        "GET / HTTP/9.9\r\n\r\n",
        "GET / HTTP/1.1\nHost: x\n\n",
      ]),
      "latin1",
    );
  // how it is sent: whole, in pieces with pauses, or cut off
  const pieces: { hex: string; delayMs: number }[] = [];
  const sending = rng.weighted<string>([
    [10, "whole"],
    [2, "pieces"],
    [1, "cut"],
  ]);
  if (sending === "whole") pieces.push({ hex: whole.toString("hex"), delayMs: 0 });
  else {
    const cuts = [
      0,
      ...Array.from({ length: rng.range(1, 4) }, () => rng.int(whole.length)).sort((a, b) => a - b),
      whole.length,
    ];
    for (let i = 0; i + 1 < cuts.length; i++)
      if (cuts[i + 1] > cuts[i])
        pieces.push({
          hex: whole.subarray(cuts[i], cuts[i + 1]).toString("hex"),
          delayMs: rng.pick([0, 10, 100, 300]),
        });
    if (sending === "cut") {
      pieces.pop();
      complete = false;
    }
  }
  const isStream = /"stream":true/.test(body);
  const closeAfterMs = rng.chance(isStream ? 0.3 : 0.05) ? rng.pick([0, 5, 50, 200]) : undefined;
  return {
    target: "server",
    pieces,
    complete: complete && framing !== "short",
    closeAfterMs,
    what: `${method} ${route.slice(0, 60)} (${bodyBytes.length} bytes, ${lengthKind}, ${sending}${closeAfterMs !== undefined ? `, client closes after ${closeAfterMs} ms` : ""})`,
  };
}

/** What came back over one connection. */
interface Received {
  data: Buffer;
  closed: boolean;
}

function exchange(port: number, c: ServerCase, deadlineMs: number): Promise<Received> {
  return new Promise((resolve) => {
    const sock = connect(port, "127.0.0.1");
    const chunks: Buffer[] = [];
    let done = false;
    const finish = (closed: boolean) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      sock.destroy();
      resolve({ data: Buffer.concat(chunks), closed });
    };
    const timer = setTimeout(() => finish(false), deadlineMs);
    sock.on("data", (d) => {
      chunks.push(d);
      if (responseComplete(Buffer.concat(chunks))) finish(true);
    });
    sock.on("close", () => finish(true));
    sock.on("error", () => finish(true));
    sock.on("connect", async () => {
      for (const p of c.pieces) {
        if (p.delayMs) await new Promise((r) => setTimeout(r, p.delayMs));
        if (done || sock.destroyed) return;
        sock.write(Buffer.from(p.hex, "hex"));
      }
      if (c.closeAfterMs !== undefined) setTimeout(() => finish(true), c.closeAfterMs);
    });
  });
}

/** The bytes after any interim (1xx) responses, such as 100 Continue. */
function finalResponse(b: Buffer): Buffer {
  while (/^HTTP\/1\.1 1\d\d /.test(b.toString("latin1", 0, 13))) {
    const end = b.indexOf("\r\n\r\n");
    if (end < 0) return Buffer.alloc(0);
    b = b.subarray(end + 4);
  }
  return b;
}

/** A whole response: headers plus Content-Length bytes, or an event stream's [DONE]. */
function responseComplete(all: Buffer): boolean {
  const b = finalResponse(all);
  const end = b.indexOf("\r\n\r\n");
  if (end < 0) return false;
  const head = b.toString("latin1", 0, end);
  const m = /\r\ncontent-length: *(\d+)/i.exec(head);
  if (m) return b.length - end - 4 >= Number(m[1]);
  if (/\r\ntransfer-encoding: *chunked/i.test(head))
    return b.includes("\r\n0\r\n\r\n") || b.subarray(end).includes("0\r\n\r\n");
  return false;
}

/** Decode a chunked body. */
function unchunk(body: Buffer): Buffer {
  const out: Buffer[] = [];
  let p = 0;
  for (;;) {
    const eol = body.indexOf("\r\n", p);
    if (eol < 0) break;
    const n = parseInt(body.toString("latin1", p, eol), 16);
    if (!(n > 0)) break;
    out.push(body.subarray(eol + 2, eol + 2 + n));
    p = eol + 2 + n + 2;
  }
  return Buffer.concat(out);
}

/** Send the case and judge the answer (the server's health is checked separately). */
export async function runServerCase(port: number, c: ServerCase, deadlineMs: number): Promise<CaseResult> {
  const t0 = performance.now();
  const r = await exchange(port, c, deadlineMs);
  r.data = finalResponse(r.data);
  const ms = performance.now() - t0;
  if (!r.closed) return { outcome: "hang", detail: `no complete answer and no close within ${deadlineMs} ms`, ms };
  if (c.closeAfterMs !== undefined && !responseComplete(r.data))
    return { outcome: "success", detail: "client left", ms };
  if (r.data.length === 0) {
    if (!c.complete) return { outcome: "clean", detail: "incomplete request: closed without an answer", ms };
    return { outcome: "crash", detail: "a complete request got no answer (connection closed)", ms };
  }
  const end = r.data.indexOf("\r\n\r\n");
  const statusLine = r.data.toString("latin1", 0, Math.max(0, r.data.indexOf("\r\n")));
  const m = /^HTTP\/1\.1 (\d{3}) /.exec(statusLine);
  if (!m || end < 0)
    return {
      outcome: "crash",
      detail: `not an HTTP response: ${JSON.stringify(r.data.toString("latin1", 0, 80))}`,
      ms,
    };
  const status = Number(m[1]);
  const head = r.data.toString("latin1", 0, end);
  let body = r.data.subarray(end + 4);
  if (/\r\ntransfer-encoding: *chunked/i.test(head)) body = unchunk(body);
  // what follows the first answer belongs to the next request on the connection
  const length = /\r\ncontent-length: *(\d+)/i.exec(head);
  if (length) body = body.subarray(0, Number(length[1]));
  const text = body.toString("utf8");
  if (status >= 500) return { outcome: "crash", detail: `${status}: ${text.slice(0, 200)}`, ms };
  // the request line may be split across pieces (the first can be one byte)
  const sent = Buffer.concat(c.pieces.map((p) => Buffer.from(p.hex, "hex")));
  const isHead = sent.toString("latin1", 0, 5) === "HEAD ";
  if (isHead) return { outcome: status < 400 ? "success" : "clean", detail: statusLine, ms };
  if (status === 204)
    return text === ""
      ? { outcome: "success", detail: statusLine, ms }
      : { outcome: "crash", detail: `204 with a body: ${JSON.stringify(text.slice(0, 120))}`, ms };
  if (status >= 400) {
    try {
      const j = JSON.parse(text) as { error?: { message?: unknown; type?: unknown } };
      if (typeof j.error?.message !== "string" || typeof j.error.type !== "string" || j.error.message.includes("\n"))
        return { outcome: "crash", detail: `${status} without an OpenAI error object: ${text.slice(0, 200)}`, ms };
      return { outcome: "clean", detail: `${status}: ${j.error.message.slice(0, 160)}`, ms };
    } catch {
      return {
        outcome: "crash",
        detail: `${status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 120))}`,
        ms,
      };
    }
  }
  if (/text\/event-stream/i.test(head)) {
    const events = text.split("\n\n").filter((e) => e.startsWith("data: "));
    if (events.length === 0 || events[events.length - 1] !== "data: [DONE]")
      return { outcome: "crash", detail: `event stream not ending in [DONE]: ${JSON.stringify(text.slice(-120))}`, ms };
    for (const e of events.slice(0, -1)) {
      try {
        const j = JSON.parse(e.slice(6)) as { error?: unknown };
        if (j.error) return { outcome: "crash", detail: `error event in a 200 stream: ${e.slice(0, 200)}`, ms };
      } catch {
        return { outcome: "crash", detail: `event that is not JSON: ${e.slice(0, 120)}`, ms };
      }
    }
    return { outcome: "success", detail: `${status} stream, ${events.length - 1} events`, ms };
  }
  if (/\r\ncontent-type: *text\/plain/i.test(head)) {
    // /metrics: Prometheus text, every line a comment or "name{labels} value"
    const bad = text
      .split("\n")
      .find((l) => l !== "" && !l.startsWith("#") && !/^[a-z_:][\w:]*(\{[^}]*\})? \S+$/i.test(l));
    return bad === undefined
      ? { outcome: "success", detail: statusLine, ms }
      : { outcome: "crash", detail: `${status} text with a line that is not a metric: ${JSON.stringify(bad)}`, ms };
  }
  try {
    JSON.parse(text);
  } catch {
    return {
      outcome: "crash",
      detail: `${status} with a body that is not JSON: ${JSON.stringify(text.slice(0, 120))}`,
      ms,
    };
  }
  return { outcome: "success", detail: statusLine, ms };
}

/** GET /health answered 200 within `ms`. */
export async function healthy(port: number, ms = 3000): Promise<boolean> {
  const r = await exchange(
    port,
    {
      target: "server",
      pieces: [
        {
          hex: Buffer.from("GET /health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").toString("hex"),
          delayMs: 0,
        },
      ],
      complete: true,
      what: "health",
    },
    ms,
  );
  return r.closed && r.data.toString("latin1").startsWith("HTTP/1.1 200 ");
}
