/**
 * What an offloaded FFN reads of a neuron store (GroupStore), and a view of a run of its groups as
 * if they were the whole store: a store whose layout needs several wasm memories (shards.ts
 * planStoreShards) runs one OffloadedFFN per shard, each over its own layers' groups, numbered
 * from 0 (its cache, lists, predictor and counters are laid out for those groups only). A model
 * in one memory hands the store itself over.
 */
import type { NeuronStore, StoreFFN } from "../../format/store/index.js";

/** The parts of a NeuronStore the offloaded FFN uses; groups are numbered as the FFN sees them. */
export type GroupStore = Pick<
  NeuronStore,
  "path" | "ffn" | "layer" | "bundleOffset" | "readBundles" | "verifier" | "checksumTable" | "assertUnchanged"
>;

/** Groups [from, to) of `store`, numbered 0..to-from; the rest (file, checksums) is the store's own. */
export function storeGroups(store: NeuronStore, from: number, to: number): GroupStore {
  if (!(Number.isInteger(from) && Number.isInteger(to) && 0 <= from && from < to && to <= store.ffn.layers.length))
    throw new RangeError(`${store.path}: no FFN groups [${from}, ${to}) (the store has ${store.ffn.layers.length})`);
  const ffn: StoreFFN = { ...store.ffn, layers: store.ffn.layers.slice(from, to) };
  return {
    path: store.path,
    ffn,
    layer: (g) => store.layer(from + g),
    bundleOffset: (g, pos) => store.bundleOffset(from + g, pos),
    readBundles: (g, pos, count, dst) => store.readBundles(from + g, pos, count, dst),
    verifier: (mode) => store.verifier(mode),
    checksumTable: (mode) => store.checksumTable(mode),
    assertUnchanged: () => store.assertUnchanged(),
  };
}
