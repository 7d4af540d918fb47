/**
 * A mixture of experts in memory: each token routed to its experts (router.ts), then expert by
 * expert the tokens routed to it as one batch (gathered, their gate, up, down), each token's
 * output weighted and summed; the sum is added to the residual stream last.
 */
import type { MoeLayer } from "../arch/experts.js";
import type { ForwardStep } from "../step.js";
import { cutOf } from "../step.js";
import type { PartContext } from "./context.js";
import type { FFNPart } from "./ffn.js";
import type { Router } from "./router.js";

export class MoeFFN implements FFNPart {
  constructor(
    private readonly ctx: PartContext,
    private readonly layer: number,
    private readonly w: MoeLayer,
    private readonly router: Router,
  ) {}

  /** A router that reads the block's input routes here, before attention (smallthinker). */
  beforeAttention(step: ForwardStep): void {
    if (this.ctx.cfg.routerInput === "block") this.router.route(this.w.router, step, this.ctx.buf.x, this.w.routerBias);
  }

  run(step: ForwardStep, out: number): void {
    const { n, observer } = step;
    const ctx = this.ctx;
    const { nEmbd, nFF, nExpert } = ctx.cfg;
    const b = ctx.buf;
    const r = this.router;
    const cut = cutOf(step, this.layer);
    if (ctx.cfg.routerInput === "ffn") r.route(this.w.router, step, b.xb, this.w.routerBias);
    for (let e = 0; e < nExpert; e++) {
      const m = r.tokensOf(e, n);
      if (m === 0) continue;
      const E = this.w.experts[e];
      ctx.mm.setInput(b.moeIn, nEmbd);
      ctx.mm.run(E.gate, b.hg, m);
      ctx.mm.run(E.up, b.hu, m);
      if (E.gateBias) {
        ctx.addBias(b.hg, E.gateBias, nFF, m);
        ctx.addBias(b.hu, E.upBias, nFF, m);
      }
      if (observer) {
        const buf = ctx.arena.memory.buffer;
        observer({
          layer: this.layer,
          expert: e,
          n: m,
          tokens: r.tokens.subarray(0, m),
          residual: new Float32Array(buf, b.x, n * nEmbd),
          gate: new Float32Array(buf, b.hg, m * nFF),
          up: new Float32Array(buf, b.hu, m * nFF),
        });
      }
      ctx.activate(m * nFF, cut);
      ctx.mm.setInput(b.hg, nFF);
      ctx.mm.run(E.down, b.moeOut, m);
      if (E.downBias) ctx.addBias(b.moeOut, E.downBias, nEmbd, m);
      r.addWeighted(m);
    }
    r.finish(n, out);
  }
}
