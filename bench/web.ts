/**
 * `npm run bench:web`: the same neuron store decoded in Node and in headless Chromium (the page of
 * `powerinfer web`, the store copied into OPFS), under the same budget counted the same way
 * (budgetCounts "wasm": the wasm memory and the buffers it owns, which is what a browser counts),
 * so both run the same layout: the same cache, the same reads. Rounds alternate Node and browser.
 *
 *   npm run bench:web
 *   npm run bench:web -- --model ../shared/models/relu-stories.gguf --budget 15M -n 128 --rounds 3
 *
 * Prints a markdown table (decode tok/s, hit rate, MB read per token, peak wasm memory).
 */
import { offloadFigures, statsSince } from "../src/model/offload/stats.js";
import { existsSync, mkdtempSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { basename, join } from "node:path";
import { loadModel } from "../src/api/model.js";
import { convertToStore } from "../src/offline/convert.js";
import { startWebPage } from "../src/server/web-page.js";
import { parseSize } from "../src/cli/args.js";

const args = process.argv.slice(2);
const flag = (name: string, def: string) => {
  const i = args.indexOf(name);
  return i >= 0 ? args[i + 1] : def;
};
const SRC = flag("--model", join(process.cwd(), "..", "shared", "models", "relu-stories.gguf"));
const BUDGET = parseSize(flag("--budget", "15M"));
const N = Number(flag("-n", "128"));
const ROUNDS = Number(flag("--rounds", "3"));
const THREADS = Number(flag("--threads", "2"));
const READERS = Number(flag("--readers", "4"));
const PROMPT = "Once upon a time";
const CHROMIUM = process.env.CHROMIUM ?? "/usr/bin/chromium";

interface Row {
  where: string;
  tps: number;
  hit: number;
  mbPerToken: number;
  /** ms per token the FFN waited for reads */
  waitPerToken: number;
  wasm: number;
  tokens: number[];
}

const dir = mkdtempSync(join(tmpdir(), "powerinfer-bench-web-"));
const store = SRC.endsWith(".pi") ? SRC : join(dir, basename(SRC).replace(/\.gguf$/, ".pi"));
if (!SRC.endsWith(".pi")) await convertToStore({ input: SRC, output: store, fsync: false });

async function node(): Promise<Row> {
  const m = await loadModel({ modelPath: store, memoryBudget: BUDGET, budgetCounts: "wasm", threads: THREADS });
  try {
    const before = m.offloadStats()!;
    const gen = m.generate(PROMPT, { maxTokens: N, temperature: 0 });
    for await (const _ of gen) void _;
    const d = statsSince(before, m.offloadStats()!);
    return {
      where: "Node",
      tps: gen.stats!.decodeTokensPerSecond,
      hit: offloadFigures(d).hitRate,
      mbPerToken: d.bytesRead / 1e6 / gen.tokens.length,
      waitPerToken: d.ioWaitMs / gen.tokens.length,
      wasm: m.wasmMemoryBytes,
      tokens: [...gen.tokens],
    };
  } finally {
    await m.dispose();
  }
}

const page = await startWebPage({ port: 0, models: [store] });
const { chromium } = (await import("playwright-core")) as unknown as {
  chromium: {
    launchPersistentContext(dir: string, o: object): Promise<{ newPage(): Promise<any>; close(): Promise<void> }>;
  };
};
const ctx = await chromium.launchPersistentContext(join(dir, "profile"), {
  executablePath: CHROMIUM,
  headless: true,
  args: ["--no-sandbox"],
});

async function browser(): Promise<Row> {
  const p = await ctx.newPage();
  const q = `model=/models/${basename(store)}&prompt=${encodeURIComponent(PROMPT)}&n=${N}&temp=0&budget=${BUDGET}&threads=${THREADS}&readers=${READERS}&autorun=1`;
  await p.goto(`${page.url}?${q}`);
  await p.waitForFunction(() => ["done", "error"].includes((globalThis as any).document.body.dataset.state), null, {
    timeout: 600000,
  });
  const r = await p.evaluate(() => {
    const d = (globalThis as any).document;
    return {
      state: d.body.dataset.state,
      stats: d.getElementById("stats").textContent,
      error: d.getElementById("error").textContent,
    };
  });
  await p.close();
  if (r.state !== "done") throw new Error(`browser run failed: ${r.error}`);
  const s = JSON.parse(r.stats);
  return {
    where: "Chromium",
    tps: s.decodeTokensPerSecond,
    hit: s.offload.hitRate,
    mbPerToken: s.offload.bytesRead / 1e6 / s.generatedTokens,
    waitPerToken: s.offload.ioWaitMs / s.generatedTokens,
    wasm: s.wasmMemoryBytes,
    tokens: s.tokens,
  };
}

const rows: Row[] = [];
try {
  for (let r = 0; r < ROUNDS; r++) {
    rows.push(await node());
    rows.push(await browser());
  }
} finally {
  await ctx.close();
  await page.close();
}
const weights = statSync(store).size;
console.log(
  `store ${basename(store)}: ${(weights / 2 ** 20).toFixed(1)} MiB on flash, budget ${(BUDGET / 2 ** 20).toFixed(1)} MiB ` +
    `(${(weights / BUDGET).toFixed(2)}x), ${N} tokens greedy, ${THREADS} threads\n`,
);
console.log(
  "| run | where | decode tok/s | hit rate | MB read / token | read wait ms / token | peak wasm memory | tokens equal Node's |",
);
console.log("|---|---|---|---|---|---|---|---|");
const ref = rows[0].tokens.join(",");
rows.forEach((x, i) =>
  console.log(
    `| ${Math.floor(i / 2) + 1} | ${x.where} | ${x.tps.toFixed(1)} | ${(x.hit * 100).toFixed(1)}% | ${x.mbPerToken.toFixed(2)} | ${x.waitPerToken.toFixed(2)} | ` +
      `${(x.wasm / 2 ** 20).toFixed(1)} MiB | ${x.tokens.join(",") === ref ? "yes" : "NO"} |`,
  ),
);
if (existsSync(dir)) rmSync(dir, { recursive: true, force: true });
