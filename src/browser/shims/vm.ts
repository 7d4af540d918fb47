/** `node:vm` in the browser build: no contexts to make (memory.ts's collectGarbage then does nothing). */
export function runInNewContext(_code: string): unknown {
  return undefined;
}
export default { runInNewContext };
