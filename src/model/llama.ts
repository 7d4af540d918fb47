/**
 * The llama-family transformer (llama, mistral, qwen2, bamboo; PowerInfer "PWRI" files run dense),
 * one forward pass over a batch of tokens. Prompt prefill runs the whole batch through each
 * matrix as one GEMM; decode is the same code with a batch of one (matvec kernels).
 *
 * Everything lives in one wasm memory laid out at load: weights, the KV cache ([layer][position]
 * [kvDim] f32) and the activation buffers for a batch of up to `batchSize` tokens. forward()
 * allocates nothing.
 */
import { GGUFFile } from "../format/gguf.js";
import { dequantizeRow } from "../format/quant.js";
import { tensorBytes } from "../format/ggml-types.js";
import { Arena } from "../runtime/arena.js";
import { ThreadPool } from "../runtime/pool.js";
import { activationBytes, prepareKernel, type ActivationFormat } from "../runtime/weights.js";
import { readConfig, type ModelConfig } from "./config.js";
import { ropeTable } from "./rope.js";
import { WeightLoader, type Matrix } from "./weights.js";
import type { GGUFTensorInfo } from "../format/gguf.js";

export interface LoadOptions {
  /** threads for compute, including the caller (default: all cores) */
  threads?: number;
  /** KV cache length in tokens (default: the training context, capped to what fits) */
  contextSize?: number;
  /** most tokens per forward call (prompt chunks); default 256 */
  batchSize?: number;
  onProgress?: (loadedBytes: number, totalBytes: number) => void;
}

interface Layer {
  attnNorm: number;
  wq: Matrix;
  wk: Matrix;
  wv: Matrix;
  wo: Matrix;
  bq: number;
  bk: number;
  bv: number;
  ffnNorm: number;
  gate: Matrix;
  up: Matrix;
  down: Matrix;
}

const ACT_CODE = { silu: 0, relu: 1, drelu: 2, gelu: 3 } as const;
const f32Bits = (v: number) => new Int32Array(new Float32Array([v]).buffer)[0];

export class LlamaModel {
  readonly config: ModelConfig;
  readonly contextSize: number;
  readonly batchSize: number;
  readonly file: GGUFFile;
  /** bytes of wasm memory in use (weights, caches, buffers) */
  readonly residentBytes: number;

  private constructor(
    file: GGUFFile,
    cfg: ModelConfig,
    private readonly arena: Arena,
    private readonly pool: ThreadPool,
    private readonly layers: Layer[],
    private readonly embd: { info: GGUFTensorInfo; data: Uint8Array },
    private readonly outputNorm: number,
    private readonly output: Matrix,
    private readonly buf: Buffers,
    contextSize: number,
    batchSize: number,
  ) {
    this.file = file;
    this.config = cfg;
    this.contextSize = contextSize;
    this.batchSize = batchSize;
    this.residentBytes = arena.used;
    this.heap = new Uint8Array(arena.memory.buffer);
    this.f32 = new Float32Array(arena.memory.buffer);
    this.i32 = new Int32Array(arena.memory.buffer);
    this.fn = {
      rmsnorm: pool.fn("rmsnorm_rows"),
      rope: pool.fn("rope"),
      attention: pool.fn("attention"),
      ffnAct: pool.fn("ffn_act"),
      add: pool.fn("add_inplace"),
      bias: pool.fn("add_bias_rows"),
    };
    this.epsBits = f32Bits(cfg.normEps);
    this.logits = new Float32Array(arena.memory.buffer, buf.logits, cfg.nVocab);
  }

  private readonly heap: Uint8Array;
  private readonly f32: Float32Array;
  private readonly i32: Int32Array;
  private readonly fn: Record<"rmsnorm" | "rope" | "attention" | "ffnAct" | "add" | "bias", number>;
  private readonly epsBits: number;
  private readonly args = new Int32Array(16);
  /** which prepared-activation buffers hold the current matmul input */
  private readonly prepared = new Set<ActivationFormat>();
  /** logits of the last token of the last forward() (a view into wasm memory) */
  readonly logits: Float32Array;
  /**
   * The tokens whose keys and values sit in the KV cache at positions 0..length-1 (forward()
   * keeps it), so that a prompt sharing a prefix with the previous one can reuse them.
   */
  readonly cachedTokens: number[] = [];

  static async load(path: string, opts: LoadOptions = {}): Promise<LlamaModel> {
    const file = GGUFFile.open(path);
    let pool: ThreadPool | undefined;
    try {
      const cfg = readConfig(file);
      const threads = opts.threads ?? (await import("node:os")).availableParallelism();
      const batchSize = Math.max(1, Math.min(opts.batchSize ?? 256, 4096));
      let contextSize = Math.max(1, Math.floor(opts.contextSize ?? Math.min(cfg.nCtxTrain, 4096)));
      // Keep the KV cache inside what wasm32 can address next to the weights.
      const kvBytesPerPos = 2 * cfg.nLayer * cfg.nHeadKV * cfg.headDim * 4;
      const weightBytes = [...file.tensors.values()].reduce((a, t) => a + t.bytes, 0);
      const room = 3.9 * 2 ** 30 - weightBytes * 1.15 - 64 * 2 ** 20;
      if (opts.contextSize === undefined && contextSize * kvBytesPerPos > room) {
        contextSize = Math.max(64, Math.floor(room / kvBytesPerPos));
      }
      const arena = new Arena(64 << 20);
      pool = await ThreadPool.create(arena.memory, threads);
      const loader = new WeightLoader(file, arena, pool, opts.onProgress && ((b) => opts.onProgress!(b, weightBytes)));
      const { nEmbd, nFF, nHead, nHeadKV, headDim, nVocab } = cfg;
      const qDim = nHead * headDim;
      const kvDim = nHeadKV * headDim;

      const embd = loader.raw("token_embd.weight", [nEmbd, nVocab]);
      const layers: Layer[] = [];
      for (let l = 0; l < cfg.nLayer; l++) {
        const p = `blk.${l}.`;
        const bias = (name: string, n: number) => (cfg.qkvBias ? loader.vector(p + name, n) : 0);
        layers.push({
          attnNorm: loader.vector(p + "attn_norm.weight", nEmbd),
          wq: loader.matrix(p + "attn_q.weight", nEmbd, qDim),
          wk: loader.matrix(p + "attn_k.weight", nEmbd, kvDim),
          wv: loader.matrix(p + "attn_v.weight", nEmbd, kvDim),
          wo: loader.matrix(p + "attn_output.weight", qDim, nEmbd),
          bq: bias("attn_q.bias", qDim),
          bk: bias("attn_k.bias", kvDim),
          bv: bias("attn_v.bias", kvDim),
          ffnNorm: loader.vector(p + "ffn_norm.weight", nEmbd),
          gate: loader.matrix(p + "ffn_gate.weight", nEmbd, nFF),
          up: loader.matrix(p + "ffn_up.weight", nEmbd, nFF),
          down: file.tensors.has(p + "ffn_down_t.weight")
            ? loader.transposedMatrix(p + "ffn_down_t.weight", nFF, nEmbd)
            : loader.matrix(p + "ffn_down.weight", nFF, nEmbd),
        });
      }
      const outputNorm = loader.vector("output_norm.weight", nEmbd);
      const output = loader.matrix(file.tensors.has("output.weight") ? "output.weight" : "token_embd.weight", nEmbd, nVocab);
      const buf = allocBuffers(arena, cfg, contextSize, batchSize, [output, ...layers.flatMap((L) => [L.wq, L.wk, L.wv, L.wo, L.gate, L.up, L.down])]);
      arena.f32(buf.rope, contextSize * cfg.nRot).set(ropeTable(cfg, contextSize));
      return new LlamaModel(file, cfg, arena, pool, layers, embd, outputNorm, output, buf, contextSize, batchSize);
    } catch (e) {
      await pool?.dispose();
      file.close();
      throw e;
    }
  }

  get threads(): number {
    return this.pool.threads;
  }

  /**
   * Run `n` tokens (tokens[0..n)) at positions pos0..pos0+n-1, filling the KV cache; leaves the
   * logits of the last token in `this.logits`. n must be <= batchSize and pos0 + n <= contextSize.
   */
  forward(tokens: ArrayLike<number>, n: number, pos0: number): Float32Array {
    const cfg = this.config;
    if (n < 1 || n > this.batchSize) throw new RangeError(`forward: ${n} tokens, batch holds 1..${this.batchSize}`);
    if (pos0 < 0 || pos0 + n > this.contextSize) throw new RangeError(`context full: positions ${pos0}..${pos0 + n - 1} exceed the context size ${this.contextSize}`);
    const { nEmbd, nFF, nHead, nHeadKV, headDim, nLayer } = cfg;
    const qDim = nHead * headDim;
    const kvDim = nHeadKV * headDim;
    const b = this.buf;
    const pool = this.pool;
    const a = this.args;

    // Embeddings: one dequantized row per token, and each token's position.
    const rowBytes = tensorBytes(this.embd.info.type, nEmbd);
    for (let t = 0; t < n; t++) {
      const id = tokens[t];
      if (!(id >= 0 && id < cfg.nVocab)) throw new RangeError(`token id ${id} is outside the vocabulary (0..${cfg.nVocab - 1})`);
      dequantizeRow(this.embd.info.type, this.embd.data.subarray(id * rowBytes, (id + 1) * rowBytes), nEmbd, this.f32, (b.x >> 2) + t * nEmbd);
      this.i32[(b.pos >> 2) + t] = pos0 + t;
    }
    this.cachedTokens.length = pos0;
    for (let t = 0; t < n; t++) this.cachedTokens.push(tokens[t]);

    for (let l = 0; l < nLayer; l++) {
      const L = this.layers[l];
      const kCache = b.kCache + l * this.contextSize * kvDim * 4;
      const vCache = b.vCache + l * this.contextSize * kvDim * 4;
      const kOut = kCache + pos0 * kvDim * 4;
      const vOut = vCache + pos0 * kvDim * 4;

      // Attention: norm, Q/K/V (K and V written straight into the cache), RoPE, attend, project.
      this.rmsnorm(b.xb, b.x, L.attnNorm, n);
      this.setInput(b.xb, nEmbd);
      this.matmul(L.wq, b.q, n);
      this.matmul(L.wk, kOut, n);
      this.matmul(L.wv, vOut, n);
      if (L.bq) {
        this.addBias(b.q, L.bq, qDim, n);
        this.addBias(kOut, L.bk, kvDim, n);
        this.addBias(vOut, L.bv, kvDim, n);
      }
      const neox = cfg.ropePairing === "neox" ? 1 : 0;
      a[0] = b.q; a[1] = b.pos; a[2] = b.rope; a[3] = nHead; a[4] = headDim; a[5] = cfg.nRot; a[6] = neox;
      pool.run(this.fn.rope, a, 7, n, 1, n * qDim * 4);
      a[0] = kOut; a[3] = nHeadKV;
      pool.run(this.fn.rope, a, 7, n, 1, n * kvDim * 4);
      a[0] = b.q; a[1] = kCache; a[2] = vCache; a[3] = b.att; a[4] = b.scores; a[5] = n; a[6] = pos0;
      a[7] = nHead; a[8] = nHeadKV; a[9] = headDim; a[10] = this.contextSize;
      pool.run(this.fn.attention, a, 11, nHead, 1, 2 * n * (pos0 + n) * qDim);
      this.setInput(b.att, qDim);
      this.matmul(L.wo, b.xb, n);
      this.add(b.x, b.xb, n * nEmbd);

      // FFN: norm, gate and up, activation, down.
      this.rmsnorm(b.xb, b.x, L.ffnNorm, n);
      this.setInput(b.xb, nEmbd);
      this.matmul(L.gate, b.hg, n);
      this.matmul(L.up, b.hu, n);
      a[0] = b.hg; a[1] = b.hu; a[2] = ACT_CODE[cfg.activation];
      pool.run(this.fn.ffnAct, a, 3, n * nFF, 64, n * nFF * 16);
      this.setInput(b.hg, nFF);
      this.matmul(L.down, b.xb, n);
      this.add(b.x, b.xb, n * nEmbd);
    }

    // Output: only the last token's logits are needed.
    const last = b.x + (n - 1) * nEmbd * 4;
    this.rmsnorm(b.xb, last, this.outputNorm, 1);
    this.setInput(b.xb, nEmbd);
    this.matmul(this.output, b.logits, 1);
    return this.logits;
  }

  private rmsnorm(y: number, x: number, w: number, n: number): void {
    const a = this.args;
    a[0] = y; a[1] = x; a[2] = w; a[3] = this.config.nEmbd; a[4] = this.epsBits;
    this.pool.run(this.fn.rmsnorm, a, 5, n, 1, n * this.config.nEmbd * 4);
  }

  private add(y: number, x: number, count: number): void {
    const a = this.args;
    a[0] = y; a[1] = x;
    this.pool.run(this.fn.add, a, 2, count, 64, count);
  }

  private addBias(y: number, bias: number, width: number, n: number): void {
    const a = this.args;
    a[0] = y; a[1] = bias; a[2] = width;
    this.pool.run(this.fn.bias, a, 3, n, 1, n * width);
  }

  private input = 0;
  private inputCols = 0;

  /** The f32 rows that the next matmuls read; prepared (quantized) lazily per format. */
  private setInput(ptr: number, cols: number): void {
    this.input = ptr;
    this.inputCols = cols;
    this.prepared.clear();
  }

  private matmul(m: Matrix, out: number, n: number): void {
    const fmt = m.kernel.act;
    let x = this.input;
    if (fmt !== "f32") {
      x = this.buf.act[fmt];
      if (!this.prepared.has(fmt)) {
        // Quantize the input rows once; every matrix of this format reads them.
        this.pool.kernels[prepareKernel(fmt)!](this.input, x, this.inputCols, n);
        this.prepared.add(fmt);
      }
    }
    const a = this.args;
    a[0] = m.ptr; a[1] = x; a[2] = out; a[3] = m.rows; a[4] = m.cols;
    const work = m.rows * m.cols * n;
    if (n === 1) this.pool.run(m.matvecFn, a, 5, m.rows, 16, work);
    else {
      a[5] = n;
      this.pool.run(m.matmulFn, a, 6, m.rows, 16, work);
    }
  }

  async dispose(): Promise<void> {
    await this.pool.dispose();
    this.file.close();
  }
}

interface Buffers {
  x: number; xb: number; q: number; att: number; hg: number; hu: number;
  logits: number; scores: number; pos: number; rope: number;
  kCache: number; vCache: number;
  act: Record<ActivationFormat, number>;
}

function allocBuffers(arena: Arena, cfg: ModelConfig, ctx: number, batch: number, matrices: Matrix[]): Buffers {
  const { nEmbd, nFF, nHead, nHeadKV, headDim, nLayer, nVocab } = cfg;
  const f = (count: number) => arena.alloc(count * 4, 64);
  const act = { f32: 0, q8_0: 0, q8_1: 0, q8_K: 0 } as Record<ActivationFormat, number>;
  for (const fmt of new Set(matrices.map((m) => m.kernel.act))) {
    if (fmt !== "f32") act[fmt] = arena.alloc(batch * Math.max(...matrices.filter((m) => m.kernel.act === fmt).map((m) => activationBytes(fmt, m.cols))) + 64, 64);
  }
  return {
    x: f(batch * nEmbd),
    xb: f(batch * nEmbd),
    q: f(batch * nHead * headDim),
    att: f(batch * nHead * headDim),
    hg: f(batch * nFF),
    hu: f(batch * nFF),
    logits: f(nVocab),
    scores: f(nHead * ctx),
    pos: f(batch),
    rope: f(ctx * cfg.nRot),
    kCache: f(nLayer * ctx * nHeadKV * headDim),
    vCache: f(nLayer * ctx * nHeadKV * headDim),
    act,
  };
}
