/**
 * The layout check of a neuron store's manifest: what it says lives where must tile the file.
 *
 * The checksums prove that each 4 KiB chunk holds what the converter wrote, not that the manifest
 * points at the right chunks: a manifest that moves a fixed tensor by 4096 bytes (its own CRC
 * recomputed) passes every checksum, loads, and computes with the neighbour's bytes, giving other
 * text with exit 0. The writer lays regions out back to back (docs/store-format.md), so their
 * extents are implied by the tensor shapes and the FFN geometry, and any moved, resized or
 * forgotten region shows up as an overlap or a gap:
 *
 *  - no two regions (fixed tensors padded to 4 KiB, each layer's bundle array, each layer's
 *    gate-row copy, ranges the manifest declares unused) may overlap;
 *  - they come in the order the writer writes them (so swapped offsets are seen);
 *  - together they must cover the data region [4096, manifest) with no gap, in stores whose
 *    manifest has the `unused` list (written since it exists). Older stores may hold predictors
 *    that train-predictors --store replaced without saying so: there gaps are tolerated, overlaps
 *    are not.
 *
 * Also checked against the model's metadata: one FFN layer per block (a mixture of experts: one
 * group per block and expert), each as wide as the FFN.
 */
import { STORE_PAGE } from "./header.js";
import type { StoreManifest } from "./manifest.js";
import type { StoreFFNLayer, StoreTensorInfo } from "./manifest-check.js";
import type { GGUFValue } from "../gguf.js";

export interface LayoutRegion {
  /** what lives there, for messages: `fixed tensor "output.weight"`, `layer 3 bundles`, ... */
  readonly what: string;
  readonly start: number;
  readonly end: number;
}

export interface StoreLayoutInput {
  readonly metadata: Map<string, GGUFValue>;
  readonly tensors: readonly StoreTensorInfo[];
  readonly layers: readonly StoreFFNLayer[];
  /** experts per layer (0: a dense FFN): the groups are then layers x experts */
  readonly experts?: number;
  readonly unused: StoreManifest["unused"];
  /** the data region the checksums cover */
  readonly start: number;
  readonly end: number;
}

const span = (r: LayoutRegion) => `${r.what} [${r.start}, ${r.end})`;
const pages = (bytes: number) => Math.ceil(bytes / STORE_PAGE) * STORE_PAGE;

/** Every region the manifest describes, in file order. `fail` throws (it names the file). */
export function storeRegions(input: StoreLayoutInput, fail: (message: string) => never): LayoutRegion[] {
  const regions: LayoutRegion[] = [];
  for (const t of input.tensors)
    regions.push({ what: `fixed tensor "${t.name}"`, start: t.offset, end: t.offset + t.paddedBytes });
  for (const L of input.layers) {
    regions.push({ what: `layer ${L.index} bundles`, start: L.offset, end: L.offset + L.neurons * L.bundleBytes });
    if (L.gateRows !== null)
      regions.push({
        what: `layer ${L.index} gate rows`,
        start: L.gateRows,
        end: L.gateRows + pages(L.neurons * L.rowBytes),
      });
  }
  if (input.unused !== undefined) {
    if (!Array.isArray(input.unused)) fail("unused must be an array of { offset, bytes, what }");
    input.unused.forEach((u, i) => {
      const ok =
        typeof u === "object" &&
        u !== null &&
        typeof u.what === "string" &&
        Number.isSafeInteger(u.offset) &&
        Number.isSafeInteger(u.bytes) &&
        u.offset % STORE_PAGE === 0 &&
        u.bytes > 0 &&
        u.bytes % STORE_PAGE === 0 &&
        u.offset >= input.start &&
        u.offset + u.bytes <= input.end;
      if (!ok)
        fail(
          `unused[${i}] ${JSON.stringify(u).slice(0, 120)} is not { offset, bytes, what } of whole ${STORE_PAGE}-byte pages inside [${input.start}, ${input.end})`,
        );
      regions.push({ what: `unused region "${u.what}"`, start: u.offset, end: u.offset + u.bytes });
    });
  }
  return regions.sort((a, b) => a.start - b.start || a.end - b.end);
}

/**
 * Throws (through `fail`) when the layout is not one the writer could have produced; returns the
 * regions in file order otherwise.
 */
export function checkStoreLayout(input: StoreLayoutInput, fail: (message: string) => never): LayoutRegion[] {
  const arch = input.metadata.get("general.architecture");
  if (typeof arch === "string") {
    const blocks = input.metadata.get(`${arch}.block_count`);
    const experts = input.experts ?? 0;
    const modelExperts = input.metadata.get(`${arch}.expert_count`) ?? 0;
    if (experts !== modelExperts)
      fail(`ffn has ${experts} experts per layer, the model (${arch}.expert_count) has ${modelExperts}`);
    if (typeof blocks === "number" && blocks * Math.max(1, experts) !== input.layers.length)
      fail(
        experts > 0
          ? `ffn has ${input.layers.length} groups, the model (${arch}.block_count x ${arch}.expert_count) has ${blocks} x ${experts}`
          : `ffn has ${input.layers.length} layers, the model (${arch}.block_count) has ${blocks}`,
      );
    // an expert's width: expert_feed_forward_length where the model has it (qwen3moe), else
    // feed_forward_length (Mixtral's layout)
    const widthKey =
      experts > 0 && input.metadata.has(`${arch}.expert_feed_forward_length`)
        ? `${arch}.expert_feed_forward_length`
        : `${arch}.feed_forward_length`;
    const width = input.metadata.get(widthKey);
    if (typeof width === "number") {
      for (const L of input.layers)
        if (L.neurons !== width)
          fail(`ffn layer ${L.index} has ${L.neurons} neurons, the model (${widthKey}) has ${width}`);
    }
  }
  const regions = storeRegions(input, fail);
  // overlaps first: a moved region leaves a gap too, but the overlap says what collided
  let reach: LayoutRegion | undefined;
  for (const r of regions) {
    if (reach && r.start < reach.end) fail(`layout: ${span(r)} overlaps ${span(reach)}`);
    if (!reach || r.end > reach.end) reach = r;
  }
  // The writer lays regions out in manifest order (fixed tensors, then per layer its bundles and
  // right after them its gate rows): two entries whose offsets were swapped still tile the file,
  // but not in this order.
  let prev: StoreTensorInfo | undefined;
  for (const t of input.tensors) {
    if (prev && t.offset <= prev.offset)
      fail(
        `layout: fixed tensor "${t.name}" at ${t.offset} comes after "${prev.name}" at ${prev.offset} in the manifest but not in the file`,
      );
    prev = t;
  }
  input.layers.forEach((L, i) => {
    const before = input.layers[i - 1];
    if (before && L.offset <= before.offset)
      fail(`layout: ffn layer ${i} bundles at ${L.offset} do not come after layer ${i - 1}'s at ${before.offset}`);
    const end = L.offset + L.neurons * L.bundleBytes;
    if (L.gateRows !== null && L.gateRows !== end)
      fail(`layout: ffn layer ${i} gate rows at ${L.gateRows} do not follow its bundles, which end at ${end}`);
  });
  if (input.unused === undefined) return regions;
  let pos = input.start;
  let before = "the header page";
  for (const r of regions) {
    if (r.start > pos)
      fail(
        `layout: bytes [${pos}, ${r.start}) are described by nothing in the manifest (between ${before} and ${r.what})`,
      );
    pos = r.end;
    before = r.what;
  }
  if (pos < input.end)
    fail(
      `layout: bytes [${pos}, ${input.end}) are described by nothing in the manifest (between ${before} and the manifest)`,
    );
  return regions;
}
