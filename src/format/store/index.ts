/**
 * The `.pi` neuron store (docs/store-format.md): a model laid out for flash offloading.
 *
 * One file: a 4 KiB header page, the fixed tensors (each 4 KiB aligned, in their GGUF type and
 * layout), the FFN as per-layer arrays of neuron bundles (Gate row i | Up row i | Down column i,
 * each bundle padded to a multiple of 4 KiB), then a JSON manifest. Every 4 KiB chunk between the
 * header and the manifest has a CRC-32 in the manifest; the manifest has one in the header, and
 * the header one of its own fields, so whatever reads part of the file can check exactly what it
 * read.
 *
 * checksum.ts: the CRC-32; header.ts: the magic, version and header page; manifest.ts: the
 * manifest's JSON; metadata-values.ts: GGUF metadata in it; ffn-types.ts: what a bundle may hold;
 * manifest-check.ts and layout-check.ts: checking a manifest that was read; writer.ts:
 * `StoreWriter`; reader.ts: `NeuronStore`.
 */
export { crc32, crc32Portable, crcHex } from "./checksum.js";
export { StoreError } from "./store-error.js";
export {
  decodeHeader,
  encodeHeader,
  isNeuronStore,
  readHeaderFields,
  startsWithStoreMagic,
  STORE_HEADER_FIELD_BYTES,
  STORE_MAGIC,
  STORE_OLDEST_VERSION,
  STORE_PAGE,
  STORE_VERSION,
  type StoreHeader,
  type StoreHeaderFields,
} from "./header.js";
export {
  base64Of,
  STORE_FORMAT_NAME,
  type EncodedMetadata,
  type StoreConversion,
  type StoreFixedManifest,
  type StoreLayerManifest,
  type StoreManifest,
} from "./manifest.js";
export { encodeMetadataValue } from "./metadata-values.js";
export { bundleParts, nearestStoreType, storeDownType, STORE_FFN_TYPES, type BundleParts } from "./ffn-types.js";
export { type StoreFFN, type StoreFFNLayer, type StoreTensorInfo } from "./manifest-check.js";
export { checkStoreLayout, storeRegions, type LayoutRegion, type StoreLayoutInput } from "./layout-check.js";
export { StoreWriter, type StoreManifestBody, type StoreWriterOptions } from "./writer.js";
export { NeuronStore, type ModelMetadataSource, type VerifyMode } from "./reader.js";
