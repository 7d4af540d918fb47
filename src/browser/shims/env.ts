/**
 * Globals Node has and a browser worker lacks, injected into every browser bundle by esbuild:
 * `process` (no environment; a resident size of 0, since in a browser the memory budget counts
 * the wasm memory and the buffers it owns, which the layout lists itself), `setImmediate` (a
 * MessageChannel turn) and `Buffer` (the npm "buffer" package, Node's API).
 */
import { Buffer } from "buffer";

const channel = new MessageChannel();
const queue: (() => void)[] = [];
(channel.port1 as unknown as { onmessage: () => void }).onmessage = () => {
  const f = queue.shift();
  if (f) f();
};

function setImmediateShim<A extends unknown[]>(fn: (...args: A) => void, ...args: A): number {
  queue.push(() => fn(...args));
  channel.port2.postMessage(0);
  return 0;
}

const start = performance.now();
const processShim = {
  env: {} as Record<string, string | undefined>,
  platform: "browser",
  version: "browser",
  versions: {} as Record<string, string>,
  pid: 1,
  argv: [] as string[],
  execArgv: [] as string[],
  arch: "wasm",
  memoryUsage: Object.assign(() => ({ rss: 0, heapUsed: 0, heapTotal: 0, external: 0, arrayBuffers: 0 }), {
    rss: () => 0,
  }),
  resourceUsage: () => ({ maxRSS: 0 }),
  emitWarning: (message: string) => console.warn(message),
  nextTick: (fn: (...a: unknown[]) => void, ...args: unknown[]) => queueMicrotask(() => fn(...args)),
  hrtime: Object.assign(
    () => {
      const t = performance.now();
      return [Math.floor(t / 1000), Math.floor((t % 1000) * 1e6)];
    },
    { bigint: () => BigInt(Math.floor((performance.now() - start) * 1e6)) },
  ),
  cwd: () => "/opfs",
  on: () => processShim,
  once: () => processShim,
  off: () => processShim,
  exitCode: 0,
};

export { processShim as process, setImmediateShim as setImmediate, Buffer };
