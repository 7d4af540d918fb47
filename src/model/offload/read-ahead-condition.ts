/**
 * When a step reads ahead (read-ahead.ts): the runtime (OffloadedFFN) decides with these
 * functions, and the planner's cost model predicts with the same ones, so that the two cannot
 * drift apart.
 */
import type { SparsityMode } from "./layout.js";

/**
 * Whether a step reads ahead at all: in predictor mode (the predictor picks ahead) and in dense
 * mode (every neuron runs, so a group's picks are its uncached bundles, known ahead exactly); gate
 * mode needs the group's own input to know its picks. Reads ahead overlap other work only when the
 * misses' reads do (the pipeline), and with every neuron hot there is nothing to read.
 */
export function readsAhead(
  mode: SparsityMode,
  pipeline: boolean,
  lookahead: boolean,
  hotPerLayer: number,
  nFF: number,
): boolean {
  return mode !== "gate" && pipeline && lookahead && hotPerLayer < nFF;
}

/**
 * The group a step of group `group` reads ahead for once the first round of its misses is issued,
 * or -1 for none. Only when that round took every miss: the reads ahead pin cold slots that the
 * step's later rounds would want. A dense model reads the next layer's picks (none after the last
 * layer); a mixture's step reads nothing ahead (its routed experts are all read ahead once its
 * layer has routed: OffloadedFFN.readsAheadExpert). `firstRound` and `misses` may be expected
 * values (the cost model): a first round within 1e-9 of the misses takes them all.
 */
export function readAheadGroup(
  group: number,
  nLayer: number,
  experts: number,
  firstRound: number,
  misses: number,
): number {
  if (experts > 0 || firstRound < misses - 1e-9) return -1;
  return group + 1 < nLayer ? group + 1 : -1;
}
