/**
 * What every part of a block shares: the model's hyper-parameters, its buffers, the matrix runner,
 * and the small kernels between the matrix products (RMSNorm, residual add, bias, the FFN
 * activation, the KV cache's store), each one pool call. Made once the model's memory is laid out;
 * its views over the memory are taken then, after the last allocation. A model in several
 * memories (shards of whole layers, model.ts) has one context per shard, each with its own buffers.
 */
import { ACTIVATIONS } from "../../format/activations.js";
import type { Arena } from "../../runtime/arena.js";
import { f32Bits } from "../../runtime/f32-bits.js";
import type { ThreadPool } from "../../runtime/pool.js";
import type { Buffers } from "../buffers.js";
import type { ModelConfig } from "../config.js";
import type { KvCacheType, KvCacheTypes } from "../kv-cache.js";
import type { MatrixRunner } from "../matrix-runner.js";

export class PartContext {
  readonly f32: Float32Array;
  /** argument scratch for one kernel call at a time */
  readonly args = new Int32Array(16);
  readonly fn: Record<"rmsnorm" | "rope" | "attention" | "kvStore" | "ffnAct" | "ffnActCut" | "add" | "bias", number>;
  private readonly epsBits: number;
  private readonly actCode: number;

  constructor(
    readonly cfg: ModelConfig,
    readonly arena: Arena,
    readonly pool: ThreadPool,
    /** every matrix product of the forward pass runs on it */
    readonly mm: MatrixRunner,
    readonly buf: Buffers,
    readonly kvCache: KvCacheTypes,
    readonly contextSize: number,
    /** which of the pool's memories `arena` is: the kernels named here run over it */
    readonly shard = 0,
  ) {
    this.f32 = new Float32Array(arena.memory.buffer);
    this.fn = {
      rmsnorm: pool.fn("rmsnorm_rows", shard),
      rope: pool.fn("rope", shard),
      attention: pool.fn("attention", shard),
      kvStore: pool.fn("kv_store", shard),
      ffnAct: pool.fn("ffn_act", shard),
      ffnActCut: pool.fn("ffn_act_cut", shard),
      add: pool.fn("add_inplace", shard),
      bias: pool.fn("add_bias_rows", shard),
    };
    this.epsBits = f32Bits(cfg.normEps);
    this.actCode = ACTIVATIONS[cfg.activation].code;
  }

  /** n rows of y = rmsnorm(x rows) * w, rows `width` wide (default the residual stream's; y may be x). */
  rmsnorm(y: number, x: number, w: number, n: number, width = this.cfg.nEmbd): void {
    const a = this.args;
    a[0] = y;
    a[1] = x;
    a[2] = w;
    a[3] = width;
    a[4] = this.epsBits;
    this.pool.run(this.fn.rmsnorm, a, 5, n, 1, n * width * 4);
  }

  /** y[0..count) += x[0..count). */
  add(y: number, x: number, count: number): void {
    const a = this.args;
    a[0] = y;
    a[1] = x;
    this.pool.run(this.fn.add, a, 2, count, 64, count);
  }

  /** Each of n rows of y (width wide) += bias. */
  addBias(y: number, bias: number, width: number, n: number): void {
    const a = this.args;
    a[0] = y;
    a[1] = bias;
    a[2] = width;
    this.pool.run(this.fn.bias, a, 3, n, 1, n * width);
  }

  /** hg = act(hg) * hu over `count` values; with a threshold `cut` > 0, |act| at or below it counts as zero. */
  activate(count: number, cut: number): void {
    const a = this.args;
    a[0] = this.buf.hg;
    a[1] = this.buf.hu;
    a[2] = this.actCode;
    if (cut > 0) {
      a[3] = f32Bits(cut);
      this.pool.run(this.fn.ffnActCut, a, 4, count, 64, count * 16);
    } else this.pool.run(this.fn.ffnAct, a, 3, count, 64, count * 16);
  }

  /** count f32 values at src into the KV cache at dst as `type` (rounded to nearest even for f16). */
  storeKV(src: number, dst: number, type: KvCacheType, count: number): void {
    const a = this.args;
    a[0] = src;
    a[1] = dst;
    a[2] = type === "f16" ? 1 : 0;
    this.pool.run(this.fn.kvStore, a, 3, count, 1024, count * 4);
  }
}
