/**
 * Checking a manifest that was read from a store, and the reader's view of it.
 *
 * Every field the reader relies on is checked before it is used: a manifest is JSON, so a store
 * edited by hand (its CRC recomputed) or written by another tool may say anything. What it says
 * about offsets is bounded by the checksummed region first, and the layout check
 * (layout-check.ts) then holds the regions to what the writer could have produced, so that a wrong
 * offset becomes an error here instead of wrong text later.
 */
import { traitsBytes, typeName, typeTraits, type GGMLType } from "../ggml-types.js";
import type { GGUFTensorInfo, GGUFValue } from "../gguf.js";
import { bundleParts, STORE_FFN_TYPES } from "./ffn-types.js";
import { STORE_PAGE, type StoreHeader } from "./header.js";
import { checkStoreLayout } from "./layout-check.js";
import { fromBase64, STORE_FORMAT_NAME, type StoreConversion, type StoreManifest } from "./manifest.js";
import { decodeMetadataValue } from "./metadata-values.js";
import { StoreError } from "./store-error.js";

/** A fixed tensor in a store: GGUFTensorInfo (fileIndex 0) plus its page-padded extent. */
export interface StoreTensorInfo extends GGUFTensorInfo {
  /** bytes rounded up to STORE_PAGE: what an O_DIRECT read of the tensor reads */
  readonly paddedBytes: number;
}

export interface StoreFFNLayer {
  /** the group's index in `ffn.layers`: the layer, or for a mixture of experts layer * experts + expert */
  readonly index: number;
  /** the model layer, and the expert (-1 for a dense FFN) */
  readonly layer: number;
  readonly expert: number;
  /** file offset of stored position 0's bundle */
  readonly offset: number;
  readonly neurons: number;
  readonly bundleBytes: number;
  /** bytes of one Gate/Up/Down part (a row of nEmbd values of `type`) */
  readonly rowBytes: number;
  readonly type: GGMLType;
  /** stored position -> original neuron index */
  readonly order: Int32Array;
  /** original neuron index -> stored position */
  readonly position: Int32Array;
  /** activation frequency per original neuron index from the profile, or null */
  readonly frequency: Float32Array | null;
  readonly gate: StoreConversion | null;
  readonly up: StoreConversion | null;
  readonly down: StoreConversion | null;
  /** file offset of the contiguous copy of the gate rows in stored order, or null (see the manifest) */
  readonly gateRows: number | null;
}

export interface StoreFFN {
  readonly type: GGMLType;
  readonly nEmbd: number;
  readonly rowBytes: number;
  readonly bundleBytes: number;
  /** byte offsets of Gate, Up and Down inside a bundle, and of the gate and up biases where the bundles carry them */
  readonly parts: { readonly gate: number; readonly up: number; readonly down: number; readonly biases?: number };
  /** the down columns' type (ffn-types.ts: storeDownType) */
  readonly downType: GGMLType;
  /** the bytes a bundle's parts and biases take, without its padding */
  readonly dataBytes: number;
  readonly conversion: StoreManifest["ffn"]["conversion"];
  /** experts per layer (0: a dense FFN, one group per layer) */
  readonly experts: number;
  readonly layers: readonly StoreFFNLayer[];
}

/** What checkManifest derives from a manifest: everything NeuronStore reads by. */
export interface CheckedManifest {
  /** the magic of the model it was converted from: "PWRI" when it came from a PowerInfer GGUF */
  readonly magic: "GGUF" | "PWRI";
  readonly metadata: Map<string, GGUFValue>;
  readonly tensors: Map<string, StoreTensorInfo>;
  readonly ffn: StoreFFN;
  /** the checksummed region [start, end): everything after the header page up to the manifest */
  readonly checksummed: { readonly start: number; readonly end: number; readonly chunkBytes: number };
  /** one CRC-32 per chunk of the checksummed region */
  readonly crcs: Uint32Array;
}

/**
 * Check the manifest of the store at `path` against its (already checked) header and every
 * structural rule of the format; throws a StoreError naming the file and the manifest's offset.
 */
export function checkManifest(path: string, header: StoreHeader, manifest: StoreManifest): CheckedManifest {
  const fail = (m: string, at = header.manifestOffset): never => {
    throw new StoreError(path, `manifest: ${m}`, at);
  };
  if (manifest.format !== STORE_FORMAT_NAME)
    fail(`format is ${JSON.stringify(manifest.format)}, expected ${JSON.stringify(STORE_FORMAT_NAME)}`);
  if (manifest.version !== header.version)
    fail(`version ${manifest.version} differs from the header's ${header.version}`);

  // checksums first: everything else is bounded by the region they cover
  const ck = manifest.checksums;
  if (
    !ck ||
    ck.algorithm !== "crc32" ||
    ck.chunkBytes !== STORE_PAGE ||
    ck.start !== STORE_PAGE ||
    ck.end !== header.manifestOffset
  ) {
    fail(
      `checksums must be crc32 over ${STORE_PAGE}-byte chunks from ${STORE_PAGE} to the manifest (${header.manifestOffset}); found ${JSON.stringify({ ...ck, crc32: undefined })}`,
    );
  }
  const crcs = fromBase64(ck.crc32, Uint32Array, fail, "checksums.crc32");
  const chunks = (ck.end - ck.start) / ck.chunkBytes;
  if (crcs.length !== chunks)
    fail(`checksums.crc32 has ${crcs.length} entries, the region [${ck.start}, ${ck.end}) has ${chunks} chunks`);
  const checksummed = { start: ck.start, end: ck.end, chunkBytes: ck.chunkBytes };
  const inRegion = (what: string, offset: unknown, bytes: number) => {
    if (typeof offset !== "number" || !Number.isSafeInteger(offset) || offset % STORE_PAGE !== 0)
      fail(`${what}: offset ${offset} is not a multiple of ${STORE_PAGE}`);
    if ((offset as number) < ck.start || (offset as number) + bytes > ck.end) {
      fail(
        `${what}: bytes [${offset}, ${(offset as number) + bytes}) lie outside the data region [${ck.start}, ${ck.end})`,
      );
    }
  };

  const src = manifest.source;
  if (!src || (src.magic !== "GGUF" && src.magic !== "PWRI")) fail(`source.magic must be "GGUF" or "PWRI"`);
  const magic = src.magic;

  if (!Array.isArray(manifest.metadata)) fail("metadata must be an array of [key, type, value]");
  const metadata = new Map<string, GGUFValue>();
  for (const e of manifest.metadata) {
    if (!Array.isArray(e) || e.length !== 3 || typeof e[0] !== "string" || typeof e[1] !== "number")
      fail(`metadata entry ${JSON.stringify(e).slice(0, 80)} is not [key, type, value]`);
    metadata.set(e[0], decodeMetadataValue(e[1], e[2], fail, e[0]));
  }

  if (!Array.isArray(manifest.fixed)) fail("fixed must be an array");
  const tensors = new Map<string, StoreTensorInfo>();
  for (const t of manifest.fixed) {
    const traits = typeTraits(t?.type);
    if (typeof t?.name !== "string" || !traits)
      fail(`fixed tensor ${JSON.stringify(t?.name)} has unknown type ${t?.type}`);
    if (
      !Array.isArray(t.dims) ||
      t.dims.length < 1 ||
      t.dims.length > 4 ||
      !t.dims.every((d) => Number.isSafeInteger(d) && d > 0)
    )
      fail(`fixed tensor "${t.name}" has bad dims ${JSON.stringify(t.dims)}`);
    const elements = t.dims.reduce((a, b) => a * b, 1);
    if (t.dims[0] % traits!.blockSize !== 0 || traitsBytes(traits!, elements) !== t.bytes) {
      fail(`fixed tensor "${t.name}": ${typeName(t.type)} [${t.dims.join(", ")}] cannot take ${t.bytes} bytes`);
    }
    const paddedBytes = Math.ceil(t.bytes / STORE_PAGE) * STORE_PAGE;
    inRegion(`fixed tensor "${t.name}"`, t.offset, paddedBytes);
    if (tensors.has(t.name)) fail(`fixed tensor "${t.name}" appears twice`);
    tensors.set(t.name, {
      name: t.name,
      dims: t.dims,
      type: t.type,
      elements,
      bytes: t.bytes,
      fileIndex: 0,
      offset: t.offset,
      paddedBytes,
    });
  }

  const f = manifest.ffn;
  if (!f || !STORE_FFN_TYPES.includes(f.type))
    fail(`ffn.type ${f?.type} is not a type a store may hold (${STORE_FFN_TYPES.map(typeName).join(", ")})`);
  if (f.layout !== "gguf") fail(`ffn.layout ${JSON.stringify(f.layout)} is not understood (expected "gguf")`);
  const tr = typeTraits(f.type)!;
  if (!Number.isSafeInteger(f.nEmbd) || f.nEmbd <= 0 || f.nEmbd % tr.blockSize !== 0)
    fail(`ffn.nEmbd ${f.nEmbd} is not a positive multiple of the ${tr.name} block size`);
  const rb = traitsBytes(tr, f.nEmbd);
  if (f.rowBytes !== rb) fail(`ffn.rowBytes ${f.rowBytes} should be ${rb} for ${f.nEmbd} ${tr.name} values`);
  const want = bundleParts(f.type, f.nEmbd, f.parts?.biases !== undefined);
  if ((f.downType ?? f.type) !== want.downType)
    fail(
      `ffn.downType ${f.downType ?? "(absent)"} should be ${want.downType} (${typeName(want.downType)}): a ${tr.name} store's down columns are ${typeName(want.downType)}`,
    );
  if (f.bundleBytes !== want.bundleBytes) fail(`ffn.bundleBytes ${f.bundleBytes} should be ${want.bundleBytes}`);
  if (f.parts?.gate !== 0 || f.parts.up !== want.up || f.parts.down !== want.down || f.parts.biases !== want.biases)
    fail(
      `ffn.parts ${JSON.stringify(f.parts)} should be ${JSON.stringify({ gate: 0, up: want.up, down: want.down, biases: want.biases })}`,
    );
  if (!Array.isArray(f.layers)) fail("ffn.layers must be an array");
  const experts = f.experts ?? 0;
  if (!Number.isSafeInteger(experts) || experts < 0 || experts > 1024)
    fail(`ffn.experts ${JSON.stringify(f.experts)} is not an expert count (0..1024)`);
  if (experts > 0 && f.layers.length % experts !== 0)
    fail(`ffn.layers has ${f.layers.length} groups, not a whole number of layers of ${experts} experts`);
  const layers: StoreFFNLayer[] = [];
  f.layers.forEach((L, index) => {
    const what =
      experts > 0
        ? `ffn group ${index} (layer ${Math.floor(index / experts)}, expert ${index % experts})`
        : `ffn layer ${index}`;
    const layer = experts > 0 ? Math.floor(index / experts) : index;
    const expert = experts > 0 ? index % experts : -1;
    if (experts > 0 ? L?.layer !== layer || L?.expert !== expert : L?.layer !== undefined || L?.expert !== undefined)
      fail(`${what}: says layer ${L?.layer}, expert ${L?.expert}`);
    if (!Number.isSafeInteger(L?.neurons) || L.neurons <= 0)
      fail(`${what}: neurons ${L?.neurons} is not a positive integer`);
    inRegion(what, L.offset, L.neurons * f.bundleBytes);
    const order = fromBase64(L.order, Int32Array, fail, `${what} order`);
    if (order.length !== L.neurons) fail(`${what}: order has ${order.length} entries for ${L.neurons} neurons`);
    const position = new Int32Array(L.neurons).fill(-1);
    for (let p = 0; p < order.length; p++) {
      const n = order[p];
      if (n < 0 || n >= L.neurons || position[n] !== -1)
        fail(`${what}: order is not a permutation (entry ${p} = ${n})`);
      position[n] = p;
    }
    const frequency = L.frequency == null ? null : fromBase64(L.frequency, Float32Array, fail, `${what} frequency`);
    if (L.gateRows != null)
      inRegion(`${what} gate rows`, L.gateRows, Math.ceil((L.neurons * rb) / STORE_PAGE) * STORE_PAGE);
    if (frequency && frequency.length !== L.neurons)
      fail(`${what}: frequency has ${frequency.length} entries for ${L.neurons} neurons`);
    layers.push({
      index,
      layer,
      expert,
      offset: L.offset,
      neurons: L.neurons,
      bundleBytes: f.bundleBytes,
      rowBytes: rb,
      type: f.type,
      order,
      position,
      frequency,
      gate: L.gate ?? null,
      up: L.up ?? null,
      down: L.down ?? null,
      gateRows: L.gateRows ?? null,
    });
  });
  const ffn: StoreFFN = {
    type: f.type,
    nEmbd: f.nEmbd,
    rowBytes: rb,
    bundleBytes: f.bundleBytes,
    parts: { gate: 0, up: want.up, down: want.down, ...(want.biases !== undefined ? { biases: want.biases } : {}) },
    downType: want.downType,
    dataBytes: want.dataBytes,
    conversion: f.conversion,
    experts,
    layers,
  };
  const layout = {
    tensors: [...tensors.values()],
    layers,
    experts,
    unused: manifest.unused,
    start: ck.start,
    end: ck.end,
  };
  checkStoreLayout({ metadata, ...layout }, fail);
  return { magic, metadata, tensors, ffn, checksummed, crcs };
}
