/**
 * The Node modules that have no meaning in a browser tab (worker_threads, module, zlib, child
 * processes...): importing works, using them throws. zlib's absence makes the store's CRC-32 use
 * its portable table version.
 */
function unavailable(what: string) {
  return function (): never {
    throw new Error(`${what} is not available in the browser build`);
  };
}
export const Worker = unavailable("node:worker_threads Worker");
export const parentPort = null;
export const workerData = null;
export const isMainThread = true;
export const createRequire = unavailable("node:module createRequire");
export const spawn = unavailable("node:child_process");
export const spawnSync = unavailable("node:child_process");
export const execFileSync = unavailable("node:child_process");
export const createServer = unavailable("node:http");
export const gzipSync = unavailable("node:zlib");
export const promisify = (f: unknown) => f;
export const inspect = (v: unknown) => String(v);
export const format = (...a: unknown[]) => a.map(String).join(" ");
export const stdin = null;
export const stdout = null;
export const stderr = null;
export default {};
/** zlib.crc32: absent, so the store's CRC-32 takes its portable table version */
export const crc32: undefined = undefined;
