/**
 * Planted activation sparsity: the rows of a plain random model (random-rows.ts) rewritten so a
 * chosen share of FFN neurons outputs exactly zero, at the rates of the firing law
 * (src/model/firing.ts), and, with a gate rank, so that a small predictor can tell which fire
 * (planted-predictor.ts). The construction follows; the arithmetic on a row's blocks is in
 * row-moments.ts and first-block.ts.
 */
import { GGMLType, traitsBytes, typeTraits } from "../../format/ggml-types.js";
import { f16Table, f32ToF16 } from "../../format/half.js";
import { plannedFiring, SynthStream } from "../../model/firing.js";
import { readBlock0, RESERVED, solveBlock0, writeBlock0, type BlockLevels } from "./first-block.js";
import { normCdf, normQuantile, reluMoments } from "./normal.js";
import { PredictorPlanter, type PlantedPredictor } from "./planted-predictor.js";
import { rowFiller, type RowFiller } from "./random-rows.js";
import { rowMoments } from "./row-moments.js";
import { GGML_TYPE, type SynthActivation, type SynthShapeSpec, type SynthType, type TensorRecipe } from "./shapes.js";

export { RESERVED } from "./first-block.js";
export { PREDICTOR_MARGIN, type PlantedPredictor } from "./planted-predictor.js";

// ---------------------------------------------------------------------------------------------
// Planted activation sparsity
//
// The construction. Residual dimension 0 carries a large constant C: every token embedding has
// C there and zeros in dimensions 1..31 (the rest of its quant block), and rows 0..31 of every
// attn_output and ffn_down are zero, so no layer changes them. Column 0 of every matrix that
// reads the normalized residual (attn_q/k/v, output, and ffn_up under relu) is zero, so the
// constant reaches only ffn_gate (and ffn_up under drelu).
// RMSNorm multiplies the whole residual by one positive number per token, which cannot change
// a sign: neuron i fires exactly when  W[i,0] w0 C + sum_{j>0} W[i,j] w_j x_j > 0,  x being the
// raw residual and w the ffn_norm weights. The sum is a random projection of the residual, close
// to Gaussian across tokens with mean mu_i and deviation sigma_i, so W[i,0] = (sigma_i z_i -
// mu_i) / (w0 C) with z_i = PhiInverse(p_i) makes the neuron fire with probability p_i. Under
// dReLU the up row gets the same kind of bias, and the two events (nearly independent: the rows
// are independent random vectors) each have probability sqrt(p_i).
//
// sigma_i and mu_i come from the generated row itself (after quantization: the bias is written
// into the row's first block with a scale chosen so that it is exact) and from a running model
// of the residual stream: its per-dimension variance v_j and, under dReLU (whose outputs are
// never negative), its mean m_j. Both are known in closed form because the generator chooses
// the scales: each FFN adds variance G/L per dimension (ffn_down's scale is set from the
// Gaussian moments of the planned activations), attention adds a quarter of that at position 0
// and, averaging over ever more positions, next to nothing later. The dReLU mean is pushed
// through the actual generated ffn_down rows; in attn_v and output, element 0 cancels it (so
// attention carries no constant and the logits have no fixed favourites). So the residual's
// variance grows from 1 to 1 + G over the depth whatever the shape, which keeps 40 layers finite.
//
// Frequencies: the power law of src/model/firing.ts (plannedFiring), ranks dealt to neurons by a
// seeded shuffle per layer.
//
// A mixture of experts (Mixtral's layout) is the same construction per expert: every expert
// reads the same normalized residual, so each gets its own biases, its own shuffle of the firing
// law (plannedFiring's expert argument: each expert has its own hot neurons), and with a gate rank
// its own basis and predictor. The FFN's output is the routed experts' outputs weighted by
// probabilities that sum to 1; with k experts used and weights near 1/k it has 1/k of one
// expert's variance, so each expert's ffn_down is drawn k times as wide in variance, and under dReLU
// the mean it adds is the experts' mean (routing spreads tokens over them). The router reads the
// normalized residual too: its column 0 is zero (or, under dReLU, cancels the residual's mean), so
// neither the constant nor the mean favours an expert, and its rows are scaled for logits of
// deviation ROUTER_LOGIT_STD, so the choice follows the token.
//
// Predictable firing (gateRank r): the gate rows are drawn from a low-rank basis per layer, and
// the predictor that implies is written alongside (planted-predictor.ts).

export const SPARSITY_MIN = 0.1;
export const SPARSITY_MAX = 0.99;
export const ALPHA_MIN = 0;
export const ALPHA_MAX = 4;
export const GATE_RANK_MAX = 1024;

/** Residual variance added by all the FFNs together (the embeddings bring 1). */
const GROWTH = 2;
/** Attention's variance at position 0, relative to an FFN's. */
const ATTN_SHARE = 0.25;
/** C^2 relative to the embedding's summed variance: enough to make the biases ordinary-sized weights. */
const KAPPA = 2;
/** Deviation of a router logit across tokens: clear favourites per token, none overall. */
const ROUTER_LOGIT_STD = 1;

const F16 = f16Table;

/**
 * Follows the tensors in file order (embeddings, then per layer norms, attention, FFN, then the
 * output), rewriting each generated row as the construction needs and keeping the running model
 * of the residual stream that the next tensors' biases and scales are computed from.
 */
export class SparsityPlanter {
  readonly predicted: number[] = [];
  private readonly d: number;
  private readonly ffn: number;
  /** experts per layer (1 when dense) and experts used per token */
  private readonly experts: number;
  private readonly used: number;
  private readonly type: GGMLType;
  private readonly quantized: boolean;
  /** E[(value / std)^2] of generated weights: block scales vary by a uniform factor in [0.75, 1.25] */
  private readonly ef2: number;
  private readonly drelu: boolean;
  private readonly C: number;
  private readonly dF: number;
  private readonly dA: number;
  /** residual variance per dimension, and (dReLU) mean; index 0 (the constant) unused */
  private readonly v: Float64Array;
  private readonly m: Float64Array;
  private attnNorm = new Float32Array(0);
  private ffnNorm = new Float32Array(0);
  private outNorm = new Float32Array(0);
  private kNorm = 1;
  private readonly omega: Float64Array;
  private readonly nu: Float64Array;
  private readonly zeroW: Float64Array;
  // per neuron of the current layer (of every expert of a mixture: expert e's at e * ffn)
  private zGate = new Float64Array(0);
  private zUp = new Float64Array(0);
  private readonly sg: Float64Array;
  private readonly zg: Float64Array;
  private readonly su: Float64Array;
  private readonly zu: Float64Array;
  private readonly eh: Float64Array;
  // means in flight (dReLU)
  private readonly addMean: Float64Array;
  private pending: "none" | "attn" | "ffn" = "none";
  private readonly mom = new Float64Array(2);
  private readonly bl: BlockLevels = { dNom: 0, levels: new Int32Array(32), maxPos: 0, maxNeg: 0 };
  // Predictable firing (rank > 0): the gate rows' basis and the predictors they imply.
  private readonly predictor: PredictorPlanter | undefined;
  readonly predictors: PlantedPredictor[];

  constructor(
    private readonly spec: SynthShapeSpec,
    synthType: SynthType,
    act: SynthActivation,
    private readonly seed: number,
    private readonly sparsity: number,
    private readonly alpha: number,
    private readonly rank = 0,
  ) {
    const d = (this.d = spec.dim);
    this.ffn = spec.ffn;
    this.type = GGML_TYPE[synthType];
    this.quantized = synthType !== "f32" && synthType !== "f16";
    this.ef2 = this.quantized ? 1 + 1 / 48 : 1;
    this.drelu = act === "drelu";
    if (d <= RESERVED) throw new RangeError(`synthetic model: planted sparsity needs dim > ${RESERVED}, got ${d}`);
    this.dF = GROWTH / spec.layers;
    this.dA = ATTN_SHARE * this.dF;
    this.v = new Float64Array(d);
    for (let j = RESERVED; j < d; j++) this.v[j] = this.ef2; // token embeddings: std 1
    this.m = new Float64Array(d);
    this.C = this.constantValue(Math.sqrt(KAPPA * (d - RESERVED)));
    this.omega = new Float64Array(d);
    this.nu = new Float64Array(d);
    this.zeroW = new Float64Array(Math.max(d, spec.ffn));
    this.experts = Math.max(1, spec.experts);
    this.used = Math.max(1, spec.expertsUsed);
    const f = spec.ffn * this.experts;
    this.sg = new Float64Array(f);
    this.zg = new Float64Array(f);
    this.su = new Float64Array(f);
    this.zu = new Float64Array(f);
    this.eh = new Float64Array(f);
    this.addMean = new Float64Array(d);
    if (rank > 0) this.predictor = new PredictorPlanter(d, spec.ffn, rank, seed, spec.experts > 0, this.type);
    this.predictors = this.predictor?.predictors ?? [];
  }

  /** The constant as the file will hold it (what dequantization gives back). */
  private constantValue(c: number): number {
    switch (this.type) {
      case GGMLType.F32:
        return Math.fround(c);
      case GGMLType.F16:
        return F16[f32ToF16(c)];
      case GGMLType.Q8_0:
        return 127 * F16[f32ToF16(c / 127)];
      default:
        return 7 * F16[f32ToF16(c / 7)]; // Q4_0, Q4_1: level 7
    }
  }

  /** 1 / RMS of the residual: the factor RMSNorm applies, the same for nearly every token. */
  private normFactor(): number {
    let s = this.C * this.C;
    for (let j = 1; j < this.d; j++) s += this.v[j] + this.m[j] * this.m[j];
    return 1 / Math.sqrt(s / this.d + this.spec.rmsEps);
  }

  /** sum_j w_j^2 v_j over the varying dimensions */
  private weightedVar(w: Float32Array): number {
    let s = 0;
    for (let j = 1; j < this.d; j++) s += w[j] * w[j] * this.v[j];
    return s;
  }

  private finishAttention(): void {
    // V's mean is cancelled (see filler), so attention moves no mean. Its variance is not
    // counted: past the first few positions it averages many values and adds almost none, so
    // only those first positions fire a little more often than planned.
    this.pending = "none";
  }

  private finishFfn(): void {
    for (let j = RESERVED; j < this.d; j++) this.v[j] += this.dF;
    if (this.drelu) for (let j = 1; j < this.d; j++) this.m[j] += this.addMean[j];
    this.pending = "none";
  }

  /** Set up for a tensor (of a mixture: for one expert's part of it); returns the standard deviation its values get. */
  private begin(r: TensorRecipe, expert: number): number {
    const d = this.d;
    switch (r.kind) {
      case "norm":
        // a norm follows the block whose effect on the residual is now complete
        if (this.pending === "ffn") this.finishFfn();
        else if (this.pending === "attn") this.finishAttention();
        return r.std;
      case "attn_output": {
        // variance of one value of V at position 0, where attention returns it unchanged
        const k = this.normFactor();
        const varV = (this.ef2 / d) * k * k * this.weightedVar(this.attnNorm); // attn_v's std is 1/sqrt(dim)
        this.pending = "attn";
        return Math.sqrt(this.dA / (this.ef2 * d * varV));
      }
      case "router": {
        // the router reads the normalized residual, as the experts do (F32: no quantization spread)
        const k = this.normFactor();
        return ROUTER_LOGIT_STD / Math.sqrt(k * k * this.weightedVar(this.ffnNorm));
      }
      case "ffn_gate": {
        if (expert === 0) {
          this.kNorm = this.normFactor();
          const w = this.ffnNorm;
          for (let j = 1; j < d; j++) {
            this.omega[j] = w[j] * w[j] * this.v[j];
            this.nu[j] = w[j] * this.m[j];
          }
          this.zGate = new Float64Array(this.ffn * this.experts);
          this.zUp = new Float64Array(this.ffn * this.experts);
        }
        if (this.rank > 0) this.predictor!.start(r.layer, expert, r.std, this.ffnNorm);
        const p = plannedFiring(
          this.seed,
          r.layer,
          this.ffn,
          this.sparsity,
          this.alpha,
          this.spec.experts > 0 ? expert : -1,
        );
        const base = expert * this.ffn;
        for (let i = 0; i < this.ffn; i++) {
          // dReLU: gate and up each fire with probability sqrt(p)
          const pg = this.drelu ? Math.sqrt(p[i]) : p[i];
          this.zGate[base + i] = quantileCached(pg);
          this.zUp[base + i] = this.drelu ? this.zGate[base + i] : 0;
        }
        return r.std;
      }
      case "ffn_down": {
        // Gaussian moments of each neuron's output, in the units RMSNorm leaves
        const k2 = this.kNorm * this.kNorm;
        let sumVar = 0;
        let zeros = 0;
        const base = expert * this.ffn;
        for (let j = 0; j < this.ffn; j++) {
          const i = base + j;
          const [g1, g2] = reluMoments(this.zg[i]);
          const sg = this.sg[i];
          const su = this.su[i];
          let e1: number, e2: number;
          if (this.drelu) {
            const [u1, u2] = reluMoments(this.zu[i]);
            e1 = k2 * sg * su * g1 * u1;
            e2 = k2 * k2 * sg * sg * su * su * g2 * u2;
            zeros += 1 - normCdf(this.zg[i]) * normCdf(this.zu[i]);
          } else {
            // up has no bias here: zu holds its mean over its deviation
            const mu = this.zu[i] * su;
            e1 = k2 * sg * g1 * mu;
            e2 = k2 * k2 * sg * sg * g2 * (su * su + mu * mu);
            zeros += 1 - normCdf(this.zg[i]);
          }
          this.eh[j] = e1;
          sumVar += e2 - e1 * e1;
        }
        // a layer's share: the mean over its experts
        if (expert === 0) {
          this.predicted.push(0);
          this.addMean.fill(0);
        }
        this.predicted[this.predicted.length - 1] += zeros / this.ffn / this.experts;
        this.pending = "ffn";
        // a mixture: k routed experts weighted about 1/k each keep 1/k of one expert's variance
        return Math.sqrt((this.dF * this.used) / (this.ef2 * sumVar));
      }
      case "output": {
        if (this.pending === "ffn") this.finishFfn();
        const k = this.normFactor();
        return 2 / Math.sqrt(this.ef2 * k * k * this.weightedVar(this.outNorm));
      }
      default:
        return r.std;
    }
  }

  /** The row generator for a tensor of the sparse model (of a mixture's expert tensor: for expert `expert`'s rows). */
  filler(r: TensorRecipe, stream: SynthStream, expert = 0): RowFiller {
    const std = this.begin(r, expert);
    const base0 = expert * this.ffn;
    // a predictable gate draws each row from the layer's basis instead (in `each`, below)
    const lowRank = r.kind === "ffn_gate" && this.rank > 0;
    const base: RowFiller = lowRank ? () => {} : rowFiller(std === r.std ? r : { ...r, std }, stream);
    const rowLen = r.dims[0];
    const tr = typeTraits(r.type)!;
    const rowBytes = traitsBytes(tr, rowLen);
    let row = 0;
    let each: (b: Uint8Array, off: number, row: number) => void;
    const wcF = this.ffnNorm.length ? this.ffnNorm[0] * this.C : 1;
    switch (r.kind) {
      case "norm": {
        const which = r.name.endsWith("attn_norm.weight")
          ? "attnNorm"
          : r.name.endsWith("ffn_norm.weight")
            ? "ffnNorm"
            : "outNorm";
        each = (b, off) => {
          this[which] = new Float32Array(rowLen);
          this[which].set(new Float32Array(b.buffer, b.byteOffset + off, rowLen));
        };
        break;
      }
      case "embed":
        each = (b, off) => this.writeEmbedding(b, off);
        break;
      case "attn_q":
      case "attn_k":
        each = (b, off) => this.plantElement0(b, off, rowLen, null, this.zeroW, this.zeroW, 1);
        break;
      case "attn_v":
      case "output": {
        // Under dReLU the residual has a mean (outputs are never negative); element 0 then
        // cancels its share in V (attention passes no constant on) and in the logits (no fixed
        // favourite tokens). Under ReLU the mean is zero and element 0 is zero.
        const norm = r.kind === "attn_v" ? this.attnNorm : this.outNorm;
        const nu = new Float64Array(rowLen);
        for (let j = 1; j < rowLen; j++) nu[j] = norm[j] * this.m[j];
        const wc = norm[0] * this.C;
        each = (b, off) => this.plantElement0(b, off, rowLen, this.drelu ? 0 : null, this.zeroW, nu, wc);
        break;
      }
      case "attn_output":
        each = (b, off, j) => {
          if (j < RESERVED) b.fill(0, off, off + rowBytes); // nothing may move the constant or fill its block
        };
        break;
      case "router": {
        // F32 rows, one per expert: element 0 zero under ReLU (the constant must not favour an
        // expert), under dReLU the value that cancels the residual's mean (nor may the mean)
        const w = this.ffnNorm;
        each = (b, off) => {
          const f = new Float32Array(b.buffer, b.byteOffset + off, rowLen);
          let mu = 0;
          if (this.drelu) for (let j = 1; j < rowLen; j++) mu += f[j] * w[j] * this.m[j];
          f[0] = this.drelu ? -mu / wcF : 0;
        };
        break;
      }
      case "ffn_down": {
        const share = 1 / this.experts;
        each = (b, off, j) => {
          if (j < RESERVED) b.fill(0, off, off + rowBytes);
          else if (this.drelu) {
            rowMoments(this.type, b, off, rowLen, 0, this.zeroW, this.eh, this.mom);
            this.addMean[j] += this.mom[1] * share;
          }
        };
        break;
      }
      case "ffn_gate":
        each = (b, off, i) => {
          if (lowRank) this.predictor!.lowRankRow(b, off, rowBytes, i, stream);
          const [sigma, z] = this.plantElement0(b, off, rowLen, this.zGate[base0 + i], this.omega, this.nu, wcF);
          this.sg[base0 + i] = sigma;
          this.zg[base0 + i] = z;
          if (lowRank) this.predictor!.finishRow(b, off, rowBytes, i, sigma, this.omega, this.ffnNorm[0] * this.C);
        };
        break;
      case "ffn_up":
        each = (b, off, i) => {
          const [sigma, z] = this.plantElement0(
            b,
            off,
            rowLen,
            this.drelu ? this.zUp[base0 + i] : null,
            this.omega,
            this.nu,
            wcF,
          );
          this.su[base0 + i] = sigma;
          this.zu[base0 + i] = z;
        };
        break;
      default:
        throw new RangeError(`synthetic model: no sparse recipe for ${r.name}`);
    }
    return (dst, words, rows) => {
      base(dst, words, rows);
      for (let k = 0; k < rows; k++, row++) each(dst, k * rowBytes, row);
    };
  }

  /** Token embedding row: the constant in dimension 0, zeros in the rest of its block. */
  private writeEmbedding(b: Uint8Array, off: number): void {
    switch (this.type) {
      case GGMLType.F32:
        new Float32Array(b.buffer, b.byteOffset + off, RESERVED).fill(0)[0] = this.C;
        return;
      case GGMLType.F16:
        new Uint16Array(b.buffer, b.byteOffset + off, RESERVED).fill(0)[0] = f32ToF16(this.C);
        return;
      default: {
        const L = this.bl.levels;
        L.fill(0);
        L[0] = this.type === GGMLType.Q8_0 ? 127 : 7;
        writeBlock0(this.type, b, off, this.C / L[0], L);
      }
    }
  }

  /**
   * Set element 0 of a row that reads the normalized residual: to 0 (z null), or to the bias that
   * makes the row's dot product positive with probability Phi(z) (z = 0 with a mean: the bias
   * that cancels the mean). wc: what element 0 is multiplied by, in raw residual units (the
   * norm weight of dimension 0 times C). Returns the deviation of the rest of the dot product
   * (raw residual units) and the bias-plus-mean over it (the z reached; for z null, the mean's
   * share).
   */
  private plantElement0(
    b: Uint8Array,
    off: number,
    rowLen: number,
    z: number | null,
    omega: Float64Array,
    nu: Float64Array,
    wc: number,
  ): [number, number] {
    const mom = this.mom;
    if (!this.quantized) {
      rowMoments(this.type, b, off, rowLen, 1, omega, nu, mom);
      const sigma = Math.sqrt(mom[0]);
      const mu = mom[1];
      const target = z === null ? 0 : (z * sigma - mu) / wc;
      let value: number;
      if (this.type === GGMLType.F32) {
        value = Math.fround(target);
        new Float32Array(b.buffer, b.byteOffset + off, 1)[0] = value;
      } else {
        const h = f32ToF16(target);
        new Uint16Array(b.buffer, b.byteOffset + off, 1)[0] = h;
        value = F16[h];
      }
      return [sigma, sigma > 0 ? (value * wc + mu) / sigma : 0];
    }
    // blocks 1.. as drawn; block 0 rewritten around the bias
    rowMoments(this.type, b, off, rowLen, 32, omega, nu, mom);
    const R = mom[0];
    const muR = mom[1];
    const bl = this.bl;
    readBlock0(this.type, b, off, bl);
    const L = bl.levels;
    let Q0 = 0;
    let M0 = 0;
    for (let j = 1; j < 32; j++) {
      Q0 += omega[j] * L[j] * L[j];
      M0 += nu[j] * L[j];
    }
    const [L0, d, sgn] = z === null ? [0, bl.dNom, 1] : solveBlock0(z, R, muR, Q0, M0, wc, bl);
    if (sgn !== 1) {
      for (let j = 1; j < 32; j++) L[j] *= sgn;
      Q0 *= sgn * sgn;
      M0 *= sgn;
    }
    L[0] = L0;
    const ds = writeBlock0(this.type, b, off, d, L);
    const sigma = Math.sqrt(R + ds * ds * Q0);
    const mu = muR + ds * M0;
    return [sigma, sigma > 0 ? (L0 * ds * wc + mu) / sigma : 0];
  }
}

const quantileCache = new Map<number, number>();
function quantileCached(p: number): number {
  let z = quantileCache.get(p);
  if (z === undefined) {
    if (quantileCache.size > 1 << 16) quantileCache.clear();
    quantileCache.set(p, (z = normQuantile(p)));
  }
  return z;
}
