/** `node:os` in the browser build: the thread count and the errno numbers the reader uses. */
import { web } from "../web-types.js";

export function availableParallelism(): number {
  return Math.max(1, web.navigator.hardwareConcurrency ?? 1);
}
export function cpus(): unknown[] {
  return new Array(availableParallelism()).fill({ model: "browser", speed: 0 });
}
export function totalmem(): number {
  return 0;
}
export function freemem(): number {
  return 0;
}
export function platform(): string {
  return "browser";
}
export function tmpdir(): string {
  return "/opfs";
}
export function homedir(): string {
  return "/opfs";
}
export const EOL = "\n";
export const constants = { errno: { EIO: 5, EINVAL: 22, EBADMSG: 74, ENOENT: 2 }, signals: {} };
export default { availableParallelism, cpus, totalmem, freemem, platform, tmpdir, homedir, EOL, constants };
