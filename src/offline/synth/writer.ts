/**
 * Writing a synthetic model: checking the options, the GGUF metadata (hyper-parameters, a
 * synthetic vocabulary, provenance), and streaming the tensors to disk chunk by chunk, each drawn
 * from its own stream (random-rows.ts) or, with planted sparsity, rewritten as the construction
 * needs (planted-sparsity.ts); then the implied predictors, if asked for.
 */
import { LLAMA_FILE_TYPE } from "../../format/ggml-types.js";
import { GGUFWriter, GGUFValueType } from "../../format/gguf-writer.js";
import { SPARSITY_ALPHA_DEFAULT, SynthStream } from "../../model/firing.js";
import { llama3RopeFactors } from "../../model/rope.js";
import { writePredictorFile } from "../predictor-files.js";
import { fingerprintOfPath } from "../profile.js";
import { buildSynthVocab } from "../synth-vocab.js";
import {
  ALPHA_MAX,
  ALPHA_MIN,
  GATE_RANK_MAX,
  PREDICTOR_MARGIN,
  RESERVED,
  SPARSITY_MAX,
  SPARSITY_MIN,
  SparsityPlanter,
  type PlantedPredictor,
} from "./planted-sparsity.js";
import { rowFiller } from "./random-rows.js";
import {
  checkSpec,
  FIXED_ACTIVATION,
  headDimOf,
  SHAPE_SPECS,
  SYNTH_ACTIVATIONS,
  SYNTH_SHAPES,
  SYNTH_TYPES,
  synthRecipes,
  type SynthActivation,
  type SynthShape,
  type SynthShapeSpec,
  type SynthType,
} from "./shapes.js";

export interface SynthProgress {
  /** tensor data bytes written so far, and in all */
  readonly bytesWritten: number;
  readonly totalBytes: number;
  readonly tensor: string;
  readonly tensorIndex: number;
  readonly tensorCount: number;
}

export interface SynthOptions {
  shape: SynthShape;
  act: SynthActivation;
  type: SynthType;
  seed: number;
  out: string;
  onProgress?: (p: SynthProgress) => void;
  signal?: AbortSignal;
  /** override the shape's spec (tests use smaller vocabularies) */
  overrides?: Partial<SynthShapeSpec>;
  /** fsync before the final rename (default true) */
  fsync?: boolean;
  /**
   * Planted activation sparsity (relu and drelu only): the mean share of FFN neurons whose
   * output is exactly zero, per layer, in [SPARSITY_MIN, SPARSITY_MAX]. Omitted: plain random
   * weights (a ReLU model then rests about half its neurons, with no hot ones).
   */
  sparsity?: number;
  /** exponent of the firing-frequency power law (default SPARSITY_ALPHA_DEFAULT); needs `sparsity` */
  alpha?: number;
  /**
   * Predictable firing (relu with `sparsity` only): each layer's gate rows are drawn from a
   * subspace of this many dimensions (plus the quantization's own noise), as the gate inputs of
   * trained ReLU models live near a low-dimensional subspace; a small predictor can then tell
   * which neurons fire, and the generator hands one back (`SynthResult.predictors`).
   */
  gateRank?: number;
  /** with gateRank: write the planted predictors here (a predictors-only GGUF for `convert --predictors`) */
  predictorsOut?: string;
}

export interface SynthResult {
  path: string;
  /** file size */
  bytes: number;
  tensors: number;
  seconds: number;
  /**
   * With planted sparsity: the share of zero FFN outputs per layer that the generator's own model
   * of the residual stream predicts (the real rate is measured by running the model).
   */
  predictedSparsity?: number[];
  /**
   * With `gateRank`: the predictor the construction implies for each layer (see "Predictable
   * firing"): PowerInfer's fc2 . relu(fc1 . x) on the raw residual, active above 0.
   */
  predictors?: PlantedPredictor[];
}

const CHUNK_BYTES = 4 << 20;

function validate(o: SynthOptions): SynthShapeSpec {
  if (!SYNTH_SHAPES.includes(o.shape))
    throw new RangeError(
      `synthetic model: unknown shape ${JSON.stringify(o.shape)} (expected ${SYNTH_SHAPES.join(", ")})`,
    );
  if (!SYNTH_ACTIVATIONS.includes(o.act))
    throw new RangeError(
      `synthetic model: unknown activation ${JSON.stringify(o.act)} (expected ${SYNTH_ACTIVATIONS.join(", ")})`,
    );
  if (!SYNTH_TYPES.includes(o.type))
    throw new RangeError(
      `synthetic model: unknown type ${JSON.stringify(o.type)} (expected ${SYNTH_TYPES.join(", ")})`,
    );
  if (!Number.isSafeInteger(o.seed) || o.seed < 0)
    throw new RangeError(`synthetic model: seed must be a non-negative integer, got ${o.seed}`);
  if (typeof o.out !== "string" || o.out === "") throw new RangeError("synthetic model: no output path");
  if (o.sparsity !== undefined) {
    if (o.act === "silu")
      throw new RangeError(
        "synthetic model: planted sparsity needs a ReLU-family activation (relu or drelu); silu never outputs exact zeros",
      );
    if (typeof o.sparsity !== "number" || !(o.sparsity >= SPARSITY_MIN && o.sparsity <= SPARSITY_MAX)) {
      throw new RangeError(
        `synthetic model: sparsity must be a number in [${SPARSITY_MIN}, ${SPARSITY_MAX}], got ${o.sparsity}`,
      );
    }
  }
  if (o.alpha !== undefined) {
    if (o.sparsity === undefined)
      throw new RangeError(
        "synthetic model: alpha shapes the firing frequencies of planted sparsity; give a sparsity too",
      );
    if (typeof o.alpha !== "number" || !(o.alpha >= ALPHA_MIN && o.alpha <= ALPHA_MAX)) {
      throw new RangeError(`synthetic model: alpha must be a number in [${ALPHA_MIN}, ${ALPHA_MAX}], got ${o.alpha}`);
    }
  }
  if (o.predictorsOut !== undefined && o.gateRank === undefined)
    throw new RangeError(
      "synthetic model: predictorsOut needs gateRank (only a predictable model has predictors to write)",
    );
  if (o.gateRank !== undefined) {
    if (o.sparsity === undefined || o.act !== "relu")
      throw new RangeError(
        "synthetic model: gateRank makes planted ReLU sparsity predictable; it needs act relu and a sparsity",
      );
    if (!Number.isInteger(o.gateRank) || o.gateRank < 1 || o.gateRank > GATE_RANK_MAX)
      throw new RangeError(`synthetic model: gateRank must be an integer in [1, ${GATE_RANK_MAX}], got ${o.gateRank}`);
  }
  const spec = { ...SHAPE_SPECS[o.shape], ...(o.overrides ?? {}) };
  checkSpec(spec, o.type);
  const fixed = FIXED_ACTIVATION[spec.arch ?? "llama"];
  if (fixed ? o.act !== fixed : o.act === "gelu" || o.act === "swiglu_oai")
    throw new RangeError(
      fixed
        ? `synthetic model: ${o.shape} is ${spec.arch}, which computes ${fixed}: --act ${fixed}`
        : `synthetic model: ${o.act} is ${o.act === "gelu" ? "gemma3" : "gpt-oss"}'s activation; ${o.shape} takes silu, relu or drelu`,
    );
  if (o.gateRank !== undefined && o.gateRank >= spec.dim - RESERVED)
    throw new RangeError(
      `synthetic model: gateRank ${o.gateRank} must be below the residual width ${spec.dim - RESERVED}`,
    );
  return spec;
}

/** Set a synthetic model's metadata on a writer. */
function writeMetadata(w: GGUFWriter, o: SynthOptions, spec: SynthShapeSpec): void {
  const U32 = GGUFValueType.UINT32;
  const F32 = GGUFValueType.FLOAT32;
  const arch = spec.arch ?? "llama";
  w.setMetadata("general.architecture", arch);
  const planted = o.sparsity !== undefined ? `-sparsity${o.sparsity}` : "";
  w.setMetadata(
    "general.name",
    `synthetic-${o.shape}-${o.act}${planted}-${o.type}-seed${o.seed} (random weights shaped like ${spec.like}; not a trained model)`,
  );
  w.setMetadata("general.file_type", LLAMA_FILE_TYPE[o.type], U32);
  if (o.type !== "f32" && o.type !== "f16") w.setMetadata("general.quantization_version", 2, U32);
  const headDim = headDimOf(spec);
  const key = (k: string) => `${arch}.${k}`;
  w.setMetadata(key("context_length"), spec.context, U32);
  w.setMetadata(key("embedding_length"), spec.dim, U32);
  w.setMetadata(key("block_count"), spec.layers, U32);
  if (arch === "smallthinker" || arch === "gpt-oss") {
    // as SmallThinker's converter writes them: both widths the experts', the gating function
    w.setMetadata(key("feed_forward_length"), spec.ffn, U32);
    w.setMetadata(key("expert_feed_forward_length"), spec.ffn, U32);
    if (arch === "smallthinker") w.setMetadata(key("expert_gating_func"), spec.gating === "sigmoid" ? 2 : 1, U32);
  } else if (arch === "qwen3moe") {
    // as Qwen3-MoE's converter writes it: the dense width (no layer has it) and the experts' own
    w.setMetadata(key("feed_forward_length"), spec.ffn * spec.expertsUsed, U32);
    w.setMetadata(key("expert_feed_forward_length"), spec.ffn, U32);
  } else w.setMetadata(key("feed_forward_length"), spec.ffn, U32);
  w.setMetadata(key("rope.dimension_count"), headDim, U32);
  w.setMetadata(key("attention.head_count"), spec.heads, U32);
  w.setMetadata(key("attention.head_count_kv"), spec.kvHeads, U32);
  if (spec.headDim !== undefined) {
    w.setMetadata(key("attention.key_length"), headDim, U32);
    w.setMetadata(key("attention.value_length"), headDim, U32);
  }
  if (spec.longRopeContext) {
    // as the converter writes LongRoPE: the original context and the attention factor it implies
    const scale = spec.context / spec.longRopeContext;
    w.setMetadata(key("rope.scaling.original_context_length"), spec.longRopeContext, U32);
    w.setMetadata(
      key("rope.scaling.attn_factor"),
      scale > 1 ? Math.sqrt(1 + Math.log(scale) / Math.log(spec.longRopeContext)) : 1,
      F32,
    );
  }
  if (spec.slidingWindow) {
    w.setMetadata(key("attention.sliding_window"), spec.slidingWindow, U32);
    if (spec.slidingPattern) w.setMetadata(key("attention.sliding_window_pattern"), spec.slidingPattern, U32);
  }
  if (spec.yarn) {
    w.setMetadata(key("rope.scaling.type"), "yarn");
    w.setMetadata(key("rope.scaling.factor"), spec.yarn.factor, F32);
    w.setMetadata(key("rope.scaling.original_context_length"), spec.yarn.originalContext, U32);
  }
  if (spec.ropeScaleLinear) {
    w.setMetadata(key("rope.scaling.type"), "linear");
    w.setMetadata(key("rope.scaling.factor"), spec.ropeScaleLinear, F32);
  }
  if (spec.logitSoftcap) w.setMetadata(key("final_logit_softcapping"), spec.logitSoftcap, F32);
  w.setMetadata(key("attention.layer_norm_rms_epsilon"), spec.rmsEps, F32);
  w.setMetadata(key("rope.freq_base"), spec.ropeBase, F32);
  w.setMetadata(key("vocab_size"), spec.vocab, U32);
  w.setMetadata(key("feed_forward_activation"), o.act);
  if (spec.experts > 0) {
    w.setMetadata(key("expert_count"), spec.experts, U32);
    w.setMetadata(key("expert_used_count"), spec.expertsUsed, U32);
  }
  // Provenance, so tools can tell a synthetic file from a real one and rebuild it.
  w.setMetadata("synth.shape", o.shape);
  w.setMetadata("synth.seed", BigInt(o.seed), GGUFValueType.UINT64);
  // For display and for rebuilding the file only: the engine must find the zeros by computing.
  if (o.sparsity !== undefined) {
    w.setMetadata("synth.sparsity", o.sparsity, F32);
    w.setMetadata("synth.alpha", o.alpha ?? SPARSITY_ALPHA_DEFAULT, F32);
    if (o.gateRank !== undefined) w.setMetadata("synth.gate_rank", o.gateRank, U32);
  }
  const vocab = buildSynthVocab(spec.vocab);
  if (arch === "phi3") {
    // llama.cpp looks "<|endoftext|>" up in any vocabulary of a model whose name says phi3, as
    // every Phi-3 vocabulary has it: the last piece gives way to it
    vocab.tokens[spec.vocab - 1] = "<|endoftext|>";
    vocab.types[spec.vocab - 1] = 3; // CONTROL
  }
  w.setMetadata("tokenizer.ggml.model", "llama");
  w.setMetadata("tokenizer.ggml.tokens", vocab.tokens, GGUFValueType.STRING);
  w.setMetadata("tokenizer.ggml.scores", vocab.scores);
  w.setMetadata("tokenizer.ggml.token_type", vocab.types);
  w.setMetadata("tokenizer.ggml.bos_token_id", vocab.bosId, U32);
  w.setMetadata("tokenizer.ggml.eos_token_id", vocab.eosId, U32);
  w.setMetadata("tokenizer.ggml.unknown_token_id", vocab.unkId, U32);
  w.setMetadata("tokenizer.ggml.add_bos_token", true);
  w.setMetadata("tokenizer.ggml.add_eos_token", false);
}

/**
 * A frequency-factor tensor (one row): rope_freqs.weight from the shape's Llama 3 RoPE scaling;
 * LongRoPE's long factors rising from 1 to 4 over the pairs (slower pairs slowed more, as in
 * Phi-3's), its short ones from 1 to 1.5.
 */
function ropeFactorsFiller(
  spec: SynthShapeSpec,
  kind: "rope_freqs" | "rope_long" | "rope_short",
): (dst: Uint8Array) => void {
  const half = headDimOf(spec) / 2;
  let factors: Float32Array;
  if (kind === "rope_freqs") factors = llama3RopeFactors(headDimOf(spec), spec.ropeBase, spec.llama3Rope!);
  else {
    factors = new Float32Array(half);
    const top = kind === "rope_long" ? 3 : 0.5;
    for (let i = 0; i < half; i++) factors[i] = 1 + top * (i / (half - 1)) ** 2;
  }
  return (dst) => dst.set(new Uint8Array(factors.buffer));
}

/** Size in bytes of the file synthesize() would write (header included). */
export function synthFileSize(o: Omit<SynthOptions, "out"> & { out?: string }): number {
  const spec = validate({ ...o, out: o.out ?? "size-only" });
  const w = new GGUFWriter(o.out ?? "size-only");
  writeMetadata(w, { ...o, out: "" }, spec);
  for (const r of synthRecipes(spec, o.type)) w.addTensor(r.name, r.dims, r.type);
  return w.totalBytes;
}

/** Write a synthetic model. Resolves when the file is complete and in place. */
export async function synthesize(o: SynthOptions): Promise<SynthResult> {
  const start = performance.now();
  const spec = validate(o);
  o.signal?.throwIfAborted();
  const recipes = synthRecipes(spec, o.type);
  const w = new GGUFWriter(o.out, { fsync: o.fsync ?? true });
  writeMetadata(w, o, spec);
  for (const r of recipes) w.addTensor(r.name, r.dims, r.type);
  const totalBytes = w.dataBytes;
  const planter =
    o.sparsity !== undefined
      ? new SparsityPlanter(spec, o.type, o.act, o.seed, o.sparsity, o.alpha ?? SPARSITY_ALPHA_DEFAULT, o.gateRank ?? 0)
      : undefined;

  // Two buffers: one is filled while the other is on its way to disk.
  const bufs = [new ArrayBuffer(CHUNK_BYTES + 8), new ArrayBuffer(CHUNK_BYTES + 8)];
  const onAbort = () => void w.abort();
  o.signal?.addEventListener("abort", onAbort, { once: true });
  // the write in flight while the next chunk is filled; an abort makes it reject, and that
  // rejection must be observed (else an interrupted synth crashes instead of cleaning up)
  let pending: Promise<void> | undefined;
  try {
    for (let ti = 0; ti < recipes.length; ti++) {
      const r = recipes[ti];
      const rows = r.dims[1] ?? 1;
      // a mixture's expert tensor is its experts' matrices one after the other
      const experts = r.dims[2] ?? 1;
      const rowBytes = r.bytes / rows / experts;
      // Whole rows per chunk (a row is a neuron), at least one, never two experts in a chunk.
      const rowsPerChunk = Math.max(1, Math.floor(CHUNK_BYTES / rowBytes));
      const sink = await w.tensorSink(r.name);
      pending = undefined;
      for (let e = 0, k = 0; e < experts; e++) {
        // each expert its own stream: expert e's bytes do not depend on how many come before it
        const stream = new SynthStream(o.seed, r.dims.length > 2 ? `${r.name}.${e}` : r.name);
        const fill =
          r.kind === "rope_freqs" || r.kind === "rope_long" || r.kind === "rope_short"
            ? ropeFactorsFiller(spec, r.kind)
            : planter && r.kind !== "qk_norm" && r.kind !== "post_norm"
              ? planter.filler(r, stream, e)
              : rowFiller(r, stream);
        for (let row = 0; row < rows; row += rowsPerChunk, k++) {
          o.signal?.throwIfAborted();
          const n = Math.min(rowsPerChunk, rows - row);
          const bytes = n * rowBytes;
          let buf = bufs[k & 1];
          if (buf.byteLength < bytes + 8) buf = bufs[k & 1] = new ArrayBuffer(bytes + 8); // a single huge row
          const dst = new Uint8Array(buf, 0, bytes);
          fill(dst, new Uint32Array(buf, 0, (bytes + 3) >>> 2), n);
          if (pending) await pending;
          pending = sink.write(dst);
          o.onProgress?.({
            bytesWritten: w.dataBytesWritten,
            totalBytes,
            tensor: r.name,
            tensorIndex: ti,
            tensorCount: recipes.length,
          });
        }
      }
      if (pending) await pending;
    }
    o.signal?.throwIfAborted();
    await w.finish();
  } catch (err) {
    await pending?.catch(() => undefined);
    await w.abort();
    throw err;
  } finally {
    o.signal?.removeEventListener("abort", onAbort);
  }
  const result: SynthResult = {
    path: o.out,
    bytes: w.totalBytes,
    tensors: recipes.length,
    seconds: (performance.now() - start) / 1000,
  };
  if (planter) result.predictedSparsity = planter.predicted.slice();
  if (planter && o.gateRank) {
    result.predictors = planter.predictors;
    if (o.predictorsOut) {
      const share = planter.predictors.reduce((a, p) => a + p.noiseShare, 0) / planter.predictors.length;
      await writePredictorFile({
        output: o.predictorsOut,
        predictors: planter.predictors,
        experts: spec.experts,
        model: fingerprintOfPath(o.out),
        fsync: o.fsync,
        origin: `planted by powerinfer synth (gate rank ${o.gateRank}, margin ${PREDICTOR_MARGIN} noise deviations; quantization noise ${(100 * share).toFixed(1)}% of the pre-activation's deviation); not trained`,
      });
    }
  }
  return result;
}
