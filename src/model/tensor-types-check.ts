/**
 * Tensors whose values the loader reads through dequantizeRow (vectors such as norms and
 * biases, the embedding table, a transposed Down) must be of a type it can read. A file whose
 * norm says I64 otherwise fails deep in the loader (or, for the embedding table, at the first
 * token) with "cannot dequantize I64", naming neither the tensor nor the file.
 */
import { GGUFError, type ModelFile } from "../format/gguf.js";
import { typeName, typeTraits } from "../format/ggml-types.js";
import { dequantizeRow } from "../format/quant.js";

const readable = new Map<number, boolean>();

/** The tensors LlamaModel reads value by value (WeightLoader.vector, raw, transposedMatrix). */
const BY_VALUE =
  /^(token_embd\.weight|output_norm\.weight|blk\.\d+\.(attn_norm\.weight|ffn_norm\.weight|attn_[qk]_norm\.weight|post_attention_norm\.weight|post_ffw_norm\.weight|attn_[qkv]\.bias|ffn_down_t\.weight|attn_output\.bias|attn_sinks\.weight|ffn_gate_inp\.bias|ffn_(gate|up|down)_exps\.bias))$/;

/** Whether dequantizeRow reads `type` (found by asking it, once per type). */
export function dequantizable(type: number): boolean {
  let ok = readable.get(type);
  if (ok === undefined) {
    const tr = typeTraits(type);
    try {
      if (!tr) throw new Error("unknown type");
      dequantizeRow(type, new Uint8Array(tr.typeSize), tr.blockSize, new Float32Array(tr.blockSize));
      ok = true;
    } catch {
      ok = false;
    }
    readable.set(type, ok);
  }
  return ok;
}

/** Throws a GGUFError naming the first tensor read by value whose type cannot be read. */
export function checkValueTensorTypes(file: ModelFile): void {
  for (const t of file.tensors.values()) {
    const byValue = BY_VALUE.test(t.name);
    if (byValue && !dequantizable(t.type))
      throw new GGUFError(
        file.path,
        `tensor "${t.name}" has type ${typeName(t.type)}, which this engine cannot read values of (the loader reads its values, not through a matrix kernel)`,
      );
  }
}
