/**
 * GGUF (or PowerInfer "PWRI" GGUF) -> `.pi` neuron store (docs/store-format.md). buildStore does
 * the work over a StoreSource (convert/store-source.ts), which a GGUF is and a Hugging Face
 * checkpoint read in place is too (convert/hf-source.ts, hf-to-store.ts).
 *
 * Streams: the fixed tensors are copied in 16 MiB pieces, and the FFN is built one layer at a
 * time. Per layer, Down is transposed in column bands (each band's slice of every row is read,
 * dequantized, and every column of the band requantized into the FFN type), then bundles are
 * assembled in groups of a few MiB from rows read on demand. So the converter holds one layer's
 * transposed Down plus a few buffers, never the model.
 *
 * Down cannot be copied: a GGUF stores it as nEmbd rows of nFF values, quantized in blocks along
 * a row, and a bundle needs column i (nEmbd values) contiguous, so the column is requantized with
 * blocks along it. The max and rms error of that (and of any type change of Gate/Up, e.g. from
 * K-quants, which have no quantizer here) are measured against the source values and recorded in
 * the manifest. A PWRI file's `ffn_down_t` is already transposed and is copied bit for bit when
 * its type is the store's.
 *
 * The stages, in convert/: store-source.ts (what is read, and how), source-ffn.ts (finding and
 * checking the source's FFN), predictor-source.ts (a separate predictor file), hot-first.ts (the
 * activation profile and the stored order), transpose-down.ts, row-conversion.ts (type changes
 * and their error), ffn-group.ts (one group's bundles and gate rows), store-metadata.ts (the
 * metadata carried over).
 */
import { basename, resolve } from "node:path";
import { GGMLType, traitsBytes, typeFromName, typeName, typeTraits } from "../format/ggml-types.js";
import { GGUFFile } from "../format/gguf.js";
import { checkFiniteOnRead } from "../format/finite-check.js";
import {
  base64Of,
  bundleParts,
  nearestStoreType,
  StoreWriter,
  type StoreLayerManifest,
  type StoreManifest,
} from "../format/store/index.js";
import { PREDICTOR_TENSOR_RE } from "../model/model.js";
import { ConvertError } from "./convert/convert-error.js";
import { partConversion, writeFFNGroup, type WrittenGroup } from "./convert/ffn-group.js";
import { hotFirstOrder, loadProfile, perToken, routedShare, type ActivationProfile } from "./convert/hot-first.js";
import { openPredictors, predictorsFit, type PredictorTensor } from "./convert/predictor-source.js";
import { ErrorStats } from "./convert/row-conversion.js";
import { inlineConvertRunner, type ConvertRunner } from "./convert/convert-runner.js";
import { ChunkPipeline } from "../format/hf/chunk-pipeline.js";
import { findFFN } from "./convert/source-ffn.js";
import { withSparseThreshold, withThresholds } from "./convert/store-metadata.js";
import { copyByPieces, ggufSource, type StoreSource } from "./convert/store-source.js";

export { ConvertError } from "./convert/convert-error.js";
export { hotFirstOrder, type ActivationProfile } from "./convert/hot-first.js";

/**
 * `--type`: the FFN type of the store (the sparse kernels read every one); "keep" keeps the
 * source's when a store can hold it, else takes the nearest (nearestStoreType: Q4_K -> Q4_1,
 * Q5_K -> Q5_1, Q2_K/Q3_K -> Q4_0, Q6_K -> Q8_0).
 */
export const CONVERT_TYPES = ["keep", "f32", "f16", "bf16", "q4_0", "q4_1", "q5_0", "q5_1", "q8_0"] as const;
export type ConvertType = (typeof CONVERT_TYPES)[number];

export interface ConvertProgress {
  stage: "fixed" | "ffn";
  /** FFN layer being converted (-1 while copying fixed tensors) */
  layer: number;
  layers: number;
  /** source bytes processed so far / in all */
  bytesDone: number;
  bytesTotal: number;
}

export interface ConvertOptions {
  input: string;
  output: string;
  type?: ConvertType;
  /** a profile, or the path of a JSON file holding one */
  profile?: string | ActivationProfile;
  signal?: AbortSignal;
  onProgress?: (p: ConvertProgress) => void;
  /** fsync before the final rename (default true) */
  fsync?: boolean;
  /**
   * The model's activation predictors: a GGUF holding `blk.N.fc1/fc2` (a predictors-only file, as
   * `synth --gate-rank` writes beside its model, or a PowerInfer GGUF of the same model), or
   * safetensors in PowerInfer's and TurboSparse's names (a .safetensors file or a directory:
   * predictor-safetensors.ts). They replace any the input has.
   */
  predictors?: string;
  /** who runs the element loops (default: this thread); the same store whichever */
  runner?: ConvertRunner;
}

export interface ConvertResult {
  output: string;
  bytes: number;
  seconds: number;
  ffnType: GGMLType;
  nEmbd: number;
  /** transformer layers */
  layers: number;
  /** experts per layer (0: a dense FFN) */
  experts: number;
  /** FFN neurons over all layers */
  neurons: number;
  bundleBytes: number;
  /** share of the FFN region that is padding (bundles are rounded up to 4 KiB) */
  paddingFraction: number;
  fixedTensors: number;
  conversion: StoreManifest["ffn"]["conversion"];
  ordered: boolean;
  /** predictors taken from `predictors`: one per layer, or per (layer, expert) */
  predictorGroups: number;
}

export async function convertToStore(opts: ConvertOptions): Promise<ConvertResult> {
  const input = resolve(opts.input),
    output = resolve(opts.output);
  if (input === output) throw new ConvertError(`the output ${output} would overwrite the input`);
  // NaN/Inf in the source is refused as it is read: a store holds only what was checked.
  return buildStore(ggufSource(checkFiniteOnRead(GGUFFile.open(input))), { ...opts, input, output });
}

/**
 * The store of `source` (which it closes): the fixed tensors copied, then each bundle group's
 * bundles and gate rows, then the manifest. Shared by every kind of source (store-source.ts).
 */
export async function buildStore(source: StoreSource, opts: ConvertOptions): Promise<ConvertResult> {
  const t0 = performance.now();
  const input = resolve(opts.input),
    output = resolve(opts.output);
  const file = source.model;
  const closers: (() => void)[] = [];
  let writer: StoreWriter | undefined;
  try {
    const { layers, nEmbd, fixed: own, experts } = findFFN(file);
    if (opts.predictors === undefined) predictorsFit(file, file, layers.length, experts);
    const preds =
      opts.predictors !== undefined
        ? openPredictors(resolve(opts.predictors), file, input, layers.length, nEmbd, layers[0].neurons, experts)
        : undefined;
    if (preds) closers.push(() => preds.close());
    // each fixed tensor with how to copy it; predictors from the predictor file win
    type Copy = (write: (piece: Uint8Array) => Promise<void>, check: () => void) => Promise<void>;
    const fixed: { t: PredictorTensor; copy: Copy }[] = [
      ...own
        .filter((t) => !(preds && PREDICTOR_TENSOR_RE.test(t.name)))
        .map((t) => ({ t, copy: ((w, c) => source.copyFixed(t, w, c)) as Copy })),
      ...(preds?.tensors ?? []).map((t) => ({
        t,
        copy: ((w, c) => copyByPieces(t.bytes, (d, o, n) => preds!.read(t, d, o, n), w, c)) as Copy,
      })),
    ];
    const want = opts.type ?? "keep";
    if (!CONVERT_TYPES.includes(want))
      throw new ConvertError(`--type must be one of ${CONVERT_TYPES.join(", ")}, got "${want}"`);
    const srcType = layers[0].gate.t.type;
    const ffnType = want === "keep" ? nearestStoreType(srcType) : typeFromName(want)!;
    const tr = typeTraits(ffnType)!;
    if (nEmbd % tr.blockSize !== 0)
      throw new ConvertError(
        `embedding width ${nEmbd} is not a multiple of the ${tr.name} block size ${tr.blockSize}: choose another --type`,
      );
    const rowBytes = traitsBytes(tr, nEmbd);
    const parts = bundleParts(ffnType, nEmbd, layers[0].biases !== null);
    const { bundleBytes } = parts;
    const prof = opts.profile !== undefined ? loadProfile(opts.profile, layers, file) : undefined;

    const bytesTotal =
      fixed.reduce((a, f) => a + f.t.bytes, 0) +
      layers.reduce((a, L) => a + L.gate.bytes + L.up.bytes + L.down.bytes, 0);
    let bytesDone = 0;
    const progress = (stage: ConvertProgress["stage"], layer: number) =>
      opts.onProgress?.({ stage, layer, layers: layers.length, bytesDone, bytesTotal });
    const check = () => {
      if (opts.signal?.aborted)
        throw opts.signal.reason instanceof Error ? opts.signal.reason : new ConvertError("conversion aborted");
    };

    writer = await StoreWriter.create(output, { fsync: opts.fsync });
    progress("fixed", -1);

    // fixed tensors, in source order, each on a page boundary
    const fixedManifest: StoreManifest["fixed"] = [];
    for (const { t, copy } of fixed) {
      check();
      await writer.pad();
      fixedManifest.push({ name: t.name, type: t.type, dims: t.dims, offset: writer.position, bytes: t.bytes });
      const at = writer.position;
      await copy(async (piece) => {
        await writer!.write(piece);
        bytesDone += piece.length;
        progress("fixed", -1);
      }, check);
      if (writer.position - at !== t.bytes)
        throw new ConvertError(`${input}: ${t.name} gave ${writer.position - at} bytes, expected ${t.bytes}`);
    }
    await writer.pad();

    // FFN, group by group: each group's pieces written as the runner gives them back, in order
    const shape = { ffnType, nEmbd, rowBytes, parts };
    const runner = opts.runner ?? inlineConvertRunner();
    const work = { runner, pipeline: new ChunkPipeline(runner) };
    const total = { gate: new ErrorStats(), up: new ErrorStats(), down: new ErrorStats() };
    const changed = { gate: null as GGMLType | null, up: null as GGMLType | null, down: null as GGMLType | null };
    const groups: { order: Int32Array; written: WrittenGroup }[] = [];
    for (let l = 0; l < layers.length; l++) {
      const L = layers[l];
      const n = L.neurons;
      const order = prof
        ? hotFirstOrder(prof.profile.layers[l].frequency)
        : Int32Array.from({ length: n }, (_, i) => i);
      const written = await writeFFNGroup(source, writer, L, order, shape, work, changed, {
        check,
        addBytes: (b) => {
          bytesDone += b;
        },
        report: () => progress("ffn", l),
      });
      groups.push({ order, written });
    }
    await work.pipeline.drain();
    const layerManifest: StoreLayerManifest[] = [];
    for (let l = 0; l < layers.length; l++) {
      const L = layers[l];
      const { order, written } = groups[l];
      const n = L.neurons;
      const { stats } = written;
      layerManifest.push({
        ...(L.expert >= 0 ? { layer: L.layer, expert: L.expert } : {}),
        offset: written.offset,
        neurons: n,
        order: base64Of(order),
        frequency: prof ? base64Of(perToken(prof.profile.layers[l])) : null,
        gate: partConversion(source, "gate", L, ffnType, stats),
        up: partConversion(source, "up", L, ffnType, stats),
        down: partConversion(source, "down", L, ffnType, stats),
        gateRows: written.gateRows,
      });
      for (const k of ["gate", "up", "down"] as const) total[k].merge(stats[k]);
    }

    const conversion = {
      gate: changed.gate === null ? null : total.gate.report(changed.gate),
      up: changed.up === null ? null : total.up.report(changed.up),
      down: changed.down === null ? null : total.down.report(changed.down),
    };
    const neurons = layers.reduce((a, L) => a + L.neurons, 0);
    const { bytes } = await writer.finish({
      source: source.record,
      metadata: withSparseThreshold(withThresholds(source.metadata(), prof?.thresholds), preds?.threshold),
      fixed: fixedManifest,
      ffn: {
        type: ffnType,
        typeName: typeName(ffnType),
        layout: "gguf",
        nEmbd,
        rowBytes,
        bundleBytes,
        parts: {
          gate: parts.gate,
          up: parts.up,
          down: parts.down,
          ...(parts.biases !== undefined ? { biases: parts.biases } : {}),
        },
        ...(parts.downType !== ffnType ? { downType: parts.downType } : {}),
        conversion,
        ...(experts > 0 ? { experts } : {}),
        layers: layerManifest,
      },
      profile: prof
        ? {
            file: prof.file ? basename(prof.file) : null,
            tokens: prof.profile.tokens ?? null,
            ...(experts > 0 ? { routed: prof.profile.layers.map(routedShare) } : {}),
          }
        : null,
    });
    writer = undefined;
    progress("ffn", layers.length - 1);
    return {
      output,
      bytes,
      seconds: (performance.now() - t0) / 1000,
      ffnType,
      nEmbd,
      layers: layers.length / Math.max(1, experts),
      experts,
      neurons,
      bundleBytes,
      paddingFraction: 1 - parts.dataBytes / bundleBytes,
      fixedTensors: fixed.length,
      conversion,
      ordered: !!prof,
      predictorGroups: preds ? layers.length : 0,
    };
  } catch (e) {
    // jobs still running read the source's files: they end before the files close
    await opts.runner?.idle?.();
    await writer?.abort();
    throw e;
  } finally {
    for (const close of closers) close();
    source.close();
  }
}
