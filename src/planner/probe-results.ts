/**
 * What the hardware probe (probe.ts) measured, as kept in its cache file (probe-cache.ts): the
 * result's shape and the keys of its tables.
 */
import { typeName, type GGMLType } from "../format/ggml-types.js";
import type { PredictorShape } from "../model/offload/predictor.js";
import { layoutName } from "../runtime/weight-kernels.js";
import type { MachineFingerprint } from "./machine.js";

/** Bumped when a measurement changes meaning: a cache of another version is measured again. */
export const PROBE_VERSION = 6;

/**
 * Batches of random reads of one size at one queue depth, issued as the runtime issues a layer's
 * misses: one submit of n requests, then wait for the last.
 */
export interface IoCell {
  bytes: number;
  queueDepth: number;
  /** reads per second of a batch of the largest size (the rate while the queue stays full) */
  iops: number;
  /** per batch size n: n / the batch's median wall time (ramp-up, the slowest last reads and submit included) */
  batches: { n: number; perSecond: number }[];
  /** seconds of main-thread JS per read to submit it (checks, coalescing, queueing, first issues) */
  submit: number;
}

export interface IoTable {
  /** whether the reads bypassed the page cache (O_DIRECT) */
  direct: boolean;
  /** libuv thread pool size at probe time: deeper queues do not run more reads at once */
  threadPool: number;
  cells: IoCell[];
  loadAverage: number;
}

export interface ScanSpeed {
  perNeuron: number;
  perLookup: number;
  perMiss: number;
}

export interface SparseSpeed {
  /** seconds per firing neuron of up/down (two rows of nEmbd) */
  upDownPerNeuron: number;
  /** seconds per layer besides the neurons: prepare (quantize x) + one up/down call + reduce */
  layerFixed: number;
  /** seconds per neuron of the gate kernel over staged gate pages */
  gatePerNeuron: number;
  /** seconds of one gate call besides the neurons */
  gateFixed: number;
  /** seconds per listed neuron of gate, up and down in one pass (predictor mode's picked neurons) */
  ffnPerNeuron: number;
  /** seconds per neuron of the same over a contiguous run of bundles (predictor mode's hot clusters computed whole) */
  ffnRunPerNeuron: number;
}

export interface ProbeResult {
  version: number;
  fingerprint: MachineFingerprint;
  /** when each part was last measured, and the 1-minute load average then */
  notes: Record<string, { at: string; loadAverage: number }>;
  /** seconds spent probing, summed over every part (cached parts cost nothing next time) */
  seconds: number;
  /** "threads" -> seconds per pool.run of a trivial job split over the threads */
  dispatch: Record<string, number>;
  /** "threads" -> bytes per second streamed (read x, read + write y) */
  memoryBandwidth: Record<string, number>;
  /** "threads" -> resident bytes a pool of that many threads adds (wasm instances, stacks) */
  poolBytes: Record<string, number>;
  /** "type:cols:threads" -> multiply-adds per second of a matvec streamed from DRAM */
  matvec: Record<string, number>;
  /** "type:nEmbd:threads" -> sparse FFN kernel costs */
  sparse: Record<string, SparseSpeed>;
  /** JS of the FFN step: seconds per neuron scanned, per firing neuron looked up, per miss (slot, request, list) */
  scan: ScanSpeed | null;
  /** predictorKey -> seconds of one layer's predictor scores (fc1, relu, fc2) */
  predictor: Record<string, number>;
  /** "device|readBytes" -> read rates per queue depth */
  io: Record<string, IoTable>;
}

export const matvecKey = (type: GGMLType, cols: number, threads: number) => `${typeName(type)}:${cols}:${threads}`;
export const sparseKey = (type: GGMLType, nEmbd: number, threads: number) => `${typeName(type)}:${nEmbd}:${threads}`;
/** A store's predictor as it sits in memory (layer 0's shape: fc1's and fc2's types, fc2's layout, its widths), at a thread count. */
export const predictorKey = (p: PredictorShape, nEmbd: number, nFF: number, threads: number) =>
  `${typeName(p.fc1Type)}+${layoutName(p.fc2Type, p.fc2Layout)}:${nEmbd}x${p.hidden}x${nFF}:${threads}`;
export const ioKey = (device: string, bytes: number, threads: number) => `${device}|${bytes}|${threads}`;
/** Read table of whole gate-row chunks (one chunk per batch) of `bytes`. */
export const streamKey = (device: string, bytes: number, threads: number) => `${device}|stream ${bytes}|${threads}`;
/** Read table of runs of adjacent bundles (one run of `bytes` per batch, read as reads of at most the reader's largest). */
export const runKey = (device: string, bytes: number, threads: number) => `${device}|run ${bytes}|${threads}`;

export function emptyResult(fp: MachineFingerprint): ProbeResult {
  return {
    version: PROBE_VERSION,
    fingerprint: fp,
    notes: {},
    seconds: 0,
    dispatch: {},
    memoryBandwidth: {},
    poolBytes: {},
    matvec: {},
    sparse: {},
    scan: null,
    predictor: {},
    io: {},
  };
}
