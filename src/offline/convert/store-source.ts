/**
 * What the store builder (convert.ts's buildStore) reads from a model, whatever holds it: a GGUF
 * (ggufSource, here) or a Hugging Face checkpoint read in place (hf-source.ts). The model is
 * seen as the GGUF it is or would be (tensor names, types and shapes, metadata), so finding the
 * FFN, the type rules, profiles and predictors are one code for both; only reading differs.
 */
import { basename } from "node:path";
import { traitsBytes, typeTraits, type GGMLType } from "../../format/ggml-types.js";
import type { GGUFFile, GGUFTensorInfo, ModelFile } from "../../format/gguf.js";
import { dequantizeRow } from "../../format/quant.js";
import type { EncodedMetadata, StoreManifest } from "../../format/store/index.js";
import type { HalvesRead } from "../../format/hf/planned-rows.js";
import { readRows, type MatrixView } from "./source-ffn.js";
import { encodeMetadata } from "./store-metadata.js";

export interface StoreSource {
  /** the model as a GGUF: names, types, shapes and metadata (reading it is for fingerprints) */
  readonly model: ModelFile;
  /** the manifest's record of where the store came from */
  readonly record: StoreManifest["source"];
  /** the metadata the store keeps, each key with its GGUF type */
  metadata(): EncodedMetadata[];
  /**
   * The type of the values `m` is read from in place (a checkpoint's F32, F16 or BF16): then Gate
   * and Up rows come as f32 values (readRowValues) and are quantized once, their error measured
   * against them. null: rows come as bytes of m.t.type (readRows), copied or converted.
   */
  valuesType(m: MatrixView): GGMLType | null;
  /** rows `indices` of `m` into dst, in m.t.type */
  readRows(m: MatrixView, indices: Int32Array, dst: Uint8Array): void;
  /**
   * Rows `indices` of `m` as one read of stored F16 or BF16 values that the thread converting
   * them makes, where they are that (a run of a checkpoint tensor's rows); else undefined, and
   * readRowValues reads them.
   */
  rowsRead?(m: MatrixView, indices: Int32Array): HalvesRead | undefined;
  /** rows `indices` of `m` into dst as f32 values (a source with a valuesType) */
  readRowValues(m: MatrixView, indices: Int32Array, dst: Float32Array): void;
  /** Down (`m`, nEmbd rows of nFF): values [c0, c0 + w) of every row, as f32, row after row */
  readDownBand(m: MatrixView, c0: number, w: number, tile: Float32Array): void;
  /** bands of Down start on a multiple of this (the source's block) */
  downBandStep(m: MatrixView): number;
  /** a fixed tensor's bytes, in order, a piece at a time (`check` between pieces: an abort) */
  copyFixed(t: GGUFTensorInfo, write: (piece: Uint8Array) => Promise<void>, check: () => void): Promise<void>;
  close(): void;
}

/** Lets the event loop run (progress, an abort) between pieces. */
const tick = () => new Promise<void>((r) => setImmediate(r));

/** Copy `bytes` bytes that `read` gives at any offset, 16 MiB at a time. */
export async function copyByPieces(
  bytes: number,
  read: (dst: Uint8Array, start: number, length: number) => void,
  write: (piece: Uint8Array) => Promise<void>,
  check: () => void,
): Promise<void> {
  const piece = new Uint8Array(Math.min(bytes, 16 << 20));
  for (let o = 0; o < bytes; o += piece.length) {
    check();
    const n = Math.min(piece.length, bytes - o);
    read(piece, o, n);
    await write(piece.subarray(0, n));
    await tick();
  }
}

/** The most bytes of one Down matrix held for its bands (a larger one is read a band's slice of each row at a time). */
const HELD_DOWN_BYTES = 256 << 20;

/**
 * One Down matrix's stored bytes, read whole once for all of its bands: a band reads a slice of
 * every row, and reading those slices one by one was one small read per row per band (262K reads,
 * 2 s of system time, in a 3 GB llama's store). The buffer grows to the largest matrix held.
 */
export class HeldMatrix {
  private tensor: object | undefined;
  private at = -1;
  private buf = new Uint8Array(0);
  private held = new Uint8Array(0);

  /**
   * The `bytes` bytes from offset `at` of `tensor` as `read` fills them (read again only when
   * another tensor, offset or length is asked for), or undefined past the limit.
   */
  bytesOf(tensor: object, at: number, bytes: number, read: (dst: Uint8Array) => void): Uint8Array | undefined {
    if (bytes > HELD_DOWN_BYTES) return undefined;
    if (this.tensor !== tensor || this.at !== at || this.held.length !== bytes) {
      if (this.buf.length < bytes) this.buf = new Uint8Array(bytes);
      this.tensor = undefined;
      this.held = this.buf.subarray(0, bytes);
      read(this.held);
      [this.tensor, this.at] = [tensor, at];
    }
    return this.held;
  }
}

/** A GGUF (or PWRI) file as a store's source. */
export function ggufSource(file: GGUFFile): StoreSource {
  const down = new HeldMatrix();
  return {
    model: file,
    record: { file: basename(file.path), bytes: file.fileSize, magic: file.magic },
    metadata: () => encodeMetadata(file),
    valuesType: () => null,
    readRows: (m, indices, dst) => readRows(file, m, indices, dst),
    readRowValues: (m) => {
      throw new Error(`${m.name}: a GGUF's rows are read as bytes`);
    },
    readDownBand: (m, c0, w, tile) => {
      const src = typeTraits(m.t.type)!;
      const sb = traitsBytes(src, w);
      const at = traitsBytes(src, c0);
      const held = down.bytesOf(m.t, m.base, m.rows * m.rowBytes, (dst) =>
        file.readTensor(m.t, dst, m.base, dst.length),
      );
      const slice = new Uint8Array(held ? 0 : sb);
      for (let r = 0; r < m.rows; r++) {
        const at0 = r * m.rowBytes + at;
        if (held) dequantizeRow(m.t.type, held.subarray(at0, at0 + sb), w, tile, r * w);
        else {
          file.readTensor(m.t, slice, m.base + at0, sb);
          dequantizeRow(m.t.type, slice, w, tile, r * w);
        }
      }
    },
    downBandStep: (m) => typeTraits(m.t.type)!.blockSize,
    copyFixed: (t, write, check) => copyByPieces(t.bytes, (d, o, n) => file.readTensor(t, d, o, n), write, check),
    close: () => file.close(),
  };
}

/** The type a matrix's values are converted from, for the manifest: the values' own where read in place. */
export function convertedFrom(source: StoreSource, m: MatrixView): GGMLType {
  return source.valuesType(m) ?? m.t.type;
}
