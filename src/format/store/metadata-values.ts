/**
 * GGUF metadata values in the store's manifest: each key keeps its GGUF value type, and each value
 * is spelled in JSON so that it decodes to exactly what GGUFFile gives for the same GGUF bytes
 * (the config reader and the tokenizer must not see a difference between a store and its model).
 */
import { GGUFValueType, type GGUFValue } from "../gguf.js";
import { base64Of, fromBase64 } from "./manifest.js";

/**
 * Encode one scalar for JSON. Integers beyond 2^53 become decimal strings; f32/f64 values JSON
 * cannot spell (NaN, the infinities, -0) become strings too, so every value round-trips exactly.
 */
function encodeScalar(type: number, v: unknown): unknown {
  switch (type) {
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64:
      return typeof v === "bigint" ? v.toString() : v;
    case GGUFValueType.FLOAT32:
    case GGUFValueType.FLOAT64: {
      const n = v as number;
      if (Number.isNaN(n)) return "NaN";
      if (n === Infinity) return "Infinity";
      if (n === -Infinity) return "-Infinity";
      if (Object.is(n, -0)) return "-0";
      return n;
    }
    default:
      return v;
  }
}

/** Encode a value whose GGUF type is known (arrays: { t: item type, v: items or base64 }). */
export function encodeMetadataValue(type: number, itemTypes: readonly number[], v: GGUFValue): unknown {
  if (type !== GGUFValueType.ARRAY) return encodeScalar(type, v);
  const [item, ...inner] = itemTypes;
  if (item === GGUFValueType.FLOAT32 && v instanceof Float32Array) return { t: item, b64: base64Of(v) };
  if (item === GGUFValueType.INT32 && v instanceof Int32Array) return { t: item, b64: base64Of(v) };
  const arr = v as GGUFValue[];
  return { t: item, v: arr.map((x) => encodeMetadataValue(item, inner, x)) };
}

function bigToValue(v: bigint): number | bigint {
  return v <= BigInt(Number.MAX_SAFE_INTEGER) && v >= BigInt(Number.MIN_SAFE_INTEGER) ? Number(v) : v;
}

/** Decode to exactly the JS value GGUFFile gives for the same GGUF bytes. */
export function decodeMetadataValue(type: number, enc: unknown, fail: (m: string) => never, key: string): GGUFValue {
  const bad = (what: string): never => fail(`metadata "${key}": ${what}`);
  switch (type) {
    case GGUFValueType.UINT8:
    case GGUFValueType.INT8:
    case GGUFValueType.UINT16:
    case GGUFValueType.INT16:
    case GGUFValueType.UINT32:
    case GGUFValueType.INT32:
      if (typeof enc !== "number" || !Number.isInteger(enc)) bad(`expected an integer, found ${JSON.stringify(enc)}`);
      return enc as number;
    case GGUFValueType.UINT64:
    case GGUFValueType.INT64:
      if (typeof enc === "number" && Number.isInteger(enc)) return enc;
      if (typeof enc === "string" && /^-?\d+$/.test(enc)) return bigToValue(BigInt(enc));
      return bad(`expected a 64-bit integer, found ${JSON.stringify(enc)}`);
    case GGUFValueType.FLOAT32:
    case GGUFValueType.FLOAT64:
      if (typeof enc === "number") return enc;
      if (enc === "NaN") return NaN;
      if (enc === "Infinity") return Infinity;
      if (enc === "-Infinity") return -Infinity;
      if (enc === "-0") return -0;
      return bad(`expected a number, found ${JSON.stringify(enc)}`);
    case GGUFValueType.BOOL:
      if (typeof enc !== "boolean") bad(`expected a bool, found ${JSON.stringify(enc)}`);
      return enc as boolean;
    case GGUFValueType.STRING:
      if (typeof enc !== "string") bad(`expected a string, found ${JSON.stringify(enc)}`);
      return enc as string;
    case GGUFValueType.ARRAY: {
      if (typeof enc !== "object" || enc === null) return bad("expected an array object { t, v } or { t, b64 }");
      const { t, v, b64 } = enc as { t?: unknown; v?: unknown; b64?: unknown };
      if (typeof t !== "number") return bad("array item type missing");
      if (b64 !== undefined) {
        if (t === GGUFValueType.FLOAT32) return fromBase64(b64, Float32Array, fail, `metadata "${key}"`);
        if (t === GGUFValueType.INT32) return fromBase64(b64, Int32Array, fail, `metadata "${key}"`);
        return bad(`base64 arrays are only for f32 and i32 items, found item type ${t}`);
      }
      if (!Array.isArray(v)) return bad("array items missing");
      const out: GGUFValue[] = new Array(v.length);
      for (let i = 0; i < v.length; i++) out[i] = decodeMetadataValue(t, v[i], fail, key);
      return out;
    }
    default:
      return bad(`unknown GGUF value type ${type}`);
  }
}
