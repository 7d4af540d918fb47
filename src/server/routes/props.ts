/**
 * GET /props, llama-server's description of what it serves: the model and its file, the
 * context, the build, the default generation settings (what a request that sets nothing gets),
 * the chat template, and for a neuron store how its FFN runs from flash.
 */
import { SAMPLER_DEFAULTS } from "../../generate/sampler.js";
import { buildInfo } from "../build-info.js";
import type { Route } from "./route.js";

export const propsRoute: Route = {
  method: "GET",
  handle(ctx) {
    const d = { ...SAMPLER_DEFAULTS, maxTokens: -1, ...definedOnly(ctx.defaults ?? {}) };
    const model = ctx.model;
    const layout = model.offloadLayout;
    return {
      json: {
        model: ctx.modelName,
        model_alias: ctx.modelName,
        model_path: ctx.modelPath ?? null,
        n_ctx: model.contextSize,
        total_slots: 1,
        build_info: buildInfo(),
        default_generation_settings: {
          n_ctx: model.contextSize,
          model: ctx.modelName,
          params: {
            n_predict: d.maxTokens,
            temperature: d.temperature,
            top_k: d.topK,
            top_p: d.topP,
            min_p: d.minP,
            repeat_penalty: d.repeatPenalty,
            repeat_last_n: d.repeatLastN,
            frequency_penalty: d.frequencyPenalty,
            presence_penalty: d.presencePenalty,
            seed: d.seed ?? -1,
            ignore_eos: d.ignoreEos ?? false,
            stop: d.stop ?? [],
          },
        },
        chat_template: ctx.template?.source ?? null,
        modalities: { vision: false, audio: false },
        architecture: model.config?.architecture ?? null,
        offload: layout
          ? {
              sparsity: model.offloadMode,
              memory_budget: layout.budget ?? null,
              neuron_cache_bytes: layout.cacheBytes,
              hot_neurons_per_layer: layout.hotPerLayer,
              gate_rows_in_memory: layout.residentGates,
            }
          : null,
      },
    };
  },
};

function definedOnly<T extends object>(o: T): Partial<T> {
  const out: Partial<T> = {};
  for (const [k, v] of Object.entries(o)) if (v !== undefined) (out as Record<string, unknown>)[k] = v;
  return out;
}
