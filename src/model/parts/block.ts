/**
 * A block: its norms, an attention part and an FFN part. An architecture's file (arch/) says
 * where each block's weights are in the file (LayerWeights); `makeBlock` picks the parts for them
 * once the model's memory is laid out.
 */
import type { MoeLayer } from "../arch/experts.js";
import type { OffloadedFFN } from "../offload/offloaded-ffn.js";
import type { Matrix } from "../weight-loader.js";
import { Attention, type AttentionOptions, type AttentionWeights } from "./attention.js";
import type { PartContext } from "./context.js";
import type { FFNPart } from "./ffn.js";
import { DenseFFN, type DenseFFNWeights } from "./ffn-dense.js";
import { MoeFFN } from "./ffn-moe.js";
import { OffloadedDenseFFN } from "./ffn-offloaded.js";
import { OffloadedMoeFFN } from "./ffn-offloaded-moe.js";
import type { Router } from "./router.js";

/** Where an FFN's weights are: in memory (dense, or a mixture of experts), or in a neuron store. */
export type FFNWeights =
  | ({ kind: "dense" } & DenseFFNWeights)
  | { kind: "moe"; moe: MoeLayer }
  /** every neuron in the store: nothing in memory */
  | { kind: "offloaded" }
  /**
   * the experts in the store, the router in memory; where the architecture has them (gpt-oss), the
   * router's bias and each expert's down bias (addresses of f32 vectors)
   */
  | { kind: "offloaded-moe"; router: Matrix; routerBias?: number; downBias?: number[] };

/** One layer's weights in memory (norms and biases as addresses of f32 vectors). */
export interface LayerWeights {
  attnNorm: number;
  attention: AttentionWeights;
  ffnNorm: number;
  ffn: FFNWeights;
  /** RMSNorm weights of the FFN's output before it joins the residual stream (gemma3), 0 when none */
  ffnPostNorm?: number;
}

export interface Block {
  /** the shard the block's weights, KV cache and buffers are in (its parts run there) */
  readonly ctx: PartContext;
  readonly attnNorm: number;
  readonly attention: Attention;
  readonly ffnNorm: number;
  readonly ffn: FFNPart;
  /** 0: the FFN adds to the residual stream directly */
  readonly ffnPostNorm: number;
}

/** What the parts of every block share beyond the context. */
export interface SharedParts {
  /** per layer */
  attention: readonly AttentionOptions[];
  /** a mixture's routing arrays (null: a dense model) */
  router: Router | null;
  /** a neuron store's FFN (null: every FFN in memory) */
  offloaded: OffloadedFFN | null;
}

export function makeBlock(ctx: PartContext, l: number, w: LayerWeights, shared: SharedParts): Block {
  return {
    ctx,
    attnNorm: w.attnNorm,
    attention: new Attention(ctx, w.attention, shared.attention[l]),
    ffnNorm: w.ffnNorm,
    ffn: ffnPart(ctx, l, w, shared),
    ffnPostNorm: w.ffnPostNorm ?? 0,
  };
}

function ffnPart(ctx: PartContext, l: number, w: LayerWeights, shared: SharedParts): FFNPart {
  const f = w.ffn;
  const need = <T>(part: T | null, what: string): T => {
    if (!part) throw new Error(`layer ${l}: a ${f.kind} FFN needs ${what}`);
    return part;
  };
  switch (f.kind) {
    case "dense":
      return new DenseFFN(ctx, l, f);
    case "moe":
      return new MoeFFN(ctx, l, f.moe, need(shared.router, "a router"));
    case "offloaded":
      return new OffloadedDenseFFN(ctx, l, need(shared.offloaded, "a neuron store"));
    case "offloaded-moe":
      return new OffloadedMoeFFN(
        ctx,
        l,
        f.router,
        w.ffnNorm,
        need(shared.router, "a router"),
        need(shared.offloaded, "a neuron store"),
        f.routerBias ?? 0,
        f.downBias ?? null,
      );
  }
}
