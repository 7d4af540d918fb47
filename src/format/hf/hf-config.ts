/**
 * config.json of a Hugging Face model, read key by key: every value the conversion takes is
 * checked for its kind and range, and an error names the file and the key.
 */
import { readFileSync } from "node:fs";
import { errorText } from "../printable.js";

export class HFConvertError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "HFConvertError";
  }
}

type Json = Record<string, unknown>;

export class HFConfig {
  readonly path: string;
  readonly json: Json;

  constructor(path: string, json: unknown) {
    this.path = path;
    if (typeof json !== "object" || json === null || Array.isArray(json))
      throw new HFConvertError(`${path}: not a JSON object`);
    // A multimodal model's text half keeps its keys in text_config; the text model is what is
    // converted, so they are read as if at the top (the outer keys fill what it leaves out).
    const j = json as Json;
    const text = j.text_config;
    this.json = typeof text === "object" && text !== null && !Array.isArray(text) ? { ...j, ...(text as Json) } : j;
  }

  static read(path: string): HFConfig {
    let text: string;
    try {
      text = readFileSync(path, "utf8");
    } catch (e) {
      throw new HFConvertError(`${path}: cannot read: ${errorText(e)}`);
    }
    let json: unknown;
    try {
      json = JSON.parse(text);
    } catch (e) {
      throw new HFConvertError(`${path}: not JSON: ${errorText(e)}`);
    }
    return new HFConfig(path, json);
  }

  fail(key: string, msg: string): never {
    throw new HFConvertError(`${this.path}: "${key}" ${msg}`);
  }

  has(key: string): boolean {
    return this.json[key] !== undefined && this.json[key] !== null;
  }

  /** The first of `keys` the config sets (llama.cpp accepts several spellings of some). */
  private pick(keys: readonly string[]): string | undefined {
    return keys.find((k) => this.has(k));
  }

  /** A positive integer (or >= 0 with allowZero), at most `max` (default 2^31), under the first of `keys` that is set. */
  int(keys: string | readonly string[], opts: { allowZero?: boolean; fallback?: number; max?: number } = {}): number {
    const list = typeof keys === "string" ? [keys] : keys;
    const k = this.pick(list);
    if (k === undefined) {
      if (opts.fallback !== undefined) return opts.fallback;
      this.fail(list.join('" / "'), "is required but not set");
    }
    const v = this.json[k];
    const max = opts.max ?? 2 ** 31;
    if (typeof v !== "number" || !Number.isSafeInteger(v) || v < (opts.allowZero ? 0 : 1) || v > max)
      this.fail(
        k,
        `= ${JSON.stringify(v)} is not a ${opts.allowZero ? "non-negative" : "positive"} integer up to ${max}`,
      );
    return v;
  }

  optInt(keys: string | readonly string[], max?: number): number | undefined {
    const list = typeof keys === "string" ? [keys] : keys;
    return this.pick(list) === undefined ? undefined : this.int(list, { allowZero: true, max });
  }

  /** A finite number. */
  num(keys: string | readonly string[], fallback?: number): number {
    const list = typeof keys === "string" ? [keys] : keys;
    const k = this.pick(list);
    if (k === undefined) {
      if (fallback !== undefined) return fallback;
      this.fail(list.join('" / "'), "is required but not set");
    }
    const v = this.json[k];
    if (typeof v !== "number" || !Number.isFinite(v)) this.fail(k, `= ${JSON.stringify(v)} is not a number`);
    return v;
  }

  optNum(keys: string | readonly string[]): number | undefined {
    const list = typeof keys === "string" ? [keys] : keys;
    return this.pick(list) === undefined ? undefined : this.num(list);
  }

  str(key: string, fallback?: string): string {
    if (!this.has(key)) {
      if (fallback !== undefined) return fallback;
      this.fail(key, "is required but not set");
    }
    const v = this.json[key];
    if (typeof v !== "string") this.fail(key, `= ${JSON.stringify(v)} is not a string`);
    return v;
  }

  bool(key: string, fallback: boolean): boolean {
    if (!this.has(key)) return fallback;
    const v = this.json[key];
    if (typeof v !== "boolean") this.fail(key, `= ${JSON.stringify(v)} is not true or false`);
    return v;
  }

  /** A JSON object under `key`, or undefined when unset. */
  object(key: string): Json | undefined {
    if (!this.has(key)) return undefined;
    const v = this.json[key];
    if (typeof v !== "object" || Array.isArray(v)) this.fail(key, "is not an object");
    return v as Json;
  }

  /** The model class, `architectures[0]`. */
  architecture(): string {
    const a = this.json.architectures;
    if (!Array.isArray(a) || a.length === 0 || typeof a[0] !== "string")
      this.fail("architectures", `= ${JSON.stringify(a)} does not name the model class`);
    return a[0];
  }
}
