/** `node:crypto` in the browser build: random bytes for the sampler's seed. */
import { Buffer } from "buffer";

export function randomBytes(n: number): Buffer {
  const b = Buffer.alloc(n);
  (globalThis as unknown as { crypto: { getRandomValues(a: Uint8Array): Uint8Array } }).crypto.getRandomValues(b);
  return b;
}
export function randomUUID(): string {
  return (globalThis as unknown as { crypto: { randomUUID(): string } }).crypto.randomUUID();
}
export default { randomBytes, randomUUID };
/** Model fingerprints (profiles, predictor files) are not computed in the browser build. */
export function createHash(algorithm: string): never {
  throw new Error(`node:crypto createHash(${algorithm}) is not available in the browser build`);
}
