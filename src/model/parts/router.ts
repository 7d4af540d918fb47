/**
 * A mixture of experts' routing, as llama.cpp routes Mixtral: softmax over the router's logits,
 * the nExpertUsed most probable experts, their probabilities renormalized to sum to 1; the FFN's
 * output is the weighted sum of those experts' outputs. One Router serves every layer: its
 * arrays hold the batch being routed now (laid out once).
 */
import type { ExpertGating } from "../config.js";
import type { ForwardStep } from "../step.js";
import type { Matrix } from "../weight-loader.js";
import type { PartContext } from "./context.js";

/**
 * Route n tokens: logits (n x nExpert, f32) -> for each token the k most probable experts
 * (highest first; the lower index on a tie) into ids (n x k) and their renormalized weights into
 * weights (n x k). Probabilities by softmax over the experts (in double precision) or each
 * expert's sigmoid, rounded to f32 as ggml keeps them; "softmax_weight" (gpt-oss) chooses by the
 * logits themselves and weights the k chosen by a softmax over their logits alone. Returns the
 * closest call: the smallest gap between a token's k-th expert's probability (softmax_weight: its
 * logit) and the best one not chosen (Infinity if k covers every expert).
 */
/** p(a) - p(b) under a softmax over the nExpert logits at logits[row..] (a >= b: two of them). */
function softmaxGap(logits: Float32Array, row: number, nExpert: number, a: number, b: number): number {
  let sum = 0;
  for (let e = 0; e < nExpert; e++) sum += Math.exp(logits[row + e] - a);
  return (1 - Math.exp(b - a)) / sum;
}

/** An expert already chosen (probabilities and logits are finite). */
const TAKEN = -Infinity;

export function routeTokens(
  logits: Float32Array,
  n: number,
  nExpert: number,
  k: number,
  ids: Int32Array,
  weights: Float32Array,
  probs: Float64Array,
  gating: ExpertGating = "softmax",
  /** where token 0's logits start in `logits` (the model's memory, viewed whole: no view made per call) */
  from = 0,
): number {
  let margin = Infinity;
  for (let t = 0; t < n; t++) {
    const row = from + t * nExpert;
    if (gating === "sigmoid") {
      for (let e = 0; e < nExpert; e++) probs[e] = Math.fround(1 / (1 + Math.exp(-logits[row + e])));
    } else if (gating === "softmax_weight") {
      for (let e = 0; e < nExpert; e++) probs[e] = logits[row + e];
    } else {
      let max = -Infinity;
      for (let e = 0; e < nExpert; e++) max = Math.max(max, logits[row + e]);
      let sum = 0;
      for (let e = 0; e < nExpert; e++) sum += probs[e] = Math.exp(logits[row + e] - max);
      for (let e = 0; e < nExpert; e++) probs[e] = Math.fround(probs[e] / sum);
    }
    let chosen = 0;
    for (let j = 0; j < k; j++) {
      let best = -1;
      for (let e = 0; e < nExpert; e++) if (probs[e] !== TAKEN && (best < 0 || probs[e] > probs[best])) best = e;
      ids[t * k + j] = best;
      weights[t * k + j] = probs[best];
      chosen += probs[best];
      probs[best] = TAKEN;
    }
    let left = -Infinity;
    for (let e = 0; e < nExpert; e++) if (probs[e] !== TAKEN) left = Math.max(left, probs[e]);
    if (left > -Infinity) {
      const last = weights[t * k + k - 1];
      // softmax_weight chose by logits: the gap as probabilities of a softmax over every expert,
      // the closeness the other gatings report
      margin = Math.min(
        margin,
        gating === "softmax_weight" ? softmaxGap(logits, row, nExpert, last, left) : last - left,
      );
    }
    if (gating === "softmax_weight") {
      // the chosen logits' softmax: the first is the largest
      const top = weights[t * k];
      let sum = 0;
      for (let j = 0; j < k; j++) sum += weights[t * k + j] = Math.exp(weights[t * k + j] - top);
      for (let j = 0; j < k; j++) weights[t * k + j] = Math.fround(weights[t * k + j] / sum);
    } else for (let j = 0; j < k; j++) weights[t * k + j] = Math.fround(weights[t * k + j] / chosen);
  }
  return margin;
}

export class Router {
  /** per token of the batch, its experts (best first) and their weights */
  readonly ids: Int32Array;
  readonly weights: Float32Array;
  private readonly probs: Float64Array;
  /** the tokens routed to the expert being computed, and their weights */
  readonly tokens: Int32Array;
  private readonly tokenWeights: Float32Array;

  constructor(
    private readonly ctx: PartContext,
    batchSize: number,
  ) {
    const k = ctx.cfg.nExpertUsed;
    this.ids = new Int32Array(batchSize * k);
    this.weights = new Float32Array(batchSize * k);
    this.probs = new Float64Array(ctx.cfg.nExpert);
    this.tokens = new Int32Array(batchSize);
    this.tokenWeights = new Float32Array(batchSize);
  }

  /**
   * The router's logits of the n rows at `input` (default the normed rows in xb), into the route
   * buffer, plus `bias` (an address of nExpert f32; 0: none).
   */
  logits(router: Matrix, n: number, input = this.ctx.buf.xb, bias = 0): void {
    const ctx = this.ctx;
    ctx.mm.setInput(input, ctx.cfg.nEmbd);
    ctx.mm.run(router, ctx.buf.route, n);
    if (bias) ctx.addBias(ctx.buf.route, bias, ctx.cfg.nExpert, n);
  }

  /**
   * Route the n rows at `input` (the FFN's normed rows in xb, or the block's input rows in x
   * where the router reads them before attention) into ids and weights, and clear the layer's
   * output sum.
   */
  route(router: Matrix, step: ForwardStep, input = this.ctx.buf.xb, bias = 0): void {
    const { nEmbd, nExpert, nExpertUsed, expertGating } = this.ctx.cfg;
    const { n } = step;
    const b = this.ctx.buf;
    const f32 = this.ctx.f32;
    this.logits(router, n, input, bias);
    const margin = routeTokens(
      f32,
      n,
      nExpert,
      nExpertUsed,
      this.ids,
      this.weights,
      this.probs,
      expertGating,
      b.route >>> 2,
    );
    step.routed += n * nExpertUsed;
    if (margin < step.routeMargin) step.routeMargin = margin;
    f32.fill(0, b.moeAcc >>> 2, (b.moeAcc >>> 2) + n * nEmbd);
  }

  /** The tokens routed to expert e (into `tokens`), their xb rows gathered into moeIn; returns how many. */
  tokensOf(e: number, n: number): number {
    const { nEmbd, nExpertUsed: k } = this.ctx.cfg;
    const b = this.ctx.buf;
    const f32 = this.ctx.f32;
    let m = 0;
    for (let t = 0; t < n; t++) {
      for (let j = 0; j < k; j++) {
        if (this.ids[t * k + j] !== e) continue;
        const from = (b.xb >>> 2) + t * nEmbd;
        f32.copyWithin((b.moeIn >>> 2) + m * nEmbd, from, from + nEmbd);
        this.tokens[m] = t;
        this.tokenWeights[m++] = this.weights[t * k + j];
      }
    }
    return m;
  }

  /** moeAcc rows of the expert's m tokens += their routing weight * its output rows (moeOut). */
  addWeighted(m: number): void {
    const nEmbd = this.ctx.cfg.nEmbd;
    const b = this.ctx.buf;
    const f32 = this.ctx.f32;
    for (let i = 0; i < m; i++) {
      const w = this.tokenWeights[i];
      const acc = (b.moeAcc >>> 2) + this.tokens[i] * nEmbd;
      const out = (b.moeOut >>> 2) + i * nEmbd;
      for (let c = 0; c < nEmbd; c++) f32[acc + c] += w * f32[out + c];
    }
  }

  /** out (the residual stream, or the block's post-norm buffer) += the layer's weighted sum of its experts' outputs. */
  finish(n: number, out: number): void {
    this.ctx.add(out, this.ctx.buf.moeAcc, n * this.ctx.cfg.nEmbd);
  }

  /** Decoding one token: the expert after e (in the order experts are computed) it is routed to, or -1. */
  nextRouted(e: number): number {
    const k = this.ctx.cfg.nExpertUsed;
    let next = -1;
    for (let j = 0; j < k; j++) if (this.ids[j] > e && (next < 0 || this.ids[j] < next)) next = this.ids[j];
    return next;
  }
}
