/**
 * Predictable firing (gateRank r). Plain random gate rows make the firing set a function of the
 * whole residual: a predictor would need the gate itself. In trained ReLU models the gate's input
 * lives near a low-dimensional subspace, which is why PowerInfer's small predictors work. Here the
 * equivalent is built into the gate: row i (elements 32..) is a_i . B, B a random r x dim basis
 * per layer and a_i random coefficients, then quantized as any tensor (element 0 still takes the
 * planted bias, so the frequencies hold). The pre-activation is then bias_i + a_i . B x + e_i . x,
 * where e_i is the quantization's noise, and the predictor fc1 = [B; -B; e0] (times the norm
 * weights), fc2 row i = [a_i, -a_i, bias_i + delta_i] computes the first two terms exactly
 * (relu(u) - relu(-u) = u; e0 reads the constant C). Its misses are the neurons whose noise term
 * outweighs the margin delta_i = PREDICTOR_MARGIN times the noise's deviation: a fraction of a
 * percent of the firing ones; its false alarms cost only the read of a bundle whose gate then
 * computes to zero.
 */
import type { GGMLType } from "../../format/ggml-types.js";
import { dequantizeRow, quantizeRow } from "../../format/quant.js";
import { fillRandom, SynthStream } from "../../model/firing.js";
import type { PredictorWeights } from "../../predictor-training/predictor-train.js";
import { RESERVED } from "./first-block.js";

/** The planted predictor's margin, in deviations of a neuron's quantization noise. */
export const PREDICTOR_MARGIN = 2;

/** A predictor the construction implies. */
export interface PlantedPredictor extends PredictorWeights {
  /** mean over neurons: the deviation of the gate's quantization noise over that of its whole pre-activation */
  noiseShare: number;
}

/**
 * Draws a predictable layer's gate rows from its basis and fills in the predictor they imply,
 * one group (a layer, or an expert of a mixture's layer) after another.
 */
export class PredictorPlanter {
  readonly predictors: PlantedPredictor[] = [];
  private basis = new Float32Array(0);
  private readonly rowF: Float32Array;
  private readonly rowQ: Float32Array;
  private readonly coefWords: Uint32Array;
  private current: PlantedPredictor | undefined;

  /**
   * d: the residual width; ffn: neurons per group; mixture: whether groups are experts (their
   * bases are drawn from per-expert streams); type: the gate's type.
   */
  constructor(
    private readonly d: number,
    private readonly ffn: number,
    private readonly rank: number,
    private readonly seed: number,
    private readonly mixture: boolean,
    private readonly type: GGMLType,
  ) {
    this.rowF = new Float32Array(d);
    this.rowQ = new Float32Array(d);
    this.coefWords = new Uint32Array(rank);
  }

  /**
   * A group's gate basis (rank x dim) and its predictor's fc1 (zero where the residual is).
   * std: the deviation of the gate's values; ffnNorm: the layer's ffn_norm weights.
   */
  start(layer: number, expert: number, std: number, ffnNorm: Float32Array): void {
    const { d, rank } = this;
    const words = new Uint32Array(rank * d);
    const key = this.mixture ? `blk.${layer}.ffn_gate_exps.${expert}.basis` : `blk.${layer}.ffn_gate.basis`;
    fillRandom(new SynthStream(this.seed, key), words, words.length);
    // uniform values with deviation std / sqrt(rank): a row a . B, a of unit deviation, then
    // has the deviation an ordinary row has
    const a = (std / Math.sqrt(rank)) * Math.sqrt(3);
    const B = (this.basis = new Float32Array(rank * d));
    // (the reserved columns meet zeros in the residual; they are drawn anyway so that block 0
    // has an ordinary scale for the bias to be planted into)
    for (let i = 0; i < rank * d; i++) B[i] = unitUniform(words[i]) * a;
    const w = ffnNorm;
    if (!(w[0] > 0))
      throw new Error(
        `synthetic model: ffn_norm weight 0 of layer ${layer} is ${w[0]}; the planted predictor needs it positive (this is a bug in the generator)`,
      );
    const hidden = 2 * rank + 1;
    const fc1 = new Float32Array(hidden * d);
    for (let k = 0; k < rank; k++) {
      for (let j = RESERVED; j < d; j++) {
        const v = B[k * d + j] * w[j];
        fc1[k * d + j] = v;
        fc1[(rank + k) * d + j] = -v;
      }
    }
    fc1[2 * rank * d] = w[0]; // reads the constant: relu(w0 C) = w0 C
    this.current = {
      hidden,
      nIn: d,
      nOut: this.ffn,
      fc1,
      fc2: new Float32Array(this.ffn * hidden),
      threshold: 0,
      noiseShare: 0,
    };
    this.predictors.push(this.current);
  }

  /** Gate row i of a predictable group: a_i . B in the file's type, a_i recorded in fc2. */
  lowRankRow(b: Uint8Array, off: number, rowBytes: number, i: number, stream: SynthStream): void {
    const { d, rank, rowF, basis: B } = this;
    const p = this.current!;
    const h = p.hidden;
    fillRandom(stream, this.coefWords, rank);
    rowF.fill(0);
    for (let k = 0; k < rank; k++) {
      const ak = unitUniform(this.coefWords[k]) * Math.sqrt(3);
      p.fc2[i * h + k] = ak;
      p.fc2[i * h + rank + k] = -ak;
      const o = k * d;
      for (let j = 0; j < d; j++) rowF[j] += ak * B[o + j];
    }
    quantizeRow(this.type, rowF, b.subarray(off, off + rowBytes));
  }

  /**
   * After row i's bias is planted: the predictor's constant term, the bias plus the margin over
   * the row's quantization noise (what the predictor cannot see). sigma: the deviation of the
   * rest of the pre-activation (raw residual units); omega: the residual's variance per dimension
   * times the squared norm weight; wc: what element 0 is multiplied by (norm weight 0 times C).
   */
  finishRow(
    b: Uint8Array,
    off: number,
    rowBytes: number,
    i: number,
    sigma: number,
    omega: Float64Array,
    wc: number,
  ): void {
    const { d, rank, rowF, rowQ } = this;
    const p = this.current!;
    dequantizeRow(this.type, b.subarray(off, off + rowBytes), d, rowQ);
    let noise = 0;
    for (let j = RESERVED; j < d; j++) {
      const e = rowQ[j] - rowF[j];
      noise += e * e * omega[j];
    }
    noise = Math.sqrt(noise);
    p.fc2[i * p.hidden + 2 * rank] = rowQ[0] + (PREDICTOR_MARGIN * noise) / wc;
    if (sigma > 0) p.noiseShare += noise / sigma / this.ffn;
  }
}

/** 32 random bits -> uniform on (-1, 1). */
function unitUniform(word: number): number {
  return ((word >>> 8) + 0.5) / 8388608 - 1;
}
