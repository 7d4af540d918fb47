/**
 * The FFN of a neuron store under a memory budget (offload/offloaded-ffn.ts does the work): a
 * prompt as one batch, every needed bundle read once; otherwise one token at a time, each seeing
 * only its own firing neurons. Waits for its reads from flash: `run` returns a promise.
 */
import type { OffloadedFFN } from "../offload/offloaded-ffn.js";
import type { ForwardStep } from "../step.js";
import type { PartContext } from "./context.js";
import type { FFNPart } from "./ffn.js";

export class OffloadedDenseFFN implements FFNPart {
  /** the layer's group in `off`'s numbering (a split store's memory numbers its own from 0) */
  private readonly layer: number;

  constructor(
    private readonly ctx: PartContext,
    layer: number,
    private readonly off: OffloadedFFN,
  ) {
    this.layer = layer - off.firstGroup;
  }

  async run(step: ForwardStep, out: number): Promise<void> {
    const { n } = step;
    const b = this.ctx.buf;
    const off = this.off;
    // (a model with an offloaded FFN counts its passes: step.offload is set)
    const pass = step.offload!;
    if (n > 1 && off.batches) return off.prefillBatch(pass, this.layer, b.xb, out, n, b.hg);
    const row = this.ctx.cfg.nEmbd * 4;
    // the predictor reads the residual row; the output goes to out's row
    for (let t = 0; t < n; t++) await off.decodeStep(pass, this.layer, b.xb + t * row, b.x + t * row, out + t * row);
  }
}
