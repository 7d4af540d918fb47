/**
 * The hand-made 2-layer store the cost-model tests plan for (test/planner.test.ts,
 * test/cost-model.test.ts): 100 neurons a layer, nEmbd 64, one 64 x 64 attention matrix per
 * layer, a 50 x 64 output.
 */
import { GGMLType } from "../src/format/ggml-types.js";
import type { StoreFacts } from "../src/model/offload/layout.js";
import type { Hardware } from "../src/planner/hardware.js";
import type { ModelShape } from "../src/planner/model-shape.js";

export const MiB = 2 ** 20;

export const facts: StoreFacts = {
  groups: 2,
  experts: 0,
  expertsUsed: 1,
  nFF: 100,
  nEmbd: 64,
  ffnType: GGMLType.Q4_1,
  bundleBytes: 4096,
  // a bundle's parts fill its page (no packing of hot slots): hot counts are the knob's
  rowBytes: 1400,
  dataBytes: 3 * 1400,
  gateRowBytes: 4 * MiB,
  gateReadBytes: 4096,
  gateCopy: false,
  nVocab: 50,
  checksumMarkBytes: 0,
  firing: null,
};

export const shape: ModelShape = {
  facts,
  resident: { weights: 10 * MiB, buffers: 0, kv: 1 * MiB },
  nLayer: 2,
  experts: 0,
  expertsUsed: 1,
  routed: null,
  nEmbd: 64,
  nFF: 100,
  nHead: 4,
  nHeadKV: 4,
  headDim: 16,
  nVocab: 50,
  ffnType: GGMLType.Q4_1,
  bundleBytes: 4096,
  gateReadBytes: 4096,
  layerMatrices: [{ type: GGMLType.Q4_1, rows: 64, cols: 64 }],
  output: { type: GGMLType.Q4_1, rows: 50, cols: 64 },
  gateStream: null,
  predictor: null,
};

/** Round rates for costs followed by hand (test/cost-model.test.ts spells them out): reads 1 ms each at any depth, 10 us of each the submit. */
export const roundHardware: Hardware = {
  threads: 1,
  dispatch: 1e-6,
  memoryBandwidth: 2.56e9,
  matvecRate: () => 1e9,
  sparse: {
    upDownPerNeuron: 1e-6,
    layerFixed: 2e-6,
    gatePerNeuron: 1e-7,
    gateFixed: 1e-6,
    ffnPerNeuron: 2e-6,
    ffnRunPerNeuron: 1e-6,
  },
  scan: { perNeuron: 1e-8, perLookup: 1e-7, perMiss: 1e-6 },
  predictorSeconds: 5e-6,
  batchSeconds: (_bytes, _qd, n) => n * 1e-3,
  streamChunkSeconds: () => 1e-3,
  submitSeconds: () => 1e-5,
  iops: () => 1000,
  base: 20 * MiB,
  overlap: true,
};
