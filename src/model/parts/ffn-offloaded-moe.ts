/**
 * A mixture whose experts are offloaded: the router stays in memory, each expert is a group of
 * bundles in the store, and each expert's tokens run through its group (a batch, or one by one).
 *
 * Decoding one token with read-ahead (predictor mode; OffloadedFFN says which):
 * - "expert": each routed expert's step reads ahead the token's next routed expert's picks
 *   (exact: its predictor on the same residual row);
 * - "layer": before the block's attention, this layer's router on the residual as it stands
 *   picks the likely experts, whose likely bundles are read while attention computes. Where the
 *   router reads the block's input (smallthinker), that is the routing itself: the experts are
 *   known before attention, not guessed.
 */
import type { OffloadedFFN } from "../offload/offloaded-ffn.js";
import type { ForwardStep } from "../step.js";
import type { Matrix } from "../weight-loader.js";
import type { PartContext } from "./context.js";
import type { FFNPart } from "./ffn.js";
import type { Router } from "./router.js";

export class OffloadedMoeFFN implements FFNPart {
  /** the experts (store groups) read ahead before attention */
  private readonly ahead: Int32Array;
  /** the group of the layer's expert 0 in `off`'s numbering (a split store's memory numbers its own from 0) */
  private readonly first: number;

  constructor(
    private readonly ctx: PartContext,
    private readonly layer: number,
    private readonly routerWeights: Matrix,
    /** the block's FFN norm, which the read-ahead's router applies itself */
    private readonly ffnNorm: number,
    private readonly router: Router,
    private readonly off: OffloadedFFN,
    /** the router's bias (nExpert f32), 0 when none */
    private readonly routerBias = 0,
    /** each expert's down bias (nEmbd f32), added to its output as the in-memory mixture adds it; null when none */
    private readonly downBias: readonly number[] | null = null,
  ) {
    this.ahead = new Int32Array(Math.max(1, ctx.cfg.nExpertUsed));
    this.first = layer * ctx.cfg.nExpert - off.firstGroup;
  }

  async run(step: ForwardStep, out: number): Promise<void> {
    const { n } = step;
    const ctx = this.ctx;
    const { nEmbd, nExpert } = ctx.cfg;
    const b = ctx.buf;
    const r = this.router;
    const off = this.off;
    const row = nEmbd * 4;
    // (a model with an offloaded FFN counts its passes: step.offload is set)
    const pass = step.offload!;
    if (ctx.cfg.routerInput === "ffn") r.route(this.routerWeights, step, b.xb, this.routerBias);
    const ahead = n === 1 && off.readsAheadExpert && !off.readsAheadAllRouted;
    if (n === 1 && off.readsAheadAllRouted) {
      // in the order the loop below computes them
      let count = 0;
      for (let e = r.nextRouted(-1); e >= 0; e = r.nextRouted(e)) this.ahead[count++] = this.first + e;
      off.readAheadGroups(pass, this.ahead, count, b.x, "exact");
    }
    for (let e = 0; e < nExpert; e++) {
      const m = r.tokensOf(e, n);
      if (m === 0) continue;
      const group = this.first + e;
      ctx.f32.fill(0, b.moeOut >>> 2, (b.moeOut >>> 2) + m * nEmbd);
      if (m > 1 && off.batches) await off.prefillBatch(pass, group, b.moeIn, b.moeOut, m, b.hg);
      else {
        const next = ahead ? r.nextRouted(e) : -1;
        for (let i = 0; i < m; i++)
          await off.decodeStep(
            pass,
            group,
            b.moeIn + i * row,
            b.x + r.tokens[i] * row,
            b.moeOut + i * row,
            next < 0 ? -1 : this.first + next,
          );
      }
      if (this.downBias) ctx.addBias(b.moeOut, this.downBias[e], nEmbd, m);
      r.addWeighted(m);
    }
    r.finish(n, out);
  }

  /**
   * Decoding one token: the experts this layer's router picks on the residual before attention
   * (the nExpertUsed largest logits), their likely bundles read while attention computes. Layer 0
   * reads nothing ahead, as the "layer" read-ahead was measured (docs/benchmarks-log.md,
   * "Mixture-of-experts read-ahead"): whether the embedding row alone routes well enough to pay
   * for its reads has not been measured.
   */
  beforeAttention(step: ForwardStep): void {
    const off = this.off;
    const ctx = this.ctx;
    const { nExpert, nExpertUsed } = ctx.cfg;
    const b = ctx.buf;
    const first = this.first;
    if (ctx.cfg.routerInput === "block") {
      // the real routing (the router reads the block's input): the routed experts' likely
      // bundles can be read while attention computes, layer 0's included
      this.router.route(this.routerWeights, step, b.x, this.routerBias);
      if (step.n !== 1 || !off.readsAheadLayer) return;
      for (let j = 0; j < nExpertUsed; j++) this.ahead[j] = first + this.router.ids[j];
      off.readAheadGroups(step.offload!, this.ahead, nExpertUsed, b.x, "routed");
      return;
    }
    if (step.n !== 1 || !off.readsAheadLayer || this.layer === 0) return;
    ctx.rmsnorm(b.xb, b.x, this.ffnNorm, 1);
    this.router.logits(this.routerWeights, 1, b.xb, this.routerBias);
    const logits = b.route >>> 2;
    const f32 = ctx.f32;
    const ahead = this.ahead;
    for (let j = 0; j < nExpertUsed; j++) {
      let best = -1;
      for (let e = 0; e < nExpert; e++) {
        let taken = false;
        for (let i = 0; i < j; i++) if (ahead[i] === first + e) taken = true;
        if (!taken && (best < 0 || f32[logits + e] > f32[logits + best])) best = e;
      }
      ahead[j] = first + best;
    }
    off.readAheadGroups(step.offload!, ahead, nExpertUsed, b.x, "likely");
  }
}
