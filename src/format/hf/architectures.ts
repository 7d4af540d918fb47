/**
 * The Hugging Face model classes `convert` reads (config.json's `architectures[0]`), each with
 * the plan that maps it to llama.cpp's GGUF layout.
 */
import { HFConvertError, type HFConfig } from "./hf-config.js";
import { LLAMA, llamaLayoutPlan, MIXTRAL, QWEN2, QWEN3, QWEN3MOE } from "./arch-llama.js";
import { gemma3Plan } from "./arch-gemma3.js";
import { gptOssPlan } from "./arch-gpt-oss.js";
import { phi3Plan } from "./arch-phi3.js";
import { smallthinkerPlan } from "./arch-smallthinker.js";
import type { ConversionPlan } from "./plan.js";
import { tokenizerCount, type HFTokenizerFiles } from "./tokenizer-files.js";
import type { SafetensorsCheckpoint } from "./safetensors.js";

type PlanFn = (ckpt: SafetensorsCheckpoint, cfg: HFConfig, tok: HFTokenizerFiles) => ConversionPlan;

const HF_ARCHITECTURES: ReadonlyMap<string, PlanFn> = new Map<string, PlanFn>([
  // Mistral and Mixtral are llama to llama.cpp's converter (general.architecture "llama").
  ["LlamaForCausalLM", (c, f) => llamaLayoutPlan(c, f, LLAMA)],
  ["MistralForCausalLM", (c, f) => llamaLayoutPlan(c, f, LLAMA)],
  ["MixtralForCausalLM", (c, f) => llamaLayoutPlan(c, f, MIXTRAL)],
  ["Qwen2ForCausalLM", (c, f) => llamaLayoutPlan(c, f, QWEN2)],
  ["Qwen3ForCausalLM", (c, f) => llamaLayoutPlan(c, f, QWEN3)],
  ["Qwen3MoeForCausalLM", (c, f) => llamaLayoutPlan(c, f, QWEN3MOE)],
  ["Phi3ForCausalLM", phi3Plan],
  ["Gemma3ForCausalLM", (c, f, t) => gemma3Plan(c, f, tokenizerCount(t))],
  ["SmallThinkerForCausalLM", smallthinkerPlan],
  ["GptOssForCausalLM", gptOssPlan],
]);

export const SUPPORTED_HF_ARCHITECTURES: readonly string[] = [...HF_ARCHITECTURES.keys()];

export function planConversion(ckpt: SafetensorsCheckpoint, cfg: HFConfig, tok: HFTokenizerFiles): ConversionPlan {
  const name = cfg.architecture();
  const plan = HF_ARCHITECTURES.get(name);
  if (!plan)
    throw new HFConvertError(
      `${cfg.path}: "architectures" = "${name}" is not a model class convert knows (${SUPPORTED_HF_ARCHITECTURES.join(", ")})`,
    );
  return plan(ckpt, cfg, tok);
}
