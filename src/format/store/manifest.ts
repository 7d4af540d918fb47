/**
 * The store's manifest (docs/store-format.md): the JSON document at the end of the file that says
 * what lives where (fixed tensors, per-layer neuron bundles, gate-row copies, unused ranges), the
 * model's metadata, the profile the FFN was ordered by and the CRC-32 of every 4 KiB chunk.
 *
 * These are the types of the JSON as the writer writes it; manifest-check.ts checks one that was
 * read and turns it into the reader's view.
 */
export const STORE_FORMAT_NAME = "powerinfer-ts store";

/** A GGUF metadata value as the manifest stores it: [key, GGUF value type, encoded value]. */
export type EncodedMetadata = [string, number, unknown];

/** How one tensor of the FFN was changed on the way into bundles (null in the manifest: copied bit for bit). */
export interface StoreConversion {
  /** GGML type id of the source tensor */
  from: number;
  fromName: string;
  /** max |stored value - source value| over the whole layer (or model), after dequantization */
  maxAbsError: number;
  /** root mean square of the same differences */
  rmsError: number;
  /** max |source value|, so the error can be read relative to the weights' scale */
  maxAbsValue: number;
}

export interface StoreLayerManifest {
  /** a mixture of experts (version 2): the layer and the expert this group of bundles is (groups go layer by layer, expert by expert) */
  layer?: number;
  expert?: number;
  /** file offset of stored position 0's bundle (4 KiB aligned) */
  offset: number;
  neurons: number;
  /** base64 of an Int32Array (little endian): stored position -> original neuron index */
  order: string;
  /** base64 of a Float32Array: activation frequency per *original* neuron index, or null */
  frequency: string | null;
  gate: StoreConversion | null;
  up: StoreConversion | null;
  down: StoreConversion | null;
  /**
   * file offset (4 KiB aligned) of a copy of the layer's gate rows in stored order, contiguous
   * (rowBytes each): when the gate rows cannot stay in memory they are streamed from here with
   * large sequential reads. Optional: absent (or null) in stores written before it existed.
   */
  gateRows?: number | null;
}

export interface StoreFixedManifest {
  name: string;
  type: number;
  /** ggml dimension order (dims[0] is the contiguous row length) */
  dims: number[];
  offset: number;
  bytes: number;
}

export interface StoreManifest {
  format: typeof STORE_FORMAT_NAME;
  version: number;
  source: { file: string; bytes: number; magic: "GGUF" | "PWRI" };
  metadata: EncodedMetadata[];
  fixed: StoreFixedManifest[];
  ffn: {
    type: number;
    typeName: string;
    /** "gguf": each part is a plain GGUF row (blocks in file order) */
    layout: "gguf";
    nEmbd: number;
    rowBytes: number;
    bundleBytes: number;
    /**
     * byte offsets of the three parts inside a bundle, and of the neuron's gate and up biases (two
     * f32; gpt-oss's experts) where the bundles carry them (absent: none)
     */
    parts: { gate: number; up: number; down: number; biases?: number };
    /** the down columns' type where it is not `type` (an MXFP4 store's are Q8_0: ffn-types.ts); absent: `type` */
    downType?: number;
    /** per tensor kind, the worst conversion over all layers (null: every layer copied exactly) */
    conversion: { gate: StoreConversion | null; up: StoreConversion | null; down: StoreConversion | null };
    /** a mixture of experts (version 2): experts per layer; `layers` then holds one group per (layer, expert) */
    experts?: number;
    layers: StoreLayerManifest[];
  };
  /**
   * The profile the FFN was ordered by. `routed` (a mixture of experts): per (layer, expert) group,
   * the share of profiled tokens routed to it; the groups' stored frequencies are per token (that
   * share times the expert's firing among its routed tokens). Absent in stores written before it.
   */
  profile: { file: string | null; tokens: number | null; routed?: number[] } | null;
  checksums: { algorithm: "crc32"; chunkBytes: number; start: number; end: number; crc32: string };
  /**
   * Byte ranges (whole pages) the manifest knowingly leaves unreferenced, e.g. predictors that
   * train-predictors --store replaced; absent in stores written before the layout check.
   */
  unused?: { offset: number; bytes: number; what: string }[];
}

/** Typed array elements as base64 (little endian, as the manifest stores them). */
export function base64Of(a: Int32Array | Float32Array | Uint32Array): string {
  return Buffer.from(a.buffer, a.byteOffset, a.byteLength).toString("base64");
}

/** The typed array `text` (base64) decodes to; `fail` throws when it is not one. */
export function fromBase64<T extends Int32Array | Float32Array | Uint32Array>(
  text: unknown,
  ctor: { new (n: number): T; BYTES_PER_ELEMENT: number },
  fail: (m: string) => never,
  what: string,
): T {
  if (typeof text !== "string") fail(`${what} should be a base64 string`);
  const raw = Buffer.from(text, "base64");
  if (raw.length % ctor.BYTES_PER_ELEMENT !== 0)
    fail(`${what} decodes to ${raw.length} bytes, not a whole number of ${ctor.BYTES_PER_ELEMENT}-byte values`);
  const out = new ctor(raw.length / ctor.BYTES_PER_ELEMENT);
  new Uint8Array(out.buffer).set(raw);
  return out;
}
