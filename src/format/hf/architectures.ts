/**
 * The Hugging Face model classes `convert` reads (config.json's `architectures[0]`), each with
 * the plan that maps it to llama.cpp's GGUF layout.
 */
import { HFConvertError, type HFConfig } from "./hf-config.js";
import { LLAMA, llamaLayoutPlan, MIXTRAL, QWEN2, QWEN3, QWEN3MOE } from "./arch-llama.js";
import { gemma3Plan } from "./arch-gemma3.js";
import { phi3Plan } from "./arch-phi3.js";
import { smallthinkerPlan } from "./arch-smallthinker.js";
import type { ConversionPlan } from "./plan.js";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import type { SafetensorsCheckpoint } from "./safetensors.js";

type PlanFn = (ckpt: SafetensorsCheckpoint, cfg: HFConfig) => ConversionPlan;

/**
 * The tokenizer's real tokens as llama.cpp's converter counts them for Gemma 3 (tokenizer.json's
 * model vocabulary plus its added tokens), which bounds the embedding rows it keeps.
 */
function tokenizerCount(dir: string): number {
  const path = join(dir, "tokenizer.json");
  if (!existsSync(path)) throw new HFConvertError(`${dir}: no tokenizer.json`);
  let j: { model?: { vocab?: unknown }; added_tokens?: unknown };
  try {
    j = JSON.parse(readFileSync(path, "utf8")) as typeof j;
  } catch (e) {
    throw new HFConvertError(`${path}: ${(e as Error).message}`);
  }
  const vocab = j.model?.vocab;
  const n = Array.isArray(vocab) ? vocab.length : typeof vocab === "object" && vocab ? Object.keys(vocab).length : -1;
  if (n < 0) throw new HFConvertError(`${path}: "model.vocab" is missing`);
  return n + (Array.isArray(j.added_tokens) ? j.added_tokens.length : 0);
}

const HF_ARCHITECTURES: ReadonlyMap<string, PlanFn> = new Map<string, PlanFn>([
  // Mistral and Mixtral are llama to llama.cpp's converter (general.architecture "llama").
  ["LlamaForCausalLM", (c, f) => llamaLayoutPlan(c, f, LLAMA)],
  ["MistralForCausalLM", (c, f) => llamaLayoutPlan(c, f, LLAMA)],
  ["MixtralForCausalLM", (c, f) => llamaLayoutPlan(c, f, MIXTRAL)],
  ["Qwen2ForCausalLM", (c, f) => llamaLayoutPlan(c, f, QWEN2)],
  ["Qwen3ForCausalLM", (c, f) => llamaLayoutPlan(c, f, QWEN3)],
  ["Qwen3MoeForCausalLM", (c, f) => llamaLayoutPlan(c, f, QWEN3MOE)],
  ["Phi3ForCausalLM", phi3Plan],
  ["Gemma3ForCausalLM", (c, f) => gemma3Plan(c, f, tokenizerCount(c.dir))],
  ["SmallThinkerForCausalLM", smallthinkerPlan],
]);

export const SUPPORTED_HF_ARCHITECTURES: readonly string[] = [...HF_ARCHITECTURES.keys()];

export function planConversion(ckpt: SafetensorsCheckpoint, cfg: HFConfig): ConversionPlan {
  const name = cfg.architecture();
  if (name === "GptOssForCausalLM")
    throw new HFConvertError(
      `${cfg.path}: "architectures" = "${name}": gpt-oss checkpoints keep their experts as MXFP4 blocks and scales, which convert does not repack yet`,
    );
  const plan = HF_ARCHITECTURES.get(name);
  if (!plan)
    throw new HFConvertError(
      `${cfg.path}: "architectures" = "${name}" is not a model class convert knows (${SUPPORTED_HF_ARCHITECTURES.join(", ")})`,
    );
  return plan(ckpt, cfg);
}
