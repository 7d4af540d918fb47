/**
 * The probe of the sparse FFN kernels on the store's own bundles at shuffled addresses (what a
 * warm neuron cache looks like): up/down per firing neuron, the fixed cost of a layer (prepare +
 * reduce), gate per neuron from staged gate pages (the non-resident-gate mode's first phase), and
 * predictor mode's whole bundles, listed or as a contiguous run.
 */
import type { NeuronStore } from "../format/store/index.js";
import type { Arena } from "../runtime/arena.js";
import type { ThreadPool } from "../runtime/pool.js";
import { SparseFFN } from "../runtime/sparse-kernels.js";
import type { SparseSpeed } from "./probe-results.js";
import { rnd, STREAM_BYTES, timeCalls } from "./probe-timing.js";

/** Shuffled lists of bundle addresses: the kernels' calls take them in turn. */
const LISTS = 8;

/** Layer 0's bundles in memory, the kernels' lists over them, and their input and output rows. */
export interface SparseFixture {
  /** bundles in memory */
  nb: number;
  region: number;
  /** neurons of a layer that fire in the measurement, and the small count the fixed cost is taken from */
  firing: number;
  small: number;
  /** LISTS lists of nb shuffled bundle addresses */
  lists: number;
  /** gate pages staged, and their list */
  nStage: number;
  stageList: number;
  /** nb gate values, every one firing */
  gates: number;
  /** nb f32 outputs (the gates; the matvec probe writes its rows there too) */
  gateOut: number;
  /** the input row (nEmbd f32; the matvec and predictor probes read it too) and the output row */
  x: number;
  y: number;
}

export function sparseFixture(store: NeuronStore, arena: Arena): SparseFixture {
  const ffn = store.ffn;
  const nEmbd = ffn.nEmbd;
  const nFF = store.layer(0).neurons;
  // Neuron bundles of layer 0 at shuffled addresses, as a warm cache holds them.
  const nb = Math.max(64, Math.min(nFF, Math.ceil(STREAM_BYTES / ffn.bundleBytes)));
  const region = arena.alloc(nb * ffn.bundleBytes, 4096);
  {
    const per = Math.max(1, Math.floor((4 << 20) / ffn.bundleBytes));
    for (let p = 0; p < nb; p += per) {
      const c = Math.min(per, nb - p);
      store.readBundles(0, p, c, arena.u8(region + p * ffn.bundleBytes, c * ffn.bundleBytes));
    }
  }
  const nStage = Math.min(2048, nb);
  const firing = Math.max(8, Math.min(nb, Math.round(nFF * 0.1)));
  const small = Math.max(1, Math.min(32, firing >> 2));
  const lists = arena.alloc(LISTS * nb * 4, 64);
  const stageList = arena.alloc(nStage * 4, 64);
  const gates = arena.alloc(nb * 4, 64);
  const gateOut = arena.alloc(nb * 4, 64);
  const x = arena.alloc(nEmbd * 4, 64);
  const y = arena.alloc(nEmbd * 4, 64);
  {
    const xf = arena.f32(x, nEmbd);
    for (let i = 0; i < nEmbd; i++) xf[i] = Math.sin(i * 0.37);
    const g = arena.f32(gates, nb);
    for (let i = 0; i < nb; i++) g[i] = 0.1 + rnd(); // every listed neuron fires (ReLU: gate > 0)
    for (let s = 0; s < LISTS; s++) {
      const l = arena.i32(lists + s * nb * 4, nb);
      const perm = Array.from({ length: nb }, (_, i) => i);
      for (let i = nb - 1; i > 0; i--) {
        const j = Math.floor(rnd() * (i + 1));
        [perm[i], perm[j]] = [perm[j], perm[i]];
      }
      for (let i = 0; i < nb; i++) l[i] = region + perm[i] * ffn.bundleBytes;
    }
    // staged gate pages: the gate kernel reads each listed address's gate part, as from the staging area
    const sl = arena.i32(stageList, nStage);
    for (let i = 0; i < nStage; i++) sl[i] = region + i * ffn.bundleBytes;
  }
  return { nb, region, firing, small, lists, nStage, stageList, gates, gateOut, x, y };
}

/** The sparse kernels' costs at the pool's thread count. */
export function measureSparse(
  pool: ThreadPool,
  arena: Arena,
  store: NeuronStore,
  fx: SparseFixture,
  d: number,
): SparseSpeed {
  const ffn = store.ffn;
  const { nb, region, firing, small, lists, nStage, stageList, gates, gateOut, x, y } = fx;
  const f = new SparseFFN(pool, arena, ffn.type, ffn.nEmbd);
  const layer = (count: number) => (i: number) => {
    f.prepare(x);
    f.upDown(lists + (i % LISTS) * nb * 4, count, gates, "relu");
    f.finish(y);
  };
  const tSmall = timeCalls(layer(small), d);
  const tBig = timeCalls(layer(firing), d);
  const upDownPerNeuron = Math.max(1e-12, (tBig - tSmall) / (firing - small));
  const gSmall = timeCalls(() => f.gate(stageList, Math.min(small, nStage), gateOut), d * 0.5);
  const gBig = timeCalls(() => f.gate(stageList, nStage, gateOut), d);
  const gatePerNeuron = Math.max(1e-12, (gBig - gSmall) / Math.max(1, nStage - Math.min(small, nStage)));
  // predictor mode: whole bundles, listed (the picks) or as a contiguous run (a hot cluster)
  const whole = (count: number) => (i: number) => {
    f.prepare(x);
    f.ffn(lists + (i % LISTS) * nb * 4, count, "relu");
    f.finish(y);
  };
  const run = (count: number) => (i: number) => {
    f.prepare(x);
    f.ffnRun(region + ((i * 32) % Math.max(1, nb - count)) * ffn.bundleBytes, ffn.bundleBytes, count, "relu");
    f.finish(y);
  };
  const ffnPerNeuron = Math.max(1e-12, (timeCalls(whole(firing), d) - timeCalls(whole(small), d)) / (firing - small));
  const ffnRunPerNeuron = Math.max(1e-12, (timeCalls(run(firing), d) - timeCalls(run(small), d)) / (firing - small));
  return {
    upDownPerNeuron,
    layerFixed: Math.max(0, tSmall - small * upDownPerNeuron),
    gatePerNeuron,
    gateFixed: Math.max(0, gSmall - Math.min(small, nStage) * gatePerNeuron),
    ffnPerNeuron,
    ffnRunPerNeuron,
  };
}
