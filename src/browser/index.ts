/**
 * powerinfer-ts in a browser (`import { Engine } from "powerinfer-ts/browser"`): the same engine
 * as in Node (kernels, forward pass, neuron cache, flash reader), run in a module worker, with
 * models in the Origin Private File System. The page must be cross-origin isolated (served with
 * Cross-Origin-Opener-Policy: same-origin and Cross-Origin-Embedder-Policy: require-corp), since
 * the engine's workers share one WebAssembly.Memory; `powerinfer web` serves such a page.
 *
 *   const engine = await Engine.start();
 *   await engine.importUrl("/models/stories260K.gguf", "stories260K.gguf", (p) => show(p.loaded / p.total));
 *   await engine.load({ name: "stories260K.gguf" });
 *   const { text, stats } = await engine.generate({ prompt: "Once upon a time", maxTokens: 32, temperature: 0 });
 */
import { crossOriginIsolationError } from "./platform.js";
import { web, type WebWorker } from "./web-types.js";
import type { EngineStats, GenerateArgs, LoadArgs } from "./engine-worker.js";
import type { ImportProgress, OpfsEntry, PickedFile } from "./opfs-import.js";

export type { EngineStats, GenerateArgs, LoadArgs, ImportProgress, OpfsEntry };

export interface Progress {
  stage: string;
  loaded: number;
  total: number | null;
}

export class EngineError extends Error {
  constructor(message: string, name = "EngineError") {
    super(message);
    this.name = name;
  }
}

interface Pending {
  resolve: (v: unknown) => void;
  reject: (e: Error) => void;
  onEvent?: (event: string, data: Record<string, unknown>) => void;
}

export class Engine {
  private nextId = 1;
  private readonly pending = new Map<number, Pending>();
  private dead: Error | null = null;

  private constructor(private readonly worker: WebWorker) {
    worker.onmessage = (ev) => {
      const d = ev.data as Record<string, unknown>;
      if (typeof d.event === "string") {
        if (typeof d.id === "number") this.pending.get(d.id)?.onEvent?.(d.event, d);
        return;
      }
      const p = this.pending.get(d.id as number);
      if (!p) return;
      this.pending.delete(d.id as number);
      if (d.ok) p.resolve(d.result);
      else p.reject(new EngineError(String(d.error), String(d.name ?? "EngineError")));
    };
    worker.onerror = (ev) => {
      ev.preventDefault?.();
      this.fail(new EngineError(`the engine worker failed: ${ev.message ?? "unknown error"}`));
    };
  }

  private fail(e: Error): void {
    this.dead = e;
    for (const p of this.pending.values()) p.reject(e);
    this.pending.clear();
  }

  /**
   * Start the engine worker (engine-worker.js beside this module, or `workerUrl`). Throws at once,
   * saying why, where the page is not cross-origin isolated or the browser lacks what it needs.
   */
  static async start(options: { workerUrl?: string | URL } = {}): Promise<Engine> {
    const iso = crossOriginIsolationError();
    if (iso) throw iso;
    if (typeof SharedArrayBuffer === "undefined")
      throw new EngineError("this browser has no SharedArrayBuffer, which the engine's workers share memory through");
    const url = options.workerUrl ?? new URL("./engine-worker.js", import.meta.url);
    const w = new web.Worker(url, { type: "module", name: "powerinfer-engine" });
    await new Promise<void>((resolve, reject) => {
      const t = setTimeout(
        () => reject(new EngineError(`the engine worker (${String(url)}) did not start in 30 s`)),
        30000,
      );
      w.onmessage = (ev) => {
        if ((ev.data as { event?: string }).event === "started") {
          clearTimeout(t);
          resolve();
        }
      };
      w.onerror = (ev) => {
        clearTimeout(t);
        ev.preventDefault?.();
        reject(new EngineError(`the engine worker (${String(url)}) failed to start: ${ev.message ?? "error"}`));
      };
    });
    return new Engine(w);
  }

  private call<T>(op: string, args: unknown, onEvent?: Pending["onEvent"]): Promise<T> & { id: number } {
    const id = this.nextId++;
    const p = new Promise<T>((resolve, reject) => {
      if (this.dead) return reject(this.dead);
      this.pending.set(id, { resolve: resolve as (v: unknown) => void, reject, onEvent });
      this.worker.postMessage({ id, op, args });
    }) as Promise<T> & { id: number };
    p.id = id;
    return p;
  }

  /** Files in this origin's private file system. */
  list(): Promise<OpfsEntry[]> {
    return this.call("list", {});
  }
  remove(name: string): Promise<void> {
    return this.call("remove", { name });
  }
  /** Copy the file at `url` into OPFS as `name` (resumable; progress as it goes). */
  importUrl(url: string, name: string, onProgress?: (p: Progress) => void): Promise<number> {
    return this.call("importUrl", { url, name }, (_e, d) => onProgress?.(d as unknown as Progress));
  }
  /** Copy a picked File (an <input type=file>'s) into OPFS as `name` (resumable). */
  importFile(file: PickedFile, name: string, onProgress?: (p: Progress) => void): Promise<number> {
    return this.call("importFile", { file, name }, (_e, d) => onProgress?.(d as unknown as Progress));
  }
  /** Convert a GGUF in OPFS into a neuron store in OPFS, streaming (as `powerinfer convert`). */
  convert(input: string, output: string, onProgress?: (p: Progress) => void, type?: string): Promise<object> {
    return this.call("convert", { input, output, type }, (_e, d) => onProgress?.(d as unknown as Progress));
  }
  /** Load a model from OPFS (a store under `budget` bytes, if given). */
  load(args: LoadArgs): Promise<Record<string, unknown>> {
    return this.call("load", args);
  }
  unload(): Promise<void> {
    return this.call("unload", {});
  }
  /** One generation; `onText` gets the text so far and live stats (about every 100 ms). */
  generate(
    args: GenerateArgs,
    onText?: (text: string, stats: EngineStats) => void,
  ): Promise<{ text: string; stats: EngineStats }> & { id: number } {
    return this.call("generate", args, (e, d) => {
      if (e === "token") onText?.(d.text as string, d.stats as EngineStats);
    });
  }
  /** Stop a running generation or copy (the promise `generate`/`importUrl` returned). */
  abort(p: { id: number }): Promise<void> {
    return this.call("abort", { target: p.id });
  }
  stats(): Promise<EngineStats | null> {
    return this.call("stats", {});
  }
  terminate(): void {
    this.worker.terminate();
    this.fail(new EngineError("the engine was terminated"));
  }
}
