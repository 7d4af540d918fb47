/**
 * The forward pass: the one layer loop every model runs, in memory or from flash.
 *
 *   for each block:  x += attention(norm(x))     (gemma3: x += postnorm(attention(norm(x))))
 *                    x += ffn(norm(x))           (awaited where the FFN part reads from flash;
 *                                                 gemma3: x += postnorm(ffn(norm(x))))
 *   logits = output . norm(x of the last token)   (soft-capped where the model says: gemma3)
 *
 * An FFN part that waits for reads returns a promise; the loop then continues after it resolves.
 * A part in memory returns nothing, so a model in memory runs the loop straight through, with no
 * promise made (forward() stays synchronous).
 *
 * A model in several memories (shards.ts) runs each block in its own shard's context; where the
 * shard changes between two blocks the residual rows are copied across (nEmbd floats a token).
 */
import type { Block } from "./parts/block.js";
import type { PartContext } from "./parts/context.js";
import type { ForwardStep } from "./step.js";
import type { Matrix } from "./weight-loader.js";

/**
 * Run blocks[from..] over the step's rows of x (in blocks[from]'s shard, or the one before it's);
 * a promise where a block waits for reads.
 */
export function runBlocks(blocks: readonly Block[], step: ForwardStep, from = 0): void | Promise<void> {
  const tr = step.tracer;
  for (let l = from; l < blocks.length; l++) {
    const B = blocks[l];
    const ctx = B.ctx;
    const b = ctx.buf;
    if (l > 0 && blocks[l - 1].ctx !== ctx) carryResidual(blocks[l - 1].ctx, ctx, step.n);
    const t0 = tr ? tr.now() : 0;
    B.ffn.beforeAttention?.(step);
    const ta = tr ? tr.now() : 0;
    ctx.rmsnorm(b.xb, b.x, B.attnNorm, step.n);
    B.attention.run(step);
    const tf = tr ? tr.now() : 0;
    if (tr) tr.span("attention", "attention", ta, undefined, tf);
    ctx.rmsnorm(b.xb, b.x, B.ffnNorm, step.n);
    const out = B.ffnPostNorm ? b.ffnOut : b.x;
    if (B.ffnPostNorm) ctx.f32.fill(0, b.ffnOut >>> 2, (b.ffnOut >>> 2) + step.n * ctx.cfg.nEmbd);
    const reading = B.ffn.run(step, out);
    if (reading)
      return reading.then(() => {
        endLayer(ctx, B, step, l, t0, tf);
        return runBlocks(blocks, step, l + 1);
      });
    endLayer(ctx, B, step, l, t0, tf);
  }
}

/** After the FFN: its output normed into the residual stream where the block says so. */
function endLayer(ctx: PartContext, B: Block, step: ForwardStep, l: number, t0: number, tf: number): void {
  if (B.ffnPostNorm) {
    const b = ctx.buf;
    ctx.rmsnorm(b.ffnOut, b.ffnOut, B.ffnPostNorm, step.n);
    ctx.add(b.x, b.ffnOut, step.n * ctx.cfg.nEmbd);
  }
  const tr = step.tracer;
  if (!tr) return;
  tr.span("ffn", "ffn", tf);
  tr.span(`layer ${l}`, "layer", t0);
}

/**
 * The residual rows of n tokens from one shard's memory into another's: element by element, since
 * no kernel sees two memories and a typed-array copy would allocate its views.
 */
export function carryResidual(from: PartContext, to: PartContext, n: number): void {
  const src = from.f32;
  const dst = to.f32;
  const count = n * from.cfg.nEmbd;
  for (let i = 0, s = from.buf.x >>> 2, d = to.buf.x >>> 2; i < count; i++) dst[d + i] = src[s + i];
}

/** The final norm and the output matrix for row t of the batch: the logits into the logits buffer. */
export function outputLogits(ctx: PartContext, outputNorm: number, output: Matrix, t: number): void {
  const b = ctx.buf;
  const nEmbd = ctx.cfg.nEmbd;
  ctx.rmsnorm(b.xb, b.x + t * nEmbd * 4, outputNorm, 1);
  ctx.mm.setInput(b.xb, nEmbd);
  ctx.mm.run(output, b.logits, 1);
  const cap = ctx.cfg.logitSoftcap;
  if (cap > 0) {
    // as ggml: times the f32 reciprocal, tanh, times the cap, each rounded to f32
    const inv = Math.fround(1 / cap);
    const f32 = ctx.f32;
    for (let i = b.logits >>> 2, end = i + ctx.cfg.nVocab; i < end; i++)
      f32[i] = Math.fround(Math.fround(Math.tanh(Math.fround(f32[i] * inv))) * cap);
  }
}
