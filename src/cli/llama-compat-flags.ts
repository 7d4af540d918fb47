/**
 * llama.cpp's flags that mean nothing here (GPU offload, attention kernels, memory mapping,
 * quantized KV-cache types, server slots): accepted, each with a one-line note on stderr, so that a
 * llama.cpp command pasted with `powerinfer` in front of it runs. They are taken out of argv
 * before the command's own parser sees it.
 */

interface IgnoredFlag {
  names: string[];
  /** true: takes a value; "optional": takes the next argument when it is one of `values` */
  value: boolean | "optional";
  values?: string[];
  /** a flag the command has too: ignored only with one of these values (others go to the command) */
  onlyWith?: string[];
  why: string;
}

const NO_GPU = "no GPU here: everything runs on the CPU";

const IGNORED: IgnoredFlag[] = [
  { names: ["-ngl", "--gpu-layers", "--n-gpu-layers"], value: true, why: NO_GPU },
  { names: ["-sm", "--split-mode"], value: true, why: NO_GPU },
  { names: ["-mg", "--main-gpu"], value: true, why: NO_GPU },
  { names: ["-ts", "--tensor-split"], value: true, why: NO_GPU },
  { names: ["-dev", "--device"], value: true, why: NO_GPU },
  { names: ["-nkvo", "--no-kv-offload"], value: false, why: NO_GPU },
  {
    names: ["-fa", "--flash-attn"],
    value: "optional",
    values: ["on", "off", "auto", "1", "0", "true", "false"],
    why: "attention always runs as one fused WebAssembly kernel",
  },
  { names: ["--jinja"], value: false, why: "chat templates are always rendered with Jinja when the model has one" },
  { names: ["--no-mmap", "--mmap"], value: false, why: "weights are read into memory, never mapped" },
  { names: ["--mlock"], value: false, why: "memory is not locked; a store's budget bounds what stays resident" },
  { names: ["--numa"], value: true, why: "threads are not pinned to NUMA nodes" },
  { names: ["-ub", "--ubatch-size"], value: true, why: "a prompt batch of -b tokens is also the physical batch" },
  {
    names: ["-ctk", "--cache-type-k", "-ctv", "--cache-type-v"],
    value: true,
    onlyWith: ["bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"],
    why: "the KV cache holds f16 (the default) or f32 here: f16 is used",
  },
  { names: ["--no-warmup"], value: false, why: "there is no warm-up run to skip" },
  {
    names: ["-cnv", "--conversation", "-no-cnv", "--no-conversation"],
    value: false,
    why: "run generates once; `powerinfer chat` converses",
  },
  {
    names: ["--no-display-prompt", "--verbose-prompt", "--no-perf", "--log-disable"],
    value: false,
    why: "the prompt is never echoed; statistics go to stderr",
  },
  {
    names: ["-cb", "--cont-batching", "-nocb", "--no-cont-batching"],
    value: false,
    why: "one generation runs at a time; others queue",
  },
  { names: ["-np", "--parallel"], value: true, why: "one generation runs at a time; others queue" },
  { names: ["--metrics"], value: false, why: "/metrics is always served" },
  { names: ["--slots", "--no-slots"], value: false, why: "there is one slot and no /slots route" },
];

const BY_NAME = new Map<string, IgnoredFlag>();
for (const f of IGNORED) for (const n of f.names) BY_NAME.set(n, f);

/**
 * argv without llama.cpp's flags that mean nothing here, and a note for each one found
 * ("-ngl 99 ignored: no GPU here: everything runs on the CPU").
 */
export function stripLlamaCppFlags(argv: readonly string[]): { argv: string[]; notes: string[] } {
  const out: string[] = [];
  const notes: string[] = [];
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i];
    if (arg === "--") {
      out.push(...argv.slice(i));
      break;
    }
    const eq = arg.startsWith("--") ? arg.indexOf("=") : -1;
    const name = eq > 0 ? arg.slice(0, eq) : arg;
    const flag = BY_NAME.get(name);
    const value = eq > 0 ? arg.slice(eq + 1) : argv[i + 1];
    if (!flag || (flag.onlyWith && !flag.onlyWith.includes(String(value).toLowerCase()))) {
      out.push(arg);
      continue;
    }
    let shown = arg;
    if (eq < 0 && flag.value === true && i + 1 < argv.length) shown = `${arg} ${argv[++i]}`;
    else if (
      eq < 0 &&
      flag.value === "optional" &&
      i + 1 < argv.length &&
      flag.values!.includes(argv[i + 1].toLowerCase())
    )
      shown = `${arg} ${argv[++i]}`;
    notes.push(`${shown} ignored: ${flag.why}`);
  }
  return { argv: out, notes };
}

/** Strips the flags and prints their notes on stderr, one line each. */
export function acceptLlamaCppFlags(command: string, argv: readonly string[]): string[] {
  const { argv: rest, notes } = stripLlamaCppFlags(argv);
  for (const n of notes) process.stderr.write(`powerinfer ${command}: note: ${n}\n`);
  return rest;
}
