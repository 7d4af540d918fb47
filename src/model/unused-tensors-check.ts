/**
 * A model file whose tensors the engine would not all read is refused, naming them: a tensor it
 * ignores (rope_freqs under an architecture that applies none, an attention output bias, a
 * fused QKV beside the split ones) would make it compute another model than the file describes,
 * silently. llama.cpp refuses such a file too ("wrong number of tensors").
 */
import { GGUFError, type ModelFile } from "../format/gguf.js";

/**
 * PowerInfer's activation predictors only choose which neurons to compute: a run that computes
 * every neuron, or finds the firing ones from the gates, gives the exact answer without them.
 */
const MAY_GO_UNREAD = /^blk\.\d+\.fc[12](\.\d+)?\.weight$/;

export function checkEveryTensorUsed(file: ModelFile, used: ReadonlySet<string>): void {
  const unused: string[] = [];
  for (const name of file.tensors.keys()) if (!used.has(name) && !MAY_GO_UNREAD.test(name)) unused.push(name);
  if (unused.length === 0) return;
  const shown = unused.slice(0, 8).map((n) => `"${n}"`);
  if (unused.length > shown.length) shown.push(`and ${unused.length - shown.length} more`);
  throw new GGUFError(
    file.path,
    `${unused.length === 1 ? "tensor" : "tensors"} ${shown.join(", ")} would be ignored by the engine's "${file.architecture}" architecture, which would then compute a different model than the file describes; refused`,
  );
}
