/**
 * The fuzz executor: a worker thread that runs cases against the engine in process, so that the
 * main thread can time each case, see a hang (and terminate the worker), and watch memory.
 *
 * Per target it keeps what the cases need between them: the pristine GGUF files, the pristine
 * neuron store and its text, the tokenizers, or (server) a running server the main thread sends
 * requests to.
 */
import { parentPort, workerData } from "node:worker_threads";
import { mkdtempSync, readdirSync, readFileSync, writeFileSync, rmSync } from "node:fs";
import { join } from "node:path";
import { loadModel, type Model } from "../../src/index.js";
import { main as inspectMain } from "../../src/cli/inspect.js";
import { GGUFFile } from "../../src/format/gguf.js";
import { Tokenizer, StreamingDecoder, TokenizerError } from "../../src/tokenizer/index.js";
import { startServer, type OpenAIServer } from "../../src/server/index.js";
import { applyPatches } from "./patch.js";
import { judgeError, worse, type CaseResult } from "./outcome.js";
import type { GGUFCase } from "./gguf-cases.js";
import { buildStore, mayChangeText, storeParts, type StoreCase, type StoreParts } from "./store-cases.js";
import type { TokenizerCase } from "./tokenizer-cases.js";
import { bpeTokenizer } from "./bpe-fixture.js";
import { hfFiles, hfPristine, type HFCase, type HFPristine } from "./hf-cases.js";
import { convertHFToGGUF } from "../../src/format/hf/hf-to-gguf.js";

export interface ExecutorInit {
  target: "gguf" | "store" | "tokenizer" | "server" | "hf";
  workDir: string;
  /** gguf: the pristine files; store: the pristine store; server/tokenizer: the model */
  files: string[];
}

export type AnyCase = GGUFCase | StoreCase | TokenizerCase | HFCase;

/** The prompt every run case generates from. */
export const PROMPT = "Once upon a time";

// Cases print nothing: inspect writes to stdout, which in a worker is the main thread's.
console.log = () => undefined;
console.error = () => undefined;
process.stdout.write = (() => true) as typeof process.stdout.write;
process.stderr.write = (() => true) as typeof process.stderr.write;

const init = workerData as ExecutorInit;

async function step(name: string, file: string, fn: () => Promise<unknown> | unknown): Promise<CaseResult> {
  try {
    await fn();
    return { outcome: "success", detail: "", step: name };
  } catch (e) {
    return { ...judgeError(e, file), step: name };
  }
}

async function generate(path: string, opts: Parameters<typeof loadModel>[0]["offload"] = undefined): Promise<string> {
  const m: Model = await loadModel({ modelPath: path, threads: 1, offload: opts });
  try {
    const text = await m.generate(PROMPT, { maxTokens: 8, temperature: 0 }).text();
    m.tokenize("Lily and Tom");
    return text;
  } finally {
    await m.dispose();
  }
}

// ---- GGUF ----

const pristine = new Map<string, Uint8Array>();

async function runGGUF(c: GGUFCase): Promise<CaseResult> {
  const src = pristine.get(c.file);
  if (!src) throw new Error(`no pristine file ${c.file}`);
  const path = join(init.workDir, `case-${c.file}`);
  writeFileSync(
    path,
    applyPatches(
      src,
      c.mutations.map((m) => m.patch),
    ),
  );
  let r = await step("inspect", path, () => inspectMain([path]));
  r = worse(r, await step("inspect --json", path, () => inspectMain(["--json", path])));
  r = worse(r, await step("run", path, () => generate(path)));
  rmSync(path, { force: true });
  return r;
}

// ---- store ----

let parts: StoreParts | undefined;
let pristineText = "";
/** A small neuron cache, so that bundles are read (and checked) from the file while generating. */
const STORE_RUN = { cacheBytes: 40 * 4096 };

async function runStore(c: StoreCase): Promise<CaseResult> {
  const path = join(init.workDir, "case.pi");
  writeFileSync(path, buildStore(parts!, c));
  let r = await step("inspect --json", path, () => inspectMain(["--json", path]));
  r = worse(r, await step("inspect --verify", path, () => inspectMain(["--verify", path])));
  let text: string | undefined;
  r = worse(
    r,
    await step("run", path, async () => {
      text = await generate(path, STORE_RUN);
    }),
  );
  if (text !== undefined && text !== pristineText && !mayChangeText(c)) {
    r = worse(r, {
      outcome: "wrong",
      step: "run",
      detail: `generated ${JSON.stringify(text)}, the pristine store ${JSON.stringify(pristineText)}`,
    });
  }
  rmSync(path, { force: true });
  return r;
}

// ---- tokenizer ----

const tokenizers = new Map<string, Tokenizer>();

function runTokenizer(c: TokenizerCase): CaseResult {
  const tk = tokenizers.get(c.tokenizer)!;
  let text = "";
  for (let i = 0; i < c.units.length; i += 8192) text += String.fromCharCode(...c.units.slice(i, i + 8192));
  try {
    const ids = tk.encode(text, { parseSpecial: c.parseSpecial, addBos: c.addBos });
    for (const id of ids)
      if (!Number.isInteger(id) || id < 0 || id >= tk.vocabSize)
        return { outcome: "wrong", detail: `encode gave id ${id} outside 0..${tk.vocabSize - 1}`, step: "encode" };
    if (!c.parseSpecial && !c.addBos) {
      // decode(encode(text)) is the text as the tokenizer normalizes it: lone surrogates become
      // U+FFFD; SentencePiece's U+2581 stands for a space; BPE's decoder may drop spaces before
      // punctuation (clean_up_tokenization_spaces), so BPE is compared without spaces.
      const back = tk.decode(ids, { removeLeadingSpace: true });
      let want = text.replace(/[\ud800-\udbff](?![\udc00-\udfff])|(?<![\ud800-\udbff])[\udc00-\udfff]/g, "\ufffd");
      let got = back;
      if (tk.kind === "spm") want = want.replaceAll("\u2581", " ");
      else {
        want = want.replaceAll(" ", "");
        got = got.replaceAll(" ", "");
      }
      if (got !== want)
        return {
          outcome: "wrong",
          step: "round trip",
          detail: `decode(encode(text)) differs: ${JSON.stringify(want.slice(0, 80))} vs ${JSON.stringify(got.slice(0, 80))}`,
        };
    }
    const sd = new StreamingDecoder(tk);
    const streamed = ids.map((id) => sd.push(id)).join("") + sd.flush();
    const whole = tk.decode(ids);
    if (tk.kind === "spm" ? streamed !== whole : streamed.replaceAll(" ", "") !== whole.replaceAll(" ", ""))
      return {
        outcome: "wrong",
        step: "streaming",
        detail: `streamed ${JSON.stringify(streamed.slice(0, 80))} vs decode ${JSON.stringify(whole.slice(0, 80))}`,
      };
  } catch (e) {
    return { ...judgeError(e, ""), step: "encode/decode" };
  }
  const valid = c.ids.every((id) => Number.isInteger(id) && id >= 0 && id < tk.vocabSize);
  try {
    tk.decode(c.ids);
    if (!valid) return { outcome: "wrong", step: "decode ids", detail: `decode accepted ${JSON.stringify(c.ids)}` };
  } catch (e) {
    // a bad id is the caller's mistake: a RangeError (or TokenizerError) that names it
    const named =
      e instanceof Error && /token id/.test(e.message) && (e instanceof RangeError || e instanceof TokenizerError);
    if (valid || !named) return { ...judgeError(e, ""), step: "decode ids" };
  }
  return { outcome: "success", detail: "" };
}

// ---- hf ----

let hf: HFPristine | undefined;

/**
 * A damaged Hugging Face directory through `convert DIR -o x.gguf`, and the GGUF it may give
 * through a load and a few greedy tokens: each step succeeds or fails with an error naming what
 * is wrong; nothing that looks like a model is left beside a failed conversion.
 */
async function runHF(c: HFCase): Promise<CaseResult> {
  const dir = mkdtempSync(join(init.workDir, "hf-"));
  try {
    for (const [name, bytes] of hfFiles(hf!, c.edits)) writeFileSync(join(dir, name), bytes);
    const out = join(dir, "out.gguf");
    let r = await step("convert", dir, () => convertHFToGGUF({ input: dir, output: out, type: c.type, fsync: false }));
    if (r.outcome !== "success") {
      if (readdirSync(dir).some((f) => f.startsWith("out.gguf")))
        r = worse(r, {
          outcome: "wrong",
          step: "convert",
          detail: "a failed conversion left out.gguf (or its partial file)",
        });
      return r;
    }
    return worse(r, await step("run", out, () => generate(out)));
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

// ---- server ----

let server: OpenAIServer | undefined;

async function setUp(): Promise<unknown> {
  switch (init.target) {
    case "gguf":
      for (const f of init.files) pristine.set(f.split("/").pop()!, readFileSync(f));
      return {};
    case "store":
      parts = storeParts(readFileSync(init.files[0]));
      pristineText = await generate(init.files[0], STORE_RUN);
      return { pristineText };
    case "tokenizer": {
      const f = GGUFFile.open(init.files[0]);
      tokenizers.set("spm", Tokenizer.fromGGUF(f));
      f.close();
      for (const pre of ["gpt-2", "llama-bpe", "qwen2", "gpt-4o", "deepseek-v3"])
        tokenizers.set(pre, bpeTokenizer(pre));
      return { vocabSizes: Object.fromEntries([...tokenizers].map(([k, t]) => [k, t.vocabSize])) };
    }
    case "hf": {
      hf = hfPristine();
      // the pristine directory must convert and run, or every case would be judged against nothing
      const r = await runHF({ target: "hf", type: "f32", edits: [] });
      if (r.outcome !== "success") throw new Error(`the pristine Hugging Face directory fails: ${r.step}: ${r.detail}`);
      return {};
    }
    case "server": {
      const model = await loadModel({ modelPath: init.files[0], threads: 1, contextSize: 256 });
      server = await startServer({
        model,
        port: 0,
        maxBodyBytes: 1 << 20,
        limits: { headersTimeoutMs: 1000, requestTimeoutMs: 2000, idleTimeoutMs: 1000, maxConnections: 64 },
        defaults: { maxTokens: 16 },
      });
      return { port: server.port };
    }
  }
}

async function run(c: AnyCase): Promise<CaseResult> {
  switch (c.target) {
    case "gguf":
      return runGGUF(c);
    case "store":
      return runStore(c);
    case "tokenizer":
      return runTokenizer(c);
    case "hf":
      return runHF(c);
  }
}

parentPort!.on("message", async (msg: { type: "case"; id: number; case: AnyCase }) => {
  const t0 = performance.now();
  const result = await run(msg.case).catch((e) => ({ ...judgeError(e, ""), step: "harness" }));
  parentPort!.postMessage({ type: "result", id: msg.id, result: { ...result, ms: performance.now() - t0 } });
});

setUp().then(
  (info) => parentPort!.postMessage({ type: "ready", info }),
  (e) => parentPort!.postMessage({ type: "failed", error: e instanceof Error ? e.stack : String(e) }),
);
