/**
 * The server soak: thousands of requests (10,000 by default), eight at a time, mixing good
 * answers, streamed answers, bad requests, clients that disconnect mid-stream and clients that
 * stall, against one server on a real model. It passes when no request gets a 5xx or no answer,
 * the server still answers /health, and resident memory levels off: the median of the last fifth
 * of the samples is within a margin of the median after warm-up (the second fifth).
 */
import { join } from "node:path";
import { rmSync } from "node:fs";
import { Executor, prepareInputs, executorInit, DEFAULT_LIMITS } from "./runner.js";
import { runServerCase, healthy, type ServerCase } from "./server-cases.js";
import { Rng } from "./rng.js";
import type { Outcome } from "./outcome.js";

export interface SoakOptions {
  requests: number;
  concurrency: number;
  seed: number;
  /** growth of resident memory after warm-up that still counts as level */
  marginBytes: number;
  log: (line: string) => void;
}

export interface SoakSummary {
  requests: number;
  seconds: number;
  counts: Record<string, number>;
  failures: string[];
  rssSamples: number[];
  growthBytes: number;
  level: boolean;
}

function request(method: string, path: string, body?: unknown, raw?: string): Buffer {
  const text = raw ?? (body === undefined ? "" : JSON.stringify(body));
  const head = `${method} ${path} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(text)}\r\n\r\n`;
  return Buffer.from(head + text);
}

/** One soak request: what kind, and the case that sends it. */
function soakCase(rng: Rng): { kind: string; c: ServerCase } {
  const prompts = ["Once upon a time", "Lily", "The dog", "One day", "Tom and Sue"];
  const kind = rng.weighted<string>([
    [35, "good"],
    [20, "stream"],
    [10, "chat"],
    [15, "bad"],
    [10, "disconnect"],
    [5, "models"],
    [5, "stall"],
  ]);
  const one = (b: Buffer, extra: Partial<ServerCase> = {}): ServerCase => ({
    target: "server",
    pieces: [{ hex: b.toString("hex"), delayMs: 0 }],
    complete: true,
    what: kind,
    ...extra,
  });
  const maxTokens = rng.range(1, 24);
  switch (kind) {
    case "good":
      return {
        kind,
        c: one(
          request("POST", "/v1/completions", { prompt: rng.pick(prompts), max_tokens: maxTokens, seed: rng.u32() }),
        ),
      };
    case "stream":
      return {
        kind,
        c: one(request("POST", "/v1/completions", { prompt: rng.pick(prompts), max_tokens: maxTokens, stream: true })),
      };
    case "chat":
      return {
        kind,
        c: one(
          request("POST", "/v1/chat/completions", {
            messages: [{ role: "user", content: rng.pick(prompts) }],
            max_tokens: maxTokens,
          }),
        ),
      };
    case "bad":
      return {
        kind,
        c: one(
          rng.pick([
            request("POST", "/v1/completions", undefined, '{"prompt": "x", "max_tokens": '),
            request("POST", "/v1/completions", { prompt: "x", temperature: "hot" }),
            request("POST", "/v1/chat/completions", { messages: [] }),
            request("GET", "/v1/completions"),
            request("POST", "/v1/nowhere", {}),
            request("POST", "/v1/completions", { prompt: [1, 99999] }),
          ]),
        ),
      };
    case "disconnect":
      return {
        kind,
        c: one(
          request("POST", "/v1/completions", {
            prompt: rng.pick(prompts),
            max_tokens: 64,
            stream: true,
            ignore_eos: true,
          }),
          {
            closeAfterMs: rng.pick([0, 2, 10, 30]),
          },
        ),
      };
    case "models":
      return { kind, c: one(request("GET", rng.pick(["/v1/models", "/health", "/v1/models/local"]))) };
    default: {
      // headers sent, body never finished: the server's request/idle timeouts close it
      const b = request("POST", "/v1/completions", { prompt: "x" });
      return {
        kind,
        c: {
          target: "server",
          pieces: [{ hex: b.subarray(0, b.length - 3).toString("hex"), delayMs: 0 }],
          complete: false,
          what: kind,
        },
      };
    }
  }
}

export async function soak(o: SoakOptions): Promise<SoakSummary> {
  const inputs = await prepareInputs("server", process.env.POWERINFER_SHARED ?? join(process.cwd(), "..", "shared"));
  const ex = new Executor(executorInit("server", inputs), DEFAULT_LIMITS);
  await ex.start();
  const port = ex.info.port as number;
  const rng = new Rng(o.seed);
  const counts: Record<string, number> = {};
  const failures: string[] = [];
  const rssSamples: number[] = [];
  const sampleEvery = Math.max(1, Math.floor(o.requests / 50));
  let next = 0;
  let done = 0;
  const t0 = performance.now();
  const workerLoop = async () => {
    while (next < o.requests) {
      const i = next++;
      const { kind, c } = soakCase(rng);
      const r = await runServerCase(port, c, 20_000);
      const bad: Outcome[] = ["crash", "hang", "wrong", "blowup"];
      counts[`${kind} ${r.outcome}`] = (counts[`${kind} ${r.outcome}`] ?? 0) + 1;
      if (bad.includes(r.outcome)) failures.push(`request ${i} (${kind}): ${r.outcome}: ${r.detail}`);
      if (++done % sampleEvery === 0) {
        rssSamples.push(process.memoryUsage.rss());
        if (done % (sampleEvery * 10) === 0)
          o.log(`  ... ${done} requests, resident ${(rssSamples[rssSamples.length - 1] / 2 ** 20).toFixed(1)} MiB`);
      }
    }
  };
  try {
    await Promise.all(Array.from({ length: o.concurrency }, workerLoop));
    if (!(await healthy(port))) failures.push("after the soak the server did not answer GET /health");
  } finally {
    await ex.stop();
    rmSync(inputs.workDir, { recursive: true, force: true });
  }
  const median = (a: number[]) => [...a].sort((x, y) => x - y)[Math.floor(a.length / 2)] ?? 0;
  const fifth = Math.max(1, Math.floor(rssSamples.length / 5));
  const warm = median(rssSamples.slice(fifth, 2 * fifth));
  const last = median(rssSamples.slice(-fifth));
  const growthBytes = last - warm;
  return {
    requests: done,
    seconds: (performance.now() - t0) / 1000,
    counts,
    failures,
    rssSamples,
    growthBytes,
    level: growthBytes <= o.marginBytes,
  };
}
