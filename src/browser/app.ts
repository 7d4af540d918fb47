/**
 * The page `powerinfer web` serves (plain DOM). Besides the controls, a contract for scripts:
 * `/?model=URL&prompt=TEXT&n=N&temp=T&budget=SIZE&autorun=1` copies the model into OPFS (with
 * `&convert=1` a GGUF is converted to a store in the browser first; `&threads=N`, `&readers=N`
 * set the compute threads and OPFS reader workers; `&shard=SIZE` caps one wasm memory's bytes,
 * splitting a larger model among several, for tests and small per-tab limits), loads it, runs one
 * generation and, when done, writes the text into #output, the stats JSON into #stats and sets
 * document.body.dataset.state = "done" ("error", with the reason in #error, when anything fails).
 */
import { Engine, type EngineStats, type Progress } from "./index.js";

type El = { textContent: string | null; value: string; disabled: boolean; innerHTML: string; files?: FileList | null };
interface FileList {
  length: number;
  [i: number]: { name: string; size: number; lastModified: number };
}
const doc = (
  globalThis as unknown as {
    document: { getElementById(id: string): unknown; body: { dataset: Record<string, string> } };
  }
).document;
const $ = (id: string) =>
  doc.getElementById(id) as El & { addEventListener(t: string, f: () => void): void; max: number };
const params = new URLSearchParams((globalThis as unknown as { location: { search: string } }).location.search);

let engine: Engine | null = null;
let running: { id: number } | null = null;

function mib(b: number): string {
  return b >= 2 ** 30 ? `${(b / 2 ** 30).toFixed(2)} GiB` : `${(b / 2 ** 20).toFixed(1)} MiB`;
}

/** A size such as 12M or 1.5G in bytes ("" or "none": undefined); `what` names it in the error. */
export function parseSize(s: string, what = "budget"): number | undefined {
  const t = s.trim();
  if (t === "" || t === "none") return undefined;
  const m = /^(\d+(?:\.\d+)?)\s*([kmg]?)i?b?$/i.exec(t);
  if (!m) throw new Error(`${what} "${s}": expected a size such as 12M, 512M or 1.5G`);
  const mult = { "": 1, k: 2 ** 10, m: 2 ** 20, g: 2 ** 30 }[m[2].toLowerCase() as "" | "k" | "m" | "g"];
  return Math.floor(Number(m[1]) * mult);
}

/** Text for innerHTML (file names in OPFS may be anything). */
function esc(t: string): string {
  return t.replace(/[&<>"']/g, (c) => `&#${c.charCodeAt(0)};`);
}

function setState(state: string): void {
  doc.body.dataset.state = state;
}

function showError(e: unknown): void {
  $("error").textContent = e instanceof Error ? e.message : String(e);
  setState("error");
}

function progress(p: Progress): void {
  const total = p.total ?? 0;
  const bar = $("progress");
  bar.max = 1;
  bar.value = String(total > 0 ? p.loaded / total : 0);
  $("progress-text").textContent = `${p.stage}: ${mib(p.loaded)}${total ? ` of ${mib(total)}` : ""}`;
}

function showStats(s: EngineStats): void {
  $("m-tps").textContent = s.tokensPerSecond ? s.tokensPerSecond.toFixed(1) : "-";
  $("m-mem").textContent = mib(s.wasmMemoryBytes);
  const o = s.offload;
  $("m-hit").textContent = o ? `${(o.hitRate * 100).toFixed(1)}%` : "all in memory";
  $("m-read").textContent = o ? o.readMBps.toFixed(1) : "0";
  if (o && o.layers.length) {
    const rows = o.layers.map((l, i) => {
      const all = l.hot + l.cold + l.misses || 1;
      const w = (x: number) => ((x / all) * 100).toFixed(1);
      const label = o.experts > 0 ? `L${Math.floor(i / o.experts)} E${i % o.experts}` : `layer ${i}`;
      return `<span>${label}</span><div class="bar" title="hot ${l.hot}, cold ${l.cold}, misses ${l.misses}"><div class="hot" style="width:${w(l.hot)}%"></div><div class="cold" style="width:${w(l.cold)}%"></div><div class="miss" style="width:${w(l.misses)}%"></div></div>`;
    });
    $("cache").innerHTML = rows.join("");
  }
  $("stats").textContent = JSON.stringify(s, null, 1);
}

async function getEngine(): Promise<Engine> {
  engine ??= await Engine.start();
  return engine;
}

async function refreshModels(select?: string): Promise<void> {
  const e = await getEngine();
  const list = await e.list();
  const sel = $("models");
  sel.innerHTML = list
    .filter((f) => !f.name.endsWith(".part") && !f.name.endsWith(".part.json"))
    .map((f) => `<option value="${esc(f.name)}">${esc(f.name)} (${mib(f.size)})</option>`)
    .join("");
  if (select) sel.value = select;
}

function nameFromUrl(url: string): string {
  let parsed: URL;
  try {
    parsed = new URL(url, (globalThis as unknown as { location: { href: string } }).location.href);
  } catch {
    throw new Error(`model=${url}: not a URL`);
  }
  const last = parsed.pathname.split("/").pop() ?? "";
  const name = decodeURIComponent(last).replace(/[^A-Za-z0-9._-]/g, "_");
  if (!name) throw new Error(`cannot name a model after the URL ${url}`);
  return name;
}

async function load(
  name: string,
  budget: number | undefined,
  more: { threads?: number; readers?: number; shardBytes?: number } = {},
): Promise<void> {
  const e = await getEngine();
  $("progress-text").textContent = `loading ${name}${budget ? ` under ${mib(budget)}` : ""}...`;
  const info = await e.load({ name, budget, ...more });
  const memories = info.memories as number;
  $("progress-text").textContent =
    `loaded ${name}: ${info.kind}, ${info.kernels} kernels, ${info.threads} threads, wasm memory ${mib(info.wasmMemoryBytes as number)}${memories > 1 ? ` in ${memories} memories` : ""}`;
  $("generate").disabled = false;
}

async function generate(prompt: string, n: number, temp: number): Promise<{ text: string; stats: EngineStats }> {
  const e = await getEngine();
  $("output").textContent = "";
  $("generate").disabled = true;
  $("stop").disabled = false;
  const p = e.generate({ prompt, maxTokens: n, temperature: temp, seed: 1 }, (text, stats) => {
    $("output").textContent = prompt + text;
    showStats(stats);
  });
  running = p;
  try {
    const r = await p;
    $("output").textContent = prompt + r.text;
    showStats(r.stats);
    return r;
  } finally {
    running = null;
    $("generate").disabled = false;
    $("stop").disabled = true;
  }
}

function guard(f: () => Promise<void>): () => void {
  return () => {
    $("error").textContent = "";
    setState("busy");
    f().then(
      () => setState("idle"),
      (e) => showError(e),
    );
  };
}

$("import").addEventListener(
  "click",
  guard(async () => {
    const url = $("url").value.trim();
    const name = nameFromUrl(url);
    await (await getEngine()).importUrl(url, name, progress);
    await refreshModels(name);
  }),
);
$("file").addEventListener(
  "change",
  guard(async () => {
    const f = $("file").files?.[0];
    if (!f) return;
    const name = f.name.replace(/[^A-Za-z0-9._-]/g, "_");
    await (await getEngine()).importFile(f as never, name, progress);
    await refreshModels(name);
  }),
);
$("convert").addEventListener(
  "click",
  guard(async () => {
    const input = $("models").value;
    if (!input.endsWith(".gguf")) throw new Error("choose a .gguf to convert");
    const output = input.replace(/\.gguf$/, ".pi");
    await (await getEngine()).convert(input, output, progress);
    await refreshModels(output);
  }),
);
$("load").addEventListener(
  "click",
  guard(async () => load($("models").value, parseSize($("budget").value))),
);
$("generate").addEventListener(
  "click",
  guard(async () => {
    await generate($("prompt").value, Number($("n").value), Number($("temp").value));
  }),
);
$("stop").addEventListener("click", () => {
  if (running && engine) void engine.abort(running);
});

async function autorun(): Promise<void> {
  const url = params.get("model");
  if (!url) throw new Error("autorun needs ?model=URL");
  const prompt = params.get("prompt") ?? "Once upon a time";
  const n = Number(params.get("n") ?? "32");
  const temp = Number(params.get("temp") ?? "0");
  if (!Number.isInteger(n) || n < 1) throw new Error(`n=${params.get("n")}: expected a positive integer`);
  if (!Number.isFinite(temp) || temp < 0) throw new Error(`temp=${params.get("temp")}: expected a number >= 0`);
  const budget = parseSize(params.get("budget") ?? "");
  const shardBytes = parseSize(params.get("shard") ?? "", "shard");
  $("prompt").value = prompt;
  $("n").value = String(n);
  $("temp").value = String(temp);
  if (budget) $("budget").value = params.get("budget")!;
  let name = nameFromUrl(url);
  const e = await getEngine();
  await e.importUrl(url, name, progress);
  if (params.get("convert") === "1") {
    if (!name.endsWith(".gguf")) throw new Error("convert=1 needs a .gguf model");
    const out = name.replace(/\.gguf$/, ".pi");
    await e.convert(name, out, progress);
    name = out;
  }
  await refreshModels(name);
  // optional: compute threads and OPFS reader workers (defaults: the cores, at most 8; 4 readers)
  const count = (k: string) => {
    const v = params.get(k);
    if (v === null) return undefined;
    const n = Number(v);
    if (!Number.isInteger(n) || n < 1 || n > 64) throw new Error(`${k}=${v}: expected an integer in [1, 64]`);
    return n;
  };
  await load(name, budget, { threads: count("threads"), readers: count("readers"), shardBytes });
  const r = await generate(prompt, n, temp);
  $("output").textContent = r.text;
  $("stats").textContent = JSON.stringify(r.stats);
  setState("done");
}

const preset = params.get("model");
if (preset) $("url").value = preset;
if (params.get("autorun") === "1") {
  setState("busy");
  autorun().catch(showError);
} else {
  getEngine()
    .then(() => refreshModels())
    .catch(showError);
}
