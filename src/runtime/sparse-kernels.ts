/**
 * The sparse FFN kernels (assembly/sparse_ffn.ts): descriptors per FFN weight type, a binding to
 * a ThreadPool that lays out its buffers once and dispatches without allocating, and a plain-TS
 * reference for each kernel.
 *
 * A neuron bundle (docs/store-format.md) is [gate row | up row | down column | pad], each part
 * nEmbd values of the FFN type in GGUF block layout (rowBytes each; an MXFP4 bundle's down column
 * is Q8_0, twice an MXFP4 row: bundleParts), anywhere in wasm memory (4 KiB aligned in practice).
 * Biased bundles (gpt-oss's experts) carry the neuron's gate and up biases (two f32) after the
 * parts, which the kernels add to the gate and up dots. Kernels read an Int32Array of bundle
 * addresses in wasm memory.
 *
 * Use, per token and layer (x = the FFN input after its norm, f32 in wasm memory):
 *   ffn.prepare(x)                                   activation in the format the type wants
 *   gate mode:  ffn.gate(bundles, n, gateOut)        all gates; then the caller lists the fired
 *               ffn.upDown(list, m, gates, act)      neurons (with their gates) for up/down
 *   predictor:  ffn.ffn(list, m, act)                gate, up, down in one pass per bundle
 *               ffn.ffnRun(base, stride, m, act)     the same over a contiguous cluster
 *   ffn.finish(y)                                    y += the FFN output (one reduction)
 * Any number of upDown / ffn / ffnRun calls (clusters computed as their bytes land) may come
 * between prepare and finish: they accumulate in per-thread partial slots.
 */
import { ACTIVATIONS, gatedActivation, type Activation } from "../format/activations.js";
import { GGMLType, typeName } from "../format/ggml-types.js";
import { dequantizeRow, prepareActivation, rowBytes as ggmlRowBytes, vecDot } from "../format/quant.js";
import type { Arena } from "./arena.js";
import { prepareKernel } from "./weight-kernels.js";
import { bundleParts } from "../format/store/ffn-types.js";
import type { ThreadPool } from "./pool.js";

export type SparseActivation = Activation;

/**
 * "f32": the FFN input as is. "f32_eo": the same values, each 8's even ones first, then its odd
 * ones (the dense F16/BF16 kernels' order: made by prepare_f32_eo(x, dst, cols, ntok)). "q8_sp":
 * ggml's Q8_0 quants of it (the same numbers prepare_q8_0 makes), 352 bytes per 128 values,
 * arranged for the kernel (assembly/sparse_prepare.ts explains why not ggml's own q8_0 / q8_1
 * blocks), made by prepare_q8_sp(x, dst, cols, ntok, mode).
 */
export type SparseActivationFormat = "f32" | "f32_eo" | "q8_sp";

export interface SparseKernel {
  readonly type: GGMLType;
  readonly act: SparseActivationFormat;
  /** the export that prepares the activation (undefined for f32) */
  readonly prepare: string | undefined;
  /** `mode` argument of prepare_q8_sp (the others take none) */
  readonly prepareMode: number;
  /** export names */
  readonly gate: string;
  readonly upDown: string;
  readonly ffn: string;
  readonly ffnRun: string;
  /** the same over segments' items, each into its segment's slot (assembly/sparse_segments.ts) */
  readonly upDownSeg: string;
  readonly ffnSeg: string;
  /** `mode` argument of sparse_sum_partials: how this type's kernels order their partial slots */
  readonly partialMode: number;
}

export const SPARSE_PREPARE = "prepare_q8_sp";

const KERNELS = new Map<GGMLType, SparseKernel>();
for (const [type, suffix, act, prepareMode, partialMode] of [
  [GGMLType.F32, "f32", "f32", 0, 0],
  [GGMLType.F16, "f16", "f32_eo", 0, 0],
  [GGMLType.BF16, "bf16", "f32_eo", 0, 0],
  [GGMLType.Q8_0, "q8_0", "q8_sp", 0, 1],
  [GGMLType.Q4_0, "q4_0", "q8_sp", 1, 2],
  [GGMLType.Q4_1, "q4_1", "q8_sp", 1, 2],
  [GGMLType.Q5_0, "q5_0", "q8_sp", 2, 3],
  [GGMLType.Q5_1, "q5_1", "q8_sp", 2, 3],
  // the down column Q8_0: Q8_0's partial order
  [GGMLType.MXFP4, "mxfp4", "q8_sp", 0, 1],
] as const) {
  KERNELS.set(type, {
    type,
    act,
    prepare: act === "q8_sp" ? SPARSE_PREPARE : prepareKernel(act),
    prepareMode,
    gate: `sparse_gate_${suffix}`,
    upDown: `sparse_updown_${suffix}`,
    ffn: `sparse_ffn_${suffix}`,
    ffnRun: `sparse_ffn_run_${suffix}`,
    upDownSeg: `sparse_updown_seg_${suffix}`,
    ffnSeg: `sparse_ffn_seg_${suffix}`,
    partialMode,
  });
}

export const SPARSE_SUM_PARTIALS = "sparse_sum_partials";

/**
 * Added to the kernels' activation code for biased bundles (assembly/activation_codes.ts
 * SPARSE_BIASED; test/activations.test.ts checks the built module's against it).
 */
export const SPARSE_BIASED = 256;
export const SPARSE_SUM_SEGMENTS = "sparse_sum_segments";

/**
 * Segments of a layer's stored positions, each summed into a partial slot of its own: the fixed
 * summation order of an offloaded FFN (src/model/offload/fixed-order.ts). A constant, not the
 * thread count, so that the sums do not depend on it either.
 */
export const SUM_SEGMENTS = 16;

export function hasSparseKernel(type: GGMLType): boolean {
  return KERNELS.has(type);
}

/** Why a store of `type` bundles cannot run, and what to do: one wording for the loader, the planner and convert. */
export function noSparseKernel(type: GGMLType): string {
  return `no sparse FFN kernel for weight type ${typeName(type)} (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 and MXFP4 have one): convert the model with --type q4_1 or q8_0`;
}

export function sparseKernel(type: GGMLType): SparseKernel {
  const k = KERNELS.get(type);
  if (!k) throw new Error(noSparseKernel(type));
  return k;
}

function checkWidth(nEmbd: number): void {
  if (!Number.isInteger(nEmbd) || nEmbd <= 0 || nEmbd % 32 !== 0)
    throw new Error(`sparse FFN: nEmbd ${nEmbd} is not a positive multiple of 32`);
}

/** Bytes of one gate or up row (and of a down column but for MXFP4's: bundleParts). */
export function sparseRowBytes(type: GGMLType, nEmbd: number): number {
  sparseKernel(type);
  checkWidth(nEmbd);
  return ggmlRowBytes(type, nEmbd);
}

/** Bytes of one prepared activation row. */
export function sparseActivationBytes(type: GGMLType, nEmbd: number): number {
  checkWidth(nEmbd);
  return sparseKernel(type).act === "q8_sp" ? Math.ceil(nEmbd / 128) * 352 : nEmbd * 4;
}

/**
 * f32 values per partial slot (the kernel's slotFloats): nEmbd sums, nEmbd / 32 corrections (to a
 * multiple of 4), 16 of scratch, 64-byte padded.
 */
export function partialSlotFloats(nEmbd: number): number {
  checkWidth(nEmbd);
  return (((nEmbd + nEmbd / 32 + 3) & ~3) + 16 + 15) & ~15;
}

/** Bytes of the partial region for `threads` threads. */
export function partialBytes(nEmbd: number, threads: number): number {
  return partialSlotFloats(nEmbd) * 4 * threads;
}

/** Bytes of the segments' partial slots (SUM_SEGMENTS of them), then their items and slot list. */
export function segmentBytes(nEmbd: number): number {
  return partialBytes(nEmbd, SUM_SEGMENTS) + 4 * 4 * SUM_SEGMENTS;
}

// ---------------------------------------------------------------------------------------------
// Binding

/**
 * One layer shape's sparse FFN on a pool: owns the prepared-activation and partial buffers
 * (allocated once from the arena). Calls allocate nothing. Not reentrant: one token at a time.
 */
export class SparseFFN {
  readonly kernel: SparseKernel;
  readonly rowBytes: number;
  /** where prepare() writes the activation */
  readonly xAct: number;
  /** the per-thread partial slots */
  readonly partials: number;
  /** the segments' partial slots (SUM_SEGMENTS), and the items / slot list the segment calls read (i32) */
  readonly segPartials: number;
  readonly items: number;
  readonly slotList: number;
  private readonly args = new Int32Array(12);
  private readonly fn: {
    gate: number;
    upDown: number;
    ffn: number;
    ffnRun: number;
    sum: number;
    upDownSeg: number;
    ffnSeg: number;
    sumSeg: number;
  };
  private readonly prepareFn: ((...a: number[]) => number) | undefined;
  private slotsUsed = 0;
  private preparedCols = -1;

  constructor(
    readonly pool: ThreadPool,
    arena: Arena,
    readonly type: GGMLType,
    readonly nEmbd: number,
    /** the pool's memory `arena` is (its kernels run there) */
    shard = 0,
    /** the bundles carry their gate and up biases (bundleParts' `biases`), which the kernels add */
    readonly biased = false,
  ) {
    this.kernel = sparseKernel(type);
    this.rowBytes = sparseRowBytes(type, nEmbd);
    this.xAct = this.kernel.act === "f32" ? 0 : arena.alloc(sparseActivationBytes(type, nEmbd), 64);
    const pb = partialBytes(nEmbd, pool.threads);
    this.partials = arena.alloc(pb, 64);
    // the kernels add into the slots and the reduction clears them: they must start at zero
    arena.u8(this.partials, pb).fill(0);
    const sb = segmentBytes(nEmbd);
    this.segPartials = arena.alloc(sb, 64);
    arena.u8(this.segPartials, sb).fill(0);
    this.items = this.segPartials + partialBytes(nEmbd, SUM_SEGMENTS);
    this.slotList = this.items + 12 * SUM_SEGMENTS;
    const k = this.kernel;
    this.fn = {
      gate: pool.fn(k.gate, shard),
      upDown: pool.fn(k.upDown, shard),
      ffn: pool.fn(k.ffn, shard),
      ffnRun: pool.fn(k.ffnRun, shard),
      sum: pool.fn(SPARSE_SUM_PARTIALS, shard),
      upDownSeg: pool.fn(k.upDownSeg, shard),
      ffnSeg: pool.fn(k.ffnSeg, shard),
      sumSeg: pool.fn(SPARSE_SUM_SEGMENTS, shard),
    };
    this.prepareFn = k.prepare ? pool.kernelsOf(shard)[k.prepare] : undefined;
  }

  private input = 0;

  /** Prepare the activation from nEmbd f32 at x (wasm memory); every later call reads it. */
  prepare(x: number): void {
    this.input = x;
    this.preparedCols = this.nEmbd;
    if (this.prepareFn) this.prepareFn(x, this.xAct, this.nEmbd, 1, this.kernel.prepareMode);
  }

  private act(): number {
    if (this.preparedCols < 0) throw new Error("sparse FFN: prepare(x) must come before the kernels");
    return this.prepareFn ? this.xAct : this.input;
  }

  /** The kernels' activation argument: the code, and whether the bundles are biased. */
  private code(act: SparseActivation): number {
    return ACTIVATIONS[act].code | (this.biased ? SPARSE_BIASED : 0);
  }

  /**
   * out[k] = gate_k . x for the `count` bundles listed at `bundles` (i32 addresses); out f32.
   * The dot alone: a biased bundle's gate bias is added by the kernels that take the gate.
   */
  gate(bundles: number, count: number, out: number): void {
    const a = this.args;
    a[0] = bundles;
    a[1] = count;
    a[2] = this.act();
    a[3] = out;
    a[4] = this.nEmbd;
    a[5] = this.rowBytes;
    this.pool.run(this.fn.gate, a, 6, count, 2);
  }

  private per(count: number): number {
    const per = Math.ceil(count / this.pool.threads);
    const used = Math.ceil(count / per);
    if (used > this.slotsUsed) this.slotsUsed = used;
    return per;
  }

  /**
   * For the listed bundles, given their gate values (f32 at `gates`, one per listed bundle):
   * up, activation and down, accumulated for finish(). Neurons whose activation is 0 whatever
   * up says (ReLU family: gate <= 0) are skipped without reading up or down.
   */
  upDown(bundles: number, count: number, gates: number, act: SparseActivation): void {
    if (count <= 0) return;
    const a = this.args;
    const per = this.per(count);
    a[0] = bundles;
    a[1] = count;
    a[2] = gates;
    a[3] = this.act();
    a[4] = this.partials;
    a[5] = this.nEmbd;
    a[6] = this.rowBytes;
    a[7] = this.code(act);
    a[8] = per;
    this.pool.run(this.fn.upDown, a, 9, count, per);
  }

  /**
   * Gate, up, activation and down for the listed bundles, accumulated for finish(). A neuron
   * whose gate factor is 0 (ReLU family: gate <= 0) has its up and down left uncomputed, but
   * every listed bundle must be whole in memory: while computing one bundle the kernel loads one
   * line of each 4 KiB page of the next (wasm has no prefetch instruction).
   */
  ffn(bundles: number, count: number, act: SparseActivation): void {
    if (count <= 0) return;
    const a = this.args;
    const per = this.per(count);
    a[0] = bundles;
    a[1] = count;
    a[2] = this.act();
    a[3] = this.partials;
    a[4] = this.nEmbd;
    a[5] = this.rowBytes;
    a[6] = this.code(act);
    a[7] = per;
    this.pool.run(this.fn.ffn, a, 8, count, per);
  }

  /** ffn() over `count` bundles at base, base + stride, ... (a contiguous cluster). */
  ffnRun(base: number, stride: number, count: number, act: SparseActivation): void {
    if (count <= 0) return;
    const a = this.args;
    const per = this.per(count);
    a[0] = base;
    a[1] = stride;
    a[2] = count;
    a[3] = this.act();
    a[4] = this.partials;
    a[5] = this.nEmbd;
    a[6] = this.rowBytes;
    a[7] = this.code(act);
    a[8] = per;
    this.pool.run(this.fn.ffnRun, a, 9, count, per);
  }

  /**
   * The `nItems` items at `items` (i32 triples [from, to, segment]): the listed bundles [from, to)
   * at `list` (i32 addresses; gate values f32 at `gates` for upDown, none for whole bundles) added,
   * in list order, into their segment's partial slot. Each item goes to one thread whole.
   */
  segments(list: number, gates: number, nItems: number, wholeBundles: boolean, act: SparseActivation): void {
    if (nItems <= 0) return;
    const a = this.args;
    let i = 0;
    a[i++] = list;
    if (!wholeBundles) a[i++] = gates;
    a[i++] = this.items;
    a[i++] = this.act();
    a[i++] = this.segPartials;
    a[i++] = this.nEmbd;
    a[i++] = this.rowBytes;
    a[i++] = this.code(act);
    this.pool.run(wholeBundles ? this.fn.ffnSeg : this.fn.upDownSeg, a, i, nItems, 1);
  }

  /**
   * y (nEmbd f32) += the segments' slots listed at slotList[0..nSlots), one after the other in
   * that order; those slots are cleared.
   */
  sumSegments(y: number, nSlots: number): void {
    if (nSlots <= 0) return;
    const a = this.args;
    a[0] = y;
    a[1] = this.segPartials;
    a[2] = this.slotList;
    a[3] = nSlots;
    a[4] = this.nEmbd;
    a[5] = this.kernel.partialMode;
    this.pool.run(this.fn.sumSeg, a, 6, this.nEmbd, 32, 4 * this.nEmbd * nSlots);
  }

  /** y (nEmbd f32) += everything accumulated since the last finish; the slots are cleared. */
  finish(y: number): void {
    const a = this.args;
    a[0] = y;
    a[1] = this.partials;
    a[2] = this.slotsUsed;
    a[3] = this.nEmbd;
    a[4] = this.kernel.partialMode;
    // work: four multiply-adds' time per float read (an estimate, not measured), enough to keep
    // a decode step's sum on the caller alone (measured, 2 slots of 2048 floats at 2 threads:
    // 9.2 us a call split over both, most of it the hand-over; 2.8 us alone)
    if (this.slotsUsed > 0) this.pool.run(this.fn.sum, a, 5, this.nEmbd, 32, 4 * this.nEmbd * this.slotsUsed);
    this.slotsUsed = 0;
  }
}

// ---------------------------------------------------------------------------------------------
// Plain-TS references (ggml's numerics: src/format/quant.ts), for tests

function part(mem: Uint8Array, type: GGMLType, nEmbd: number, bundle: number, which: 0 | 1 | 2): Uint8Array {
  const p = bundleParts(type, nEmbd, false);
  const at = [p.gate, p.up, p.down][which];
  return mem.subarray(bundle + at, bundle + at + (which === 2 ? p.downBytes : p.up));
}

/** A biased bundle's gate (which 0) or up (1) bias. */
function biasOf(mem: Uint8Array, type: GGMLType, nEmbd: number, bundle: number, which: 0 | 1): number {
  const at = bundle + bundleParts(type, nEmbd, true).biases! + 4 * which;
  return new DataView(mem.buffer, mem.byteOffset).getFloat32(at, true);
}

/**
 * The activation vecDot takes: f32 x is quantized by the TS reference (ggml's reference rounding,
 * which can differ from llama.cpp's x86 rounding at exact ties); ggml Q8_0 / Q8_1 blocks (e.g.
 * from the wasm prepare_q8_0 / prepare_q8_1) are used as given.
 */
function refActivation(type: GGMLType, x: Float32Array | Uint8Array, nEmbd: number): Float32Array | Uint8Array {
  return x instanceof Float32Array ? prepareActivation(type, x.subarray(0, nEmbd)) : x;
}

/** gate_k . x for each listed bundle address (mem: the wasm memory's bytes). */
export function refSparseGate(
  type: GGMLType,
  mem: Uint8Array,
  bundles: ArrayLike<number>,
  x: Float32Array | Uint8Array,
  nEmbd: number,
): Float64Array {
  const xa = refActivation(type, x, nEmbd);
  const out = new Float64Array(bundles.length);
  for (let k = 0; k < bundles.length; k++) out[k] = vecDot(type, part(mem, type, nEmbd, bundles[k], 0), xa, nEmbd);
  return out;
}

/**
 * sum over listed k of act(g_k, u_k) * down_k, where u_k = up_k . x and g_k = gates[k] when given
 * (upDown), else gate_k . x (ffn), in f64 (`biased`: the bundle's gate and up biases added to g_k
 * and u_k); and the magnitude sum over the same k of a bound on |act(g_k, u_k)| times |down_k|,
 * the scale of the float rounding a kernel may make. Neurons whose h is 0 add nothing.
 */
export function refSparseFFN(
  type: GGMLType,
  mem: Uint8Array,
  bundles: ArrayLike<number>,
  x: Float32Array | Uint8Array,
  nEmbd: number,
  act: SparseActivation,
  gates?: ArrayLike<number>,
  biased = false,
): { y: Float64Array; magnitude: Float64Array } {
  const xa = refActivation(type, x, nEmbd);
  const y = new Float64Array(nEmbd),
    magnitude = new Float64Array(nEmbd);
  const col = new Float32Array(nEmbd);
  const downType = bundleParts(type, nEmbd, false).downType;
  const bias = (k: number, which: 0 | 1) => (biased ? biasOf(mem, type, nEmbd, bundles[k], which) : 0);
  for (let k = 0; k < bundles.length; k++) {
    // a given gate is the dot alone, as the kernels take it
    const g = (gates ? gates[k] : vecDot(type, part(mem, type, nEmbd, bundles[k], 0), xa, nEmbd)) + bias(k, 0);
    const u = vecDot(type, part(mem, type, nEmbd, bundles[k], 1), xa, nEmbd) + bias(k, 1);
    const h = gatedActivation(act, g, u);
    if (h === 0) continue;
    dequantizeRow(downType, part(mem, type, nEmbd, bundles[k], 2), nEmbd, col);
    // |act(g, u)| <= |g u| (swiglu_oai: |g| (|u| + 1), its up factor being u clamped, plus 1)
    const m = Math.abs(g) * (act === "swiglu_oai" ? Math.abs(u) + 1 : Math.abs(u));
    for (let i = 0; i < nEmbd; i++) {
      y[i] += h * col[i];
      magnitude[i] += m * Math.abs(col[i]);
    }
  }
  return { y, magnitude };
}
