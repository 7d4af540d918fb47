/**
 * A Hugging Face checkpoint as a store's source, read in place: the model is the GGUF that
 * convert DIR -o x.gguf would write (hf-to-gguf.ts's ggufLayoutOf: the same metadata, names,
 * shapes and types), but no GGUF is written. Fixed tensors are produced chunk by chunk as that
 * GGUF's bytes; Gate and Up rows are read as values where the checkpoint holds them and quantized
 * once into the store's type (the bytes the GGUF would hold, so the store's rows equal a store made
 * through the GGUF); Down's columns come straight from the checkpoint's values, each quantized once.
 */
import { basename } from "node:path";
import { GGMLType, traitsBytes, typeFromName, typeTraits } from "../../format/ggml-types.js";
import { findNonFinite, nonFiniteError } from "../../format/finite-check.js";
import { MetadataAccess, type GGUFTensorInfo, type GGUFValue, type ModelFile } from "../../format/gguf.js";
import { metadataEntry, valueAsRead } from "../../format/gguf-writer.js";
import { ggufLayoutOf, openHFModel, TensorChunks, type HFOutputType } from "../../format/hf/hf-to-gguf.js";
import { encodeRows } from "../../format/hf/chunk-encoding.js";
import { ChunkPipeline, inlineRunner, type ChunkRunner } from "../../format/hf/chunk-pipeline.js";
import type { PlannedTensor } from "../../format/hf/plan.js";
import { plainRowsRead, readPlannedMxfp4, readPlannedRows } from "../../format/hf/planned-rows.js";
import type { SafetensorsCheckpoint } from "../../format/hf/safetensors.js";
import { encodeMetadataValue, type EncodedMetadata } from "../../format/store/index.js";
import { ConvertError } from "./convert-error.js";
import type { MatrixView } from "./source-ffn.js";
import { HeldMatrix, type StoreSource } from "./store-source.js";

/** The end of the run of consecutive row numbers in `indices` from i. */
function runEnd(indices: Int32Array, i: number): number {
  let j = i + 1;
  while (j < indices.length && indices[j] === indices[j - 1] + 1) j++;
  return j;
}

/** The checkpoint seen as its GGUF: metadata and tensor infos, and (for fingerprints) a tensor's bytes. */
class HFModelFile extends MetadataAccess implements ModelFile {
  readonly magic = "GGUF" as const;
  readonly metadata = new Map<string, GGUFValue>();
  readonly tensors = new Map<string, GGUFTensorInfo>();
  /** each tensor's plan */
  readonly planned = new Map<string, PlannedTensor>();

  constructor(
    readonly path: string,
    readonly ckpt: SafetensorsCheckpoint,
  ) {
    super();
  }

  protected metadataError(message: string): Error {
    return new ConvertError(`${this.path}: ${message}`);
  }

  tensor(name: string): GGUFTensorInfo {
    const t = this.tensors.get(name);
    if (!t) throw new ConvertError(`${this.path}: missing tensor "${name}"`);
    return t;
  }

  /** Produces the whole tensor to give a piece of it: for the small reads of a fingerprint. */
  readTensor(t: GGUFTensorInfo, dst: Uint8Array, start = 0, length = t.bytes - start): void {
    dst.set(this.tensorData(t.name).subarray(start, start + length));
  }

  tensorData(name: string): Uint8Array {
    const t = this.tensor(name);
    const rows = t.elements / t.dims[0];
    const values = new Float32Array(t.elements);
    readPlannedRows(this.ckpt, this.planned.get(name)!, 0, rows, 0, t.dims[0], values, new Uint8Array(0));
    const out = new Uint8Array(t.bytes);
    encodeRows(t.type, values, rows, t.dims[0], out);
    return out;
  }

  close(): void {
    this.ckpt.close();
  }
}

/**
 * The directory `dir` as a store's source, its tensors typed as a GGUF of `type` would hold them,
 * the fixed tensors converted by `runner` (default: this thread). Also says what `type` resolved to and whether the
 * checkpoint has activation predictors.
 */
export function hfSource(
  dir: string,
  type: HFOutputType,
  runner: ChunkRunner = inlineRunner(),
): { source: StoreSource; type: string; arch: string; predictors: number; mxfp4?: "kept" | "dequantized" } {
  const { cfg, ckpt, plan, tok } = openHFModel(dir);
  try {
    const layout = ggufLayoutOf(dir, { cfg, plan, tok }, type);
    const model = new HFModelFile(dir, ckpt);
    const metadata: EncodedMetadata[] = [];
    for (const m of layout.metadata) {
      const e = metadataEntry(m.key, m.value, m.type);
      const read = valueAsRead(e);
      model.metadata.set(m.key, read);
      metadata.push([m.key, e.type, encodeMetadataValue(e.type, e.itemType === undefined ? [] : [e.itemType], read)]);
    }
    plan.tensors.forEach((t, i) => {
      const elements = t.dims.reduce((a, b) => a * b, 1);
      const tt = typeTraits(layout.types[i])!;
      model.tensors.set(t.name, {
        name: t.name,
        dims: t.dims,
        type: layout.types[i],
        elements,
        bytes: traitsBytes(tt, elements),
        fileIndex: 0,
        offset: 0,
      });
      model.planned.set(t.name, t);
    });
    const planned = (m: MatrixView) => model.planned.get(m.t.name)!;
    // raw bytes of a read (a run of rows, or a band's slice of one), grown to the largest: a
    // buffer made per read is memory V8 counts against collecting garbage
    let scratch = new Uint8Array(0);
    const room = (n: number) => {
      if (scratch.length < 4 * n) scratch = new Uint8Array(4 * n);
    };
    const chunks = new TensorChunks(ckpt, runner, new ChunkPipeline(runner));
    const down = new HeldMatrix();
    const source: StoreSource = {
      model,
      record: {
        file: basename(dir),
        bytes: ckpt.files.reduce((a, f) => a + f.size, 0),
        magic: "GGUF",
      },
      metadata: () => metadata,
      // MXFP4 experts kept as MXFP4 are copied as the GGUF's bytes; else the checkpoint's values
      valuesType: (m) => {
        const t = planned(m);
        if (t.mxfp4) return m.t.type === GGMLType.MXFP4 ? null : GGMLType.MXFP4;
        return typeFromName(t.parts![0].source.dtype) as GGMLType;
      },
      readRows: (m, indices, dst) => {
        const first = m.base / m.rowBytes;
        for (let i = 0; i < indices.length;) {
          const j = runEnd(indices, i);
          readPlannedMxfp4(ckpt, planned(m), first + indices[i], j - i, dst.subarray(i * m.rowBytes, j * m.rowBytes));
          i = j;
        }
      },
      rowsRead: (m, indices) =>
        runEnd(indices, 0) === indices.length
          ? plainRowsRead(ckpt, planned(m), m.base / m.rowBytes + indices[0], indices.length)
          : undefined,
      readRowValues: (m, indices, dst) => {
        const rowLen = m.t.dims[0];
        const first = m.base / m.rowBytes;
        for (let i = 0; i < indices.length;) {
          const j = runEnd(indices, i);
          room((j - i) * rowLen);
          const out = dst.subarray(i * rowLen, j * rowLen);
          readPlannedRows(ckpt, planned(m), first + indices[i], j - i, 0, rowLen, out, scratch);
          i = j;
        }
      },
      readDownBand: (m, c0, w, tile) => {
        // room for the band's raw bytes, widened at once
        room(m.rows * w);
        readPlannedRows(ckpt, planned(m), m.base / m.rowBytes, m.rows, c0, w, tile, scratch, (...a) =>
          down.bytesOf(...a),
        );
      },
      downBandStep: () => 1,
      copyFixed: async (t, write, check) => {
        // NaN or infinity refused as a GGUF's are when read for a store (finite-check.ts)
        let at = 0;
        const checked = async (piece: Uint8Array) => {
          const found = findNonFinite(t.type, piece, at);
          if (found) throw nonFiniteError(dir, t, found);
          at += piece.length;
          await write(piece);
        };
        await chunks.write(model.planned.get(t.name)!, t.type, { write: checked }, () => check());
        // the store builder goes on from where the tensor ends
        await chunks.drain();
      },
      close: () => model.close(),
    };
    return {
      source,
      type: layout.type,
      arch: plan.arch,
      predictors: plan.predictors.length,
      ...(layout.mxfp4 ? { mxfp4: layout.mxfp4 } : {}),
    };
  } catch (e) {
    ckpt.close();
    throw e;
  }
}
