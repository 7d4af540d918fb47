/**
 * The compiled kernel module (build/kernels.wasm) and instances of it over a shared memory.
 * The module is compiled once per thread; every worker instantiates it over the same memory.
 */
import { readFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";

const WASM_URL = new URL("../../../build/kernels.wasm", import.meta.url);
export const WASM_PATH = fileURLToPath(WASM_URL);

/** Kernel exports: functions taking and returning numbers (pointers are byte offsets). */
export type KernelExports = Record<string, (...args: number[]) => number>;

let compiled: WebAssembly.Module | undefined;

export function kernelModule(): WebAssembly.Module {
  if (!compiled) {
    if (!existsSync(WASM_PATH))
      throw new Error(`kernel module ${WASM_PATH} is missing: run "npm install" (or "npm run build") first`);
    compiled = new WebAssembly.Module(readFileSync(WASM_PATH));
  }
  return compiled;
}

export function instantiateKernels(memory: WebAssembly.Memory, module = kernelModule()): KernelExports {
  const instance = new WebAssembly.Instance(module, {
    env: {
      memory,
      abort: (_msg: number, _file: number, line: number, col: number) => {
        throw new Error(`wasm kernel abort at ${line}:${col}`);
      },
    },
  });
  return instance.exports as unknown as KernelExports;
}
