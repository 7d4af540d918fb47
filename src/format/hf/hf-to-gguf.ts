/**
 * A Hugging Face model directory (config.json, safetensors, tokenizer.json) to a GGUF in
 * llama.cpp's names and layout, streamed: each output tensor is produced a MiB or so of rows at
 * a time (read from its shard by the thread that converts them, then permuted or offset where the
 * plan says and converted to the output type: chunk-encoding.ts, on this thread or on workers), so
 * memory holds a few chunks (chunk-pipeline.ts), never a tensor or the model; the first ones are
 * converted while this thread makes the vocabulary. The GGUF writer writes under a temporary name
 * and renames at the end: an interrupted conversion leaves no file that looks complete.
 *
 * Types follow llama.cpp's converter: 1-D tensors, norms, biases and routers stay F32, a row
 * that is not a whole number of the type's blocks falls back to F16, and "auto" is BF16 for a
 * BF16 checkpoint, else F16. MXFP4 matrices (gpt-oss's published experts) stay MXFP4, their
 * bytes repacked and no value changed, under "auto" and every quantized type, as llama.cpp's
 * converter keeps them; asked for f32, f16 or bf16, they are written as their exact values
 * instead (an e2m1 code times a power of two: exact in f32 and bf16, and in f16 unless the
 * power is out of its range, which is refused).
 */
import { basename, join, resolve } from "node:path";
import { GGMLType, LLAMA_FILE_TYPE, traitsBytes, typeName, typeTraits } from "../ggml-types.js";
import { GGUFValueType } from "../gguf.js";
import { GGUFWriter, type GGUFWritableValue, type TensorSink } from "../gguf-writer.js";
import { ggufVocabFromHF } from "../hf-tokenizer.js";
import { f16Table, f32ToF16Array } from "../half.js";
import { dequantizeMXFP4, MXFP4_BLOCK_BYTES } from "../mxfp4.js";
import { HF_MXFP4_CODE_BYTES, MXFP4_BLOCK_VALUES, repackMxfp4Row } from "./mxfp4-blocks.js";
import { planConversion } from "./architectures.js";
import { HFConfig, HFConvertError } from "./hf-config.js";
import { pickColumns, pickedCount } from "./column-pick.js";
import {
  outputTypeFor,
  type ColumnPick,
  type ConversionPlan,
  type Mxfp4Source,
  type PlannedTensor,
  type RowRange,
} from "./plan.js";
import { SafetensorsCheckpoint, type SafetensorsFile, type ValueRead } from "./safetensors.js";
import { tokenizerFilesOnDemand, type HFTokenizerFiles } from "./tokenizer-files.js";
import { encodesInPlace, type EncodeJob } from "./chunk-encoding.js";
import { ChunkPipeline, inlineRunner, sizeClass, type ChunkRunner } from "./chunk-pipeline.js";

export const HF_OUTPUT_TYPES = ["auto", "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1"] as const;
export type HFOutputType = (typeof HF_OUTPUT_TYPES)[number];

const GGML_OF: Record<Exclude<HFOutputType, "auto">, GGMLType> = {
  f32: GGMLType.F32,
  f16: GGMLType.F16,
  bf16: GGMLType.BF16,
  q8_0: GGMLType.Q8_0,
  q4_0: GGMLType.Q4_0,
  q4_1: GGMLType.Q4_1,
  q5_0: GGMLType.Q5_0,
  q5_1: GGMLType.Q5_1,
};

export interface HFConvertProgress {
  /** source bytes read so far / in all */
  bytesDone: number;
  bytesTotal: number;
  tensor: string;
}

export interface HFConvertOptions {
  /** the model directory */
  input: string;
  output: string;
  type?: HFOutputType;
  signal?: AbortSignal;
  onProgress?: (p: HFConvertProgress) => void;
  fsync?: boolean;
  /** who converts the chunks (default: this thread); the same bytes whichever */
  runner?: ChunkRunner;
}

export interface HFConvertResult {
  output: string;
  arch: string;
  /** the type asked for, "auto" resolved */
  type: Exclude<HFOutputType, "auto">;
  tensors: number;
  bytes: number;
  seconds: number;
  /** the checkpoint's activation predictors, which the GGUF leaves out (a store takes them) */
  predictorsLeftOut: number;
  /** the checkpoint's MXFP4 matrices: kept as MXFP4, or written as their values (f32, f16, bf16) */
  mxfp4?: "kept" | "dequantized";
}

/** The types asked for by name that turn MXFP4 matrices into their values. */
const FLOAT_TYPES: readonly HFOutputType[] = ["f32", "f16", "bf16"];

/**
 * Values per chunk (4 MiB of f32): a few milliseconds of a worker's kernels, so that a large
 * tensor is many chunks for the workers to share, and few enough messages (each wakes a worker:
 * 3300 of them, at a quarter of this, took the converting thread 0.7 s of a 3 GB store).
 */
export const CHUNK_VALUES = 1 << 20;

/** The checkpoint's float type decides "auto", as llama.cpp's converter does: its first matrix's. */
function autoType(plan: ConversionPlan): Exclude<HFOutputType, "auto"> {
  for (const t of plan.tensors) {
    const src = t.parts?.[0]?.source;
    if (!src || src.shape.length < 2) continue;
    return src.dtype === "BF16" ? "bf16" : "f16";
  }
  return "f16";
}

/** The tokens llama.cpp's Phi-3 rule looks up (src/llama-vocab.cpp, llama_vocab::impl::load). */
const PHI3_RULE_TOKENS = ["</s>", "<unk>", "<s>", "<|endoftext|>"];

/**
 * general.name: the directory's name, unless llama.cpp could not load the file under it. When
 * the name contains "phi-3" or "phi3" (any case), llama.cpp's vocabulary loader sets Phi-3's
 * whitespace handling on "</s>", "<unk>", "<s>" and "<|endoftext|>", looking each up with
 * std::map::at: a vocabulary that lacks one (a Phi-3 checkpoint with another tokenizer) makes it
 * refuse the whole file ("_Map_base::at"), as it refuses the output of its own converter for
 * such a directory. Such a file is written without a name; the engine's vocabulary (which keys
 * the same rule on the same name) then reads it as llama.cpp does.
 */
export function ggufModelName(dir: string, tokens: readonly string[]): string | undefined {
  const name = basename(dir);
  const lower = name.toLowerCase();
  if (!lower.includes("phi-3") && !lower.includes("phi3")) return name;
  const have = new Set(tokens);
  return PHI3_RULE_TOKENS.every((t) => have.has(t)) ? name : undefined;
}

/** Open the directory and plan its conversion (nothing is written). */
export function openHFModel(dir: string): {
  cfg: HFConfig;
  ckpt: SafetensorsCheckpoint;
  plan: ConversionPlan;
  tok: HFTokenizerFiles;
} {
  const cfg = HFConfig.read(join(dir, "config.json"));
  const tok = tokenizerFilesOnDemand(dir);
  const ckpt = SafetensorsCheckpoint.open(dir);
  try {
    return { cfg, ckpt, tok, plan: planConversion(ckpt, cfg, tok) };
  } catch (e) {
    ckpt.close();
    throw e;
  }
}

/** What a directory's GGUF holds before its tensor data: its metadata in order, and each planned tensor's type. */
export interface GGUFLayout {
  /** the type asked for, "auto" resolved */
  type: Exclude<HFOutputType, "auto">;
  metadata: { key: string; value: GGUFWritableValue; type?: GGUFValueType }[];
  /** per plan.tensors entry */
  types: GGMLType[];
  /** the checkpoint's MXFP4 matrices: kept as MXFP4, or written as their values (f32, f16, bf16) */
  mxfp4?: "kept" | "dequantized";
}

/** A GGUF's tensor types for `want` (what its layout needs but the vocabulary). */
export type GGUFTyping = Omit<GGUFLayout, "metadata">;

/** The tensor types of a directory's GGUF for `want`: known before its vocabulary is read. */
export function ggufTypingOf(plan: ConversionPlan, want: HFOutputType): GGUFTyping {
  if (!HF_OUTPUT_TYPES.includes(want))
    throw new HFConvertError(`--type must be one of ${HF_OUTPUT_TYPES.join(", ")}, got "${want}"`);
  const type = want === "auto" ? autoType(plan) : want;
  const ggmlType = GGML_OF[type];
  const block = typeTraits(ggmlType)!.blockSize;
  const hasMxfp4 = plan.tensors.some((t) => t.mxfp4);
  const keepMxfp4 = hasMxfp4 && !FLOAT_TYPES.includes(want);
  return {
    type,
    types: plan.tensors.map((t) =>
      t.mxfp4 && keepMxfp4 ? GGMLType.MXFP4 : outputTypeFor(t.name, t.dims, ggmlType, block),
    ),
    ...(hasMxfp4 ? { mxfp4: keepMxfp4 ? "kept" : "dequantized" } : {}),
  };
}

/**
 * The GGUF's metadata and tensor types for `want`: one place for what a GGUF of the directory
 * and a store made straight from it (offline/convert/hf-source.ts) must agree on.
 */
export function ggufLayoutOf(
  dir: string,
  model: { cfg: HFConfig; plan: ConversionPlan; tok: HFTokenizerFiles },
  want: HFOutputType,
): GGUFLayout {
  const typing = ggufTypingOf(model.plan, want);
  return { ...typing, metadata: ggufMetadataOf(dir, model, typing) };
}

/** The metadata of a directory's GGUF typed as `typing` says, in order: its vocabulary read here. */
export function ggufMetadataOf(
  dir: string,
  { cfg, plan, tok }: { cfg: HFConfig; plan: ConversionPlan; tok: HFTokenizerFiles },
  { type, mxfp4 }: GGUFTyping,
): GGUFLayout["metadata"] {
  const vocab = ggufVocabFromHF(tok.tokenizerJson, tok.tokenizerConfig, {
    vocabSize: plan.vocabSize,
    config: cfg.json,
    chatTemplate: tok.chatTemplate,
  });
  // a key set twice keeps its first place and its last value, as GGUFWriter.setMetadata does
  const meta = new Map<string, { value: GGUFWritableValue; type?: GGUFValueType }>();
  const set = (key: string, value: GGUFWritableValue, type?: GGUFValueType) => meta.set(key, { value, type });
  // GGUFWriter always stores the alignment first
  set("general.alignment", 32, GGUFValueType.UINT32);
  set("general.architecture", plan.arch);
  set("general.type", "model");
  const name = ggufModelName(dir, vocab.get("tokenizer.ggml.tokens") as string[]);
  if (name !== undefined) set("general.name", name);
  for (const m of plan.metadata) if (m.key !== "general.architecture") set(m.key, m.value, m.type);
  // llama.cpp's converter: a float type over kept MXFP4 experts is MOSTLY_MXFP4_MOE
  const fileType = mxfp4 === "kept" && FLOAT_TYPES.includes(type) ? LLAMA_FILE_TYPE.mxfp4 : LLAMA_FILE_TYPE[type];
  set("general.file_type", fileType, GGUFValueType.UINT32);
  set("general.quantization_version", 2, GGUFValueType.UINT32);
  for (const [k, v] of vocab) set(k, v as GGUFWritableValue);
  return [...meta].map(([key, m]) => ({ key, ...m }));
}

export async function convertHFToGGUF(opts: HFConvertOptions): Promise<HFConvertResult> {
  const t0 = performance.now();
  const dir = resolve(opts.input);
  const output = resolve(opts.output);
  const { cfg, ckpt, plan, tok } = openHFModel(dir);
  let writer: GGUFWriter | undefined;
  try {
    const typing = ggufTypingOf(plan, opts.type ?? "auto");
    const { type, types } = typing;
    const w = (writer = new GGUFWriter(output, { fsync: opts.fsync }));
    plan.tensors.forEach((t, i) => w.addTensor(t.name, t.dims, types[i]));
    const runner = opts.runner ?? inlineRunner();
    const pipeline = new ChunkPipeline(runner);
    const chunks = new TensorChunks(ckpt, runner, pipeline);
    // The metadata (the vocabulary: tokenizer.json parsed and made into GGUF arrays, 0.4 s of
    // this thread for Llama 3's) is made while workers convert the first chunks: their results
    // wait until the header is fixed, up to EARLY_BYTES of them
    let headerFixed = () => {};
    const fixed = new Promise<void>((res) => (headerFixed = res));
    const header = () => {
      for (const m of ggufMetadataOf(dir, { cfg, plan, tok }, typing)) w.setMetadata(m.key, m.value, m.type);
      headerFixed();
    };
    const early = runner.depth > 0;
    if (early) pipeline.depth = Math.max(runner.depth, earlyChunks(GGML_OF[type]));
    else header();

    const bytesTotal = plan.tensors.reduce((a, t) => a + sourceBytes(t), 0);
    let bytesDone = 0;
    let submitted = () => {};
    const allSubmitted = new Promise<void>((res) => (submitted = res));
    const converting = (async () => {
      for (let i = 0; i < plan.tensors.length; i++) {
        const t = plan.tensors[i];
        // the tensor's sink once the header is fixed (a failure met by its first write)
        const opened = fixed.then(() => w.tensorSink(t.name));
        opened.catch(() => undefined);
        const sink = { write: async (b: Uint8Array) => (await opened).write(b) };
        // checked after every chunk, so that an interrupt stops a multi-GB tensor promptly
        await chunks.write(t, types[i], sink, (n) => {
          if (opts.signal?.aborted)
            throw opts.signal.reason instanceof Error ? opts.signal.reason : new HFConvertError("conversion aborted");
          bytesDone += n;
          opts.onProgress?.({ bytesDone, bytesTotal, tensor: t.name });
        });
      }
      submitted();
      await chunks.drain();
    })();
    // held (as a failure) until awaited below: not reported as unhandled meanwhile
    converting.catch(() => undefined);
    if (early) {
      // the early chunks submitted (or every chunk, or a failure), then the header
      await Promise.race([pipeline.holding(pipeline.depth), allSubmitted, converting]);
      header();
      pipeline.depth = runner.depth;
    }
    await converting;
    const bytes = writer.totalBytes;
    await writer.finish();
    writer = undefined;
    return {
      output,
      arch: plan.arch,
      type,
      tensors: plan.tensors.length,
      bytes,
      seconds: (performance.now() - t0) / 1000,
      predictorsLeftOut: plan.predictors.length,
      ...(typing.mxfp4 ? { mxfp4: typing.mxfp4 } : {}),
    };
  } catch (e) {
    // jobs still running read the checkpoint's files: they end before the files close
    await opts.runner?.idle?.();
    await writer?.abort();
    throw e;
  } finally {
    ckpt.close();
  }
}

/** Memory for the chunks converted before a GGUF's header is fixed (their buffers, in size classes). */
const EARLY_BYTES = 192 << 20;

/** Chunks of CHUNK_VALUES values of `type` that EARLY_BYTES hold. */
function earlyChunks(type: GGMLType): number {
  return Math.floor(EARLY_BYTES / sizeClass(traitsBytes(typeTraits(type)!, CHUNK_VALUES)));
}

/** The checkpoint bytes that make `t` (what progress counts). */
export function sourceBytes(t: PlannedTensor): number {
  if (t.mxfp4) return (t.mxfp4.blocks.bytes + t.mxfp4.scales.bytes) / t.mxfp4.step;
  if (!t.parts) return 0;
  return t.parts.reduce(
    (a, p) => a + (p.columns ? p.source.bytes : (p.source.bytes / Math.max(1, rowsOfSource(p))) * p.rows),
    0,
  );
}

function rowsOfSource(p: RowRange): number {
  const s = p.source.shape;
  return s.length <= 1 ? 1 : s.slice(0, -1).reduce((a, b) => a * b, 1);
}

/** Lets the event loop run (progress, an abort, the workers' answers) between chunks. */
const tick = () => new Promise<void>((res) => setImmediate(res));

/** Converted chunks waiting to be written behind the converting: the thread goes on reading meanwhile. */
const WRITES_BEHIND = 3;

/**
 * Output tensors, chunk by chunk: rows read from the checkpoint (or computed: picked columns,
 * MXFP4 decoded, rope_freqs), converted by the runner, written in order. `report(n)` counts
 * source bytes read. The caller drains (drain()) where it needs every chunk written: between
 * tensors it need not. The writes go one after another, behind the converting: waiting for each
 * (a 1 MB pwrite at a time) had the converting thread idle for a fifth of a GGUF's conversion.
 */
export class TensorChunks {
  /** the chunks' writes, chained in order; those not done yet */
  private writing: Promise<void> = Promise.resolve();
  private behind: Promise<void>[] = [];

  constructor(
    readonly ckpt: SafetensorsCheckpoint,
    readonly runner: ChunkRunner,
    readonly pipeline: ChunkPipeline,
  ) {}

  /** Every chunk converted and written. */
  async drain(): Promise<void> {
    await this.pipeline.drain();
    await this.writing;
    this.behind = [];
  }

  /** `bytes` written after the chunks before, then `release` returned to the pipeline; waits while WRITES_BEHIND wait. */
  private async writeBehind(
    sink: Pick<TensorSink, "write">,
    bytes: Uint8Array,
    ...release: Uint8Array[]
  ): Promise<void> {
    const done = this.writing.then(async () => {
      await sink.write(bytes);
      this.pipeline.release(...release);
    });
    // a failed write throws from the wait below or from drain() (held till then, not reported as unhandled)
    done.catch(() => undefined);
    this.writing = done;
    this.behind.push(done);
    while (this.behind.length > WRITES_BEHIND) await this.behind.shift();
  }

  async write(
    t: PlannedTensor,
    type: GGMLType,
    sink: Pick<TensorSink, "write">,
    report: (sourceBytes: number) => void,
  ): Promise<void> {
    const rowLen = t.dims[0];
    if (t.values) {
      const src = this.pipeline.buffer(t.values.length * 4);
      new Float32Array(src.buffer, 0, t.values.length).set(t.values);
      await this.encode(t, type, sink, src, "F32", t.values.length / rowLen);
      return;
    }
    if (t.mxfp4) {
      await this.writeMxfp4(t, t.mxfp4, type, sink, report);
      return;
    }
    for (const p of t.parts!) {
      const file = this.ckpt.fileOf(p.source);
      if (p.columns) {
        await this.writeColumnPart(file, t, p, p.columns, type, sink, report);
        continue;
      }
      const srcRowLen = p.source.shape.length === 0 ? 1 : p.source.shape[p.source.shape.length - 1];
      if (srcRowLen !== rowLen)
        throw new HFConvertError(
          `${p.source.file}: tensor "${p.source.name}" rows of ${srcRowLen} do not make "${t.name}" rows of ${rowLen}`,
        );
      const elemBytes = p.source.bytes / Math.max(1, p.source.elements);
      // whole heads per chunk when rows are permuted within a head
      const unit = p.ropeHeadRows ?? 1;
      const perChunk = Math.max(unit, Math.floor(CHUNK_VALUES / rowLen / unit) * unit);
      for (let r = 0; r < p.rows; r += perChunk) {
        const n = Math.min(perChunk, p.rows - r);
        // read by the thread that encodes it
        const read = file.valueRead(p.source, (p.firstRow + r) * rowLen, n * rowLen * elemBytes);
        report(n * rowLen * elemBytes);
        await this.encode(t, type, sink, read, p.source.dtype as EncodeJob["dtype"], n, p.ropeHeadRows);
        await tick();
      }
    }
  }

  /**
   * `rows` rows of `src` (of `dtype`: bytes from buffer(), or a checkpoint read for the runner to
   * make) converted and written in their turn.
   */
  private encode(
    t: PlannedTensor,
    type: GGMLType,
    sink: Pick<TensorSink, "write">,
    src: Uint8Array | ValueRead,
    dtype: EncodeJob["dtype"],
    rows: number,
    ropeHeadRows?: number,
  ): Promise<void> {
    const rowLen = t.dims[0];
    const job: EncodeJob = { dtype, rows, rowLen, ropeHeadRows, addOne: t.addOne, type, dst: new Uint8Array(0) };
    if (src instanceof Uint8Array) job.src = src;
    else job.read = src;
    const outBytes = rows * traitsBytes(typeTraits(type)!, rowLen);
    job.dst = job.src && encodesInPlace(job) ? job.src : this.pipeline.buffer(outBytes);
    return this.pipeline.submit(this.runner.encode(job), (done) =>
      this.writeBehind(sink, done.dst, ...(done.src ? [done.src, done.dst] : [done.dst])),
    );
  }

  /** f32 values (rows of the tensor, in a buffer from buffer()) converted and written in their turn. */
  private encodeValues(
    t: PlannedTensor,
    type: GGMLType,
    sink: Pick<TensorSink, "write">,
    values: Float32Array,
    rows: number,
  ): Promise<void> {
    return this.encode(t, type, sink, new Uint8Array(values.buffer, 0, values.length * 4), "F32", rows);
  }

  /** f32 room for `n` values, from buffer(). */
  private values(n: number): Float32Array {
    return new Float32Array(this.pipeline.buffer(n * 4).buffer, 0, n);
  }

  /**
   * A part made of picked columns (plan.ts's ColumnPick): the source is read a block at a time
   * (one whole matrix when transposing, since each output row runs down all of its rows) and its
   * picked columns emitted as rows.
   */
  private async writeColumnPart(
    file: SafetensorsFile,
    t: PlannedTensor,
    p: RowRange,
    pick: ColumnPick,
    type: GGMLType,
    sink: Pick<TensorSink, "write">,
    report: (sourceBytes: number) => void,
  ): Promise<void> {
    const s = p.source.shape;
    const rowLen = t.dims[0];
    const width = s[s.length - 1];
    const picked = pickedCount(width, pick);
    // transposed: one matrix per block, its rows are s[-2]; else: source rows of `width`, as many as fit
    const blockRows = pick.transpose ? s[s.length - 2] : Math.max(1, Math.floor(CHUNK_VALUES / width));
    const totalRows = rowsOfSource(p);
    const outRowLen = pick.transpose ? blockRows : picked;
    const outRows = pick.transpose ? (totalRows / blockRows) * picked : totalRows;
    if (s.length < (pick.transpose ? 3 : 2) || outRowLen !== rowLen || outRows !== p.rows)
      throw new HFConvertError(
        `${p.source.file}: tensor "${p.source.name}" [${s.join(", ")}] does not make ${p.rows} rows of ${rowLen} for "${t.name}"`,
      );
    const elemBytes = p.source.bytes / Math.max(1, p.source.elements);
    const block = new Float32Array(blockRows * width);
    const scratch = new Uint8Array(blockRows * width * elemBytes);
    for (let r = 0; r < totalRows; r += blockRows) {
      const n = Math.min(blockRows, totalRows - r);
      const vals = block.subarray(0, n * width);
      file.readF32(p.source, r * width, vals, scratch);
      report(n * width * elemBytes);
      const out = this.values(n * picked);
      pickColumns(vals, n, width, pick, out);
      await this.encodeValues(t, type, sink, out, pick.transpose ? picked : n);
      await tick();
    }
  }

  /**
   * An MXFP4 source (plan.ts's Mxfp4Source), expert by expert, a chunk of source rows at a time:
   * the picked rows repacked into ggml's MXFP4 blocks, written as they are when the output is
   * MXFP4, else decoded to their values and converted (f16 only where exact).
   */
  private async writeMxfp4(
    t: PlannedTensor,
    src: Mxfp4Source,
    type: GGMLType,
    sink: Pick<TensorSink, "write">,
    report: (sourceBytes: number) => void,
  ): Promise<void> {
    const [nExpert, srcRows, nBlocks] = src.scales.shape;
    const rowLen = t.dims[0];
    const outRows = t.dims[1];
    if (nBlocks * MXFP4_BLOCK_VALUES !== rowLen || Math.ceil((srcRows - src.first) / src.step) !== outRows)
      throw new HFConvertError(
        `${src.blocks.file}: tensor "${src.blocks.name}" [${src.blocks.shape.join(", ")}] does not make ${outRows} rows of ${rowLen} for "${t.name}"`,
      );
    const codeRow = nBlocks * HF_MXFP4_CODE_BYTES;
    const outRowBytes = nBlocks * MXFP4_BLOCK_BYTES;
    // whole steps of source rows per chunk, about CHUNK_VALUES bytes of codes
    const perChunk = Math.max(src.step, Math.floor(CHUNK_VALUES / codeRow / src.step) * src.step);
    const codes = new Uint8Array(perChunk * codeRow);
    const scales = new Uint8Array(perChunk * nBlocks);
    const blocksFile = this.ckpt.fileOf(src.blocks),
      scalesFile = this.ckpt.fileOf(src.scales);
    for (let e = 0; e < nExpert; e++)
      for (let r = 0; r < srcRows; r += perChunk) {
        const n = Math.min(perChunk, srcRows - r);
        const row0 = e * srcRows + r;
        blocksFile.readBytes(src.blocks, row0 * codeRow, codes.subarray(0, n * codeRow));
        scalesFile.readBytes(src.scales, row0 * nBlocks, scales.subarray(0, n * nBlocks));
        report((n * (codeRow + nBlocks)) / src.step);
        const rows = Math.ceil((n - src.first) / src.step);
        const packed = this.pipeline.buffer(rows * outRowBytes);
        for (let k = src.first, i = 0; k < n; k += src.step, i++)
          repackMxfp4Row(codes, k * codeRow, scales, k * nBlocks, nBlocks, packed, i * outRowBytes);
        if (type === GGMLType.MXFP4)
          await this.pipeline.submit(Promise.resolve(packed), async (bytes) => {
            await sink.write(bytes);
            this.pipeline.release(bytes);
          });
        else {
          const values = this.values(rows * rowLen);
          dequantizeMXFP4(packed, rows * rowLen, values, 0);
          this.pipeline.release(packed);
          if (type === GGMLType.F16) checkF16Exact(values, t.name);
          await this.encodeValues(t, type, sink, values, rows);
        }
        await tick();
      }
  }
}

/** MXFP4 values an f16 cannot hold exactly (a scale past f16's range) are refused, not rounded. */
function checkF16Exact(values: Float32Array, name: string): void {
  const h = new Uint16Array(values.length);
  f32ToF16Array(values, h);
  for (let i = 0; i < values.length; i++)
    if (f16Table[h[i]] !== values[i])
      throw new HFConvertError(
        `tensor "${name}": MXFP4 value ${values[i]} has no exact f16; convert with --type bf16 or f32 (exact), or keep MXFP4 (auto)`,
      );
}
