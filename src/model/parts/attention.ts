/**
 * The attention part of a block: x += wo . attention(q, k, v) over the block's normed input (xb).
 * Its options are the architecture's, given once when the model loads; every block of every
 * architecture runs this one part.
 *
 * The new keys and values are computed in f32 in the FFN's gate and up rows (hg, hu), which the
 * FFN needs only after attention, then rounded into the KV cache in its element types.
 */
import type { RopePairing } from "../config.js";
import { kvElementBytes, kvRowBytes, type KvCacheType } from "../kv-cache.js";
import type { ForwardStep } from "../step.js";
import type { Matrix } from "../weight-loader.js";
import { f32Bits } from "../../runtime/f32-bits.js";
import type { PartContext } from "./context.js";

export interface AttentionWeights {
  wq: Matrix;
  wk: Matrix;
  wv: Matrix;
  wo: Matrix;
  /** biases of q, k and v (addresses of f32 vectors), 0 when the architecture has none */
  bq: number;
  bk: number;
  bv: number;
  /** per-head RMSNorm weights of q and k (headDim f32 each) applied before RoPE, 0 when none */
  qNorm: number;
  kNorm: number;
  /** RMSNorm weights of the output before it joins the residual stream (gemma3), 0 when none */
  postNorm?: number;
  /** one logit per head that joins the softmax's denominator (attention sinks), 0 when none */
  sinks?: number;
  /** the output projection's bias (gpt-oss), 0 when none */
  bo?: number;
}

/** How the layer attends: chosen when the model loads, from the architecture and the layer. */
export interface AttentionOptions {
  /** which pairs of a head's values RoPE rotates together */
  ropePairing: RopePairing;
  /** the layer's RoPE table (ropeLayout), 0: no RoPE */
  rope: number;
  /** a token sees this many positions up to its own, 0: all of them */
  window: number;
  /** the scale of q.k */
  kqScale: number;
  /**
   * the layer's rows of the KV cache: the first (rows of the layers before it) and how many
   * (the context, or fewer for a sliding window: then a ring, position p in row p % rows)
   */
  kvFirstRow: number;
  kvRows: number;
}

export class Attention {
  private readonly qkv: Matrix[];
  private readonly qkvOut: number[];
  private readonly neox: number;
  private readonly kRow: number;
  private readonly vRow: number;
  private readonly kqScaleBits: number;
  /** the layer's keys and values, and the ring's size (0: one row per position of the context) */
  private readonly kCache: number;
  private readonly vCache: number;
  private readonly ring: number;

  /** a sliding-window layer's ring: its rows (0: none) and window */
  get ringRows(): number {
    return this.ring;
  }
  get window(): number {
    return this.opts.window;
  }

  constructor(
    private readonly ctx: PartContext,
    private readonly w: AttentionWeights,
    private readonly opts: AttentionOptions,
  ) {
    const b = ctx.buf;
    // q, k and v read one input: one pool group
    this.qkv = [w.wq, w.wk, w.wv];
    this.qkvOut = [b.q, b.hg, b.hu];
    this.neox = opts.ropePairing === "neox" ? 1 : 0;
    this.kqScaleBits = f32Bits(opts.kqScale);
    this.kRow = kvRowBytes(ctx.cfg, ctx.kvCache.k);
    this.vRow = kvRowBytes(ctx.cfg, ctx.kvCache.v);
    this.kCache = b.kCache + opts.kvFirstRow * this.kRow;
    this.vCache = b.vCache + opts.kvFirstRow * this.vRow;
    this.ring = opts.kvRows < ctx.contextSize ? opts.kvRows : 0;
  }

  /** The n new rows (keys or values, f32 at src) of positions pos0.. into the layer's cache, around the ring. */
  private store(src: number, cache: number, rowBytes: number, type: KvCacheType, pos0: number, n: number): void {
    const kvDim = rowBytes / kvElementBytes(type);
    const rows = this.ring || this.ctx.contextSize;
    const first = pos0 % rows;
    const before = Math.min(n, rows - first);
    this.ctx.storeKV(src, cache + first * rowBytes, type, before * kvDim);
    if (before < n) this.ctx.storeKV(src + before * kvDim * 4, cache, type, (n - before) * kvDim);
  }

  /** x += attention(xb) for the step's n tokens at positions pos0.. (their keys and values into the cache). */
  run(step: ForwardStep): void {
    const { n, pos0 } = step;
    const ctx = this.ctx;
    const { nEmbd, nHead, nHeadKV, headDim, nRot } = ctx.cfg;
    const qDim = nHead * headDim;
    const kvDim = nHeadKV * headDim;
    const b = ctx.buf;
    const pool = ctx.pool;
    const a = ctx.args;
    const w = this.w;
    const { kCache, vCache } = this;
    const kNew = this.qkvOut[1];
    const vNew = this.qkvOut[2];

    ctx.mm.setInput(b.xb, nEmbd);
    ctx.mm.runAll(this.qkv, this.qkvOut, n);
    if (w.bq) {
      ctx.addBias(b.q, w.bq, qDim, n);
      ctx.addBias(kNew, w.bk, kvDim, n);
      ctx.addBias(vNew, w.bv, kvDim, n);
    }
    if (w.qNorm) {
      ctx.rmsnorm(b.q, b.q, w.qNorm, n * nHead, headDim);
      ctx.rmsnorm(kNew, kNew, w.kNorm, n * nHeadKV, headDim);
    }
    if (this.opts.rope) {
      a[0] = b.q;
      a[1] = b.pos;
      a[2] = this.opts.rope;
      a[3] = nHead;
      a[4] = headDim;
      a[5] = nRot;
      a[6] = this.neox;
      pool.run(ctx.fn.rope, a, 7, n, 1, n * qDim * 4);
      a[0] = kNew;
      a[3] = nHeadKV;
      pool.run(ctx.fn.rope, a, 7, n, 1, n * kvDim * 4);
    }
    this.store(kNew, kCache, this.kRow, ctx.kvCache.k, pos0, n);
    this.store(vNew, vCache, this.vRow, ctx.kvCache.v, pos0, n);
    a[0] = b.q;
    a[1] = kCache;
    a[2] = vCache;
    a[3] = b.att;
    a[4] = b.scores;
    a[5] = n;
    a[6] = pos0;
    a[7] = nHead;
    a[8] = nHeadKV;
    a[9] = headDim;
    a[10] = ctx.contextSize;
    a[11] = (ctx.kvCache.k === "f16" ? 1 : 0) | (ctx.kvCache.v === "f16" ? 2 : 0);
    a[12] = this.kqScaleBits;
    a[13] = this.opts.window;
    a[14] = this.ring;
    a[15] = w.sinks ?? 0;
    const seen = this.opts.window > 0 ? Math.min(pos0 + n, this.opts.window) : pos0 + n;
    pool.run(ctx.fn.attention, a, 16, nHead, 1, 2 * n * seen * qDim);
    ctx.mm.setInput(b.att, qDim);
    ctx.mm.run(w.wo, b.xb, n);
    if (w.bo) ctx.addBias(b.xb, w.bo, nEmbd, n);
    if (w.postNorm) ctx.rmsnorm(b.xb, b.xb, w.postNorm, n);
    ctx.add(b.x, b.xb, n * nEmbd);
  }
}
