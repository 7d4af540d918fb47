/**
 * The activations' one table (src/format/activations.ts) against the kernels' codes (and the
 * sparse kernels' biased-bundles flag) and the metadata names it stands for.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { ACTIVATIONS, activationByName, gatedActivation, type Activation } from "../src/format/activations.js";
import { instantiateKernels, kernelBuild, kernelModule, type KernelBuild } from "../src/runtime/wasm.js";
import { SPARSE_BIASED } from "../src/runtime/sparse-kernels.js";

test("each activation's code is the one the kernels export (ACT_SILU, ACT_RELU, ...)", () => {
  // the SIMD128 build and the one this runtime runs (relaxed where it validates)
  for (const build of new Set<KernelBuild>(["simd128", kernelBuild()])) {
    const memory = new WebAssembly.Memory({ initial: 256, maximum: 65536, shared: true });
    const exports = instantiateKernels(memory, kernelModule(build)) as unknown as Record<string, unknown>;
    for (const [name, t] of Object.entries(ACTIVATIONS)) {
      const g = exports[`ACT_${name.toUpperCase()}`];
      // an exported constant is a WebAssembly.Global (not in this TypeScript's lib: read its value)
      assert.ok(g && typeof g === "object" && "value" in g, `${build}: the kernels export ACT_${name.toUpperCase()}`);
      assert.equal((g as { value: number }).value, t.code, `${build}: ${name}'s code`);
    }
    // the biased-bundles flag added to a code: no activation's code has its bit
    const b = exports.SPARSE_BIASED as { value: number } | undefined;
    assert.equal(b?.value, SPARSE_BIASED, `${build}: SPARSE_BIASED`);
    for (const t of Object.values(ACTIVATIONS)) assert.equal(t.code & SPARSE_BIASED, 0);
  }
});

test("metadata names map to their activation, any case; unknown names to none", () => {
  const cases: [string, Activation | undefined][] = [
    ["silu", "silu"],
    ["SwiGLU", "silu"],
    ["relu", "relu"],
    ["reglu", "relu"],
    ["drelu", "drelu"],
    ["GELU", "gelu"],
    ["geglu", "gelu"],
    ["tanh", undefined],
  ];
  for (const [name, want] of cases) assert.equal(activationByName(name), want, name);
});

test("gated activations: exact zeros where the ReLU family has them", () => {
  assert.equal(gatedActivation("relu", -1, 3), 0);
  assert.equal(gatedActivation("relu", 2, 3), 6);
  assert.equal(gatedActivation("drelu", 2, -3), 0);
  assert.equal(gatedActivation("drelu", 2, 3), 6);
  assert.ok(gatedActivation("silu", -1, 3) !== 0);
  assert.ok(Math.abs(gatedActivation("gelu", 1, 1) - 0.8411919906082768) < 1e-12);
  // gpt-oss's: the gate capped at 7 (not below), the up clamped to +-7, plus 1
  const sig = (x: number) => 1 / (1 + Math.exp(-x));
  assert.ok(Math.abs(gatedActivation("swiglu_oai", 9, 20) - 7 * sig(1.702 * 7) * 8) < 1e-12);
  assert.ok(Math.abs(gatedActivation("swiglu_oai", -9, -20) - -9 * sig(1.702 * -9) * -6) < 1e-12);
  assert.ok(Math.abs(gatedActivation("swiglu_oai", 1, -1)) < 1e-15);
  assert.equal(ACTIVATIONS.relu.exactZeros && ACTIVATIONS.drelu.exactZeros, true);
  assert.equal(ACTIVATIONS.silu.exactZeros || ACTIVATIONS.gelu.exactZeros, false);
});
