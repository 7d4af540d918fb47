/**
 * The activation profile a store is ordered by: read and checked against the model, turned into
 * each group's hot-first order and its per-token frequencies, and its thresholds for the metadata.
 */
import { readFileSync } from "node:fs";
import type { ModelFile } from "../../format/gguf.js";
import { checkFingerprint, modelFingerprint, profileThresholds, ProfileError } from "../profile.js";
import { ConvertError } from "./convert-error.js";
import type { FFNTensors } from "./source-ffn.js";
import { errorText } from "../../format/printable.js";

/**
 * An activation profile: per layer, how often each neuron fired (any non-negative scale: counts
 * or fractions). `tokens` (optional) is how many tokens were profiled. Neurons are stored
 * hot-first: by descending frequency, ties by index. A profile from `powerinfer profile`
 * (src/offline/profile.ts, ProfileFile) also names its model (`model`: a fingerprint, checked
 * against the model being converted) and may carry per-layer activation thresholds, which the
 * store keeps in its metadata (THRESHOLDS_KEY).
 */
export interface ActivationProfile {
  /** per group; `routed` (a mixture of experts): the share of profiled tokens routed to the expert, `frequency` then among those */
  layers: { frequency: ArrayLike<number>; threshold?: number; routed?: number }[];
  tokens?: number;
  model?: unknown;
}

/** A loaded profile: where it came from (null: given as an object) and its per-layer thresholds, if any. */
export interface LoadedProfile {
  profile: ActivationProfile;
  file: string | null;
  thresholds: Float32Array | null;
}

/** Read profile `p` (or take it as given) and check it fits `layers` of `model`. */
export function loadProfile(p: string | ActivationProfile, layers: FFNTensors[], model: ModelFile): LoadedProfile {
  let profile: ActivationProfile;
  let file: string | null = null;
  if (typeof p === "string") {
    file = p;
    try {
      profile = JSON.parse(readFileSync(p, "utf8"));
    } catch (e) {
      throw new ConvertError(`profile ${p}: ${errorText(e)}`);
    }
  } else profile = p;
  const where = file ?? "profile";
  if (!profile || !Array.isArray(profile.layers))
    throw new ConvertError(`${where}: expected a JSON object { "layers": [ { "frequency": [...] }, ... ] }`);
  // A profile that names its model (powerinfer profile writes one) must name this one: the same
  // shape alone would let another model's frequencies and thresholds through. Checked first, as
  // "from another model" says more than a count that does not match.
  const fromProfile = <T>(f: () => T): T => {
    try {
      return f();
    } catch (e) {
      throw e instanceof ProfileError ? new ConvertError(e.message) : e;
    }
  };
  if (profile.model !== undefined)
    fromProfile(() => checkFingerprint(profile.model, modelFingerprint(model), where, model.path));
  if (profile.layers.length !== layers.length)
    throw new ConvertError(`${where}: has ${profile.layers.length} layers, the model ${layers.length}`);
  profile.layers.forEach((L, l) => {
    const f = L?.frequency;
    if (!f || typeof f.length !== "number") throw new ConvertError(`${where}: layers[${l}].frequency is missing`);
    if (f.length !== layers[l].neurons)
      throw new ConvertError(
        `${where}: layers[${l}].frequency has ${f.length} entries, layer ${l} has ${layers[l].neurons} neurons`,
      );
    for (let i = 0; i < f.length; i++) {
      if (typeof f[i] !== "number" || !Number.isFinite(f[i]) || f[i] < 0)
        throw new ConvertError(`${where}: layers[${l}].frequency[${i}] = ${f[i]} is not a finite non-negative number`);
    }
  });
  if (profile.tokens !== undefined && !(Number.isFinite(profile.tokens) && profile.tokens >= 0))
    throw new ConvertError(`${where}: tokens = ${profile.tokens} is not a count`);
  profile.layers.forEach((L, l) => {
    const t = L.threshold;
    if (t !== undefined && !(typeof t === "number" && Number.isFinite(t) && t >= 0))
      throw new ConvertError(`${where}: layers[${l}].threshold = ${JSON.stringify(t)} is not a finite number >= 0`);
  });
  // a mixture's profile has one entry per (layer, expert), each with its layer's threshold
  const all = fromProfile(() => profileThresholds(profile, where));
  const experts = layers[0]?.expert >= 0 ? layers.filter((L) => L.layer === 0).length : 1;
  const thresholds = all && experts > 1 ? all.filter((_, g) => g % experts === 0) : all;
  return { profile, file, thresholds };
}

/**
 * A profile entry's frequencies per token: for an expert of a mixture, its firing share among the
 * tokens routed to it times the share of tokens routed to it (what the neuron cache sees).
 */
export function perToken(L: ActivationProfile["layers"][number]): Float32Array {
  const routed = routedShare(L);
  return Float32Array.from(L.frequency, (f) => f * routed);
}

/** A profile entry's share of tokens routed to it (1: a dense layer, or a profile that does not say). */
export function routedShare(L: ActivationProfile["layers"][number]): number {
  return typeof L.routed === "number" && L.routed >= 0 && L.routed <= 1 ? L.routed : 1;
}

/** Stored position -> neuron: descending frequency, ties by index (a stable hot-first order). */
export function hotFirstOrder(frequency: ArrayLike<number>): Int32Array {
  const idx = Array.from({ length: frequency.length }, (_, i) => i);
  idx.sort((a, b) => frequency[b] - frequency[a] || a - b);
  return Int32Array.from(idx);
}
