/**
 * The slow plain-TypeScript reference of the forward pass, in the manner of llama2.c's run.c:
 * every weight dequantized to f32, one token at a time, no kernels, no threads, no batching.
 * It exists to check the fast engine (tests compare the two on every architecture variant); it is
 * only for small models.
 */
import { gatedActivation } from "../format/activations.js";
import { dequantize } from "../format/quant.js";
import type { ModelFile } from "../format/gguf.js";
import { f16ToF32, f32ToF16 } from "../format/half.js";
import { ARCHITECTURES } from "./arch/index.js";
import { readConfig, type ModelConfig } from "./config.js";
import { ropeFactors, yarnCorrDims, yarnMagnitude, yarnRamp } from "./rope.js";
import { routeTokens } from "./parts/router.js";
import { DEFAULT_KV_CACHE, type KvCacheType, type KvCacheTypes } from "./kv-cache.js";

interface RefLayer {
  attnNorm: Float32Array;
  wq: Float32Array;
  wk: Float32Array;
  wv: Float32Array;
  wo: Float32Array;
  bq?: Float32Array;
  bk?: Float32Array;
  bv?: Float32Array;
  qNorm?: Float32Array;
  kNorm?: Float32Array;
  attnPostNorm?: Float32Array;
  ffnPostNorm?: Float32Array;
  bo?: Float32Array;
  sinks?: Float32Array;
  ffnNorm: Float32Array;
  /** a dense FFN's matrices (empty for a mixture) */
  gate: Float32Array;
  up: Float32Array;
  down: Float32Array;
  moe?: RefMoe;
}

/** A mixture of experts: the router (and its bias), each expert's matrices and biases. */
interface RefMoe {
  router: Float32Array;
  routerBias?: Float32Array;
  experts: {
    gate: Float32Array;
    up: Float32Array;
    down: Float32Array;
    gateBias?: Float32Array;
    upBias?: Float32Array;
    downBias?: Float32Array;
  }[];
}

export class ReferenceModel {
  readonly config: ModelConfig;
  private readonly layers: RefLayer[] = [];
  private readonly embd: Float32Array;
  private readonly outNorm: Float32Array;
  private readonly output: Float32Array;
  private readonly kCache: Float32Array[];
  private readonly vCache: Float32Array[];
  /** per rotated pair, a divisor of theta (Llama 3's rope_freqs), null: none */
  private readonly ropeFactors: Float32Array | null;
  /** observers for tests: each layer's FFN activations (act(gate) * up, before Down), and the final residual */
  onFFN?: (layer: number, activations: Float32Array) => void;
  onResidual?: (x: Float32Array) => void;

  constructor(
    file: ModelFile,
    readonly contextSize = 256,
    /** the engine's KV cache types: keys and values are rounded to them as they are stored */
    private readonly kvCache: KvCacheTypes = DEFAULT_KV_CACHE,
  ) {
    const cfg = (this.config = readConfig(file));
    this.ropeFactors =
      ropeFactors(file, cfg, ARCHITECTURES.get(cfg.architecture)!.ropeFactors, contextSize)?.factors ?? null;
    const get = (name: string) => dequantize(file.tensor(name).type, file.tensorData(name), file.tensor(name).elements);
    this.embd = get("token_embd.weight");
    this.outNorm = get("output_norm.weight");
    this.output = file.tensors.has("output.weight") ? get("output.weight") : this.embd;
    const arch = ARCHITECTURES.get(cfg.architecture)!;
    for (let l = 0; l < cfg.nLayer; l++) {
      const p = `blk.${l}.`;
      const moe = cfg.nExpert > 0 ? this.moeOf(file, l, get) : undefined;
      let down: Float32Array = new Float32Array(0);
      if (moe) {
        // the experts hold the FFN
      } else if (file.tensors.has(p + "ffn_down_t.weight")) {
        // stored transposed: row i = column i of Down
        const t = get(p + "ffn_down_t.weight");
        down = new Float32Array(t.length);
        for (let i = 0; i < cfg.nFF; i++)
          for (let j = 0; j < cfg.nEmbd; j++) down[j * cfg.nFF + i] = t[i * cfg.nEmbd + j];
      } else down = get(p + "ffn_down.weight");
      // fused q, k, v (rows in that order) and fused gate, up (gate first): cut apart
      const qDim = cfg.nHead * cfg.headDim;
      const kvDim = cfg.nHeadKV * cfg.headDim;
      const qkv = file.tensors.has(p + "attn_qkv.weight") ? get(p + "attn_qkv.weight") : null;
      const qkvBias = qkv && cfg.qkvBias ? get(p + "attn_qkv.bias") : null;
      const part = (all: Float32Array, width: number, from: number, rows: number) =>
        all.slice(from * width, (from + rows) * width);
      const gateUp = moe || file.tensors.has(p + "ffn_gate.weight") ? null : get(p + "ffn_up.weight");
      const none = new Float32Array(0);
      this.layers.push({
        attnNorm: get(p + "attn_norm.weight"),
        wq: qkv ? part(qkv, cfg.nEmbd, 0, qDim) : get(p + "attn_q.weight"),
        wk: qkv ? part(qkv, cfg.nEmbd, qDim, kvDim) : get(p + "attn_k.weight"),
        wv: qkv ? part(qkv, cfg.nEmbd, qDim + kvDim, kvDim) : get(p + "attn_v.weight"),
        wo: get(p + "attn_output.weight"),
        bq: !cfg.qkvBias ? undefined : qkvBias ? part(qkvBias, 1, 0, qDim) : get(p + "attn_q.bias"),
        bk: !cfg.qkvBias ? undefined : qkvBias ? part(qkvBias, 1, qDim, kvDim) : get(p + "attn_k.bias"),
        bv: !cfg.qkvBias ? undefined : qkvBias ? part(qkvBias, 1, qDim + kvDim, kvDim) : get(p + "attn_v.bias"),
        qNorm: cfg.qkNorm ? get(p + "attn_q_norm.weight") : undefined,
        kNorm: cfg.qkNorm ? get(p + "attn_k_norm.weight") : undefined,
        attnPostNorm: cfg.postNorms ? get(p + "post_attention_norm.weight") : undefined,
        ffnPostNorm: cfg.postNorms ? get(p + "post_ffw_norm.weight") : undefined,
        bo: cfg.attnOutputBias ? get(p + "attn_output.bias") : undefined,
        sinks: cfg.attnSinks ? get(p + "attn_sinks.weight") : undefined,
        ffnNorm: get(`${p}${arch.ffnNormName ?? "ffn_norm"}.weight`),
        gate: moe ? none : gateUp ? part(gateUp, cfg.nEmbd, 0, cfg.nFF) : get(p + "ffn_gate.weight"),
        up: moe ? none : gateUp ? part(gateUp, cfg.nEmbd, cfg.nFF, cfg.nFF) : get(p + "ffn_up.weight"),
        down,
        moe,
      });
    }
    const kvDim = cfg.nHeadKV * cfg.headDim;
    this.kCache = this.layers.map(() => new Float32Array(contextSize * kvDim));
    this.vCache = this.layers.map(() => new Float32Array(contextSize * kvDim));
  }

  /** Layer l's router and experts (the 3-D ffn_*_exps tensors cut per expert), with their biases where the model has them. */
  private moeOf(file: ModelFile, l: number, get: (name: string) => Float32Array): RefMoe {
    const { nEmbd, nFF, nExpert, expertBiases } = this.config;
    const p = `blk.${l}.`;
    const all = (kind: string) => get(`${p}ffn_${kind}_exps.weight`);
    const [gate, up, down] = [all("gate"), all("up"), all("down")];
    const biases = (kind: string) => (expertBiases ? get(`${p}ffn_${kind}_exps.bias`) : undefined);
    const [gb, ub, db] = [biases("gate"), biases("up"), biases("down")];
    const slice = (a: Float32Array | undefined, n: number, e: number) => a?.slice(e * n, (e + 1) * n);
    const experts: RefMoe["experts"] = [];
    for (let e = 0; e < nExpert; e++)
      experts.push({
        gate: slice(gate, nFF * nEmbd, e)!,
        up: slice(up, nFF * nEmbd, e)!,
        down: slice(down, nFF * nEmbd, e)!,
        gateBias: slice(gb, nFF, e),
        upBias: slice(ub, nFF, e),
        downBias: slice(db, nEmbd, e),
      });
    if (!file.tensors.has(`${p}ffn_gate_exps.weight`))
      throw new Error(`reference: layer ${l}'s experts are not in 3-D ffn_*_exps tensors`);
    return {
      router: get(`${p}ffn_gate_inp.weight`),
      routerBias: expertBiases ? get(`${p}ffn_gate_inp.bias`) : undefined,
      experts,
    };
  }

  /** The mixture's output for one token's normed FFN input xf: its routed experts' outputs, weighted. */
  private moeForward(m: RefMoe, xf: Float32Array): Float32Array {
    const c = this.config;
    const logits = matvec(m.router, xf, c.nExpert, m.routerBias);
    const ids = new Int32Array(c.nExpertUsed);
    const weights = new Float32Array(c.nExpertUsed);
    routeTokens(logits, 1, c.nExpert, c.nExpertUsed, ids, weights, new Float64Array(c.nExpert), c.expertGating);
    const y = new Float32Array(c.nEmbd);
    for (let j = 0; j < c.nExpertUsed; j++) {
      const E = m.experts[ids[j]];
      const g = matvec(E.gate, xf, c.nFF, E.gateBias);
      const u = matvec(E.up, xf, c.nFF, E.upBias);
      const h = new Float32Array(c.nFF);
      for (let i = 0; i < c.nFF; i++) h[i] = gatedActivation(c.activation, g[i], u[i]);
      const o = matvec(E.down, h, c.nEmbd, E.downBias);
      for (let i = 0; i < c.nEmbd; i++) y[i] += weights[j] * o[i];
    }
    return y;
  }

  /** Logits after feeding `token` at position `pos` (earlier positions must have been fed). */
  forward(token: number, pos: number): Float32Array {
    const c = this.config;
    const { nEmbd: d, nHead, nHeadKV, headDim: hd, nFF } = c;
    const kvDim = nHeadKV * hd;
    const x = this.embd.slice(token * d, (token + 1) * d).map((v) => v * c.embedScale);
    for (let l = 0; l < c.nLayer; l++) {
      const L = this.layers[l];
      const xb = rmsnorm(x, L.attnNorm, c.normEps);
      const q = matvec(L.wq, xb, nHead * hd, L.bq);
      const k = matvec(L.wk, xb, kvDim, L.bk);
      const v = matvec(L.wv, xb, kvDim, L.bv);
      if (L.qNorm) {
        for (let h = 0; h < nHead; h++) q.set(rmsnorm(q.subarray(h * hd, (h + 1) * hd), L.qNorm, c.normEps), h * hd);
        for (let h = 0; h < nHeadKV; h++) k.set(rmsnorm(k.subarray(h * hd, (h + 1) * hd), L.kNorm!, c.normEps), h * hd);
      }
      if (c.ropeBases[l]) {
        rope(q, nHead, hd, c, l, pos, this.ropeFactors);
        rope(k, nHeadKV, hd, c, l, pos, this.ropeFactors);
      }
      this.kCache[l].set(roundTo(this.kvCache.k, k), pos * kvDim);
      this.vCache[l].set(roundTo(this.kvCache.v, v), pos * kvDim);
      const att = new Float32Array(nHead * hd);
      for (let h = 0; h < nHead; h++) {
        const kvh = Math.floor(h / (nHead / nHeadKV));
        // a sliding window: only the last `window` positions
        const lo = c.windows[l] > 0 ? Math.max(0, pos + 1 - c.windows[l]) : 0;
        const scores = new Float64Array(pos + 1).fill(-Infinity);
        for (let j = lo; j <= pos; j++) {
          let s = 0;
          for (let i = 0; i < hd; i++) s += q[h * hd + i] * this.kCache[l][j * kvDim + kvh * hd + i];
          scores[j] = s * c.kqScale;
        }
        // an attention sink: one more logit in the softmax, whose value is dropped
        const sink = L.sinks ? L.sinks[h] : -Infinity;
        const mx = Math.max(sink, ...scores);
        let sum = L.sinks ? Math.exp(sink - mx) : 0;
        for (let j = lo; j <= pos; j++) sum += scores[j] = Math.exp(scores[j] - mx);
        for (let j = lo; j <= pos; j++)
          for (let i = 0; i < hd; i++) att[h * hd + i] += (scores[j] / sum) * this.vCache[l][j * kvDim + kvh * hd + i];
      }
      let o = matvec(L.wo, att, d, L.bo);
      if (L.attnPostNorm) o = rmsnorm(o, L.attnPostNorm, c.normEps);
      for (let i = 0; i < d; i++) x[i] += o[i];
      const xf = rmsnorm(x, L.ffnNorm, c.normEps);
      if (L.moe) {
        const y = this.moeForward(L.moe, xf);
        for (let i = 0; i < d; i++) x[i] += y[i];
        continue;
      }
      const g = matvec(L.gate, xf, nFF);
      const u = matvec(L.up, xf, nFF);
      const hAct = new Float32Array(nFF);
      for (let i = 0; i < nFF; i++) hAct[i] = gatedActivation(c.activation, g[i], u[i]);
      this.onFFN?.(l, hAct);
      let y = matvec(L.down, hAct, d);
      if (L.ffnPostNorm) y = rmsnorm(y, L.ffnPostNorm, c.normEps);
      for (let i = 0; i < d; i++) x[i] += y[i];
    }
    this.onResidual?.(x);
    const logits = matvec(this.output, rmsnorm(x, this.outNorm, c.normEps), c.nVocab);
    const cap = c.logitSoftcap;
    return cap > 0 ? logits.map((v) => cap * Math.tanh(v / cap)) : logits;
  }
}

function rmsnorm(x: Float32Array, w: Float32Array, eps: number): Float32Array {
  let ss = 0;
  for (const v of x) ss += v * v;
  const s = 1 / Math.sqrt(ss / x.length + eps);
  return x.map((v, i) => v * s * w[i]);
}

function matvec(w: Float32Array, x: Float32Array, rows: number, bias?: Float32Array): Float32Array {
  const cols = x.length;
  const y = new Float32Array(rows);
  for (let r = 0; r < rows; r++) {
    let s = bias ? bias[r] : 0;
    for (let i = 0; i < cols; i++) s += w[r * cols + i] * x[i];
    y[r] = s;
  }
  return y;
}

function rope(
  v: Float32Array,
  nHeads: number,
  hd: number,
  c: ModelConfig,
  layer: number,
  pos: number,
  factors: Float32Array | null,
): void {
  const half = c.nRot / 2;
  const scale = c.ropeScales[layer];
  const yarn = c.ropeYarn;
  const corr = yarn ? yarnCorrDims(c.nRot, c.ropeBases[layer], yarn) : null;
  const mscale = c.ropeAttnFactor * yarnMagnitude(scale, yarn);
  for (let h = 0; h < nHeads; h++) {
    for (let i = 0; i < half; i++) {
      const unscaled = (pos * Math.pow(c.ropeBases[layer], (-2 * i) / c.nRot)) / (factors ? factors[i] : 1);
      let theta = unscaled * scale;
      if (yarn && corr) {
        // YaRN: toward the unscaled angle on the fast pairs, by a ramp over [corr[0], corr[1]]
        const ramp = yarnRamp(i, corr, yarn.extFactor);
        theta = theta * (1 - ramp) + unscaled * ramp;
      }
      const [a, b] = c.ropePairing === "neox" ? [h * hd + i, h * hd + i + half] : [h * hd + 2 * i, h * hd + 2 * i + 1];
      const x0 = v[a];
      const x1 = v[b];
      const cos = Math.cos(theta) * mscale;
      const sin = Math.sin(theta) * mscale;
      v[a] = x0 * cos - x1 * sin;
      v[b] = x0 * sin + x1 * cos;
    }
  }
}

/** The values as a KV cache of `type` holds them. */
function roundTo(type: KvCacheType, v: Float32Array): Float32Array {
  return type === "f16" ? v.map((x) => f16ToF32(f32ToF16(x))) : v;
}
