/**
 * Perplexity as llama.cpp's `llama-perplexity` computes it by default (tools/perplexity, the
 * non-strided path), so numbers can be set side by side:
 *
 * - the whole file is tokenized once, BOS first when the model adds one (corpusTokens);
 * - it must give at least 2 * n_ctx tokens; it is cut into floor(tokens / n_ctx) chunks of n_ctx
 *   tokens (the rest is dropped), each run from position 0 with an empty KV cache and its first
 *   token replaced by BOS;
 * - only the second half of each chunk is scored: the logits at positions first = n_ctx/2 ..
 *   n_ctx-2 against the next token, NLL = -log softmax (max-shifted, summed in double);
 * - after each chunk the running estimate exp(mean NLL) is reported (`[1]4.1234,[2]...`), and at
 *   the end `PPL = exp(mean) +/- ppl * sqrt((mean(NLL^2) - mean^2) / (count - 1))`.
 *
 * A dense model runs each chunk in batches and reads the logits of every position (forwardAll);
 * a model whose FFN is offloaded to a neuron store (sparse modes) prefills the unscored first half
 * in batches, as a prompt, then runs the scored half one token at a time through forwardAsync,
 * as decoding does, so the sparse decode path is what is measured.
 */
import { offloadFigures, statsSince } from "../model/offload/stats.js";
import type { LlamaModel } from "../model/model.js";
import { gateMagnitudes } from "./profile.js";

export class PerplexityError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "PerplexityError";
  }
}

export interface PerplexityOptions {
  /** n_ctx: tokens per chunk (the model's context must hold it) */
  contextSize: number;
  /** tokens per forward pass (default: the model's batch size) */
  batchSize?: number;
  /** score at most this many chunks (default: all) */
  chunks?: number;
  /** the token each chunk starts with (llama.cpp: BOS when the model adds one); -1 keeps the text's token */
  bos: number;
  /**
   * Also measure the FFN sparsity the run had: for a dense model, the share of (token, neuron)
   * activations at or below the model's thresholds (gate <= 0 for ReLU) seen through the FFN
   * observer (slower); for a neuron store, 1 - neurons computed / neurons in all.
   */
  measureSparsity?: boolean;
  signal?: AbortSignal;
  /** after each chunk: its number (1-based), the chunk count, the running estimate */
  onChunk?: (chunk: number, chunks: number, ppl: number, seconds: number) => void;
}

export interface PerplexityResult {
  /** exp(mean NLL) over every scored token */
  ppl: number;
  /** llama.cpp's "+/-": the standard error of the mean NLL, times ppl; NaN when undefined */
  stdError: number;
  /** mean NLL (natural log) */
  nll: number;
  /** tokens scored */
  count: number;
  chunks: number;
  /** the running estimate after each chunk */
  perChunk: number[];
  /** tokens the text gave (BOS included) */
  tokens: number;
  /** how the logits were computed */
  mode: "batched" | "token-by-token";
  /** see measureSparsity (undefined when not measured) */
  sparsity?: number;
  seconds: number;
}

/** -log softmax(logits)[target] for one row at `offset`: llama.cpp's log_softmax, max-shifted, sum in double. */
export function tokenNll(logits: Float32Array, offset: number, nVocab: number, target: number): number {
  let max = logits[offset];
  for (let i = 1; i < nVocab; i++) if (logits[offset + i] > max) max = logits[offset + i];
  let sum = 0;
  for (let i = 0; i < nVocab; i++) sum += Math.exp(logits[offset + i] - max);
  return max + Math.log(sum) - logits[offset + target];
}

const tick = () => new Promise<void>((r) => setImmediate(r));

export async function perplexity(
  model: LlamaModel,
  tokens: Int32Array,
  opts: PerplexityOptions,
): Promise<PerplexityResult> {
  const t0 = performance.now();
  const nCtx = opts.contextSize;
  const nVocab = model.config.nVocab;
  if (!(Number.isInteger(nCtx) && nCtx >= 4))
    throw new PerplexityError(`context size must be an integer >= 4, got ${nCtx}`);
  if (nCtx > model.contextSize)
    throw new PerplexityError(
      `context size ${nCtx} is larger than the model's KV cache (${model.contextSize} positions): load it with contextSize >= ${nCtx}`,
    );
  const batch = Math.min(opts.batchSize ?? model.batchSize, model.batchSize, nCtx);
  if (!(Number.isInteger(batch) && batch >= 1))
    throw new PerplexityError(`batch size must be a positive integer, got ${opts.batchSize}`);
  if (tokens.length < 2 * nCtx) {
    throw new PerplexityError(
      `the text gives only ${tokens.length} tokens; perplexity with a context of ${nCtx} needs at least ${2 * nCtx} (2 * n_ctx, as llama-perplexity): use a longer text or a smaller -c`,
    );
  }
  for (let i = 0; i < tokens.length; i++) {
    if (!(tokens[i] >= 0 && tokens[i] < nVocab))
      throw new PerplexityError(`token ${i} (id ${tokens[i]}) is outside the vocabulary (0..${nVocab - 1})`);
  }
  const maxChunks = Math.floor(tokens.length / nCtx);
  if (opts.chunks !== undefined && !(Number.isInteger(opts.chunks) && opts.chunks >= 1))
    throw new PerplexityError(`chunks must be a positive integer, got ${opts.chunks}`);
  const nChunks = Math.min(opts.chunks ?? maxChunks, maxChunks);
  const first = nCtx >> 1;
  const sparse = model.offloaded !== undefined;

  // FFN sparsity of the run
  let zero = 0,
    seen = 0;
  const before = sparse ? model.offloaded!.snapshot() : undefined;
  if (opts.measureSparsity && !sparse) {
    const nFF = model.config.nFF;
    const mag = new Float32Array(model.batchSize * nFF);
    const cut = model.thresholds;
    model.setFFNObserver((o) => {
      const count = o.n * nFF;
      gateMagnitudes(model.config.activation, o.gate, count, mag);
      const t = cut ? cut[o.layer] : 0;
      for (let i = 0; i < count; i++) if (!(mag[i] > t)) zero++;
      seen += count;
    });
  }

  const chunk = new Int32Array(nCtx);
  const logits = new Float32Array(batch * nVocab);
  let nll = 0,
    nll2 = 0,
    count = 0;
  const perChunk: number[] = [];
  try {
    for (let c = 0; c < nChunks; c++) {
      const tc = performance.now();
      chunk.set(tokens.subarray(c * nCtx, (c + 1) * nCtx));
      if (opts.bos >= 0) chunk[0] = opts.bos;
      // Positions 0 .. nCtx-2 are fed; the logits of the last position would predict nothing scored.
      const fed = nCtx - 1;
      const score = (row: Float32Array, offset: number, pos: number) => {
        const v = tokenNll(row, offset, nVocab, chunk[pos + 1]);
        nll += v;
        nll2 += v * v;
        count++;
      };
      const check = () => {
        if (opts.signal?.aborted)
          throw opts.signal.reason instanceof Error ? opts.signal.reason : new PerplexityError("perplexity aborted");
      };
      if (!sparse) {
        for (let j = 0; j < fed; j += batch) {
          check();
          const n = Math.min(batch, fed - j);
          if (j + n <= first) {
            model.forward(chunk.subarray(j, j + n), n, j); // nothing scored here: last logits only
          } else {
            model.forwardAll(chunk.subarray(j, j + n), n, j, logits);
            for (let k = Math.max(0, first - j); k < n; k++) score(logits, k * nVocab, j + k);
          }
          await tick();
        }
      } else {
        for (let j = 0; j < first; j += batch) {
          check();
          const n = Math.min(batch, first - j);
          await model.forwardAsync(chunk.subarray(j, j + n), n, j);
        }
        for (let pos = first; pos < fed; pos++) {
          check();
          const row = await model.forwardAsync(chunk.subarray(pos, pos + 1), 1, pos);
          score(row, 0, pos);
        }
      }
      const ppl = Math.exp(nll / count);
      perChunk.push(ppl);
      opts.onChunk?.(c + 1, nChunks, ppl, (performance.now() - tc) / 1000);
    }
  } finally {
    if (opts.measureSparsity && !sparse) model.setFFNObserver(null);
  }

  const mean = nll / count;
  const ppl = Math.exp(mean);
  const variance = nll2 / count - mean * mean;
  const stdError = variance > 0 && count > 1 ? Math.sqrt(variance / (count - 1)) * ppl : NaN;
  let sparsity: number | undefined;
  if (opts.measureSparsity) {
    if (sparse) {
      const d = statsSince(before!, model.offloaded!.snapshot());
      sparsity = d.neuronsTotal > 0 ? 1 - offloadFigures(d).computedShare : undefined;
    } else sparsity = seen > 0 ? zero / seen : undefined;
  }
  return {
    ppl,
    stdError,
    nll: mean,
    count,
    chunks: nChunks,
    perChunk,
    tokens: tokens.length,
    mode: sparse ? "token-by-token" : "batched",
    sparsity,
    seconds: (performance.now() - t0) / 1000,
  };
}
