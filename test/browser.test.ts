/**
 * The engine in a real browser: headless Chromium (the system's, /usr/bin/chromium; .ci/run
 * installs Debian's package when it is missing) driven by playwright-core against the page
 * `powerinfer web` serves, through its script contract (/?model=URL&...&autorun=1 sets
 * document.body.dataset.state to "done", the text in #output, the stats JSON in #stats).
 *  - stories260K (GGUF copied into OPFS): the greedy tokens equal Node's.
 *  - relu-stories: the GGUF copied into OPFS, converted to a neuron store there (streaming),
 *    run under a budget that leaves most bundles on flash: the dense run's tokens, and the wasm
 *    memory never passes the budget.
 *  - relu-stories' store (converted in Node) split among several wasm memories (&shard=SIZE, the
 *    count Node lays out for the same budget): the dense run's tokens, the memories within the budget.
 *  - Qwen3 and Gemma 3 converted from Hugging Face directories (real vocabularies, the Gemma
 *    sliding-window layers): the greedy tokens and text equal Node's.
 *  - a screenshot of the page, its size checked.
 *  - bad input gives an error on the page, never a hang: no cross-origin isolation, a truncated
 *    file, a URL that is not there.
 * Skipped, saying so, where no Chromium binary exists (CHROMIUM=/path picks another).
 */
import { test, before, after } from "node:test";
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readFileSync, writeFileSync } from "node:fs";
import { spawn } from "node:child_process";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { startWebPage, type WebPage } from "../src/server/web-page.js";
import { loadModel } from "../src/api/model.js";
import { LlamaModel } from "../src/model/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { convertHFToGGUF } from "../src/format/hf/hf-to-gguf.js";
import { CLI, hfFixtureDir, SHARED, tempDir } from "./helpers.js";

const onPath = (process.env.PATH ?? "")
  .split(":")
  .filter((d) => d !== "")
  .flatMap((d) => [join(d, "chromium"), join(d, "chromium-browser")]);
const CHROMIUM = [process.env.CHROMIUM, "/usr/bin/chromium", "/usr/bin/chromium-browser", ...onPath].find(
  (p): p is string => !!p && existsSync(p),
);
const skip = CHROMIUM ? false : "no Chromium binary (/usr/bin/chromium; set CHROMIUM=/path): browser tests skipped";
const STORIES = `${SHARED}/models/stories260K.gguf`;
const RELU = `${SHARED}/models/relu-stories.gguf`;
const PROMPT = "Once upon a time";
const N = 24;

type Ctx = {
  newPage(): Promise<Page>;
  close(): Promise<void>;
};
type Page = {
  goto(url: string): Promise<unknown>;
  waitForFunction(f: () => boolean, arg: null, o: { timeout: number }): Promise<unknown>;
  evaluate<T>(f: (() => T) | string): Promise<T>;
  screenshot(o: { path?: string; fullPage?: boolean }): Promise<Buffer>;
  setViewportSize(s: { width: number; height: number }): Promise<void>;
  on(e: string, f: (m: { text(): string }) => void): void;
  close(): Promise<void>;
};

/** The page's globals, inside evaluate (the test compiles without the DOM library). */
declare const document: {
  body: { dataset: Record<string, string | undefined> };
  getElementById(id: string): { textContent: string | null } | null;
};

let ctx: Ctx;
let page: WebPage;
let bare: WebPage;
const dir = tempDir();
const truncated = join(dir, "truncated.gguf");
/** relu-stories converted in Node (a name of its own: the conversion test leaves relu-stories.pi in OPFS) */
const reluStore = join(dir, "relu-node.pi");
const corrupt = join(dir, "corrupt.pi");
/** Today's architectures, from Hugging Face checkpoints (test/fixtures/hf). */
const HF_ARCHS = ["qwen3", "gemma3"];
const hfGGUF = (arch: string) => join(dir, `hf-${arch}.gguf`);

before(async () => {
  if (skip) return;
  writeFileSync(truncated, readFileSync(STORIES).subarray(0, 600000));
  await convertToStore({ input: RELU, output: reluStore, fsync: false });
  // a store whose FFN bundles were changed after conversion (their CRC-32s no longer match)
  const bytes = readFileSync(reluStore);
  for (let off = 8_000_000; off < 30_000_000; off += 7 * 4096) bytes.fill(0xff, off, off + 64);
  writeFileSync(corrupt, bytes);
  for (const arch of HF_ARCHS)
    await convertHFToGGUF({
      input: hfFixtureDir(arch, join(dir, arch)),
      output: hfGGUF(arch),
      type: "f32",
      fsync: false,
    });
  page = await startWebPage({
    port: 0,
    models: [STORIES, RELU, reluStore, truncated, corrupt, ...HF_ARCHS.map(hfGGUF)],
  });
  bare = await startWebPage({ port: 0, isolation: false });
  const { chromium } = (await import("playwright-core")) as unknown as {
    chromium: { launchPersistentContext(dir: string, o: object): Promise<Ctx> };
  };
  // A persistent profile: an incognito one keeps OPFS in memory, ~50x slower per read.
  ctx = await chromium.launchPersistentContext(mkdtempSync(join(tmpdir(), "powerinfer-chromium-")), {
    executablePath: CHROMIUM,
    headless: true,
    args: ["--no-sandbox"],
  });
});

after(async () => {
  await ctx?.close();
  await page?.close();
  await bare?.close();
});

interface Run {
  state: string;
  output: string;
  error: string;
  stats: Record<string, unknown> & { tokens: number[] };
  p: Page;
}

/** Open the page with `query`, wait for "done" or "error" (at most 120 s). */
async function run(base: string, query: string, keep = false): Promise<Run> {
  const p = await ctx.newPage();
  const log: string[] = [];
  p.on("console", (m) => log.push(m.text()));
  await p.goto(`${base}?${query}`);
  try {
    await p.waitForFunction(() => ["done", "error"].includes(document.body.dataset.state ?? ""), null, {
      timeout: 120000,
    });
  } catch (e) {
    const progress = await p.evaluate(() => document.getElementById("progress-text")?.textContent ?? "");
    throw new Error(
      `the page did not finish: ${(e as Error).message}; progress "${progress}"; console: ${log.join(" | ")}`,
    );
  }
  const r = await p.evaluate(() => ({
    state: document.body.dataset.state ?? "",
    output: document.getElementById("output")?.textContent ?? "",
    error: document.getElementById("error")?.textContent ?? "",
    stats: document.getElementById("stats")?.textContent ?? "",
  }));
  if (!keep) await p.close();
  return { ...r, stats: r.state === "done" ? JSON.parse(r.stats) : null, p };
}

async function nodeTokens(path: string): Promise<{ tokens: number[]; text: string }> {
  const model = await loadModel({ modelPath: path, threads: 2 });
  try {
    const gen = model.generate(PROMPT, { maxTokens: N, temperature: 0 });
    let text = "";
    for await (const piece of gen) text += piece;
    return { tokens: [...gen.tokens], text };
  } finally {
    await model.dispose();
  }
}

const q = (o: Record<string, string | number>) =>
  Object.entries(o)
    .map(([k, v]) => `${k}=${encodeURIComponent(String(v))}`)
    .join("&");

test("powerinfer web: serves the page, its workers and kernels with the cross-origin-isolation headers, and the model with ranges", async () => {
  const child = spawn(process.execPath, [CLI, "web", "-m", STORIES, "--port", "0"], {
    stdio: ["ignore", "pipe", "pipe"],
  });
  try {
    const url = await new Promise<string>((resolve, reject) => {
      let out = "";
      child.stdout.on("data", (d: Buffer) => {
        out += d.toString();
        const m = /open (http:\/\/\S+?)\?model=/.exec(out);
        if (m) resolve(m[1]);
      });
      child.once("exit", (code) => reject(new Error(`powerinfer web exited (${code}): ${out}`)));
    });
    for (const path of ["", "app.js", "engine-worker.js", "pool-worker.js", "reader-worker.js", "kernels.wasm"]) {
      const res = await fetch(url + path);
      assert.equal(res.status, 200, path);
      assert.equal(res.headers.get("cross-origin-opener-policy"), "same-origin", path);
      assert.equal(res.headers.get("cross-origin-embedder-policy"), "require-corp", path);
      await res.arrayBuffer();
    }
    const part = await fetch(`${url}models/stories260K.gguf`, { headers: { range: "bytes=0-3" } });
    assert.equal(part.status, 206);
    assert.equal(Buffer.from(await part.arrayBuffer()).toString("latin1"), "GGUF");
    assert.equal((await fetch(`${url}models/other.gguf`)).status, 404);
    assert.equal((await fetch(`${url}..%2Fpackage.json`)).status, 404);
  } finally {
    child.kill("SIGTERM");
  }
});

test("browser: stories260K's greedy tokens in Chromium equal Node's", { skip }, async () => {
  const want = await nodeTokens(STORIES);
  const r = await run(page.url, q({ model: "/models/stories260K.gguf", prompt: PROMPT, n: N, temp: 0, autorun: 1 }));
  assert.equal(r.state, "done", r.error);
  assert.deepEqual(r.stats.tokens, want.tokens);
  assert.equal(r.output, want.text);
  assert.equal(r.stats.kind, "gguf");
});

for (const arch of HF_ARCHS)
  test(`browser: a ${arch} converted from Hugging Face gives Node's greedy tokens and text`, { skip }, async () => {
    const want = await nodeTokens(hfGGUF(arch));
    const r = await run(page.url, q({ model: `/models/hf-${arch}.gguf`, prompt: PROMPT, n: N, temp: 0, autorun: 1 }));
    assert.equal(r.state, "done", r.error);
    assert.deepEqual(r.stats.tokens, want.tokens);
    assert.equal(r.output, want.text);
  });

test(
  "browser: relu-stories converted to a store in OPFS, most bundles on flash under a budget, equals the dense run",
  { skip },
  async () => {
    const want = await nodeTokens(RELU);
    const budget = 15 * 2 ** 20;
    const r = await run(
      page.url,
      q({ model: "/models/relu-stories.gguf", convert: 1, prompt: PROMPT, n: N, temp: 0, budget: "15M", autorun: 1 }),
      true,
    );
    try {
      assert.equal(r.state, "done", r.error);
      assert.deepEqual(r.stats.tokens, want.tokens, "the store in the browser gives the dense run's tokens");
      const s = r.stats as unknown as {
        kind: string;
        budget: number;
        wasmMemoryBytes: number;
        offload: {
          cacheSlots: number;
          bundles: number;
          misses: number;
          bytesRead: number;
          layers: unknown[];
          maxReadsInFlight: number;
        };
      };
      assert.equal(s.kind, "store");
      assert.equal(s.budget, budget);
      assert.ok(s.wasmMemoryBytes <= budget, `wasm memory ${s.wasmMemoryBytes} within the budget ${budget}`);
      assert.equal(s.offload.bundles, 6 * 1024);
      assert.ok(
        s.offload.cacheSlots < s.offload.bundles / 2,
        `${s.offload.cacheSlots} of ${s.offload.bundles} bundles in memory`,
      );
      assert.ok(s.offload.misses > 0 && s.offload.bytesRead >= s.offload.misses * 4096, "misses were read from OPFS");
      assert.equal(s.offload.layers.length, 6);
      assert.ok(s.offload.maxReadsInFlight > 1, `at most ${s.offload.maxReadsInFlight} reads in flight`);
      // the page as a user sees it after a run: a screenshot of a sensible size, not blank
      await r.p.setViewportSize({ width: 1200, height: 800 });
      const png = await r.p.screenshot({ path: join(dir, "page.png") });
      assert.equal(png.subarray(1, 4).toString("latin1"), "PNG");
      const width = png.readUInt32BE(16),
        height = png.readUInt32BE(20);
      assert.equal(width, 1200);
      assert.equal(height, 800);
      assert.ok(png.length > 30000, `a screenshot of ${png.length} bytes is too small to show the page`);
    } finally {
      await r.p.close();
    }
  },
);

test(
  "browser: a store split among several wasm memories (&shard=SIZE) gives the dense run's tokens within the budget",
  { skip },
  async () => {
    const want = await nodeTokens(RELU);
    // a budget whose cache still leaves bundles on flash when the extra memory's buffers and
    // staging come out of it; the page counts it as "wasm", and its threads are fixed to match Node's layout
    const budget = 24 * 2 ** 20;
    const shardBytes = 16 * 2 ** 20;
    const threads = 2;
    const layout = await LlamaModel.layoutOf(reluStore, {
      threads,
      memoryBudget: budget,
      budgetCounts: "wasm",
      shardBytes,
    });
    const memories = layout.shards?.length ?? 1;
    assert.ok(memories >= 2, `Node lays relu-stories out in ${memories} memories of ${shardBytes} bytes`);
    const r = await run(
      page.url,
      q({
        model: "/models/relu-node.pi",
        prompt: PROMPT,
        n: N,
        temp: 0,
        budget: "24M",
        shard: "16M",
        threads,
        autorun: 1,
      }),
    );
    assert.equal(r.state, "done", r.error);
    const s = r.stats as unknown as {
      kind: string;
      memories: number;
      wasmMemoryBytes: number;
      offload: { cacheSlots: number; bundles: number; misses: number };
    };
    assert.equal(s.kind, "store");
    assert.equal(s.memories, memories, "the memories Node lays out");
    assert.deepEqual(r.stats.tokens, want.tokens, "several memories give the dense run's tokens");
    assert.ok(s.wasmMemoryBytes <= budget, `wasm memories ${s.wasmMemoryBytes} within the budget ${budget}`);
    assert.equal(s.offload.cacheSlots, layout.slots, "the cache Node lays out");
    assert.ok(s.offload.cacheSlots < s.offload.bundles && s.offload.misses > 0, "misses were read from OPFS");
  },
);

test("browser: a copy into OPFS resumes from what an interrupted one left", { skip }, async () => {
  const p = await ctx.newPage();
  try {
    await p.goto(page.url);
    const whole = readFileSync(STORIES);
    const cut = 400000;
    const r = await p.evaluate(
      `(async () => {
        const url = new URL("/models/stories260K.gguf", location.href).href;
        const root = await navigator.storage.getDirectory();
        // what an interrupted copy leaves: the first bytes in NAME.part, the source in NAME.part.json
        const src = await (await fetch(url)).arrayBuffer();
        const part = await (await root.getFileHandle("resume.gguf.part", { create: true })).createWritable();
        await part.write(new Uint8Array(src, 0, ${cut}));
        await part.close();
        const meta = await (await root.getFileHandle("resume.gguf.part.json", { create: true })).createWritable();
        await meta.write(JSON.stringify({ url }));
        await meta.close();
        const { Engine } = await import("/index.js");
        const engine = await Engine.start();
        let resumedFrom = -1;
        const size = await engine.importUrl(url, "resume.gguf", (p) => { if (resumedFrom < 0) resumedFrom = p.resumedFrom; });
        const names = (await engine.list()).map((f) => f.name);
        const copy = await (await (await root.getFileHandle("resume.gguf")).getFile()).arrayBuffer();
        const digest = (b) => crypto.subtle.digest("SHA-256", b).then((d) => Array.from(new Uint8Array(d)).join(","));
        engine.terminate();
        return { size, resumedFrom, names, same: (await digest(copy)) === (await digest(src)) };
      })()`,
    );
    const got = r as { size: number; resumedFrom: number; names: string[]; same: boolean };
    assert.equal(got.resumedFrom, cut, "the copy continued from the part it found");
    assert.equal(got.size, whole.length);
    assert.ok(got.same, "the resumed copy is the file, byte for byte");
    assert.ok(got.names.includes("resume.gguf") && !got.names.includes("resume.gguf.part"), got.names.join(", "));
    // a file picked in the page is copied into OPFS the same way
    await (p as unknown as { setInputFiles(sel: string, path: string): Promise<void> }).setInputFiles("#file", STORIES);
    await p.waitForFunction(
      () =>
        document.body.dataset.state !== "busy" &&
        /^copy: 1\.1 MiB of 1\.1 MiB/.test(document.getElementById("progress-text")?.textContent ?? ""),
      null,
      { timeout: 60000 },
    );
    assert.notEqual(await p.evaluate(() => document.body.dataset.state), "error");
  } finally {
    await p.close();
  }
});

test("browser: a generation stops when asked (the library's abort), with stopReason abort", { skip }, async () => {
  const p = await ctx.newPage();
  try {
    await p.goto(page.url);
    const r = (await p.evaluate(
      `(async () => {
        const { Engine } = await import("/index.js");
        const engine = await Engine.start();
        await engine.importUrl("/models/stories260K.gguf", "stop.gguf");
        await engine.load({ name: "stop.gguf", contextSize: 4096 });
        const gen = engine.generate({ prompt: "Once upon a time", maxTokens: 4000, temperature: 0.8, seed: 3 });
        await new Promise((r) => setTimeout(r, 150));
        await engine.abort(gen);
        const r = await gen;
        engine.terminate();
        return { stopReason: r.stats.stopReason, n: r.stats.generatedTokens };
      })()`,
    )) as { stopReason: string; n: number };
    assert.equal(r.stopReason, "abort");
    assert.ok(r.n > 0 && r.n < 4000, `${r.n} tokens`);
  } finally {
    await p.close();
  }
});

test("browser: bad input is an error on the page, never a hang", { skip }, async () => {
  const noIso = await run(bare.url, q({ model: "/models/stories260K.gguf", autorun: 1 }));
  assert.equal(noIso.state, "error");
  assert.match(noIso.error, /cross-origin isolation is required/);
  assert.match(noIso.error, /Cross-Origin-Embedder-Policy: require-corp/);

  const missing = await run(page.url, q({ model: "/models/nothing-here.gguf", autorun: 1 }));
  assert.equal(missing.state, "error");
  assert.match(missing.error, /HTTP 404/);

  const notUrl = await run(page.url, q({ model: "http://[oops/x.gguf", autorun: 1 }));
  assert.equal(notUrl.state, "error");
  assert.match(notUrl.error, /not a URL/);

  const unreachable = await run(page.url, q({ model: "http://127.0.0.1:9/x.gguf", autorun: 1 }));
  assert.equal(unreachable.state, "error");
  assert.match(unreachable.error, /fetching http:\/\/127\.0\.0\.1:9\/x\.gguf failed/);

  // threads=1 leaves a core to the reader workers, which then check the checksums themselves
  for (const threads of [1, 2]) {
    const bad = await run(page.url, q({ model: "/models/corrupt.pi", n: 8, budget: "15M", threads, autorun: 1 }));
    assert.equal(bad.state, "error");
    assert.match(bad.error, /corrupt\.pi: checksum mismatch in the 4096-byte chunk at \d+ \(layer \d FFN/);
  }

  const notSize = await run(page.url, q({ model: "/models/stories260K.gguf", shard: "12 parts", autorun: 1 }));
  assert.equal(notSize.state, "error");
  assert.match(notSize.error, /shard "12 parts": expected a size such as 12M/);
  const tooSmall = await run(page.url, q({ model: "/models/stories260K.gguf", shard: "64K", n: 4, autorun: 1 }));
  assert.equal(tooSmall.state, "error");
  assert.match(
    tooSmall.error,
    /shardBytes must be a whole number of bytes above \d+ and at most \d+ \(4 GiB\), got 65536/,
  );

  const cut = await run(page.url, q({ model: "/models/truncated.gguf", n: 4, autorun: 1 }));
  assert.equal(cut.state, "error");
  assert.match(cut.error, /truncated\.gguf/);
});
