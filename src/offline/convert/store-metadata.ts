/**
 * The store's metadata: the source's key/value pairs re-encoded with their GGUF types (GGUFFile
 * keeps values only), plus what the conversion adds: a profile's calibrated thresholds and the
 * predictors' sparse threshold.
 */
import { closeSync, openSync, readSync, statSync } from "node:fs";
import { GGUFFile, GGUFValueType } from "../../format/gguf.js";
import { encodeMetadataValue, type EncodedMetadata } from "../../format/store/index.js";
import { THRESHOLDS_KEY } from "../../model/model.js";
import { SPARSE_THRESHOLD_KEY } from "../predictor-files.js";
import { ConvertError } from "./convert-error.js";

/**
 * Walk a GGUF header's key/value section and return each key's type path: [type] for scalars,
 * [ARRAY, itemType, ...] for arrays (nested arrays take their first element's item type).
 * The file was already validated by GGUFFile.open, so this only needs to skip correctly.
 */
function scanMetadataTypes(path: string): Map<string, number[]> {
  const fd = openSync(path, "r");
  try {
    const size = statSync(path).size;
    let buf = Buffer.alloc(0),
      bufAt = 0,
      pos = 0;
    const need = (n: number): number => {
      if (pos - bufAt >= 0 && pos + n <= bufAt + buf.length) return pos - bufAt;
      const len = Math.min(Math.max(n, 1 << 20), size - pos);
      if (len < n)
        throw new ConvertError(`${path}: header ends early while re-reading metadata types (at byte offset ${pos})`);
      buf = Buffer.alloc(len);
      let got = 0;
      while (got < len) {
        const r = readSync(fd, buf, got, len - got, pos + got);
        if (r === 0) throw new ConvertError(`${path}: unexpected end of file at byte offset ${pos + got}`);
        got += r;
      }
      bufAt = pos;
      return 0;
    };
    const u32 = () => {
      const o = need(4);
      pos += 4;
      return buf.readUInt32LE(o);
    };
    const u64 = () => {
      const o = need(8);
      pos += 8;
      return Number(buf.readBigUInt64LE(o));
    };
    const str = () => {
      const n = u64();
      const o = need(n);
      pos += n;
      return buf.toString("utf8", o, o + n);
    };
    const FIXED: Record<number, number> = { 0: 1, 1: 1, 2: 2, 3: 2, 4: 4, 5: 4, 6: 4, 7: 1, 10: 8, 11: 8, 12: 8 };
    const skip = (type: number): number[] => {
      if (type === GGUFValueType.STRING) {
        const n = u64(); // (not `pos += u64()`: that would add to the value of pos before the read)
        pos += n;
        return [type];
      }
      if (type !== GGUFValueType.ARRAY) {
        pos += FIXED[type];
        return [type];
      }
      const item = u32();
      const n = u64();
      if (item === GGUFValueType.STRING || item === GGUFValueType.ARRAY) {
        let inner: number[] = [];
        for (let i = 0; i < n; i++) {
          const t = skip(item);
          if (i === 0) inner = t.slice(1);
        }
        return [type, item, ...inner];
      }
      pos += n * FIXED[item];
      return [type, item];
    };
    pos = 8; // magic + version
    u64(); // tensor count
    const nKV = u64();
    const out = new Map<string, number[]>();
    for (let i = 0; i < nKV; i++) {
      const key = str();
      out.set(key, skip(u32()));
    }
    return out;
  } finally {
    closeSync(fd);
  }
}

/** The source's metadata as the store keeps it: every key with its GGUF type, less split.* . */
export function encodeMetadata(file: GGUFFile): EncodedMetadata[] {
  const types = scanMetadataTypes(file.paths[0]);
  const out: EncodedMetadata[] = [];
  for (const [key, value] of file.metadata) {
    // split.* describe how the source was cut into files; a store is one file
    if (key.startsWith("split.")) continue;
    const t = types.get(key);
    if (!t) throw new ConvertError(`${file.path}: metadata key "${key}" was not found when re-reading the header`);
    out.push([key, t[0], encodeMetadataValue(t[0], t.slice(1), value)]);
  }
  return out;
}

/**
 * The source's metadata, plus the profile's calibrated thresholds under THRESHOLDS_KEY (replacing
 * any the source had), so a run of the store applies them with no extra flag.
 */
export function withThresholds(
  metadata: EncodedMetadata[],
  thresholds: Float32Array | null | undefined,
): EncodedMetadata[] {
  if (!thresholds) return metadata;
  const entry: EncodedMetadata = [
    THRESHOLDS_KEY,
    GGUFValueType.ARRAY,
    encodeMetadataValue(GGUFValueType.ARRAY, [GGUFValueType.FLOAT32], thresholds),
  ];
  return [...metadata.filter((e) => e[0] !== THRESHOLDS_KEY), entry];
}

/** The predictors' sparse threshold under SPARSE_THRESHOLD_KEY (replacing any the source had). */
export function withSparseThreshold(metadata: EncodedMetadata[], threshold: number | undefined): EncodedMetadata[] {
  if (threshold === undefined) return metadata;
  const entry: EncodedMetadata = [
    SPARSE_THRESHOLD_KEY,
    GGUFValueType.FLOAT32,
    encodeMetadataValue(GGUFValueType.FLOAT32, [], threshold),
  ];
  return [...metadata.filter((e) => e[0] !== SPARSE_THRESHOLD_KEY), entry];
}
