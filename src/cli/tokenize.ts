/** `powerinfer tokenize -m MODEL -p TEXT`: the token ids (no BOS) as a JSON array. Loads only the vocabulary. */
import { GGUFFile } from "../format/gguf.js";
import { Tokenizer } from "../tokenizer/index.js";
import { parseArgs, usage, UsageError, type FlagSpec } from "./args.js";

export const FLAGS: FlagSpec[] = [
  { names: ["-m", "--model"], key: "model", type: "string", help: "model file (GGUF)" },
  { names: ["-p", "--prompt"], key: "prompt", type: "string", help: "text to tokenize" },
  { names: ["--bos"], key: "bos", type: "bool", help: "add BOS as generation would" },
  { names: ["--special"], key: "special", type: "bool", help: "parse special tokens such as <s> in the text" },
  { names: ["-h", "--help"], key: "help", type: "bool", help: "show this help" },
];

export async function main(argv: string[]): Promise<number> {
  const args = parseArgs(argv, FLAGS);
  if (args.help) {
    console.log(usage("tokenize -m MODEL -p TEXT", "Print the token ids of TEXT as a JSON array.", FLAGS));
    return 0;
  }
  if (typeof args.model !== "string") throw new UsageError("tokenize: -m MODEL is required");
  if (typeof args.prompt !== "string") throw new UsageError("tokenize: -p TEXT is required");
  const file = GGUFFile.open(args.model);
  try {
    const tok = Tokenizer.fromGGUF(file);
    console.log(
      JSON.stringify(tok.encode(args.prompt, { addBos: Boolean(args.bos), parseSpecial: Boolean(args.special) })),
    );
  } finally {
    file.close();
  }
  return 0;
}
