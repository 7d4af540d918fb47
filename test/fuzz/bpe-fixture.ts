/**
 * A small byte-level BPE vocabulary for the tokenizer fuzzer (the real models here all use
 * SentencePiece): the 256 byte symbols in GPT-2's byte-to-character alphabet, a few merged
 * pieces, two control tokens and a user-defined one, under three pre-tokenizers.
 */
import { Tokenizer } from "../../src/tokenizer/index.js";

/** GPT-2's alphabet: bytes that are printable Latin-1 stand for themselves, the rest map to U+0100 on, in order. */
function byteSymbols(): string[] {
  const keeps = (b: number) => (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
  const out: string[] = [];
  let next = 256;
  for (let b = 0; b < 256; b++) out.push(String.fromCharCode(keeps(b) ? b : next++));
  return out;
}

const MERGES = ["Ġ t", "h e", "Ġt he", "i n", "e r", "a n", "Ġ a", "o u", "Ġ s", "r e", "o n", "Ġt h"];
const CONTROL = ["<|endoftext|>", "<|im_start|>"];
const USER = ["<tool>"];

export function bpeTokenizer(pre: string): Tokenizer {
  const tokens = byteSymbols();
  for (const m of MERGES) {
    const joined = m.replace(" ", "");
    if (!tokens.includes(joined)) tokens.push(joined);
  }
  const types: number[] = tokens.map(() => 1);
  for (const t of CONTROL) {
    tokens.push(t);
    types.push(3);
  }
  for (const t of USER) {
    tokens.push(t);
    types.push(4);
  }
  const eos = tokens.indexOf("<|endoftext|>");
  return Tokenizer.fromGGUF({
    metadata: new Map<string, unknown>([
      ["tokenizer.ggml.model", "gpt2"],
      ["tokenizer.ggml.pre", pre],
      ["tokenizer.ggml.tokens", tokens],
      ["tokenizer.ggml.token_type", Int32Array.from(types)],
      ["tokenizer.ggml.merges", MERGES],
      ["tokenizer.ggml.bos_token_id", eos],
      ["tokenizer.ggml.eos_token_id", eos],
    ]),
  });
}
