/**
 * Puts the engine's platform seams on browser implementations, once, in the engine worker:
 * kernels fetched and compiled from beside this bundle (the relaxed-SIMD build where the
 * browser validates it), pool workers as Web Workers, the flash reader's batches on OPFS reader
 * workers.
 */
import { provideAioBinding } from "../io/aio.js";
import { setPoolWorkerSpawner, type PoolWorker, type PoolWorkerData } from "../runtime/pool.js";
import { provideKernelModule, relaxedSimdSupported, type KernelBuild } from "../runtime/wasm.js";
import { OpfsReaders } from "./opfs-aio.js";
import { web, type WebWorker } from "./web-types.js";

/** Adapts a Web Worker running pool-worker.js to what ThreadPool uses (Node's Worker's events). */
class WebPoolWorker implements PoolWorker {
  private readonly listeners = {
    message: [] as ((v: unknown) => void)[],
    error: [] as ((v: unknown) => void)[],
    exit: [] as ((v: unknown) => void)[],
  };
  constructor(private readonly w: WebWorker) {
    w.onmessage = (ev) => {
      if (ev.data === "exit") return this.emit("exit", 0);
      if (typeof ev.data === "object" && ev.data && "error" in ev.data)
        return this.emit("error", new Error(`pool worker: ${(ev.data as { error: string }).error}`));
      this.emit("message", ev.data);
    };
    w.onerror = (ev) => this.emit("error", new Error(`pool worker failed: ${ev.message ?? "error"}`));
  }
  private emit(event: "message" | "error" | "exit", value: unknown): void {
    const l = this.listeners[event].splice(0);
    for (const f of l) f(value);
  }
  once(event: "message" | "error" | "exit", listener: (value: unknown) => void): this {
    this.listeners[event].push(listener);
    return this;
  }
  ref(): void {}
  unref(): void {}
}

let ready: Promise<{ build: KernelBuild; readers: OpfsReaders }> | undefined;

export function crossOriginIsolationError(): Error | null {
  if (web.crossOriginIsolated === true) return null;
  return new Error(
    "cross-origin isolation is required: the engine shares one WebAssembly.Memory between workers (SharedArrayBuffer), " +
      "which a browser allows only on a page served with the headers Cross-Origin-Opener-Policy: same-origin and " +
      "Cross-Origin-Embedder-Policy: require-corp (powerinfer web serves them)",
  );
}

/** Set the seams (once); `readers` reader workers for OPFS. */
export function browserPlatform(readers = 4): Promise<{ build: KernelBuild; readers: OpfsReaders }> {
  ready ??= (async () => {
    const err = crossOriginIsolationError();
    if (err) throw err;
    const build: KernelBuild = relaxedSimdSupported() ? "relaxed" : "simd128";
    const file = build === "relaxed" ? "kernels-relaxed.wasm" : "kernels.wasm";
    const url = new URL(`./${file}`, import.meta.url);
    const res = await web.fetch(url.href);
    if (!res.ok) throw new Error(`kernel module ${url.href}: HTTP ${res.status} ${res.statusText}`);
    // compiled synchronously: a worker may (only a page's main thread is limited to small modules)
    provideKernelModule(build, new WebAssembly.Module(new Uint8Array(await res.arrayBuffer())));
    const poolUrl = new URL("./pool-worker.js", import.meta.url);
    setPoolWorkerSpawner((data: PoolWorkerData) => {
      const w = new web.Worker(poolUrl, { type: "module", name: `powerinfer-pool-${data.index}` });
      const pw = new WebPoolWorker(w);
      w.postMessage(data);
      return pw;
    });
    const r = await OpfsReaders.start(readers, new URL("./reader-worker.js", import.meta.url));
    provideAioBinding(r);
    return { build, readers: r };
  })();
  return ready;
}
