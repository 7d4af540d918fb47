/**
 * The compiled kernel modules and instances of them over a shared memory.
 *
 * Two builds of the same AssemblyScript source (scripts/build-wasm.mjs): "simd128"
 * (build/kernels.wasm), which every supported Node runs, and "relaxed" (build/kernels-relaxed.wasm),
 * whose int8 dot kernels use relaxed SIMD where that is faster. The process picks one once: relaxed
 * where this runtime validates a module using the relaxed dot instructions (Node 21+ by default;
 * on Node 20 the process turns on V8's flag for it, see allowRelaxedSimd), SIMD128 otherwise.
 * POWERINFER_KERNELS=simd128 or =relaxed forces one. The builds may differ in the activation formats their kernels take (see
 * weight-kernels.ts), never in results: every kernel gives the same bits in both.
 * A module is compiled once per thread; every worker instantiates it over the same memory.
 */
import { readFileSync, existsSync } from "node:fs";
import { fileURLToPath } from "node:url";
import { setFlagsFromString } from "node:v8";

export type KernelBuild = "simd128" | "relaxed";
export const KERNEL_BUILDS: readonly KernelBuild[] = ["simd128", "relaxed"];

const WASM_FILE: Record<KernelBuild, string> = { simd128: "kernels.wasm", relaxed: "kernels-relaxed.wasm" };

/** Path of a build's module file. */
export function wasmPath(build: KernelBuild): string {
  return fileURLToPath(new URL(`../../../build/${WASM_FILE[build]}`, import.meta.url));
}

/** Kernel exports: functions taking and returning numbers (pointers are byte offsets). */
export type KernelExports = Record<string, (...args: number[]) => number>;

/**
 * A tiny module whose one function uses both relaxed dots the relaxed build needs
 * (i16x8.relaxed_dot_i8x16_i7x16_s, i32x4.relaxed_dot_i8x16_i7x16_add_s) on v128 constants.
 * A runtime without relaxed SIMD rejects it.
 */
function relaxedProbe(): Uint8Array {
  const zero = [0xfd, 0x0c, ...new Array<number>(16).fill(0)]; // v128.const 0
  const body = [
    0x00, // no locals
    ...zero,
    ...zero,
    0xfd,
    0x92,
    0x02, // i16x8.relaxed_dot_i8x16_i7x16_s (0x112)
    ...zero,
    ...zero,
    0xfd,
    0x93,
    0x02, // i32x4.relaxed_dot_i8x16_i7x16_add_s (0x113)
    0x0b, // end
  ];
  return new Uint8Array([
    ...[0x00, 0x61, 0x73, 0x6d, 0x01, 0x00, 0x00, 0x00], // magic, version 1
    ...[0x01, 0x05, 0x01, 0x60, 0x00, 0x01, 0x7b], // types: () -> v128
    ...[0x03, 0x02, 0x01, 0x00], // functions: one of type 0
    ...[0x0a, body.length + 2, 0x01, body.length, ...body], // code
  ]);
}

/**
 * Node 20's V8 (11.3) has relaxed SIMD behind --experimental-wasm-relaxed-simd; V8 11.4 turned it
 * on by default (Chrome 114, Node 21) with the same instructions and the same x86 lowering. The
 * flag only adds instructions to what a module may use, so the process sets it before its first
 * validation rather than asking users for a command-line flag: on Node 20 the relaxed Q4 kernels
 * are the faster ones just as on Node 22 (docs/benchmarks.md). Flags are process-wide: the pool's
 * workers see it too.
 */
function allowRelaxedSimd(): void {
  const node = process.versions.node; // undefined in the browser build
  if (node !== undefined && Number(node.split(".")[0]) === 20) setFlagsFromString("--experimental-wasm-relaxed-simd");
}

let relaxedOk: boolean | undefined;
/** Whether this runtime validates relaxed SIMD (the dot instructions the relaxed build uses). */
export function relaxedSimdSupported(): boolean {
  if (relaxedOk === undefined) {
    allowRelaxedSimd();
    relaxedOk = WebAssembly.validate(relaxedProbe());
  }
  return relaxedOk;
}

let chosen: KernelBuild | undefined;

/** The build this process runs: forced by POWERINFER_KERNELS, else the fastest this runtime validates. */
export function kernelBuild(): KernelBuild {
  if (chosen) return chosen;
  const forced = process.env.POWERINFER_KERNELS;
  if (forced !== undefined && forced !== "") {
    if (forced !== "simd128" && forced !== "relaxed")
      throw new Error(`POWERINFER_KERNELS=${forced}: expected "simd128" or "relaxed"`);
    if (forced === "relaxed" && !relaxedSimdSupported())
      throw new Error(
        `POWERINFER_KERNELS=relaxed, but this runtime (Node ${process.version}) does not validate relaxed SIMD ` +
          `(Node 20 and later have it)`,
      );
    chosen = forced;
  } else chosen = relaxedSimdSupported() ? "relaxed" : "simd128";
  return chosen;
}

const compiled = new Map<KernelBuild, WebAssembly.Module>();

/**
 * Use an already compiled module for `build` and run that build (the browser build fetches and
 * compiles build/*.wasm itself, since it has no file system to read them from).
 */
export function provideKernelModule(build: KernelBuild, module: WebAssembly.Module): void {
  compiled.set(build, module);
  chosen = build;
}

/** The compiled module of `build` (by default the one this process runs). */
export function kernelModule(build: KernelBuild = kernelBuild()): WebAssembly.Module {
  let m = compiled.get(build);
  if (!m) {
    const path = wasmPath(build);
    if (!existsSync(path))
      throw new Error(`kernel module ${path} is missing: run "npm install" (or "npm run build") first`);
    m = new WebAssembly.Module(readFileSync(path));
    compiled.set(build, m);
  }
  return m;
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
