/**
 * Changing a row's type: dequantize, quantize into the store's type, and measure what the stored
 * row decodes to against the source values. The max and rms error per part go into the manifest.
 */
import { typeName, type GGMLType } from "../../format/ggml-types.js";
import { dequantizeRow, quantizeRow } from "../../format/quant.js";
import type { StoreConversion } from "../../format/store/index.js";
import { ConvertError } from "./convert-error.js";

/** The error of a conversion, accumulated over rows: max and rms against the source, and the largest source value. */
export class ErrorStats {
  maxAbs = 0;
  sumSq = 0;
  count = 0;
  maxValue = 0;
  add(src: Float32Array, got: Float32Array, n: number): void {
    let m = this.maxAbs,
      s = 0,
      v = this.maxValue;
    for (let i = 0; i < n; i++) {
      const d = Math.abs(got[i] - src[i]);
      if (d > m) m = d;
      s += d * d;
      const a = Math.abs(src[i]);
      if (a > v) v = a;
    }
    this.maxAbs = m;
    this.sumSq += s;
    this.count += n;
    this.maxValue = v;
  }
  merge(o: ErrorStats): void {
    this.maxAbs = Math.max(this.maxAbs, o.maxAbs);
    this.sumSq += o.sumSq;
    this.count += o.count;
    this.maxValue = Math.max(this.maxValue, o.maxValue);
  }
  report(from: GGMLType): StoreConversion {
    return {
      from,
      fromName: typeName(from),
      maxAbsError: this.maxAbs,
      rmsError: this.count ? Math.sqrt(this.sumSq / this.count) : 0,
      maxAbsValue: this.maxValue,
    };
  }
}

/** Converts rows of one length (the embedding width) between types, with scratch for the f32 values. */
export class RowConverter {
  private a: Float32Array;
  private b: Float32Array;
  constructor(readonly n: number) {
    this.a = new Float32Array(n);
    this.b = new Float32Array(n);
  }
  /** Convert one row of tensor `name` between types, measuring the error against the source values. */
  convert(name: string, from: GGMLType, src: Uint8Array, to: GGMLType, dst: Uint8Array, stats: ErrorStats): void {
    dequantizeRow(from, src, this.n, this.a);
    this.quantize(name, this.a, to, dst, stats);
  }
  /**
   * Quantize f32 values of tensor `name` and measure what the stored row decodes to against them.
   * A finite value the type cannot hold (F16 above 65504, or a block scale that overflows f16)
   * is refused: the kernels would read the infinity as a finite number.
   */
  quantize(name: string, values: Float32Array, to: GGMLType, dst: Uint8Array, stats: ErrorStats): void {
    quantizeRow(to, values, dst);
    dequantizeRow(to, dst, this.n, this.b);
    for (let i = 0; i < this.n; i++)
      if (!Number.isFinite(this.b[i])) {
        const wider = ["bf16", "f32", "q8_0"].filter((t) => t !== typeName(to).toLowerCase());
        throw new ConvertError(
          `${name}: the value ${values[i]} does not fit in ${typeName(to)} (it becomes ${this.b[i]}): convert with one of --type ${wider.join(", ")}`,
        );
      }
    stats.add(values, this.b, this.n);
  }
}
