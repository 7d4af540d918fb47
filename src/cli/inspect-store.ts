/**
 * `powerinfer inspect STORE.pi`: what a neuron store holds and where (docs/store-format.md):
 * header, source, metadata, fixed tensors, the FFN's bundle geometry and per-layer placement,
 * predictors, profile, unused ranges, checksums and the layout the manifest describes; with
 * --verify, every chunk is read and checked against its checksum.
 */
import { typeName } from "../format/ggml-types.js";
import {
  NeuronStore,
  STORE_PAGE,
  storeRegions,
  type LayoutRegion,
  type StoreConversion,
} from "../format/store/index.js";
import { jsonValue, showValue } from "./inspect-format.js";

const PREDICTOR = /^blk\.(\d+)\.fc([12])\.weight$/;
const mib = (b: number) => `${(b / 2 ** 20).toFixed(2)} MiB`;

/** Gaps between regions (only a store written before the `unused` list may have them). */
function gaps(regions: LayoutRegion[], start: number, end: number): [number, number][] {
  const out: [number, number][] = [];
  let pos = start;
  for (const r of regions) {
    if (r.start > pos) out.push([pos, r.start]);
    pos = Math.max(pos, r.end);
  }
  if (pos < end) out.push([pos, end]);
  return out;
}

/** A number of a conversion record (informational: the reader does not check them, so neither is trusted here). */
const figure = (x: unknown) => (typeof x === "number" ? x.toPrecision(3) : JSON.stringify(x));

function conversion(c: StoreConversion | null): string {
  if (c === null || c === undefined) return "copied bit for bit";
  if (typeof c !== "object") return `conversion record ${JSON.stringify(c)}`;
  return `from ${String(c.fromName)}, max |error| ${figure(c.maxAbsError)}, rms ${figure(c.rmsError)} (max |value| ${figure(c.maxAbsValue)})`;
}

const isIdentity = (order: Int32Array) => order.every((n, i) => n === i);

export function inspectStore(path: string, opts: { json: boolean; all: boolean; verify: boolean }): void {
  const s = NeuronStore.open(path);
  try {
    // the fields NeuronStore.open checked, in the order `--json` has always listed them
    const { flags, manifestOffset, manifestBytes, manifestCrc32 } = s.header;
    const header = { flags, manifestOffset, manifestBytes, manifestCrc32 };
    const m = s.manifest;
    const tensors = [...s.tensors.values()];
    const predictors = tensors
      .filter((t) => PREDICTOR.test(t.name))
      .map((t) => ({ layer: Number(PREDICTOR.exec(t.name)![1]), name: t.name, type: typeName(t.type), dims: t.dims }));
    const { start, end, chunkBytes } = s.checksummed;
    const chunks = (end - start) / chunkBytes;
    const regions = storeRegions(
      { metadata: s.metadata, tensors, layers: s.ffn.layers, unused: m.unused, start, end },
      (msg) => {
        throw new Error(msg);
      },
    );
    const holes = gaps(regions, start, end);
    if (opts.verify) s.verifyAll();

    if (opts.json) {
      const meta: Record<string, unknown> = {};
      for (const [k, v] of s.metadata) meta[k] = jsonValue(v);
      const out = {
        format: m.format,
        version: s.version,
        file: path,
        bytes: s.fileSize,
        header,
        source: m.source,
        metadata: meta,
        tensors: tensors.map((t) => ({
          name: t.name,
          type: typeName(t.type),
          dims: t.dims,
          bytes: t.bytes,
          offset: t.offset,
        })),
        ffn: {
          type: typeName(s.ffn.type),
          nEmbd: s.ffn.nEmbd,
          rowBytes: s.ffn.rowBytes,
          bundleBytes: s.ffn.bundleBytes,
          parts: s.ffn.parts,
          downType: typeName(s.ffn.downType),
          conversion: s.ffn.conversion,
          layers: s.ffn.layers.map((L) => ({
            index: L.index,
            neurons: L.neurons,
            offset: L.offset,
            bytes: L.neurons * L.bundleBytes,
            gateRows: L.gateRows,
            order: isIdentity(L.order) ? "index" : "profile",
            frequency: L.frequency !== null,
          })),
        },
        predictors,
        profile: m.profile,
        unused: m.unused ?? null,
        checksums: { algorithm: "crc32", chunkBytes, start, end, chunks, verified: opts.verify },
        layout: { regions, gaps: holes },
      };
      console.log(JSON.stringify(out, null, 1));
      return;
    }

    const line = (t = "") => console.log(t);
    line(`file: ${path}`);
    line(`format: powerinfer-ts neuron store v${s.version}, ${mib(s.fileSize)}`);
    line(
      `header: manifest at ${header.manifestOffset} (${header.manifestBytes} bytes, crc32 ${header.manifestCrc32.toString(16).padStart(8, "0")}), flags ${header.flags}`,
    );
    line(`source: ${m.source.file} (${m.source.magic}, ${m.source.bytes} bytes)`);
    line(`\nmetadata (${s.metadata.size} keys):`);
    for (const [k, v] of s.metadata) line(`  ${k} = ${showValue(v, opts.all)}`);
    const fixedBytes = tensors.reduce((a, t) => a + t.bytes, 0);
    line(`\nfixed tensors (${tensors.length}, ${mib(fixedBytes)}):`);
    for (const t of tensors)
      line(
        `  ${t.name.padEnd(32)} ${typeName(t.type).padEnd(5)} [${t.dims.join(", ")}]`.padEnd(72) +
          ` ${mib(t.bytes).padStart(12)}  @${t.offset}`,
      );
    const f = s.ffn;
    line(
      `\nffn: ${typeName(f.type)}, nEmbd ${f.nEmbd}, row ${f.rowBytes} bytes, bundle ${f.bundleBytes} bytes (gate ${f.parts.gate}, up ${f.parts.up}, down ${f.parts.down}${f.downType !== f.type ? ` in ${typeName(f.downType)}` : ""}${f.parts.biases !== undefined ? `, gate and up biases ${f.parts.biases}` : ""}), ${f.layers.length} layers`,
    );
    line(`  padding: ${(100 * (1 - f.dataBytes / f.bundleBytes)).toFixed(1)}% of each bundle`);
    const records = f.conversion as unknown;
    for (const kind of ["gate", "up", "down"] as const) {
      const c = typeof records === "object" && records !== null ? (records as Record<string, unknown>)[kind] : records;
      line(`  ${kind}: ${conversion(c as StoreConversion | null)}`);
    }
    for (const L of f.layers) {
      line(
        `  layer ${L.index}: ${L.neurons} neurons, bundles at ${L.offset} (${L.neurons * L.bundleBytes} bytes), ` +
          `gate rows at ${L.gateRows ?? "none (read from the bundles)"}, order: ${isIdentity(L.order) ? "index order" : "hot first (profile)"}`,
      );
    }
    if (predictors.length === 0) line("predictors: none");
    else {
      const threshold = s.metadata.get("powerinfer.sparse_threshold");
      line(
        `predictors: ${predictors.length / 2} layers${threshold !== undefined ? `, threshold ${String(threshold)}` : ""}`,
      );
      for (const p of predictors) line(`  ${p.name.padEnd(24)} ${p.type.padEnd(5)} [${p.dims.join(", ")}]`);
    }
    line(`profile: ${m.profile ? `${m.profile.file ?? "(unnamed)"}, ${m.profile.tokens ?? "?"} tokens` : "none"}`);
    if (m.unused === undefined) line("unused: not recorded (a store written before the list existed)");
    else if (m.unused.length === 0) line("unused: none");
    else {
      line(`unused: ${m.unused.length} ranges`);
      for (const u of m.unused) line(`  [${u.offset}, ${u.offset + u.bytes}) ${u.what}`);
    }
    line(`checksums: crc32 over ${chunks} chunks of ${chunkBytes} bytes, [${start}, ${end})`);
    if (holes.length === 0)
      line(`layout: ${regions.length} regions tile [${STORE_PAGE}, ${end}) with no gap or overlap`);
    else
      line(
        `layout: ${regions.length} regions, no overlap; bytes described by nothing: ${holes.map(([a, b]) => `[${a}, ${b})`).join(", ")}`,
      );
    if (opts.verify) line("verified: every chunk matches its checksum");
  } finally {
    s.close();
  }
}
