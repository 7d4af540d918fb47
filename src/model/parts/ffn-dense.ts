/** The dense FFN: out += down(act(gate . xb) * up . xb), every neuron, all in memory. */
import type { ForwardStep } from "../step.js";
import { cutOf } from "../step.js";
import type { Matrix } from "../weight-loader.js";
import type { PartContext } from "./context.js";
import type { FFNPart } from "./ffn.js";

export interface DenseFFNWeights {
  gate: Matrix;
  up: Matrix;
  down: Matrix;
}

export class DenseFFN implements FFNPart {
  private readonly gateUp: Matrix[];
  private readonly gateUpOut: number[];

  constructor(
    private readonly ctx: PartContext,
    private readonly layer: number,
    private readonly w: DenseFFNWeights,
  ) {
    // gate and up read one input: one pool group
    this.gateUp = [w.gate, w.up];
    this.gateUpOut = [ctx.buf.hg, ctx.buf.hu];
  }

  run(step: ForwardStep, out: number): void {
    const { n, observer } = step;
    const ctx = this.ctx;
    const { nEmbd, nFF } = ctx.cfg;
    const b = ctx.buf;
    ctx.mm.setInput(b.xb, nEmbd);
    ctx.mm.runAll(this.gateUp, this.gateUpOut, n);
    if (observer) {
      const buf = ctx.arena.memory.buffer;
      observer({
        layer: this.layer,
        n,
        residual: new Float32Array(buf, b.x, n * nEmbd),
        gate: new Float32Array(buf, b.hg, n * nFF),
        up: new Float32Array(buf, b.hu, n * nFF),
      });
    }
    ctx.activate(n * nFF, cutOf(step, this.layer));
    ctx.mm.setInput(b.hg, nFF);
    ctx.mm.run(this.w.down, b.xb, n);
    ctx.add(out, b.xb, n * nEmbd);
  }
}
