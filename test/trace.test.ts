/**
 * `--trace FILE`: the Chrome trace of a real store run (relu-stories converted to a neuron store,
 * a cache small enough that every token reads from flash), parsed and checked without a browser:
 * the JSON a trace viewer loads (Perfetto's and chrome://tracing's event format), spans that nest
 * as a tree (token > layer > attention | ffn > pick, hit compute, wait reads, miss compute), every
 * read's issue and completion paired and adding up to the bytes the run reports, the counter
 * tracks, and events covering at least 95% of the run's wall time. Also serve and bench write one.
 */
import { test, before } from "node:test";
import assert from "node:assert/strict";
import { spawnSync, spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { convertToStore } from "../src/offline/convert.js";
import { Tracer, type TraceEvent } from "../src/runtime/tracer.js";
import { CLI, SHARED, tempDir } from "./helpers.js";

const RELU = `${SHARED}/models/relu-stories.gguf`;
const STORIES = `${SHARED}/models/stories260K.gguf`;
const LAYERS = 6;
const TOKENS = 12;
let dir: string;
let store: string;

before(async () => {
  dir = tempDir();
  store = join(dir, "relu.pi");
  await convertToStore({ input: RELU, output: store, fsync: false });
});

interface Trace {
  traceEvents: TraceEvent[];
}

/** A trace file: Chrome's JSON array format (the closing bracket is there once the trace is closed). */
function load(file: string): Trace {
  const events = JSON.parse(readFileSync(file, "utf8")) as TraceEvent[];
  assert.ok(Array.isArray(events), "a JSON array of events");
  return { traceEvents: events };
}

/** What a viewer needs of every event. */
function checkFormat(t: Trace): void {
  assert.ok(Array.isArray(t.traceEvents) && t.traceEvents.length > 0);
  for (const e of t.traceEvents) {
    assert.equal(typeof e.name, "string");
    assert.ok(["X", "b", "e", "C", "i", "M"].includes(e.ph), `phase ${e.ph}`);
    assert.ok(Number.isFinite(e.ts) && e.ts >= 0, `ts of ${e.name}`);
    assert.ok(Number.isInteger(e.pid) && Number.isInteger(e.tid));
    // whole microseconds: a span's end then equals the next one's start exactly, so viewers nest them right
    if (e.ph === "X")
      assert.ok(Number.isInteger(e.ts) && Number.isInteger(e.dur) && e.dur! >= 0, `ts, dur of ${e.name}`);
    if (e.ph === "b" || e.ph === "e") assert.ok(Number.isInteger(e.id) && typeof e.cat === "string" && e.cat !== "");
    if (e.ph === "C")
      for (const v of Object.values(e.args!)) assert.ok(Number.isFinite(v as number), `counter ${e.name}`);
  }
}

interface Node {
  e: TraceEvent;
  parent: Node | null;
  children: Node[];
}

/** The spans of the main track as a tree; fails on any two that overlap without one containing the other. */
function spanTree(t: Trace): Node[] {
  const spans = t.traceEvents.filter((e) => e.ph === "X" && e.tid === 1).sort((a, b) => a.ts - b.ts || b.dur! - a.dur!);
  const roots: Node[] = [];
  const stack: Node[] = [];
  const end = (e: TraceEvent) => e.ts + e.dur!;
  for (const e of spans) {
    while (stack.length && end(stack[stack.length - 1].e) <= e.ts) stack.pop();
    const parent = stack[stack.length - 1] ?? null;
    if (parent)
      assert.ok(
        end(e) <= end(parent.e),
        `"${e.name}" [${e.ts}, ${end(e)}] overlaps "${parent.e.name}" [${parent.e.ts}, ${end(parent.e)}] without nesting`,
      );
    const node: Node = { e, parent, children: [] };
    (parent ? parent.children : roots).push(node);
    stack.push(node);
  }
  return roots;
}

function all(nodes: Node[], out: Node[] = []): Node[] {
  for (const n of nodes) {
    out.push(n);
    all(n.children, out);
  }
  return out;
}

/** Share of [0, trace end] that top-level spans cover. */
function coverage(t: Trace, roots: Node[]): number {
  const end = t.traceEvents.find((e) => e.name === "trace end")!.ts;
  const covered = roots.reduce((s, r) => s + r.e.dur!, 0);
  return covered / end;
}

test("a store run's trace: viewer format, a span tree per token and layer, reads paired, counters, >= 95% of the wall time", () => {
  const file = join(dir, "run.json");
  const r = spawnSync(
    process.execPath,
    [
      CLI,
      "run",
      "-m",
      store,
      "--cache-size",
      "2MiB",
      "-p",
      "Once upon a time",
      "-n",
      String(TOKENS),
      "--temp",
      "0",
      "-t",
      "1",
    ].concat(["--json", "--trace", file]),
    { encoding: "utf8", timeout: 120_000 },
  );
  assert.equal(r.status, 0, r.stderr);
  assert.ok(
    r.stderr.includes(`trace: ${file} (`) && /events\); open it in https:\/\/ui\.perfetto\.dev/.test(r.stderr),
    r.stderr,
  );
  const stats = JSON.parse(r.stdout).stats as {
    bytesRead: number;
    gapBytes: number;
    generatedTokens: number;
    misses: number;
  };
  const t = load(file);
  checkFormat(t);

  const roots = spanTree(t);
  assert.deepEqual(
    roots.map((n) => n.e.name),
    ["load", "generate", "dispose"],
  );
  const cov = coverage(t, roots);
  assert.ok(cov >= 0.95, `events cover ${(100 * cov).toFixed(1)}% of the run`);

  const nodes = all(roots);
  const generate = roots[1];
  const prefill = generate.children.find((n) => n.e.name === "prefill")!;
  const tokens = generate.children.filter((n) => /^token \d+$/.test(n.e.name));
  // the last token is sampled and not run through the model
  assert.equal(tokens.length, stats.generatedTokens - 1);
  for (const owner of [prefill, ...tokens]) {
    const layers = owner.children.filter((n) => n.e.name.startsWith("layer "));
    assert.deepEqual(
      layers.map((n) => n.e.name),
      Array.from({ length: LAYERS }, (_, l) => `layer ${l}`),
      owner.e.name,
    );
    for (const layer of layers) {
      assert.deepEqual(
        layer.children.map((n) => n.e.name),
        ["attention", "ffn"],
      );
      const ffn = layer.children[1];
      const inside = new Set(all(ffn.children).map((n) => n.e.name));
      if (owner === prefill) for (const name of ["batch gates", "batch compute"]) assert.ok(inside.has(name), name);
      else for (const name of ["gate", "hit compute"]) assert.ok(inside.has(name), `${name} in ${owner.e.name}`);
    }
  }
  // every token waited for reads somewhere and computed misses (a 2 MiB cache)
  for (const name of ["wait reads", "miss compute", "sample", "output"])
    assert.ok(
      nodes.some((n) => n.e.name === name),
      name,
    );
  for (const n of nodes.filter((n) => ["wait reads", "miss compute", "hit compute", "gate"].includes(n.e.name)))
    assert.ok(
      n.parent && (n.parent.e.name === "ffn" || n.parent.e.name === "gate"),
      `${n.e.name} under ${n.parent?.e.name}`,
    );

  // reads: each issue has its completion, later, with the bytes; together the bytes the run read
  const begins = t.traceEvents.filter((e) => e.ph === "b" && e.name === "read");
  const ends = new Map(t.traceEvents.filter((e) => e.ph === "e" && e.name === "read").map((e) => [e.id, e]));
  assert.ok(begins.length > 0);
  assert.equal(ends.size, begins.length);
  let bytes = 0;
  for (const b of begins) {
    const e = ends.get(b.id)!;
    assert.ok(e && e.ts >= b.ts, `read ${b.id}`);
    const a = b.args as { offset: number; bytes: number; in_flight: number };
    assert.ok(a.offset >= 0 && a.bytes > 0 && a.in_flight >= 0);
    bytes += (e.args as { bytes: number }).bytes;
  }
  // (and what bridged reads read between the bundles asked for)
  assert.equal(bytes, stats.bytesRead + stats.gapBytes);

  // counter tracks: a hit rate and a read rate per forward pass
  const counters = (name: string) => t.traceEvents.filter((e) => e.ph === "C" && e.name === name);
  const hit = counters("neuron cache hit rate");
  assert.equal(hit.length, 1 + tokens.length);
  for (const c of hit) for (const v of Object.values(c.args!)) assert.ok((v as number) >= 0 && (v as number) <= 1);
  assert.equal(counters("flash read MB/s").length, hit.length);
  // reads in flight: sampled (at most every 100 us), down to 0 whenever the reads drain
  const inFlight = counters("flash reads in flight").map((c) => (c.args as { reads: number }).reads);
  assert.ok(inFlight.length > 0 && inFlight.length < 2 * begins.length);
  assert.ok(inFlight.every((v) => v >= 0) && inFlight.includes(0));
});

test("serve --trace writes the trace at shutdown; bench --trace covers its runs", async () => {
  const file = join(dir, "serve.json");
  const child = spawn(
    process.execPath,
    [CLI, "serve", "-m", STORIES, "--port", "0", "-t", "1", "--trace", file, "-q"],
    {
      stdio: ["ignore", "ignore", "pipe"],
    },
  );
  let err = "";
  child.stderr!.on("data", (d) => (err += d));
  const url = await new Promise<string>((resolve, reject) => {
    const onData = () => {
      const m = /listening on (http:\/\/\S+)/.exec(err);
      if (m && /ready/.test(err)) resolve(m[1]);
    };
    child.stderr!.on("data", onData);
    child.once("exit", () => reject(new Error(err)));
  });
  const res = await fetch(`${url}/v1/completions`, {
    method: "POST",
    headers: { "Content-Type": "application/json" },
    body: JSON.stringify({ prompt: "Once upon a time", max_tokens: 5, temperature: 0 }),
  });
  assert.equal(res.status, 200);
  await res.json();
  child.kill("SIGTERM");
  await once(child, "exit");
  const t = load(file);
  checkFormat(t);
  const names = all(spanTree(t)).map((n) => n.e.name);
  for (const name of ["load", "generate", "prefill", "token 1", "layer 4", "attention", "ffn", "dispose"])
    assert.ok(names.includes(name), name);

  const benchFile = join(dir, "bench.json");
  const b = spawnSync(
    process.execPath,
    [CLI, "bench", "-m", STORIES, "-p", "16", "-n", "4", "-r", "2", "-t", "1", "--trace", benchFile],
    { encoding: "utf8", timeout: 60_000 },
  );
  assert.equal(b.status, 0, b.stderr);
  const bt = load(benchFile);
  checkFormat(bt);
  const roots = spanTree(bt);
  // warm-up and two timed runs of each test
  assert.equal(roots.filter((n) => n.e.name === "generate").length, 6);
});

test("Tracer: events past the limit are counted and dropped; a trace not closed still holds every event written", () => {
  const file = join(dir, "limit.json");
  const tr = new Tracer(file, "limit", 5);
  for (let i = 0; i < 8; i++) tr.span(`s${i}`, "x", tr.now());
  assert.deepEqual(tr.size, { events: 5, dropped: 3 });
  tr.close();
  const t = load(file);
  assert.equal(t.traceEvents.find((e) => e.name === "process_name")!.args!.name, "limit");
  assert.equal(t.traceEvents.filter((e) => e.ph === "X").length, 5);
  // the end is there all the same, with the count of what was dropped
  assert.deepEqual(t.traceEvents.find((e) => e.name === "trace end")!.args, { dropped_events: 3 });

  // streamed: a process killed before close() leaves the events flushed so far, in the array
  // format whose closing bracket viewers do not need
  const open = join(dir, "open.json");
  const big = new Tracer(open, "killed");
  for (let i = 0; i < 20_000; i++) big.span(`span ${i}`, "x", big.now(), { i });
  const text = readFileSync(open, "utf8");
  assert.ok(text.startsWith("[\n"));
  const events = JSON.parse(text.replace(/,?\s*$/, "") + "]") as TraceEvent[];
  assert.ok(events.length > 3 && events.length < 20_003, `${events.length} events flushed`);
  big.close();
  assert.equal(load(open).traceEvents.filter((e) => e.ph === "X").length, 20_000);
});
