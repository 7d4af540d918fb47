/**
 * Hugging Face directories for `convert DIR`: a tiny llama checkpoint made here (two BF16
 * safetensors shards with their index, config.json, a byte-level tokenizer.json), damaged the
 * way downloads and hand edits damage them: config.json keys set to other values and types or
 * deleted (the widths, head counts, RoPE scaling, architectures favoured); a shard's header
 * entries given another dtype, shape or data range, or deleted; the index pointing a tensor at
 * another shard, at none, or naming one that is not there; bytes of a shard set, cut or added.
 *
 * Every edit is recorded as data against the pristine directory, which is rebuilt the same way
 * each time, so a case replays on its own.
 */
import { gpt2ByteToUnicode } from "../../src/tokenizer/unicode.js";
import { safetensorsBytes, type TestTensor } from "../safetensors-writer.js";
import { applyPatches, leHex, type Patch } from "./patch.js";
import { Rng } from "./rng.js";

export type HFEdit =
  | { kind: "config"; key: string; action: "set" | "delete"; value?: unknown }
  | {
      kind: "header";
      shard: string;
      tensor: string;
      field: "dtype" | "shape" | "data_offsets" | "entry";
      value?: unknown;
    }
  | { kind: "index"; tensor: string; value?: string | null }
  | { kind: "bytes"; file: string; patch: Patch };

export interface HFCase {
  target: "hf";
  type: "f32" | "f16" | "q8_0";
  edits: HFEdit[];
}

const HIDDEN = 32,
  LAYERS = 2,
  HEADS = 4,
  KV_HEADS = 2,
  FF = 64,
  VOCAB = 260;

const SHARDS = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"];

function gaussianish(n: number, seed: number): Float32Array {
  const rng = new Rng(seed);
  return Float32Array.from({ length: n }, () => (rng.float() + rng.float() + rng.float() - 1.5) * 0.1);
}

/** The pristine checkpoint's tensors, by shard. */
function pristineTensors(): TestTensor[][] {
  const hd = HIDDEN / HEADS;
  const t = (name: string, shape: number[], seed: number, norm = false): TestTensor => ({
    name,
    shape,
    values: norm
      ? new Float32Array(shape[0]).fill(1)
      : gaussianish(
          shape.reduce((a, b) => a * b, 1),
          seed,
        ),
  });
  const first = [t("model.embed_tokens.weight", [VOCAB, HIDDEN], 1)];
  const second = [t("model.norm.weight", [HIDDEN], 0, true)];
  for (let l = 0; l < LAYERS; l++) {
    const p = `model.layers.${l}.`;
    const into = l === 0 ? first : second;
    into.push(
      t(p + "input_layernorm.weight", [HIDDEN], 0, true),
      t(p + "self_attn.q_proj.weight", [HEADS * hd, HIDDEN], 10 + l),
      t(p + "self_attn.k_proj.weight", [KV_HEADS * hd, HIDDEN], 20 + l),
      t(p + "self_attn.v_proj.weight", [KV_HEADS * hd, HIDDEN], 30 + l),
      t(p + "self_attn.o_proj.weight", [HIDDEN, HEADS * hd], 40 + l),
      t(p + "post_attention_layernorm.weight", [HIDDEN], 0, true),
      t(p + "mlp.gate_proj.weight", [FF, HIDDEN], 50 + l),
      t(p + "mlp.up_proj.weight", [FF, HIDDEN], 60 + l),
      t(p + "mlp.down_proj.weight", [HIDDEN, FF], 70 + l),
    );
  }
  return [first, second];
}

export const PRISTINE_CONFIG: Record<string, unknown> = {
  architectures: ["LlamaForCausalLM"],
  model_type: "llama",
  hidden_size: HIDDEN,
  intermediate_size: FF,
  num_hidden_layers: LAYERS,
  num_attention_heads: HEADS,
  num_key_value_heads: KV_HEADS,
  max_position_embeddings: 128,
  rms_norm_eps: 1e-5,
  rope_theta: 10000,
  rope_scaling: {
    rope_type: "llama3",
    factor: 8,
    low_freq_factor: 1,
    high_freq_factor: 4,
    original_max_position_embeddings: 32,
  },
  tie_word_embeddings: true,
  vocab_size: VOCAB,
  bos_token_id: 257,
  eos_token_id: 258,
  hidden_act: "silu",
  torch_dtype: "bfloat16",
};

/** A byte-level BPE: one token per byte, one merge (" t"), and two specials (the rest padding). */
function tokenizerJson(): unknown {
  const vocab: Record<string, number> = {};
  for (let b = 0; b < 256; b++) vocab[gpt2ByteToUnicode(b)] = b;
  const space = gpt2ByteToUnicode(32);
  vocab[space + "t"] = 256;
  return {
    version: "1.0",
    added_tokens: [
      {
        id: 257,
        content: "<|begin|>",
        special: true,
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
      },
      {
        id: 258,
        content: "<|end|>",
        special: true,
        single_word: false,
        lstrip: false,
        rstrip: false,
        normalized: false,
      },
    ],
    normalizer: null,
    pre_tokenizer: { type: "ByteLevel", add_prefix_space: false, trim_offsets: true, use_regex: true },
    post_processor: null,
    decoder: { type: "ByteLevel", add_prefix_space: true, trim_offsets: true, use_regex: true },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: null,
      fuse_unk: false,
      byte_fallback: false,
      vocab,
      merges: [`${space} t`],
    },
  };
}

/** Headers of the pristine shards, for the mutators. */
export interface HFPristine {
  files: Map<string, Buffer>;
  tensors: { name: string; shard: string; shape: number[] }[];
}

export function hfPristine(): HFPristine {
  const files = new Map<string, Buffer>();
  const tensors: HFPristine["tensors"] = [];
  const weightMap: Record<string, string> = {};
  pristineTensors().forEach((list, i) => {
    files.set(SHARDS[i], Buffer.from(safetensorsBytes(list)));
    for (const t of list) {
      weightMap[t.name] = SHARDS[i];
      tensors.push({ name: t.name, shard: SHARDS[i], shape: t.shape });
    }
  });
  files.set("model.safetensors.index.json", Buffer.from(JSON.stringify({ metadata: {}, weight_map: weightMap })));
  files.set("config.json", Buffer.from(JSON.stringify(PRISTINE_CONFIG)));
  files.set("tokenizer.json", Buffer.from(JSON.stringify(tokenizerJson())));
  files.set("tokenizer_config.json", Buffer.from(JSON.stringify({ bos_token: "<|begin|>", eos_token: "<|end|>" })));
  return { files, tensors };
}

/** A shard with its header rewritten by `edit` (the data after it unchanged). */
function editHeader(shard: Buffer, edit: (h: Record<string, Record<string, unknown>>) => void): Buffer {
  if (shard.length < 8) return shard;
  const n = Number(shard.readBigUInt64LE(0));
  let header: Record<string, Record<string, unknown>>;
  try {
    header = JSON.parse(shard.toString("utf8", 8, 8 + n)) as typeof header;
  } catch {
    return shard; // an earlier edit broke the header: this one has nothing to edit
  }
  edit(header);
  const text = Buffer.from(JSON.stringify(header), "utf8");
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(text.length));
  return Buffer.concat([len, text, shard.subarray(8 + n)]);
}

/** The damaged directory's files. */
export function hfFiles(pristine: HFPristine, edits: readonly HFEdit[]): Map<string, Buffer> {
  const files = new Map(pristine.files);
  const json = (name: string) => JSON.parse(files.get(name)!.toString("utf8")) as Record<string, unknown>;
  for (const e of edits) {
    if (e.kind === "config") {
      const c = json("config.json");
      if (e.action === "delete") delete c[e.key];
      else c[e.key] = e.value;
      files.set("config.json", Buffer.from(JSON.stringify(c)));
    } else if (e.kind === "index") {
      const idx = json("model.safetensors.index.json") as { weight_map: Record<string, unknown> };
      if (e.value === undefined) delete idx.weight_map[e.tensor];
      else idx.weight_map[e.tensor] = e.value;
      files.set("model.safetensors.index.json", Buffer.from(JSON.stringify(idx)));
    } else if (e.kind === "header") {
      const shard = files.get(e.shard);
      if (!shard) continue;
      files.set(
        e.shard,
        editHeader(shard, (h) => {
          if (e.field === "entry") {
            if (e.value === undefined) delete h[e.tensor];
            else h[e.tensor] = e.value as Record<string, unknown>;
          } else if (typeof h[e.tensor] === "object" && h[e.tensor] !== null) h[e.tensor][e.field] = e.value;
        }),
      );
    } else {
      const f = files.get(e.file);
      if (f) files.set(e.file, applyPatches(f, [e.patch]));
    }
  }
  return files;
}

const CONFIG_KEYS = [
  "hidden_size",
  "intermediate_size",
  "num_hidden_layers",
  "num_attention_heads",
  "num_key_value_heads",
  "head_dim",
  "vocab_size",
  "rope_theta",
  "rope_scaling",
  "rope_parameters",
  "tie_word_embeddings",
  "architectures",
  "rms_norm_eps",
  "max_position_embeddings",
  "hidden_act",
  "text_config",
  "num_local_experts",
];

function oddValue(rng: Rng, current: unknown): unknown {
  const n = typeof current === "number" ? current : 8;
  return rng.pick<unknown>([
    0,
    -1,
    1,
    n + 1,
    n - 1,
    n * 2,
    Math.floor(n / 2),
    1.5,
    2 ** 31,
    2 ** 53,
    1e300,
    NaN,
    "8",
    null,
    true,
    [],
    {},
    [n],
    ["MambaForCausalLM"],
    ["Qwen3ForCausalLM"],
    ["MixtralForCausalLM"],
    ["Phi3ForCausalLM"],
    ["Gemma3ForCausalLM"],
    { rope_type: rng.pick(["linear", "yarn", "dynamic", "llama3", "longrope", 7]), factor: rng.pick([2, 0, -1, "x"]) },
    { full_attention: { rope_type: "default" } },
  ]);
}

export function hfCase(rng: Rng, p: HFPristine): HFCase {
  const edits: HFEdit[] = [];
  for (let i = 0, n = rng.range(1, 3); i < n; i++) {
    const t = rng.pick(p.tensors);
    switch (
      rng.weighted<string>([
        [5, "config"],
        [4, "header"],
        [2, "index"],
        [3, "bytes"],
      ])
    ) {
      case "config": {
        const key = rng.pick(CONFIG_KEYS);
        edits.push(
          rng.chance(0.2)
            ? { kind: "config", key, action: "delete" }
            : { kind: "config", key, action: "set", value: oddValue(rng, PRISTINE_CONFIG[key]) },
        );
        break;
      }
      case "header": {
        const field = rng.pick(["dtype", "shape", "data_offsets", "entry"] as const);
        const value =
          field === "dtype"
            ? rng.pick(["F32", "F16", "BF16", "U8", "I64", "F8_E4M3", "Q4", 3])
            : field === "shape"
              ? rng.pick<unknown>([
                  [...t.shape].reverse(),
                  [t.shape[0] + 1, ...t.shape.slice(1)],
                  [],
                  [0],
                  [-1],
                  "x",
                  [2 ** 40],
                ])
              : field === "data_offsets"
                ? rng.pick<unknown>([
                    [0, 0],
                    [0, 2 ** 40],
                    [5, 3],
                    [-1, 4],
                    [1, 1 + 2 * t.shape.reduce((a, b) => a * b, 1)],
                    "x",
                  ])
                : rng.pick<unknown>([undefined, { dtype: "BF16", shape: [4], data_offsets: [0, 8] }, 7]);
        edits.push({
          kind: "header",
          shard: t.shard,
          tensor: rng.chance(0.9) ? t.name : "model.extra.weight",
          field,
          value,
        });
        break;
      }
      case "index":
        edits.push({
          kind: "index",
          tensor: rng.chance(0.8) ? t.name : "model.layers.9.mlp.up_proj.weight",
          value: rng.pick([
            undefined,
            SHARDS[0],
            SHARDS[1],
            "model-00003-of-00002.safetensors",
            "../config.json",
            "",
            null,
          ]) as string | undefined,
        });
        break;
      default: {
        const file = rng.pick(SHARDS);
        const size = p.files.get(file)!.length;
        const patch: Patch = rng.weighted<Patch>([
          [3, { op: "truncate", size: rng.int(size) }],
          [2, { op: "set", at: 0, hex: leHex(rng.pick([0, 1, 7, 2 ** 32, size, size - 8, 2 ** 62]), 8) }],
          [3, { op: "set", at: rng.int(size), hex: Buffer.from(rng.bytes(rng.range(1, 8))).toString("hex") }],
          [1, { op: "append", hex: Buffer.from(rng.bytes(rng.range(1, 64))).toString("hex") }],
        ]);
        edits.push({ kind: "bytes", file, patch });
      }
    }
  }
  return { target: "hf", type: rng.pick(["f32", "f16", "q8_0"] as const), edits };
}
