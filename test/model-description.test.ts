/**
 * A model's parameter count and description (what `powerinfer bench` labels it with) are the same
 * whether it runs from its GGUF or from a neuron store made of it: a store's FFN lives in neuron
 * bundles, not tensors, and a mixture's bundles are every expert's.
 */
import { test } from "node:test";
import assert from "node:assert/strict";
import { join } from "node:path";
import { loadModel } from "../src/index.js";
import { convertToStore } from "../src/offline/convert.js";
import { SHARED, tempDir } from "./helpers.js";

for (const name of ["moe-stories.gguf", "relu-stories.gguf"]) {
  test(`${name}: the same parameters and description from the GGUF and from its store`, async () => {
    const gguf = join(SHARED, "models", name);
    const pi = join(tempDir(), name.replace(".gguf", ".pi"));
    await convertToStore({ input: gguf, output: pi, fsync: false });
    const fromGGUF = await loadModel({ modelPath: gguf, threads: 1 });
    const fromStore = await loadModel({ modelPath: pi, threads: 1 });
    try {
      assert.ok(fromGGUF.parameterCount > 0);
      assert.equal(fromStore.parameterCount, fromGGUF.parameterCount);
      assert.equal(fromStore.typeDescription, fromGGUF.typeDescription);
      assert.match(fromGGUF.typeDescription, new RegExp(`^${fromGGUF.config.architecture} [0-9.]+ [KMB] [A-Z0-9_]+$`));
    } finally {
      await fromGGUF.dispose();
      await fromStore.dispose();
    }
  });
}
