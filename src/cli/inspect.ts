/** `powerinfer inspect FILE`: metadata (long arrays summarized), the tensor table and sizes. */
import { GGUFFile } from "../format/gguf.js";
import { typeName } from "../format/ggml-types.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";
import { jsonValue, showValue } from "./inspect-format.js";
import { inspectStore } from "./inspect-store.js";
import { isNeuronStore } from "../format/store/index.js";

export const FLAGS: FlagSpec[] = [
  { names: ["--all"], key: "all", type: "bool", help: "print whole arrays" },
  { names: ["--json"], key: "json", type: "bool", help: "machine-readable output" },
  {
    names: ["--verify"],
    key: "verify",
    type: "bool",
    help: "a neuron store: read every chunk and check it against its checksum",
  },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

const mib = (b: number) => `${(b / 2 ** 20).toFixed(2)} MiB`;

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(
      usage(
        "inspect FILE",
        "Show a GGUF file's metadata, tensors and sizes, or a neuron store's (.pi) header, manifest and layout.",
        FLAGS,
      ),
    );
    return 0;
  }
  const path = args._[0];
  if (!path) throw new UsageError("inspect: give a model file");
  if (isNeuronStore(path)) {
    inspectStore(path, { json: Boolean(args.json), all: Boolean(args.all), verify: Boolean(args.verify) });
    return 0;
  }
  if (args.verify) throw new UsageError("inspect: --verify checks a neuron store's checksums; a GGUF file has none");
  const f = GGUFFile.open(path);
  try {
    const tensors = [...f.tensors.values()];
    const total = tensors.reduce((a, t) => a + t.bytes, 0);
    const params = tensors.reduce((a, t) => a + t.elements, 0);
    if (args.json) {
      const meta: Record<string, unknown> = {};
      for (const [k, v] of f.metadata) meta[k] = jsonValue(v);
      console.log(
        JSON.stringify(
          {
            magic: f.magic,
            version: f.version,
            files: f.paths,
            metadata: meta,
            tensors: tensors.map((t) => ({
              name: t.name,
              type: typeName(t.type),
              dims: t.dims,
              bytes: t.bytes,
              offset: t.offset,
              file: t.fileIndex,
            })),
          },
          null,
          1,
        ),
      );
      return 0;
    }
    console.log(`file: ${f.paths.join(", ")}`);
    console.log(
      `format: ${f.magic === "PWRI" ? "PowerInfer sparse GGUF (PWRI)" : "GGUF"} v${f.version}, ${mib(f.fileSize)}`,
    );
    console.log(`\nmetadata (${f.metadata.size} keys):`);
    for (const [k, v] of f.metadata) console.log(`  ${k} = ${showValue(v, Boolean(args.all))}`);
    console.log(`\ntensors (${tensors.length}, ${(params / 1e6).toFixed(2)} M parameters, ${mib(total)}):`);
    const byType = new Map<string, number>();
    for (const t of tensors) {
      console.log(
        `  ${t.name.padEnd(32)} ${typeName(t.type).padEnd(5)} [${t.dims.join(", ")}]`.padEnd(72) +
          ` ${mib(t.bytes).padStart(12)}  @${t.offset}`,
      );
      byType.set(typeName(t.type), (byType.get(typeName(t.type)) ?? 0) + t.bytes);
    }
    console.log(`\nbytes by type: ${[...byType].map(([k, v]) => `${k} ${mib(v)}`).join(", ")}`);
  } finally {
    f.close();
  }
  return 0;
}
