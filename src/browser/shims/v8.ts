/** `node:v8` in the browser build: V8 flags are the browser's own (wasm.ts sets one on Node 20 only). */
export function setFlagsFromString(_flags: string): void {}
export default { setFlagsFromString };
